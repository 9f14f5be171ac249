from __future__ import annotations

import struct

import pytest
from hypothesis import given, strategies as st

from brook.protocol.framing import FrameDecoder, FrameTooLargeError, InvalidFrameError, frame


@given(st.lists(st.binary(max_size=200), max_size=10), st.integers(1, 50), st.integers(8, 300))
def test_frames_survive_any_split(payloads, chunk, buffer_bytes):
    """Whatever the split, and whether frames fit the shared buffer or get their own."""
    stream = b"".join(frame(p) for p in payloads)
    dec = FrameDecoder(1000, buffer_bytes=buffer_bytes)
    got = []
    for i in range(0, len(stream), chunk):
        got += dec.feed(stream[i:i + chunk])
    assert [bytes(f) for f in got] == payloads
    assert dec.buffered == 0


@given(st.lists(st.binary(max_size=200), max_size=10), st.lists(st.integers(1, 64), min_size=1),
       st.integers(8, 300))
def test_receiving_into_the_decoder(payloads, sizes, buffer_bytes):
    """The network path: the socket writes into recv_buffer(), at most as much as asked."""
    stream = memoryview(b"".join(frame(p) for p in payloads))
    dec = FrameDecoder(1000, buffer_bytes=buffer_bytes)
    got, i, pos = [], 0, 0
    while pos < len(stream):
        target = dec.recv_buffer()
        assert len(target) > 0
        n = min(len(target), sizes[i % len(sizes)], len(stream) - pos)
        target[:n] = stream[pos:pos + n]
        pos += n
        i += 1
        got += dec.received(n)
    assert [bytes(f) for f in got] == payloads


def test_a_large_frame_is_received_into_a_buffer_of_its_own():
    dec = FrameDecoder(10_000, buffer_bytes=64)
    payload = bytes(range(256)) * 10
    assert dec.feed(frame(payload)[:100]) == []
    rest = frame(payload)[100:]
    frames = []
    while rest:  # the socket writes into the frame's own buffer, which grows to the frame
        target = dec.recv_buffer()
        assert 0 < len(target) <= len(rest)  # never past the frame's body
        k = len(target)
        target[:] = rest[:k]
        rest = rest[k:]
        frames += dec.received(k)
    (got,) = frames
    assert got == payload and isinstance(got, memoryview) and got.readonly


def test_oversized_frame_is_refused_on_its_length_alone():
    dec = FrameDecoder(1024)
    with pytest.raises(FrameTooLargeError) as exc:
        dec.feed(struct.pack(">i", 1025))  # no body byte has arrived
    assert exc.value.size == 1025
    assert dec.buffered == 4


def test_frame_of_exactly_the_limit_is_accepted():
    dec = FrameDecoder(8)
    assert dec.feed(frame(b"12345678")) == [b"12345678"]


def test_negative_length_is_invalid():
    with pytest.raises(InvalidFrameError):
        FrameDecoder(100).feed(struct.pack(">i", -5))


@given(st.lists(st.binary(max_size=200), max_size=10), st.lists(st.integers(1, 64), min_size=1),
       st.integers(8, 300))
def test_the_receive_buffer_goes_back_to_the_pool_between_reads(payloads, sizes, buffer_bytes):
    """The connection's path: after each read the buffer is released; frames still come out
    whole, and the buffer is kept only while a large part of a frame is in it."""
    from brook.protocol.framing import BufferPool

    pool = BufferPool(buffer_bytes, max_free=1)
    stream = memoryview(b"".join(frame(p) for p in payloads))
    dec = FrameDecoder(1000, buffer_bytes=buffer_bytes, pool=pool)
    got, i, pos = [], 0, 0
    while pos < len(stream):
        target = dec.recv_buffer()
        n = min(len(target), sizes[i % len(sizes)], len(stream) - pos)
        target[:n] = stream[pos:pos + n]
        pos += n
        i += 1
        got += dec.received(n)
        dec.release()
        assert not dec.holds_buffer or dec.buffered > 4096 or dec._body is not None
    assert [bytes(f) for f in got] == payloads
    assert dec.buffered == 0 and not dec.holds_buffer


def test_an_announced_frame_costs_only_the_bytes_that_came():
    # A connection announcing a 100 MB frame and sending little of it holds little: the
    # frame's own buffer grows as its bytes arrive (it was allocated whole at the length).
    import tracemalloc
    decoder = FrameDecoder(200 * 1024 * 1024)
    tracemalloc.start()
    try:
        assert decoder.feed(struct.pack(">i", 100 * 1024 * 1024) + b"x" * 300_000) == []
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * 1024 * 1024, peak
    assert decoder.buffered == 300_000


@given(size=st.integers(70_000, 600_000), chunk=st.integers(1, 200_000))
def test_a_growing_frame_buffer_gives_the_frame_whole(size, chunk):
    payload = bytes(range(256)) * (size // 256) + b"t" * (size % 256)
    data = frame(payload) + frame(b"next")
    decoder = FrameDecoder(1 << 30, buffer_bytes=64 * 1024)
    out = []
    for i in range(0, len(data), chunk):
        out += [bytes(f) for f in decoder.feed(data[i:i + chunk])]
    assert out == [payload, b"next"]
