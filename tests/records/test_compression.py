"""Compression codecs, checked against the framings Kafka's Java client writes and reads."""

from __future__ import annotations

import random
import struct
import time

import cramjam
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brook.records import Codec, CorruptRecordError, UnsupportedCompressionError
from brook.records.compression import codec_of, compress, decompress, inflated_bound
from brook.records.errors import InflationLimitError
from tests.support.examples import examples

SOME = settings(max_examples=examples(40), deadline=None,
                suppress_health_check=[HealthCheck.too_slow])

XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
LZ4_MAGIC = b"\x04\x22\x4d\x18"


def _payload(size: int, seed: int = 0) -> bytes:
    """Half random, half repetitive: compressible but not trivially so."""
    rng = random.Random(seed)
    return b"".join(rng.randbytes(64) + b"kafka" * 13 for _ in range(size // 129 + 1))[:size]


@pytest.mark.parametrize("codec", list(Codec))
@SOME
@given(data=st.binary(max_size=2000))
def test_round_trip(codec, data):
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("codec", list(Codec))
def test_round_trip_large_and_from_memoryview(codec):
    data = _payload(300_000)
    assert decompress(codec, memoryview(compress(codec, data))) == data


@pytest.mark.parametrize("codec", list(Codec))
@pytest.mark.parametrize("size", [0, 1000, 300_000])
def test_what_the_headers_bound_holds_the_data_and_a_reader_may_keep_the_buffer(codec, size):
    """inflated_bound() is what decompress() holds data to, from the headers alone (gzip says
    nothing); a reader that only reads gets the buffer inflated into, the same bytes."""
    data = _payload(size, seed=size)
    packed = compress(codec, data)
    bound = inflated_bound(codec, packed)
    assert bound is None if codec == Codec.GZIP else bound >= len(data)
    assert bytes(decompress(codec, memoryview(packed), readonly=True)) == data


def test_codec_of_masks_attributes_and_rejects_unknown():
    assert codec_of(0x08 | 0x10 | 2) == Codec.SNAPPY
    for bits in (5, 6, 7):
        with pytest.raises(UnsupportedCompressionError):
            codec_of(bits)


# ---------------------------------------------------------------- snappy


def _xerial_blocks(data: bytes) -> list[bytes]:
    """Split a xerial stream into its raw snappy blocks, parsed independently of brook."""
    assert data[:16] == XERIAL_HEADER
    blocks, pos = [], 16
    while pos < len(data):
        (size,) = struct.unpack_from(">i", data, pos)
        blocks.append(data[pos + 4 : pos + 4 + size])
        pos += 4 + size
    assert pos == len(data)
    return blocks


def test_snappy_writes_xerial_framing():
    data = _payload(1000)
    blocks = _xerial_blocks(compress(Codec.SNAPPY, data))
    assert len(blocks) == 1
    assert bytes(cramjam.snappy.decompress_raw(blocks[0])) == data


@SOME
@given(size=st.integers(32 * 1024 + 1, 140_000), seed=st.integers(0, 2**32))
def test_snappy_xerial_round_trip_over_several_blocks(size, seed):
    data = _payload(size, seed)
    compressed = compress(Codec.SNAPPY, data)
    blocks = _xerial_blocks(compressed)
    # snappy-java, and so Kafka, cuts the input into 32 KiB blocks.
    assert len(blocks) == -(-size // (32 * 1024))
    assert b"".join(bytes(cramjam.snappy.decompress_raw(b)) for b in blocks) == data
    assert decompress(Codec.SNAPPY, compressed) == data


def test_snappy_reads_xerial_written_by_hand():
    parts = [b"first block " * 100, b"second block " * 50]
    stream = XERIAL_HEADER
    for part in parts:
        block = bytes(cramjam.snappy.compress_raw(part))
        stream += struct.pack(">i", len(block)) + block
    assert decompress(Codec.SNAPPY, stream) == b"".join(parts)


@SOME
@given(data=st.binary(max_size=5000))
def test_snappy_reads_raw_blocks(data):
    assert decompress(Codec.SNAPPY, bytes(cramjam.snappy.compress_raw(data))) == data


@pytest.mark.parametrize(
    "bad",
    [
        XERIAL_HEADER[:12],  # header cut short
        XERIAL_HEADER + b"\x00\x00",  # block length cut short
        XERIAL_HEADER + struct.pack(">i", 50) + b"abc",  # block overruns the data
        XERIAL_HEADER + struct.pack(">i", -1),  # negative block length
        XERIAL_HEADER + struct.pack(">i", 4) + b"\xff\xff\xff\xff",  # block is not snappy
    ],
)
def test_snappy_bad_xerial_is_corrupt(bad):
    with pytest.raises(CorruptRecordError):
        decompress(Codec.SNAPPY, bad)


# ---------------------------------------------------------------- lz4


def _lz4_frame(data: bytes) -> tuple[int, int, list[tuple[bytes, bool]], bytes]:
    """Parse an LZ4 frame (lz4 frame spec): FLG, BD, [(block, compressed)], trailer."""
    assert data[:4] == LZ4_MAGIC
    flg, bd = data[4], data[5]
    pos = 6 + (8 if flg & 0x08 else 0) + 1  # content size, then the header checksum
    blocks = []
    while True:
        (word,) = struct.unpack_from("<I", data, pos)
        pos += 4
        if word == 0:
            break
        size = word & 0x7FFFFFFF
        blocks.append((data[pos : pos + size], not word & 0x80000000))
        pos += size + (4 if flg & 0x10 else 0)
    return flg, bd, blocks, data[pos:]


def test_lz4_frame_is_one_kafka_reads():
    # Kafka's Lz4BlockInputStream accepts version 01 and refuses dependent blocks.
    data = _payload(300_000)
    flg, bd, blocks, trailer = _lz4_frame(compress(Codec.LZ4, data))
    assert flg >> 6 == 0b01, "frame version"
    assert flg & 0x20, "blocks must be independent"
    assert flg & 0x03 == 0, "reserved bits"
    assert 4 <= (bd >> 4) & 7 <= 7 and bd & 0x8F == 0, "block size 64 KiB .. 4 MiB"
    assert not flg & 0x04 and trailer == b"", "Kafka's writer adds no content checksum"
    # Each block must decompress on its own, the way Kafka's reader decompresses them.
    block_max = 1 << (2 * ((bd >> 4) & 7) + 8)
    out = b""
    for block, compressed in blocks:
        if compressed:  # every block but the last holds exactly block_max bytes
            block = bytes(
                cramjam.lz4.decompress_block(block, output_len=min(block_max, len(data) - len(out)))
            )
        out += block
    assert len(blocks) > 1 and out == data


def test_lz4_reads_frames_with_content_checksum_and_linked_blocks():
    # What other clients (librdkafka and friends) may write.
    data = _payload(200_000)
    assert decompress(Codec.LZ4, bytes(cramjam.lz4.compress(data))) == data


# ---------------------------------------------------------------- garbage


@pytest.mark.parametrize("codec", [c for c in Codec if c != Codec.NONE])
@pytest.mark.parametrize(
    "garbage", [b"", b"\x00", b"definitely not compressed data", bytes(range(256))]
)
def test_garbage_is_corrupt(codec, garbage):
    if codec == Codec.SNAPPY and garbage == b"\x00":
        assert decompress(codec, garbage) == b""  # a valid raw snappy block of nothing
        return
    with pytest.raises(CorruptRecordError):
        decompress(codec, garbage)


@pytest.mark.parametrize("codec", list(Codec))
@settings(max_examples=examples(100), deadline=None)
@given(garbage=st.binary(max_size=300))
def test_random_bytes_decompress_or_raise_corrupt(codec, garbage):
    try:
        decompress(codec, garbage)
    except CorruptRecordError:
        pass


@pytest.mark.parametrize("codec", [c for c in Codec if c != Codec.NONE])
@settings(max_examples=examples(60), deadline=None)
@given(
    data=st.binary(min_size=1, max_size=500),
    flips=st.lists(st.tuples(st.integers(0), st.integers(1, 255)), min_size=1, max_size=3),
)
def test_damaged_streams_decompress_or_raise_corrupt(codec, data, flips):
    damaged = bytearray(compress(codec, data))
    for pos, xor in flips:
        damaged[pos % len(damaged)] ^= xor
    try:
        decompress(codec, bytes(damaged))
    except CorruptRecordError:
        pass


# ---------------------------------------------------------------- bounded inflation


def zstd_rle_bomb(blocks: int, block: int = 128 * 1024) -> bytes:
    """A valid zstd frame of RLE blocks (4 bytes each, `block` bytes of output each): 8,192
    of them are 32 KiB that inflate to 1 GiB."""
    out = bytearray(struct.pack("<I", 0xFD2FB528)) + bytes([0x00, 0x38])  # 128 KiB window
    for i in range(blocks):
        header = block << 3 | 1 << 1 | (i == blocks - 1)
        out += header.to_bytes(3, "little") + b"\0"
    return bytes(out)


def test_zstd_bomb_is_refused_from_its_block_headers_without_inflating():
    small = zstd_rle_bomb(8)
    assert decompress(Codec.ZSTD, small, limit=1 << 20) == bytes(1 << 20)  # real zstd reads it
    bomb = zstd_rle_bomb(8192)
    assert len(bomb) < 33_000
    started = time.perf_counter()
    with pytest.raises(InflationLimitError, match="1073741824 bytes"):
        decompress(Codec.ZSTD, bomb, limit=32 << 20)
    assert time.perf_counter() - started < 0.05  # nothing was inflated


def test_zstd_bound_counts_each_compressed_block_as_a_full_one():
    data = _payload(200_000)
    frame = compress(Codec.ZSTD, data)
    # two compressed blocks: up to 128 KiB each, whatever they really hold
    assert decompress(Codec.ZSTD, frame, limit=256 * 1024) == data
    with pytest.raises(InflationLimitError):
        decompress(Codec.ZSTD, frame, limit=256 * 1024 - 1)
    # RLE (and raw) blocks say exactly what they inflate to
    assert decompress(Codec.ZSTD, zstd_rle_bomb(2, 1000), limit=2000) == bytes(2000)
    with pytest.raises(InflationLimitError):
        decompress(Codec.ZSTD, zstd_rle_bomb(2, 1000), limit=1999)


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.LZ4, Codec.SNAPPY])
def test_bombs_of_other_codecs_stop_at_the_limit(codec):
    bomb = compress(codec, bytes(64 << 20))
    started = time.perf_counter()
    with pytest.raises(InflationLimitError):
        decompress(codec, bomb, limit=1 << 20)
    # gzip inflates up to the limit, the others not at all; a whole inflation takes longer
    assert time.perf_counter() - started < 0.1


@pytest.mark.parametrize("codec", [c for c in Codec if c != Codec.NONE])
@SOME
@given(size=st.integers(0, 300_000), seed=st.integers(0, 2**32))
def test_limit_at_the_inflated_size_passes_and_below_it_refuses(codec, size, seed):
    data = _payload(size, seed)
    compressed = compress(codec, data)
    # A block-based format's bound may exceed the data by a block's worth per block
    assert decompress(codec, compressed, limit=2 * size + 128 * 1024) == data
    if size:
        with pytest.raises(InflationLimitError):
            decompress(codec, compressed, limit=size - 1)


def test_gzip_of_several_members_is_read_whole_within_the_limit():
    parts = [_payload(5000, 1), _payload(7000, 2)]
    stream = b"".join(compress(Codec.GZIP, p) for p in parts)
    assert decompress(Codec.GZIP, stream, limit=12_000) == b"".join(parts)
    with pytest.raises(InflationLimitError):
        decompress(Codec.GZIP, stream, limit=11_999)
    with pytest.raises(CorruptRecordError):
        decompress(Codec.GZIP, stream[:-3])
