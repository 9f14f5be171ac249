"""Every length and count in a request frame checked against the bytes that follow it, before
the frame is parsed.

kio's native reader reserves memory for an array from its announced count before reading the
elements, so a count of four billion in a few bytes of request makes it ask for tens of
gigabytes, and a failed allocation aborts the process. Kafka refuses such a frame (a count
larger than the bytes left); so does brook, here, with a walk over the frame that reads only
lengths and counts and skips everything else. The walk is compiled once per request class
from the same schema kio parses with.

`check(cls, frame, offset)` raises `BoundsError` for the first length or count that does not
fit.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import fields
from functools import cache

from kio.serial._introspect import (  # kio's own reading of its schemas' field types
    EntityField,
    EntityTupleField,
    classify_field,
    get_field_tag,
)


class BoundsError(ValueError):
    """A length or count larger than the rest of the frame, or not a valid length at all."""


# (buffer, position, end) -> position after the item
Walk = Callable[[bytes, int, int], int]

_FIXED = {"int8": 1, "bool": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4,
          "timedelta_i32": 4, "int64": 8, "timedelta_i64": 8, "datetime_i64": 8,
          "float64": 8, "uuid": 16}
_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from


def check(cls: type, frame: bytes, offset: int) -> None:
    """Check the lengths and counts of a ``cls`` entity at ``offset`` to the end of ``frame``."""
    end = len(frame)
    try:
        pos = _walker(cls)(frame, offset, end)
    except (IndexError, struct.error):
        raise BoundsError("a length or count runs past the end of the frame") from None
    if pos > end:
        raise BoundsError(f"the request runs {pos - end} bytes past the end of the frame")
    # Bytes after the request are ignored, as Kafka ignores them (librdkafka sends some).


def check_header(flexible: bool, frame: bytes) -> int:
    """Check a request header (v1, or v2 with tagged fields); the offset of the body."""
    end = len(frame)
    pos = _string(frame, 8, end)  # the client id is a classic nullable string in every header
    if not flexible:
        return pos
    if pos < end and frame[pos] == 0:  # no tagged fields, as nearly every client sends
        return pos + 1
    return _tagged_fields(frame, pos, end)


# ---------------------------------------------------------------- primitives


def _uvarint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end:
            raise BoundsError("a varint runs past the end of the frame")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise BoundsError("a varint longer than five bytes")


def _room(pos: int, need: int, end: int) -> int:
    if need > end - pos:
        raise BoundsError(f"a length of {need} bytes with {end - pos} left")
    return pos + need


def _string(buf: bytes, pos: int, end: int) -> int:
    if pos + 2 > end:
        raise BoundsError("a string length runs past the end of the frame")
    (n,) = _I16(buf, pos)
    if n < -1:
        raise BoundsError(f"a string length of {n}")
    return _room(pos + 2, max(n, 0), end)


def _tagged_fields(buf: bytes, pos: int, end: int) -> int:
    n, pos = _uvarint(buf, pos, end)
    if n * 2 > end - pos:
        raise BoundsError(f"{n} tagged fields with {end - pos} bytes left")
    for _ in range(n):
        _, pos = _uvarint(buf, pos, end)
        size, pos = _uvarint(buf, pos, end)
        pos = _room(pos, size, end)
    return pos


# ---------------------------------------------------------------- compiled walks
#
# Each request class gets one generated function that walks an entity of it, nested entities
# inlined: a walk costs a few times less than kio's parse of the same request, where a walk of
# small functions, one per field, cost several times more. Reading past the end raises
# IndexError or struct.error, which `check` turns into BoundsError; skipping past the end is
# caught by the next read, by a count check, or by the final position.


@cache
def _walker(cls: type) -> Walk:
    lines = ["def walk(buf, pos, end):"]
    _emit(cls, lines, 1, [0])
    lines.append("    return pos")
    scope = {"I16": _I16, "I32": _I32, "uvarint": _uvarint, "tagged": _tagged_fields,
             "BoundsError": BoundsError}
    exec(compile("\n".join(lines), f"<bounds walk of {cls.__qualname__}>", "exec"), scope)
    return scope["walk"]


# The generated code's pieces; `_put` indents them and fills in their names.
_FLEXIBLE_COUNT = """\
{n} = buf[pos] - 1
if {n} < 127:
    pos += 1
else:
    {n}, pos = uvarint(buf, pos, end)
    {n} -= 1
"""
_CLASSIC_COUNT = """\
{n} = I32(buf, pos)[0]
pos += 4
if {n} < -1:
    raise BoundsError('an array count of %d' % {n})
"""
_ROOM_FOR_ELEMENTS = """\
if {n} > 0:
    if {n} * {least} > end - pos:
        raise BoundsError('an array of %d elements with %d bytes left' % ({n}, end - pos))
"""
_FLEXIBLE_LENGTH = """\
m = buf[pos]
if m < 128:
    pos += m if m else 1
else:
    m, pos = uvarint(buf, pos, end)
    pos += m - 1 if m else 0
"""
_CLASSIC_LENGTH = """\
m = {unpack}(buf, pos)[0]
pos += {size}
if m > 0:
    pos += m
elif m < -1:
    raise BoundsError('a length of %d' % m)
"""
_TAGGED_FIELDS = """\
if buf[pos]:
    pos = tagged(buf, pos, end)
else:
    pos += 1
"""


def _put(out: list[str], pad: str, piece: str, **names: object) -> None:
    out.extend(pad + line for line in piece.format(**names).splitlines())


def _emit(cls: type, out: list[str], depth: int, counter: list[int]) -> None:
    pad = "    " * depth
    flexible = cls.__flexible__
    fixed = 0

    def flush() -> None:
        nonlocal fixed
        if fixed:
            out.append(f"{pad}pos += {fixed}")
            fixed = 0

    for f in fields(cls):
        if get_field_tag(f) is not None:
            continue  # lives in the tagged fields at the end
        kind = classify_field(f)
        kafka_type = f.metadata.get("kafka_type")
        if isinstance(kind, EntityField):
            flush()
            _emit(kind.type_, out, depth, counter)
        elif isinstance(kind, EntityTupleField) or kind.is_array:
            flush()
            counter[0] += 1
            n = f"n{counter[0]}"
            entities = isinstance(kind, EntityTupleField)
            least = _least(kind.type_) if entities else _least_of(kafka_type, flexible)
            _put(out, pad, _FLEXIBLE_COUNT if flexible else _CLASSIC_COUNT, n=n)
            _put(out, pad, _ROOM_FOR_ELEMENTS, n=n, least=least)
            if not entities and kafka_type in _FIXED:
                out.append(f"{pad}    pos += {n} * {_FIXED[kafka_type]}")
                continue
            out.append(f"{pad}    for _ in range({n}):")
            if entities:
                _emit(kind.type_, out, depth + 2, counter)
            else:
                _emit_variable(out, pad + "        ", kafka_type, flexible)
        elif kafka_type in _FIXED:
            fixed += _FIXED[kafka_type]
        else:
            flush()
            _emit_variable(out, pad, kafka_type, flexible)
    flush()
    if flexible:
        _put(out, pad, _TAGGED_FIELDS)


def _emit_variable(out: list[str], pad: str, kafka_type: str, flexible: bool) -> None:
    """A string, bytes or records field: its length, then skip it."""
    if flexible:
        _put(out, pad, _FLEXIBLE_LENGTH)
    elif kafka_type == "string":
        _put(out, pad, _CLASSIC_LENGTH, unpack="I16", size=2)
    elif kafka_type in ("bytes", "records"):
        _put(out, pad, _CLASSIC_LENGTH, unpack="I32", size=4)
    else:
        raise TypeError(f"no walk for kafka type {kafka_type!r}")


def _least_of(kafka_type: str | None, flexible: bool) -> int:
    """The fewest bytes a field of a primitive type takes (a variable one: its length)."""
    if kafka_type in _FIXED:
        return _FIXED[kafka_type]
    return 1 if flexible else (2 if kafka_type == "string" else 4)


@cache
def _least(cls: type) -> int:
    """The fewest bytes an entity of ``cls`` can take (at least 1)."""
    flexible = cls.__flexible__
    total = 1 if flexible else 0  # the tagged fields' count
    for f in fields(cls):
        if get_field_tag(f) is not None:
            continue
        kind = classify_field(f)
        kafka_type = f.metadata.get("kafka_type")
        if isinstance(kind, EntityField):
            total += _least(kind.type_)
        elif kind.is_array or isinstance(kind, EntityTupleField):
            total += 1 if flexible else 4
        else:
            total += _least_of(kafka_type, flexible)
    return max(total, 1)
