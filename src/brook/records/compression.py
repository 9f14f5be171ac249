"""Compression codecs of Kafka record batches, all through cramjam.

Snappy is written with the xerial framing that Kafka's Java client writes (every client
reads it); on read both the xerial framing and raw snappy blocks are accepted.
LZ4 is the LZ4 frame format Kafka uses since message format v1, written with independent
blocks and no content checksum like Kafka's own writer: Kafka's reader rejects frames whose
blocks are linked, which is what the LZ4 library writes by default.
"""

from __future__ import annotations

import struct
from enum import IntEnum

import cramjam

from .errors import CorruptRecordError, UnsupportedCompressionError


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


def decompress(codec: Codec, data: bytes | memoryview) -> bytes:
    try:
        if codec == Codec.NONE:
            return bytes(data)
        if codec == Codec.GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec == Codec.SNAPPY:
            if bytes(data[:8]) == _XERIAL_MAGIC:
                return _xerial_decompress(data)
            return bytes(cramjam.snappy.decompress_raw(data))
        if codec == Codec.LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if codec == Codec.ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except (cramjam.DecompressionError, ValueError, OSError) as exc:
        raise CorruptRecordError(f"cannot decompress {codec.name} data: {exc}") from None
    raise UnsupportedCompressionError(f"unknown compression codec {codec}")


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


def _xerial_decompress(data: bytes | memoryview) -> bytes:
    view = memoryview(data)
    pos = len(_XERIAL_HEADER)
    if len(view) < pos:
        raise CorruptRecordError("truncated xerial snappy header")
    out = []
    while pos < len(view):
        if pos + 4 > len(view):
            raise CorruptRecordError("truncated xerial snappy block length")
        (size,) = struct.unpack_from(">i", view, pos)
        pos += 4
        if size < 0 or pos + size > len(view):
            raise CorruptRecordError("xerial snappy block overruns its data")
        out.append(bytes(cramjam.snappy.decompress_raw(view[pos : pos + size])))
        pos += size
    return b"".join(out)
