"""Kafka v2 record batches decoded in bulk into Arrow columns (Spark's Kafka source's rows).

`decode` takes the bytes of one partition's records as a Fetch response carries them (whole
batches, possibly followed by a partial one, which is left for the next fetch) and returns one
`pyarrow.RecordBatch` with the columns key, value, topic, partition, offset, timestamp,
timestampType (and headers when asked), plus the offset after the last whole batch it went
through.

How it stays cheap (no Python object per record on the common path):

* batch headers are read one batch at a time (a batch holds hundreds of records), CRC-32C
  checked, and their bodies (decompressed) joined into one buffer;
* one tight loop finds where each record starts (a record's length is the only thing that
  says where the next one begins); it keeps one integer per record in an `array`;
* every other field (timestamp and offset deltas, key and value lengths, header counts) is
  decoded for all records at once with numpy, one varint column at a time, and checked;
* keys and values are cut out of the buffer by Arrow: the boundaries of every key (or value)
  and of the gaps between them are always increasing, so they are the offsets of a binary
  array over the whole buffer, whose even elements `take` gathers with one copy each.

Records with headers take a per-record path (headers are rare, and decoded only when asked;
when not asked they are still walked, so that a damaged record fails the same way).

Transactions: control batches never become rows. With ``aborted`` (the Fetch response's
aborted transactions, for a read_committed reader) the data batches of aborted transactions
are dropped the way Kafka's consumer drops them: a producer's transactional batches from an
aborted transaction's first offset until that producer's ABORT marker. Without it
(read_uncommitted) every data batch is kept.
"""

from __future__ import annotations

import struct
from array import array
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import pyarrow as pa

from .batch import (
    ATTRIBUTES_OFFSET,
    CONTROL_BIT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    decode_records,
)
from .columns import PAD, fields, record_starts
from .columns import headers as read_headers
from .compression import Codec, codec_of, decompress
from .crc import crc32c
from .errors import CorruptRecordError

_HEADER = struct.Struct(">qiibIhiqqqhii")
_CONTROL_KEY = struct.Struct(">hh")  # version, type (0 abort, 1 commit)
ABORT_MARKER = 0
MAX_OFFSET = 2**63 - 1

HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def arrow_schema(include_headers: bool = False) -> pa.Schema:
    """The Arrow schema of Spark's Kafka source rows (what Spark's own type mapping gives:
    timestamps in microseconds, UTC)."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADERS_TYPE))
    return pa.schema(fields)


@dataclass(frozen=True, slots=True)
class Decoded:
    batch: pa.RecordBatch
    next_offset: int | None  # after the last whole batch read; None when there was none
    bytes_used: int  # of the input: where a partial trailing batch (if any) begins


class _Spans:
    """The batches kept, as columns: where each body is in the joined buffer, and its header."""

    __slots__ = ("bodies", "size", "pos", "count", "base_offset", "base_ts", "max_ts", "append_time")

    def __init__(self) -> None:
        self.bodies: list[bytes | memoryview] = []
        self.size = 0
        self.pos = array("q")
        self.count = array("q")
        self.base_offset = array("q")
        self.base_ts = array("q")
        self.max_ts = array("q")
        self.append_time = array("b")

    def add(self, body, count: int, base_offset: int, base_ts: int, max_ts: int,
            append_time: bool) -> None:
        self.bodies.append(body)
        self.pos.append(self.size)
        self.size += len(body)
        self.count.append(count)
        self.base_offset.append(base_offset)
        self.base_ts.append(base_ts)
        self.max_ts.append(max_ts)
        self.append_time.append(append_time)


def decode(
    data: bytes | bytearray | memoryview,
    topic: str,
    partition: int,
    *,
    start: int = 0,
    end: int = MAX_OFFSET,
    include_headers: bool = False,
    aborted: Sequence[tuple[int, int]] | None = None,
    verify: bool = True,
) -> Decoded:
    """The records of `data` with offsets in ``[start, end)`` as one Arrow record batch.

    `aborted` is the Fetch response's aborted transactions as (producer id, first offset),
    for read_committed; None reads uncommitted. Raises CorruptRecordError (and its subclass
    UnsupportedCompressionError) for damaged or unreadable batches: never wrong rows.
    """
    view = memoryview(data)
    spans = _Spans()
    pos = 0
    size = len(view)
    next_offset = None
    pending = sorted(aborted, key=lambda a: a[1]) if aborted else []
    pending.reverse()  # pop() takes the smallest first offset
    aborted_producers: set[int] = set()
    while size - pos >= LOG_OVERHEAD:
        (batch_length,) = struct.unpack_from(">i", view, pos + 8)
        total = batch_length + LOG_OVERHEAD
        if size - pos < HEADER_SIZE or size - pos < total:
            if size - pos > MAGIC_OFFSET and view[pos + MAGIC_OFFSET] != MAGIC_V2:
                raise CorruptRecordError(f"unsupported record batch magic {view[pos + MAGIC_OFFSET]}")
            break  # a partial batch at the end of a fetch: the next fetch starts there
        (base_offset, batch_length, _epoch, magic, crc, attributes, last_delta, base_ts, max_ts,
         producer_id, _producer_epoch, _base_seq, count) = _HEADER.unpack_from(view, pos)
        if magic != MAGIC_V2:
            raise CorruptRecordError(f"unsupported record batch magic {magic} at offset {base_offset}")
        if batch_length < HEADER_SIZE - LOG_OVERHEAD or last_delta < 0 or count < 0:
            raise CorruptRecordError(f"batch at offset {base_offset}: impossible header")
        if verify:
            actual = crc32c(view[pos + ATTRIBUTES_OFFSET : pos + total])
            if actual != crc:
                raise CorruptRecordError(
                    f"batch at offset {base_offset}: CRC {actual:#010x} != stored {crc:#010x}")
        body = view[pos + HEADER_SIZE : pos + total]
        pos += total
        last_offset = base_offset + last_delta
        if base_offset >= end:
            # Batches come in offset order, so [start, end) has nothing past here: a gap left
            # by compaction can run past the end of a range, which is then read to its end.
            next_offset = end if next_offset is None else max(next_offset, end)
            break
        next_offset = last_offset + 1
        transactional = attributes & TRANSACTIONAL_BIT
        if pending and transactional:
            while pending and pending[-1][1] <= last_offset:
                aborted_producers.add(pending.pop()[0])
        if attributes & CONTROL_BIT:
            if aborted is not None and producer_id in aborted_producers:
                if _control_type(body, attributes, count, base_offset, base_ts) == ABORT_MARKER:
                    aborted_producers.discard(producer_id)
            continue
        if last_offset < start or count == 0:
            continue
        if transactional and producer_id in aborted_producers:
            continue
        codec = codec_of(attributes)
        if codec != Codec.NONE:
            body = decompress(codec, body)
        spans.add(body, count, base_offset, base_ts, max_ts, bool(attributes & TIMESTAMP_TYPE_BIT))
    return Decoded(_columns(spans, topic, partition, start, end, include_headers),
                   next_offset, pos)


def _control_type(body, attributes: int, count: int, base_offset: int, base_ts: int) -> int:
    codec = codec_of(attributes)
    raw = decompress(codec, body) if codec != Codec.NONE else bytes(body)
    records = decode_records(raw, count, base_offset, base_ts)
    if not records or records[0].key is None or len(records[0].key) < 4:
        raise CorruptRecordError(f"control batch at offset {base_offset} without a control key")
    return _CONTROL_KEY.unpack_from(records[0].key)[1]


def _columns(spans: _Spans, topic: str, partition: int, start: int, end: int,
             include_headers: bool) -> pa.RecordBatch:
    schema = arrow_schema(include_headers)
    if not spans.bodies:
        return _empty(schema)
    spans.bodies.append(PAD)
    buf = b"".join(spans.bodies)
    arr = np.frombuffer(buf, np.uint8)
    begins = record_starts(buf, arr, spans.pos, spans.count, spans.size)
    if len(buf) < 2**31 - 64:  # positions in int32: half the memory traffic
        begins = begins.astype(np.int32)
    counts = np.frombuffer(spans.count, np.int64)

    (rec_end, ts_delta, off_delta, key_len, key_start, key_end, value_len, value_start, value_end,
     n_headers, headers_at) = fields(arr, begins, spans.size)
    with_headers = np.flatnonzero(n_headers)
    headers = {int(i): read_headers(buf, int(headers_at[i]), int(n_headers[i]), int(rec_end[i]))
               for i in with_headers}

    def per_record(column: array, dtype) -> np.ndarray:  # a batch's value for each record
        return np.repeat(np.frombuffer(column, dtype), counts)

    offsets = per_record(spans.base_offset, np.int64) + off_delta
    append_time = per_record(spans.append_time, np.int8).astype(bool)
    timestamps = per_record(spans.base_ts, np.int64) + ts_delta
    if append_time.any():
        # LogAppendTime batches: every record carries the batch's max timestamp (Kafka's rule)
        timestamps = np.where(append_time, per_record(spans.max_ts, np.int64), timestamps)

    keep = (offsets >= start) & (offsets < end)
    if not keep.all():
        idx = np.flatnonzero(keep)
        offsets, timestamps, append_time = offsets[idx], timestamps[idx], append_time[idx]
        key_start, key_end, key_len = key_start[idx], key_end[idx], key_len[idx]
        value_start, value_end, value_len = value_start[idx], value_end[idx], value_len[idx]
        if headers:
            headers = {j: headers[int(i)] for j, i in enumerate(idx) if int(i) in headers}
    n = len(offsets)
    columns = [
        _binary(buf, key_start, key_end, key_len),
        _binary(buf, value_start, value_end, value_len),
        _repeat_string(topic, n),
        pa.array(np.full(n, partition, np.int32)),
        pa.array(offsets),
        pa.array(timestamps * 1000, pa.timestamp("us", tz="UTC")),
        pa.array(append_time.astype(np.int32)),
    ]
    if include_headers:
        if headers:
            rows = [None] * n
            for i, h in headers.items():
                rows[i] = [{"key": k, "value": v} for k, v in h]
            columns.append(pa.array(rows, HEADERS_TYPE))
        else:
            columns.append(pa.nulls(n, HEADERS_TYPE))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _binary(buf: bytes, begin: np.ndarray, end: np.ndarray, length: np.ndarray) -> pa.Array:
    """The slices ``buf[begin[i]:end[i]]`` (null where length is -1) as one binary array.

    The slices are in order and never overlap, so slices and the gaps between them together
    have increasing boundaries: the offsets of a binary array over all of `buf`, whose even
    elements are the slices. Arrow's take copies them into a new array.
    """
    n = len(begin)
    if n == 0:
        return pa.array([], pa.binary())
    nulls = length < 0
    if nulls.all():
        return pa.nulls(n, pa.binary())
    wide = len(buf) >= 2**31 - 1
    bounds = np.empty(2 * n + 1, np.int64 if wide else np.int32)
    bounds[0:-1:2] = begin
    bounds[1::2] = end
    bounds[-1] = end[-1]
    kind = pa.large_binary() if wide else pa.binary()
    spans = pa.Array.from_buffers(kind, 2 * n, [None, pa.py_buffer(bounds), pa.py_buffer(buf)])
    taken = spans.filter(_every_other(2 * n))
    if wide:
        taken = taken.cast(pa.binary())
    if nulls.any():
        validity = pa.py_buffer(np.packbits(~nulls, bitorder="little"))
        taken = pa.Array.from_buffers(pa.binary(), n, [validity, *taken.buffers()[1:]],
                                      null_count=int(nulls.sum()))
    return taken


# Made at the first call: pyarrow imports pandas (half a second or more) at its first pa.array(),
# and importing this module (as the brook command and the test collection do) need not.
_ALTERNATE: pa.BooleanArray | None = None


def _every_other(n: int) -> pa.BooleanArray:
    """True, False, True, ... of length `n` (a slice of one cached array)."""
    global _ALTERNATE
    have = 0 if _ALTERNATE is None else len(_ALTERNATE)
    if _ALTERNATE is None or have < n:
        _ALTERNATE = pa.array(np.resize(np.array([True, False]), max(n, 2 * have)))
    return _ALTERNATE.slice(0, n)


def _repeat_string(text: str, n: int) -> pa.Array:
    raw = text.encode("utf-8")
    offsets = np.arange(n + 1, dtype=np.int64) * len(raw)
    if len(raw) * n < 2**31 - 1:
        return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets.astype(np.int32)),
                                                      pa.py_buffer(raw * n)])
    return pa.nulls(n, pa.string()).fill_null(text)


def concat(batches: Iterable[pa.RecordBatch], schema: pa.Schema) -> pa.RecordBatch:
    """Several decoded batches as one (for callers that want a single batch)."""
    table = pa.Table.from_batches(list(batches), schema=schema).combine_chunks()
    batches = table.to_batches()
    return batches[0] if batches else _empty(schema)


def _empty(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)
