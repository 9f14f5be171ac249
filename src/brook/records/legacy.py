"""Kafka's legacy message sets (magic 0 and 1) and their conversion to RecordBatch v2.

Old clients still produce these (and must be served them), so brook reads them, turns them
into v2 batches for its log, and can write them back for down-conversion.

An entry of a message set (big-endian):

    offset int64, message_size int32, then the message of message_size bytes:
    crc uint32 (CRC-32 of everything after it), magic int8, attributes int8,
    timestamp int64 (magic 1 only), key int32 length + bytes, value int32 length + bytes
    (a length of -1 is null).

The magic byte sits at byte 16 of an entry, as it does in a v2 batch, which is what lets
`magic_of` tell the formats apart. A compressed message is a wrapper whose value is a whole
compressed inner message set. Inner offsets are absolute for magic 0; for magic 1 they are
relative (0..n-1 as producers write them), and the wrapper carries the absolute offset of
the last inner message.
"""

from __future__ import annotations

import itertools
import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from .batch import CREATE_TIME, LOG_APPEND_TIME, Record, encode_batch
from .compression import CODEC_MASK, Codec, codec_of, compress, decompress
from .errors import (
    CorruptRecordError,
    InvalidRecordError,
    TruncatedBatchError,
    UnsupportedCompressionError,
)

MAGIC_V0 = 0
MAGIC_V1 = 1
NO_TIMESTAMP_TYPE = -1  # what Kafka reports as the timestamp type of magic 0 messages
TIMESTAMP_TYPE_BIT = 0x08  # magic 1 only

LOG_OVERHEAD = 12  # offset + message_size
MAGIC_OFFSET = 16  # offset + message_size + crc
MESSAGE_OVERHEAD = {MAGIC_V0: 14, MAGIC_V1: 22}  # crc .. value length, empty key and value

_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_INT32_MAX = 2**31 - 1
_INT64_LIMIT = 2**63

_LEGACY_CODECS = (Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4)


@dataclass(frozen=True, slots=True)
class LegacyMessage:
    """One message, with its absolute offset.

    `attributes` is the byte stored in the message itself (for messages flattened out of a
    compressed wrapper, the inner message's byte). `timestamp` and `timestamp_type` are the
    effective ones: -1 and NO_TIMESTAMP_TYPE for magic 0; for a magic-1 wrapper in
    LogAppendTime, the wrapper's timestamp and type for every inner message.
    """

    offset: int
    magic: int
    attributes: int = 0
    timestamp: int = -1
    timestamp_type: int = CREATE_TIME
    key: bytes | None = None
    value: bytes | None = None


@dataclass(frozen=True, slots=True)
class _Entry:
    """A top-level entry as stored: either a plain message or a compressed wrapper."""

    message: LegacyMessage
    codec: Codec


def magic_of(buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """The magic byte (a signed int8) of the entry or batch at `pos`: byte 16 in every format."""
    if pos < 0 or len(buf) - pos <= MAGIC_OFFSET:
        raise TruncatedBatchError("too few bytes to hold a magic byte")
    magic = buf[pos + MAGIC_OFFSET]
    return magic - 256 if magic > 127 else magic


# ---------------------------------------------------------------- reading


def decode_message_set(buf: bytes | bytearray | memoryview) -> list[LegacyMessage]:
    """Every message of a legacy message set, compressed wrappers flattened, in order.

    A partial entry at the end of `buf` is ignored (fetch responses cut the last entry
    short by design); a complete entry that is damaged raises CorruptRecordError.
    """
    messages: list[LegacyMessage] = []
    for entry in _iter_entries(memoryview(buf), top_level=True):
        messages.extend(_flatten(entry))
    return messages


def to_v2_batches(buf: bytes | bytearray | memoryview) -> list[bytes]:
    """Convert a legacy message set into v2 batches, one per top-level entry.

    Offsets, timestamps, keys and values are kept; a compressed wrapper becomes one batch
    compressed with the same codec. Magic 0 messages have no timestamp: their records get
    -1 and the batch CreateTime, as Kafka does when it up-converts.
    """
    batches = []
    for entry in _iter_entries(memoryview(buf), top_level=True):
        messages = _flatten(entry)
        _check_fits_v2(messages)
        records = [Record(m.offset, m.timestamp, m.key, m.value) for m in messages]
        ts_type = (
            LOG_APPEND_TIME if entry.message.timestamp_type == LOG_APPEND_TIME else CREATE_TIME
        )
        batches.append(encode_batch(records, codec=entry.codec, timestamp_type=ts_type))
    return batches


def produced_to_v2(buf: bytes | bytearray | memoryview) -> tuple[bytes, int]:
    """The v2 batch a Produce v0-v2 message set is stored as, and its number of records.

    As Kafka validates a producer's legacy messages: every entry whole and its CRC right
    (inner messages of a wrapper included), one magic throughout, either plain messages or a
    single compressed wrapper, and no codec a magic below 2 cannot carry (all three
    INVALID_RECORD). All of it becomes
    one batch at offsets 0..n-1 (the producer's offsets are ignored, as Kafka ignores them),
    compressed with the wrapper's codec, in CreateTime with the messages' timestamps (-1 for
    magic 0); a LogAppendTime topic stamps it on append, as it stamps any batch.
    """
    view = memoryview(buf)
    entries = []
    consumed = 0
    try:
        for entry in _iter_entries(view, top_level=True):
            entries.append(entry)
            # (a message is exactly as long as its fields: _parse_message holds it to that)
            consumed += LOG_OVERHEAD + MESSAGE_OVERHEAD[entry.message.magic] \
                + len(entry.message.key or b"") + len(entry.message.value or b"")
    except UnsupportedCompressionError as exc:  # zstd in a legacy wrapper: Kafka's INVALID_RECORD
        raise InvalidRecordError(str(exc)) from None
    if consumed != len(view):
        raise CorruptRecordError(f"message set of {len(view)} bytes ends inside a message")
    if not entries:
        raise InvalidRecordError("a produced message set holds no message")
    magic = entries[0].message.magic
    if any(e.message.magic != magic for e in entries):
        raise InvalidRecordError(f"messages of magic {magic} and others in one message set")
    codec = entries[0].codec
    if len(entries) > 1 and any(e.codec != Codec.NONE for e in entries):
        raise InvalidRecordError("a compressed message set must be one wrapper message alone")
    messages = [m for e in entries for m in _flatten(e, offsets=False)]
    records = [Record(i, m.timestamp, m.key, m.value) for i, m in enumerate(messages)]
    stamped = [r.timestamp for r in records if r.timestamp >= 0]
    # The base timestamp is the earliest, so the log's check of it covers every record.
    base_ts = min(stamped) if stamped else -1
    return encode_batch(records, base_offset=0, codec=codec, base_timestamp=base_ts), len(records)


def _check_fits_v2(messages: list[LegacyMessage]) -> None:
    """A v2 batch stores offsets as int32 deltas and timestamps as int64 deltas from its first
    record, with offsets increasing; a wrapper that breaks this cannot have come from Kafka."""
    first = messages[0]
    for prev, m in itertools.pairwise(messages):
        if m.offset <= prev.offset:
            raise CorruptRecordError(
                f"offsets {prev.offset}, {m.offset} in a wrapper do not increase"
            )
    if messages[-1].offset - first.offset > _INT32_MAX:
        raise CorruptRecordError(f"wrapper spans more than 2**31 offsets from {first.offset}")
    if any(not -_INT64_LIMIT <= m.timestamp - first.timestamp < _INT64_LIMIT for m in messages):
        raise CorruptRecordError("timestamps in a wrapper lie further apart than int64 allows")


def _iter_entries(view: memoryview, top_level: bool, magic: int | None = None) -> Iterator[_Entry]:
    """Yield each entry of a message set. Inside a wrapper nothing may be cut short."""
    pos = 0
    end = len(view)
    while pos < end:
        if end - pos < LOG_OVERHEAD:
            if top_level:
                return
            raise CorruptRecordError("compressed message set ends inside an entry header")
        offset, size = struct.unpack_from(">qi", view, pos)
        if size < MESSAGE_OVERHEAD[MAGIC_V0]:
            raise CorruptRecordError(f"message size {size} is smaller than any message")
        if end - pos - LOG_OVERHEAD < size:
            if top_level:
                return
            raise CorruptRecordError("compressed message set ends inside a message")
        message = view[pos + LOG_OVERHEAD : pos + LOG_OVERHEAD + size]
        entry = _parse_message(offset, message)
        if magic is not None and entry.message.magic != magic:
            raise CorruptRecordError("inner message magic differs from its wrapper's")
        yield entry
        pos += LOG_OVERHEAD + size


def _parse_message(offset: int, msg: memoryview) -> _Entry:
    (crc,) = struct.unpack_from(">I", msg, 0)
    magic, attributes = msg[4], msg[5]
    if magic not in MESSAGE_OVERHEAD:
        raise CorruptRecordError(f"magic {magic} is not a legacy message")
    if len(msg) < MESSAGE_OVERHEAD[magic]:
        raise CorruptRecordError(f"message size {len(msg)} is too small for magic {magic}")
    actual = zlib.crc32(msg[4:])
    if actual != crc:
        raise CorruptRecordError(
            f"message at offset {offset}: CRC {actual:#010x} != stored {crc:#010x}"
        )
    codec = codec_of(attributes)
    if codec not in _LEGACY_CODECS:
        raise UnsupportedCompressionError(f"{codec.name} needs message format v2")
    pos = 6
    if magic == MAGIC_V1:
        (timestamp,) = _INT64.unpack_from(msg, pos)
        pos += 8
        ts_type = LOG_APPEND_TIME if attributes & TIMESTAMP_TYPE_BIT else CREATE_TIME
    else:
        timestamp, ts_type = -1, NO_TIMESTAMP_TYPE
    key, pos = _read_bytes(msg, pos)
    value, pos = _read_bytes(msg, pos)
    if pos != len(msg):
        raise CorruptRecordError(f"message at offset {offset}: size does not match its fields")
    return _Entry(LegacyMessage(offset, magic, attributes, timestamp, ts_type, key, value), codec)


def _read_bytes(msg: memoryview, pos: int) -> tuple[bytes | None, int]:
    if len(msg) - pos < 4:
        raise CorruptRecordError("message ends inside a length field")
    (length,) = _INT32.unpack_from(msg, pos)
    pos += 4
    if length == -1:
        return None, pos
    if length < 0 or length > len(msg) - pos:
        raise CorruptRecordError(f"invalid key or value length {length}")
    return bytes(msg[pos : pos + length]), pos + length


def _flatten(entry: _Entry, offsets: bool = True) -> list[LegacyMessage]:
    """The messages an entry stands for: itself, or the inner messages of a wrapper.

    With `offsets` false the wrapper's offset is not used (a producer's, which Kafka ignores:
    kafka-python leaves it 0), and magic-1 inner messages keep their relative offsets."""
    wrapper = entry.message
    if entry.codec == Codec.NONE:
        return [wrapper]
    if wrapper.value is None:
        raise CorruptRecordError(f"compressed wrapper at offset {wrapper.offset} has no value")
    data = wrapper.value
    if entry.codec == Codec.LZ4 and wrapper.magic == MAGIC_V0:
        data = _repair_lz4_header_checksum(data)
    inner = [
        e.message
        for e in _iter_entries(memoryview(decompress(entry.codec, data)), False, wrapper.magic)
    ]
    if not inner:
        raise CorruptRecordError(f"compressed wrapper at offset {wrapper.offset} holds no message")
    if any(e.attributes & CODEC_MASK for e in inner):
        raise CorruptRecordError("compressed messages must not be nested")
    if wrapper.magic == MAGIC_V0:
        return inner  # inner offsets are already absolute
    base = wrapper.offset - inner[-1].offset if offsets else 0
    if base < 0:
        raise CorruptRecordError(f"wrapper offset {wrapper.offset} is below its relative offsets")
    log_append = wrapper.timestamp_type == LOG_APPEND_TIME
    return [
        LegacyMessage(
            base + m.offset,
            m.magic,
            m.attributes,
            wrapper.timestamp if log_append else m.timestamp,
            wrapper.timestamp_type,
            m.key,
            m.value,
        )
        for m in inner
    ]


# ---------------------------------------------------------------- writing


def encode_message_set(
    messages: Sequence[LegacyMessage], magic: int, codec: Codec = Codec.NONE
) -> bytes:
    """Write `messages` (absolute offsets) as a legacy message set of the given magic.

    With a codec, all messages go into one compressed wrapper, with the inner offsets Kafka
    expects (absolute for magic 0, relative for magic 1) and the wrapper at the last offset.
    The wrapper is in LogAppendTime if any message is, and its timestamp is the largest.
    Each message keeps its attribute bits 4-7; the codec and timestamp-type bits are
    derived from `codec` and `timestamp_type`.
    """
    _check_format(magic, codec)
    rows = [(m.offset, _attributes(m.attributes, magic, m.timestamp_type), m.timestamp, m.key,
             m.value) for m in messages]
    log_append = any(m.timestamp_type == LOG_APPEND_TIME for m in messages)
    if codec == Codec.NONE or not rows:
        return b"".join(pack_message(*row, magic) for row in rows)
    return _wrapped(rows, magic, codec, log_append)


def encode_records(records: Sequence[Record], magic: int, codec: Codec,
                   append_time: int | None = None) -> list[bytes]:
    """v2 records (absolute offsets) as legacy messages of `magic`, without a `LegacyMessage`
    each (down-conversion's path): one entry per record without a codec, else one wrapper
    holding them all. `append_time`, for records of a LogAppendTime batch, is every message's
    timestamp."""
    _check_format(magic, codec)
    log_append = append_time is not None
    attributes = TIMESTAMP_TYPE_BIT if log_append and magic == MAGIC_V1 else 0
    if codec == Codec.NONE:
        if log_append:
            return [pack_message(r.offset, attributes, append_time, r.key, r.value, magic)
                    for r in records]
        return [pack_message(r.offset, 0, r.timestamp, r.key, r.value, magic) for r in records]
    if not records:
        return []
    rows = [(r.offset, attributes, r.timestamp if append_time is None else append_time, r.key,
             r.value) for r in records]
    return [_wrapped(rows, magic, codec, log_append)]


def _check_format(magic: int, codec: Codec) -> None:
    if magic not in MESSAGE_OVERHEAD:
        raise ValueError(f"legacy magic must be 0 or 1, not {magic}")
    if codec not in _LEGACY_CODECS:
        raise ValueError(f"{Codec(codec).name} is not available before message format v2")


def _attributes(attributes: int, magic: int, timestamp_type: int) -> int:
    """A message's attribute byte without a codec: its own bits 4-7, the timestamp type's."""
    attributes = attributes & ~(CODEC_MASK | TIMESTAMP_TYPE_BIT) & 0xFF
    if magic == MAGIC_V1 and timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_BIT
    return attributes


def _wrapped(rows: list[tuple], magic: int, codec: Codec, log_append: bool) -> bytes:
    """One compressed wrapper message holding `rows` (offset, attributes, timestamp, key,
    value), at the last offset, with the largest timestamp."""
    first = rows[0][0] if magic == MAGIC_V1 else 0  # magic 1: inner offsets relative
    data = compress(codec, b"".join(pack_message(offset - first, attributes, timestamp, key,
                                                 value, magic)
                                    for offset, attributes, timestamp, key, value in rows))
    if codec == Codec.LZ4 and magic == MAGIC_V0:
        data = _lz4_header_checksum_as_kafka_08(data)
    attributes = int(codec) | (TIMESTAMP_TYPE_BIT if log_append and magic == MAGIC_V1 else 0)
    return pack_message(rows[-1][0], attributes, max(row[2] for row in rows), None, data, magic)


_ENTRY_HEAD = struct.Struct(">qiI")  # offset, message size, crc
_V0_HEAD = struct.Struct(">bB")  # magic, attributes
_V1_HEAD = struct.Struct(">bBq")  # magic, attributes, timestamp
_NULL = _INT32.pack(-1)


def pack_message(offset: int, attributes: int, timestamp: int, key, value, magic: int) -> bytes:
    """One entry of a message set: offset, size, CRC-32 of the message, the message (magic 0
    has no timestamp)."""
    head = _V1_HEAD.pack(1, attributes, timestamp) if magic else _V0_HEAD.pack(0, attributes)
    body = b"".join((head, _NULL if key is None else _INT32.pack(len(key)), key or b"",
                     _NULL if value is None else _INT32.pack(len(value)), value or b""))
    return _ENTRY_HEAD.pack(offset, 4 + len(body), zlib.crc32(body)) + body


# ---------------------------------------------------------------- LZ4 framing quirk
#
# Kafka before 0.10 computed the LZ4 frame header checksum (HC) over the magic number and
# the frame descriptor instead of the descriptor alone. Kafka kept that for magic 0: it
# writes the broken HC and ignores the HC on read. cramjam checks the HC, so a magic-0
# frame gets its HC recomputed before decompression, and gets the broken one when written.

_LZ4_MAGIC = b"\x04\x22\x4d\x18"


def _lz4_descriptor_end(data: bytes) -> int | None:
    """Position of the HC byte of an LZ4 frame, or None when `data` is no such frame."""
    if len(data) < 7 or data[:4] != _LZ4_MAGIC:
        return None
    flg = data[4]
    end = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)  # content size, dict id
    return end if end < len(data) else None


def _repair_lz4_header_checksum(data: bytes) -> bytes:
    hc_pos = _lz4_descriptor_end(data)
    if hc_pos is None:
        return data  # let the decompressor report what is wrong
    return data[:hc_pos] + bytes((xxh32(data[4:hc_pos]) >> 8 & 0xFF,)) + data[hc_pos + 1 :]


def _lz4_header_checksum_as_kafka_08(data: bytes) -> bytes:
    hc_pos = _lz4_descriptor_end(data)
    assert hc_pos is not None, "cramjam wrote something that is not an LZ4 frame"
    return data[:hc_pos] + bytes((xxh32(data[:hc_pos]) >> 8 & 0xFF,)) + data[hc_pos + 1 :]


_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32, the hash of LZ4 frame checksums (only ever run on a few header bytes here)."""
    n = len(data)
    pos = 0
    if n >= 16:
        acc = [(seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed & _M32, (seed - _P1) & _M32]
        while pos + 16 <= n:
            for i in range(4):
                lane = int.from_bytes(data[pos : pos + 4], "little")
                acc[i] = _rotl((acc[i] + lane * _P2) & _M32, 13) * _P1 & _M32
                pos += 4
        h = (_rotl(acc[0], 1) + _rotl(acc[1], 7) + _rotl(acc[2], 12) + _rotl(acc[3], 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while pos + 4 <= n:
        h = _rotl((h + int.from_bytes(data[pos : pos + 4], "little") * _P3) & _M32, 17) * _P4 & _M32
        pos += 4
    while pos < n:
        h = _rotl((h + data[pos] * _P5) & _M32, 11) * _P1 & _M32
        pos += 1
    h ^= h >> 15
    h = h * _P2 & _M32
    h ^= h >> 13
    h = h * _P3 & _M32
    return h ^ (h >> 16)
