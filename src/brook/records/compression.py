"""Compression codecs of Kafka record batches, all through cramjam.

Every decompression is bounded (`limit`, bytes of output): a few bytes of zstd can stand for
gigabytes. Where the format says how much each part inflates to, that is added up from the
frame and block headers before anything is inflated (zstd's and LZ4's block headers, snappy's
length preambles), and output past it is refused by a decompressor writing into a buffer of
that size; deflate says nothing, so gzip is inflated in steps that stop at the limit.

Snappy is written with the xerial framing that Kafka's Java client writes (every client
reads it); on read both the xerial framing and raw snappy blocks are accepted.
LZ4 is the LZ4 frame format Kafka uses since message format v1, written with independent
blocks and no content checksum like Kafka's own writer: Kafka's reader rejects frames whose
blocks are linked, which is what the LZ4 library writes by default.
"""

from __future__ import annotations

import struct
import zlib
from enum import IntEnum

import cramjam

from .errors import CorruptRecordError, InflationLimitError, UnsupportedCompressionError


class Codec(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


CODEC_MASK = 0x07

# xerial snappy-java stream header: magic, version 1, compatible version 1.
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024


def codec_of(attributes: int) -> Codec:
    try:
        return Codec(attributes & CODEC_MASK)
    except ValueError:
        raise UnsupportedCompressionError(f"unknown compression codec {attributes & CODEC_MASK}") from None


def compress(codec: Codec, data: bytes) -> bytes:
    if codec == Codec.NONE:
        return bytes(data)
    if codec == Codec.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == Codec.SNAPPY:
        return _xerial_compress(data)
    if codec == Codec.LZ4:
        return _lz4_compress(data)
    if codec == Codec.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise UnsupportedCompressionError(f"unknown compression codec {codec}")


DEFAULT_LIMIT = 64 << 20  # for callers without a configured limit (tools, clients)


def decompress(codec: Codec, data: bytes | memoryview, limit: int = DEFAULT_LIMIT, *,
               readonly: bool = False) -> bytes:
    """`data` inflated. Raises InflationLimitError when it would inflate past `limit` bytes
    (before inflating it, where the format tells), CorruptRecordError when it is damaged.
    `readonly`: the caller only reads the result, which may then be the buffer inflated into
    (a bytearray or a memoryview of one) instead of a copy of it as bytes."""
    try:
        if codec == Codec.NONE:
            return bytes(data)
        if codec == Codec.GZIP:
            return _gunzip(data, limit)
        if codec == Codec.SNAPPY:
            if bytes(data[:8]) == _XERIAL_MAGIC:
                return _xerial_decompress(data, limit)
            _check_size(codec, cramjam.snappy.decompress_raw_len(data), limit)
            return bytes(cramjam.snappy.decompress_raw(data))
        if codec == Codec.LZ4:
            return _into(cramjam.lz4, data, _check_size(codec, lz4_bound(data), limit), readonly)
        if codec == Codec.ZSTD:
            return _into(cramjam.zstd, data, _check_size(codec, zstd_bound(data), limit), readonly)
    except (cramjam.DecompressionError, ValueError, OSError, zlib.error) as exc:
        raise CorruptRecordError(f"cannot decompress {codec.name} data: {exc}") from None
    raise UnsupportedCompressionError(f"unknown compression codec {codec}")


def inflated_bound(codec: Codec, data: bytes | memoryview) -> int | None:
    """The most `data` can inflate to, from its frame and block headers or length preambles,
    without inflating it (what decompress() holds it to); None for gzip, whose size is known
    only once it is inflated. Raises CorruptRecordError when the headers are damaged."""
    try:
        if codec == Codec.NONE:
            return len(data)
        if codec == Codec.SNAPPY:
            if bytes(data[:8]) == _XERIAL_MAGIC:
                return sum(cramjam.snappy.decompress_raw_len(b) for b in _xerial_blocks(data))
            return cramjam.snappy.decompress_raw_len(data)
        if codec == Codec.LZ4:
            return lz4_bound(data)
        if codec == Codec.ZSTD:
            return zstd_bound(data)
    except (cramjam.DecompressionError, ValueError) as exc:
        raise CorruptRecordError(f"cannot decompress {codec.name} data: {exc}") from None
    return None


def _check_size(codec: Codec, size: int, limit: int) -> int:
    if size > limit:
        raise InflationLimitError(f"{codec.name} data would inflate to {size} bytes, "
                                  f"over the limit of {limit}")
    return size


def _into(module, data, bound: int, readonly: bool = False) -> bytes:
    """Decompress into a buffer of `bound` bytes: a stream that says less than it holds
    fails there instead of growing."""
    out = bytearray(bound)
    n = module.decompress_into(data, out)
    if readonly:
        return out if n == bound else memoryview(out)[:n]
    return bytes(memoryview(out)[:n]) if n != bound else bytes(out)


_GZIP_STEP = 1 << 20


def _gunzip(data, limit: int) -> bytes:
    """Gzip members one after another (as the JDK's reader takes them), inflated in steps
    of at most 1 MiB until the limit."""
    out = []
    size = 0
    rest = data  # (a memoryview is read in place)
    while True:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        chunk = d.decompress(rest, min(_GZIP_STEP, limit - size + 1))
        while True:
            size += len(chunk)
            out.append(chunk)
            if size > limit:
                raise InflationLimitError(f"GZIP data inflates past the limit of {limit} bytes")
            if d.eof or not d.unconsumed_tail and not chunk:
                break
            chunk = d.decompress(d.unconsumed_tail, min(_GZIP_STEP, limit - size + 1))
        if not d.eof:
            raise CorruptRecordError("cannot decompress GZIP data: the stream ends early")
        rest = d.unused_data
        if not rest:
            return b"".join(out)


# ---------------------------------------------------------------- sizes from headers

_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_BLOCK_MAX = 128 * 1024  # what one compressed block may inflate to, at most
_SKIPPABLE_MASK = 0xFFFFFFF0
_ZSTD_SKIPPABLE = 0x184D2A50  # skippable frames (zstd's and LZ4's share the range)
_LZ4_MAGIC = 0x184D2204
_LZ4_BLOCK_MAX = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}
_U32 = struct.Struct("<I")


def zstd_bound(data) -> int:
    """The most the zstd frames in `data` can inflate to, from their block headers: raw and
    RLE blocks give their size, a compressed block at most 128 KiB (the format's limit) or
    the frame's window, if smaller.
    A frame's content size is not trusted; the decompressor checks it."""
    view = memoryview(data)
    pos, end, total = 0, len(view), 0
    while pos < end:
        if end - pos < 4:
            raise CorruptRecordError("zstd data ends inside a frame magic")
        (magic,) = _U32.unpack_from(view, pos)
        if magic & _SKIPPABLE_MASK == _ZSTD_SKIPPABLE:
            pos = _skip(view, pos)
            continue
        if magic != _ZSTD_MAGIC or end - pos < 5:
            raise CorruptRecordError("not a zstd frame")
        fhd = view[pos + 4]
        single_segment = fhd >> 5 & 1
        fcs_size = (1 if single_segment else 0, 2, 4, 8)[fhd >> 6]
        block_max = _ZSTD_BLOCK_MAX
        if not single_segment:  # a block inflates to no more than the window
            wd = view[pos + 5]
            base = 1 << (10 + (wd >> 3))
            block_max = min(block_max, base + base // 8 * (wd & 7))
        pos += 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[fhd & 3]
        if single_segment:  # the window is the content size
            if end - pos < fcs_size:
                raise CorruptRecordError("zstd data ends inside a frame header")
            fcs = int.from_bytes(view[pos:pos + fcs_size], "little") + (256 if fcs_size == 2 else 0)
            block_max = min(block_max, fcs)
        pos += fcs_size
        while True:
            if end - pos < 3:
                raise CorruptRecordError("zstd data ends inside a block header")
            header = view[pos] | view[pos + 1] << 8 | view[pos + 2] << 16
            kind, size = header >> 1 & 3, header >> 3
            pos += 3
            if kind == 0:  # raw
                total += size
                pos += size
            elif kind == 1:  # RLE: one byte, repeated
                total += size
                pos += 1
            elif kind == 2:
                total += block_max
                pos += size
            else:
                raise CorruptRecordError("zstd block of the reserved type")
            if header & 1:  # the frame's last block
                break
        pos += 4 if fhd & 4 else 0  # content checksum
        if pos > end:
            raise CorruptRecordError("zstd data ends inside a frame")
    return total


def lz4_bound(data) -> int:
    """The most the LZ4 frames in `data` can inflate to, from their block headers: an
    uncompressed block its size, a compressed one at most the frame's block maximum."""
    view = memoryview(data)
    pos, end, total = 0, len(view), 0
    while pos < end:
        if end - pos < 7:
            raise CorruptRecordError("LZ4 data ends inside a frame header")
        (magic,) = _U32.unpack_from(view, pos)
        if magic & _SKIPPABLE_MASK == _ZSTD_SKIPPABLE:
            pos = _skip(view, pos)
            continue
        if magic != _LZ4_MAGIC:
            raise CorruptRecordError("not an LZ4 frame")
        flg, bd = view[pos + 4], view[pos + 5]
        block_max = _LZ4_BLOCK_MAX.get(bd >> 4 & 7)
        if block_max is None:
            raise CorruptRecordError("LZ4 frame with an invalid block maximum size")
        pos += 7 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
        block_checksum = 4 if flg & 0x10 else 0
        while True:
            if end - pos < 4:
                raise CorruptRecordError("LZ4 data ends inside a block header")
            (size,) = _U32.unpack_from(view, pos)
            pos += 4
            if size == 0:  # end mark
                break
            if size & 0x80000000:
                size &= 0x7FFFFFFF
                total += size
            else:
                total += block_max
            pos += size + block_checksum
        pos += 4 if flg & 0x04 else 0  # content checksum
        if pos > end:
            raise CorruptRecordError("LZ4 data ends inside a frame")
    return total


def _skip(view, pos: int) -> int:
    if len(view) - pos < 8:
        raise CorruptRecordError("data ends inside a skippable frame")
    return pos + 8 + _U32.unpack_from(view, pos + 4)[0]


def _lz4_compress(data: bytes) -> bytes:
    compressor = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)
    compressor.compress(data)
    return bytes(compressor.finish())


def _xerial_compress(data: bytes) -> bytes:
    out = [_XERIAL_HEADER]
    view = memoryview(data)
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK]))
        out.append(struct.pack(">i", len(block)))
        out.append(block)
    return b"".join(out)


def _xerial_blocks(data: bytes | memoryview):
    """The snappy blocks of xerial-framed data, each checked to lie within it."""
    view = memoryview(data)
    pos = len(_XERIAL_HEADER)
    if len(view) < pos:
        raise CorruptRecordError("truncated xerial snappy header")
    while pos < len(view):
        if pos + 4 > len(view):
            raise CorruptRecordError("truncated xerial snappy block length")
        (length,) = struct.unpack_from(">i", view, pos)
        pos += 4
        if length < 0 or pos + length > len(view):
            raise CorruptRecordError("xerial snappy block overruns its data")
        yield view[pos : pos + length]
        pos += length


def _xerial_decompress(data: bytes | memoryview, limit: int) -> bytes:
    blocks = []
    size = 0
    for block in _xerial_blocks(data):
        size = _check_size(Codec.SNAPPY, size + cramjam.snappy.decompress_raw_len(block), limit)
        blocks.append(block)
    return b"".join(bytes(cramjam.snappy.decompress_raw(b)) for b in blocks)
