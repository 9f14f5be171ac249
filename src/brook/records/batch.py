"""Kafka's RecordBatch v2 (magic 2).

Two layers, kept apart on purpose:

* the batch-level fast path (`read_header`, `verify_crc`, `set_base_offset`, `scan_batches`)
  touches only the 61-byte header and the CRC; the storage hot path uses nothing else;
* record-level decoding and encoding (`decode_batch`, `encode_batch`), for features that
  need individual records (compaction, the offsets topic, tools, tests).

Layout (big-endian), offsets from the start of the batch:

    0  baseOffset int64          27 baseTimestamp int64
    8  batchLength int32         35 maxTimestamp int64
   12  partitionLeaderEpoch int32 43 producerId int64
   16  magic int8                51 producerEpoch int16
   17  crc uint32 (CRC-32C of bytes 21..end)
   21  attributes int16          53 baseSequence int32
   23  lastOffsetDelta int32     57 recordCount int32      61 records...
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Iterator, Sequence

from .crc import crc32c

from .compression import DEFAULT_LIMIT, Codec, codec_of, compress, decompress
from .errors import CorruptRecordError, TruncatedBatchError
from .varint import decode_varint, encode_varint

MAGIC_V2 = 2
LOG_OVERHEAD = 12  # baseOffset + batchLength: bytes not counted in batchLength
HEADER_SIZE = 61
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAGIC_OFFSET = 16
RECORDS_COUNT_OFFSET = 57

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

TIMESTAMP_TYPE_BIT = 0x08  # 0 = CreateTime, 1 = LogAppendTime
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40  # KIP-534: baseTimestamp holds the tombstone delete horizon

CREATE_TIME = 0
LOG_APPEND_TIME = 1

_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_STRUCT = _HEADER  # for hot paths that want the raw tuple, not a BatchHeader
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
_BASE_OFFSET = struct.Struct(">q")
_PREFIX = struct.Struct(">qi")  # baseOffset, batchLength
_CRC = struct.Struct(">I")
_INT32 = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch takes in a log, prefix included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> Codec:
        return codec_of(self.attributes)

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_BIT else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_BIT)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


def read_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse and sanity-check the 61-byte header at `pos` (the CRC is not checked here).

    Raises TruncatedBatchError when `buf` ends before the header or the batch it announces,
    CorruptRecordError for a wrong magic or impossible sizes.
    """
    if len(buf) - pos < HEADER_SIZE:
        if len(buf) - pos >= LOG_OVERHEAD + 5:
            magic = buf[pos + MAGIC_OFFSET]
            if magic != MAGIC_V2:
                raise CorruptRecordError(f"unsupported record batch magic {magic}")
        raise TruncatedBatchError(f"{len(buf) - pos} bytes left, a batch header needs {HEADER_SIZE}")
    header = BatchHeader(*_HEADER.unpack_from(buf, pos))
    if header.magic != MAGIC_V2:
        raise CorruptRecordError(f"unsupported record batch magic {header.magic}")
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(f"batch length {header.batch_length} is smaller than a header")
    if header.last_offset_delta < 0 or header.record_count < 0:
        raise CorruptRecordError("negative last offset delta or record count")
    if len(buf) - pos < header.size:
        raise TruncatedBatchError(f"batch of {header.size} bytes, only {len(buf) - pos} present")
    return header


def compute_crc(buf: bytes | bytearray | memoryview, pos: int, size: int) -> int:
    """CRC-32C over the batch at `pos` of `size` bytes, from attributes to the end."""
    view = memoryview(buf)
    return crc32c(view[pos + ATTRIBUTES_OFFSET : pos + size])


def verify_crc(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> None:
    actual = compute_crc(buf, pos, header.size)
    if actual != header.crc:
        raise CorruptRecordError(
            f"batch at offset {header.base_offset}: CRC {actual:#010x} != stored {header.crc:#010x}"
        )


def set_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Rewrite the base offset in place. The CRC does not cover it, so it stays valid."""
    _BASE_OFFSET.pack_into(buf, pos, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """The leader epoch is outside the CRC too (it is stamped by the broker)."""
    _INT32.pack_into(buf, pos + 12, epoch)


def whole_batches_size(buf: bytes | bytearray | memoryview) -> int:
    """The length of the longest prefix of `buf` made of whole batches (any magic: they all
    start with baseOffset and a length that counts the rest).

    A Fetch response may end inside a batch when its byte limits cut the log there (KIP-74);
    readers keep the whole batches and fetch the rest again from where the cut one starts.
    """
    pos, end = 0, len(buf)
    while end - pos >= LOG_OVERHEAD:
        _, length = _PREFIX.unpack_from(buf, pos)
        if length < 0 or pos + LOG_OVERHEAD + length > end:
            break
        pos += LOG_OVERHEAD + length
    return pos


def scan_batches(
    buf: bytes | bytearray | memoryview, verify: bool = True
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) for each whole batch in `buf`, in order.

    Raises at the first damaged batch; a caller that wants "everything valid up to the
    damage" (recovery) catches the error and uses the last position it got.
    """
    pos = 0
    end = len(buf)
    while pos < end:
        header = read_header(buf, pos)
        if verify:
            verify_crc(buf, pos, header)
        yield pos, header
        pos += header.size


# ---------------------------------------------------------------- record level


@dataclass(slots=True)
class Record:
    """One record with absolute offset and timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    attributes: int = 0


@dataclass(slots=True)
class RecordBatch:
    """A decoded batch: its header fields plus its records."""

    base_offset: int = 0
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH
    attributes: int = 0
    last_offset_delta: int = 0
    base_timestamp: int = NO_TIMESTAMP
    max_timestamp: int = NO_TIMESTAMP
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    base_sequence: int = NO_SEQUENCE
    records: list[Record] = field(default_factory=list)

    @property
    def compression(self) -> Codec:
        return codec_of(self.attributes)

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_BIT else CREATE_TIME

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta


def decode_records(
    data: bytes | memoryview, count: int, base_offset: int, base_timestamp: int
) -> list[Record]:
    """Decode `count` uncompressed records from `data`; every byte must be used.

    `data` is a whole batch body, so a record or varint running past its end is damage
    (CorruptRecordError), not a batch that more bytes would complete.
    """
    try:
        return _decode_records(data, count, base_offset, base_timestamp)
    except TruncatedBatchError as exc:
        raise CorruptRecordError(str(exc)) from None


def _decode_records(
    data: bytes | memoryview, count: int, base_offset: int, base_timestamp: int
) -> list[Record]:
    records: list[Record] = []
    pos = 0
    end = len(data)
    # A varint of one byte is read in place (the call costs more than the decoding): most
    # deltas, and key, value and header counts of small records.
    for _ in range(count):
        length, pos = decode_varint(data, pos)
        if length < 1:  # even an empty record has its attributes byte
            raise CorruptRecordError(f"invalid record length {length}")
        rec_end = pos + length
        if rec_end > end:
            raise CorruptRecordError("record runs past the end of the batch")
        attributes = data[pos]
        b = data[pos + 1] if pos + 1 < rec_end else 0x80
        if b < 0x80:
            ts_delta, pos = (b >> 1) ^ -(b & 1), pos + 2
        else:
            ts_delta, pos = decode_varint(data, pos + 1)
        b = data[pos] if pos < rec_end else 0x80
        if b < 0x80:
            off_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            off_delta, pos = decode_varint(data, pos)
        key, pos = _read_bytes(data, pos, rec_end)
        value, pos = _read_bytes(data, pos, rec_end)
        b = data[pos] if pos < rec_end else 0x80
        if b < 0x80:
            n_headers, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            n_headers, pos = decode_varint(data, pos)
        if n_headers < 0 or n_headers > rec_end - pos:
            raise CorruptRecordError(f"invalid header count {n_headers}")
        headers = []
        for _ in range(n_headers):
            hkey, pos = _read_bytes(data, pos, rec_end)
            if hkey is None:
                raise CorruptRecordError("record header with a null key")
            hval, pos = _read_bytes(data, pos, rec_end)
            try:
                headers.append((hkey.decode("utf-8"), hval))
            except UnicodeDecodeError:
                raise CorruptRecordError("record header key is not UTF-8") from None
        if pos != rec_end:
            raise CorruptRecordError("record length does not match its fields")
        records.append(
            Record(base_offset + off_delta, base_timestamp + ts_delta, key, value, tuple(headers), attributes)
        )
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes left after the last record")
    return records


def _read_bytes(data: bytes | memoryview, pos: int, end: int) -> tuple[bytes | None, int]:
    b = data[pos] if pos < end else 0x80
    if b < 0x80:
        length, pos = (b >> 1) ^ -(b & 1), pos + 1
    else:
        length, pos = decode_varint(data, pos)
    if length < 0:
        if length != -1:
            raise CorruptRecordError(f"invalid length {length}")
        return None, pos
    if pos + length > end:
        raise CorruptRecordError("field runs past the end of its record")
    return bytes(data[pos : pos + length]), pos + length


def decode_batch(buf: bytes | bytearray | memoryview, pos: int = 0, verify: bool = True,
                 limit: int = DEFAULT_LIMIT) -> RecordBatch:
    """Decode the whole batch at `pos`, records included (decompressing them, to at most
    `limit` bytes: InflationLimitError past it)."""
    header = read_header(buf, pos)
    if verify:
        verify_crc(buf, pos, header)
    body = memoryview(buf)[pos + HEADER_SIZE : pos + header.size]
    codec = header.compression
    if codec != Codec.NONE:
        body = decompress(codec, body, limit)
    base_ts = header.base_timestamp
    records = decode_records(body, header.record_count, header.base_offset, base_ts)
    return RecordBatch(
        base_offset=header.base_offset,
        partition_leader_epoch=header.partition_leader_epoch,
        attributes=header.attributes,
        last_offset_delta=header.last_offset_delta,
        base_timestamp=header.base_timestamp,
        max_timestamp=header.max_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        records=records,
    )


def iter_batches(buf: bytes | bytearray | memoryview, verify: bool = True) -> Iterator[RecordBatch]:
    for pos, _ in scan_batches(buf, verify=False):
        yield decode_batch(buf, pos, verify=verify)


def _encode_record(rec: Record, base_offset: int, base_timestamp: int) -> bytes:
    parts = [
        bytes((rec.attributes & 0xFF,)),
        encode_varint(rec.timestamp - base_timestamp),
        encode_varint(rec.offset - base_offset),
    ]
    _append_bytes(parts, rec.key)
    _append_bytes(parts, rec.value)
    parts.append(encode_varint(len(rec.headers)))
    for hkey, hval in rec.headers:
        _append_bytes(parts, hkey.encode("utf-8"))
        _append_bytes(parts, hval)
    body = b"".join(parts)
    return encode_varint(len(body)) + body


def _append_bytes(parts: list[bytes], data: bytes | None) -> None:
    if data is None:
        parts.append(encode_varint(-1))
    else:
        parts.append(encode_varint(len(data)))
        parts.append(bytes(data))


def encode_batch(
    records: Sequence[Record],
    *,
    base_offset: int | None = None,
    codec: Codec = Codec.NONE,
    timestamp_type: int = CREATE_TIME,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    control: bool = False,
    last_offset_delta: int | None = None,
    base_timestamp: int | None = None,
    max_timestamp: int | None = None,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """Encode records into one v2 batch.

    Offsets in `records` are absolute; `base_offset` defaults to the first record's offset.
    `last_offset_delta` can be given to keep a batch's offset span when records were
    removed from it (compaction). With `delete_horizon_ms`, the base timestamp field carries
    the horizon (KIP-534) and record timestamp deltas are taken against it, so every record
    decodes to the same timestamp as before.
    """
    if base_offset is None:
        base_offset = records[0].offset if records else 0
    if base_timestamp is None:
        base_timestamp = records[0].timestamp if records else NO_TIMESTAMP
    if max_timestamp is None:
        max_timestamp = max((r.timestamp for r in records), default=NO_TIMESTAMP)
    if last_offset_delta is None:
        last_offset_delta = records[-1].offset - base_offset if records else 0
    attributes = int(codec) & 0x07
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_BIT
    if transactional:
        attributes |= TRANSACTIONAL_BIT
    if control:
        attributes |= CONTROL_BIT
    stored_base_ts = base_timestamp
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_BIT
        stored_base_ts = delete_horizon_ms
    body = b"".join(_encode_record(r, base_offset, stored_base_ts) for r in records)
    if codec != Codec.NONE:
        body = compress(codec, body)
    batch_length = HEADER_SIZE - LOG_OVERHEAD + len(body)
    out = bytearray(HEADER_SIZE + len(body))
    _HEADER.pack_into(
        out,
        0,
        base_offset,
        batch_length,
        partition_leader_epoch,
        MAGIC_V2,
        0,
        attributes,
        last_offset_delta,
        stored_base_ts,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    out[HEADER_SIZE:] = body
    _CRC.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)
