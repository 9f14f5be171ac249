from __future__ import annotations

import struct

import pytest
from hypothesis import given, strategies as st

from brook.protocol.framing import FrameDecoder, FrameTooLargeError, InvalidFrameError, frame


@given(st.lists(st.binary(max_size=200), max_size=10), st.integers(1, 50))
def test_frames_survive_any_split(payloads, chunk):
    stream = b"".join(frame(p) for p in payloads)
    dec = FrameDecoder(1000)
    got = []
    for i in range(0, len(stream), chunk):
        got += dec.feed(stream[i:i + chunk])
    assert got == payloads
    assert dec.buffered == 0


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
