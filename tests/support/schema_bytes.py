"""Kafka's message-schema field types built by hand, byte by byte, as the JSON schemas
describe them: the tests' reference for the coordinators' record formats."""

import struct


def i16(n):
    return struct.pack(">h", n)


def i32(n):
    return struct.pack(">i", n)


def i64(n):
    return struct.pack(">q", n)


def uvarint(n):
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def string(s):  # "string", non-flexible: int16 length, UTF-8
    b = s.encode()
    return i16(len(b)) + b


def nullable_string(s):
    return i16(-1) if s is None else string(s)


def byts(b):  # "bytes", non-flexible: int32 length
    return i32(len(b)) + b


def compact_string(s):  # flexible: unsigned varint length + 1
    b = s.encode()
    return uvarint(len(b) + 1) + b


def compact_nullable_string(s):
    return b"\x00" if s is None else compact_string(s)


def compact_bytes(b):
    return uvarint(len(b) + 1) + b
