"""Varints (protobuf style): zigzag ones as used by the fields of v2 records, unsigned ones
as used by the protocol's flexible versions."""

from __future__ import annotations

from .errors import CorruptRecordError, TruncatedBatchError


def encode_uvarint(v: int) -> bytes:
    """An unsigned varint (the protocol's compact lengths and tagged-field counts)."""
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    """Zigzag-encode a signed 64-bit integer."""
    return encode_uvarint(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def decode_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Decode a zigzag varint at `pos`; return (value, position after it)."""
    result = 0
    shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise TruncatedBatchError("varint runs past the end of the record")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint longer than 10 bytes")
    return (result >> 1) ^ -(result & 1), pos


def varint_size(value: int) -> int:
    v = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    size = 1
    while v >= 0x80:
        v >>= 7
        size += 1
    return size
