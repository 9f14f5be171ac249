"""What a producer's v2 batch must hold beyond a sound header and CRC, as Kafka's LogValidator
checks it: records that decode, exactly as many as the header counts and no byte after the
last, offset deltas 0 to n-1 in order, a key on every record of a compacted topic, and
CreateTime timestamps within message.timestamp.before.max.ms / after.max.ms of now.

Records that do not decode fail the batch as a whole (InvalidRecordError, INVALID_RECORD):
past the first bad length nothing says where records are. Records that decode but break a
rule are named by their index in the batch (KIP-467's record_errors), so that a client fails
only those and sends the others again: an offset delta or a missing key INVALID_RECORD, a
timestamp INVALID_TIMESTAMP (which the whole answer carries if any record has one, as Kafka's).

A compressed batch is inflated first, bounded by `Rules.inflate_limit`
(`brook.records.compression`). Batches of a few records are walked record by record
(`_walk`, nothing copied). Larger ones are checked with numpy: runs of records of one layout,
as producers write them, a run at a time (`brook.records.runs`), as far as the batch is of
that shape; the rest a column at a time (`brook.records.columns`), in slices so that the
arrays stay small whatever the batch holds. A batch's cost is mostly numpy's cost per call
(a microsecond or more each), so both take few calls.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .batch import ATTRIBUTES_OFFSET, HEADER_SIZE
from .columns import PAD, fields, headers, record_starts, zigzag, zigzag_short
from .compression import CODEC_MASK, codec_of, decompress, inflated_bound
from .errors import CorruptRecordError, InvalidRecordError, InvalidTimestampError
from .runs import RUN, sound_prefix

MIN_RECORD_SIZE = 7  # length, attributes, timestamp and offset deltas, key, value, header count
SMALL = 48  # fewer records than this (left after the runs) are walked one by one: numpy's
# cost per call is larger
SLICE = 1 << 16  # records whose columns are decoded at once
SHOWN = 3  # record errors quoted in the answer's error message
UNBOUNDED = 1 << 62  # a timestamp bound this far or farther is no bound
INFLATION = 8  # a batch may inflate to this many times max.message.bytes
QUICK_INFLATE = 1 << 20  # bytes a batch that inflates_quickly() inflates to at most


def inflate_limit(max_message_bytes: int) -> int:
    """What a compressed batch of a topic may inflate to: 8 times max.message.bytes (at least
    1 MiB). max.message.bytes bounds a batch as sent, compressed; producers fill batches
    before compressing them (librdkafka to batch.size, 1 MB by default; the Java client by
    an estimate of the ratio), so a real batch inflates a few times at most. One past the
    limit is MESSAGE_TOO_LARGE, which the Java producer answers by splitting the batch."""
    return INFLATION * max(max_message_bytes, 1 << 20)


@dataclass(frozen=True, slots=True)
class Rules:
    """What a log asks of the records appended to it."""

    inflate_limit: int  # bytes a compressed batch may inflate to
    keys_required: bool = False  # a compacted topic
    before_max_ms: int = UNBOUNDED  # CreateTime: how old a timestamp may be
    after_max_ms: int = UNBOUNDED  # ... and how far in the future
    check_timestamps: bool = True  # False on a LogAppendTime topic
    where: str = ""  # the topic partition, for messages


def check_batch(buf, pos: int, size: int, attributes: int, count: int, base_ts: int,
                rules: Rules, now: int) -> int:
    """Check the records of the batch at `pos` (`size` bytes, its header and CRC checked
    already); return the largest record timestamp. Raises InvalidRecordError,
    InvalidTimestampError, InflationLimitError or CorruptRecordError (does not inflate)."""
    body = memoryview(buf)[pos + HEADER_SIZE : pos + size]
    if attributes & CODEC_MASK:  # (only read: the buffer inflated into, not a copy)
        body = decompress(codec_of(attributes), body, rules.inflate_limit, readonly=True)
    return check_records(body, count, base_ts, rules, now)


def inflates_quickly(batch) -> bool:
    """Whether the compressed batch `batch` says, in its frame and block headers, that it
    inflates to QUICK_INFLATE bytes or fewer (zstd, LZ4, snappy; never gzip, which does not
    say): inflating and checking it takes about as long as an uncompressed batch of that size
    takes to check and write, less than a worker thread's hop costs for a small one."""
    if len(batch) <= HEADER_SIZE:
        return False
    try:
        codec = codec_of(batch[ATTRIBUTES_OFFSET + 1])
        bound = inflated_bound(codec, memoryview(batch)[HEADER_SIZE:])
    except CorruptRecordError:  # (an unknown codec included)
        return False  # refused where it is checked
    return bound is not None and bound <= QUICK_INFLATE


def check_records(body, count: int, base_ts: int, rules: Rules, now: int) -> int:
    """Check `count` uncompressed records; return the largest record timestamp."""
    if count * MIN_RECORD_SIZE > len(body):
        raise InvalidRecordError(f"the batch counts {count} records, but its {len(body)} bytes "
                                 f"of records hold at most {len(body) // MIN_RECORD_SIZE}")
    earliest = latest = None
    if rules.check_timestamps and base_ts != -1:
        if rules.before_max_ms < UNBOUNDED:
            earliest = now - rules.before_max_ms
        if rules.after_max_ms < UNBOUNDED:
            latest = now + rules.after_max_ms
    try:
        p = first = 0
        top = None
        if count >= RUN:  # runs of one layout first, as far as the batch is of that shape
            p, first, top = sound_prefix(
                body, np.frombuffer(body, np.uint8), len(body), count, rules.keys_required,
                None if earliest is None else earliest - base_ts,
                None if latest is None else latest - base_ts)
            if first == count and p == len(body):
                return base_ts + top
        if count - first < SMALL:
            high = _check_few(body, p, first, count, base_ts, rules, earliest, latest)
        else:
            high = _check_many(body, p, first, count, base_ts, rules, earliest, latest)
        return high if top is None else max(high, base_ts + top)
    except CorruptRecordError as exc:
        raise InvalidRecordError(f"records do not decode: {exc}") from None


def _check_few(body, p: int, first: int, count: int, base_ts: int, rules: Rules, earliest,
               latest) -> int:
    """Records `first` to `count` - 1, from `p` on, one by one."""
    deltas, offsets, no_key = _walk(body, p, first, count, rules.keys_required)
    bad_offsets = [first + k for k, delta in enumerate(offsets) if delta != first + k]
    stamps = [base_ts + delta for delta in deltas]
    bad_times = [first + k for k, t in enumerate(stamps)
                 if (earliest is not None and t < earliest) or (latest is not None and t > latest)]
    if bad_offsets or no_key or bad_times:
        _refuse(bad_offsets, [offsets[i - first] for i in bad_offsets], no_key, bad_times,
                [stamps[i - first] for i in bad_times], count, rules, earliest, latest)
    return max(stamps)


def _walk(buf, p: int, first: int, count: int, keys_required: bool
          ) -> tuple[list[int], list[int], list[int]]:
    """Timestamp and offset deltas of records `first` to `count` - 1 (the first at `p`), and
    the records without a key (when asked): record by record, nothing copied (the columns'
    checks, for few records). Varints of one and two bytes are read in place: a call costs
    more than the decoding."""
    deltas: list[int] = []
    offsets: list[int] = []
    no_key: list[int] = []
    end = len(buf)
    try:
        for i in range(first, count):
            length, p = zigzag_short(buf, p)
            stop = p + length
            if length < 1 or stop > end:
                raise CorruptRecordError("a record has an invalid length")
            delta, p = zigzag_short(buf, p + 1)  # after the attributes byte
            b = buf[p]
            offset, p = ((b >> 1) ^ -(b & 1), p + 1) if b < 0x80 else zigzag_short(buf, p)
            b = buf[p]
            key, p = ((b >> 1) ^ -(b & 1), p + 1) if b < 0x80 else zigzag_short(buf, p)
            if key > 0:
                p += key
            elif key < 0:
                if key < -1:
                    raise CorruptRecordError("a record has a key length below -1")
                if keys_required:
                    no_key.append(i)
            value, p = zigzag_short(buf, p)
            if value > 0:
                p += value
            elif value < -1:
                raise CorruptRecordError("a record has a value length below -1")
            b = buf[p]
            n_headers, p = ((b >> 1) ^ -(b & 1), p + 1) if b < 0x80 else zigzag(buf, p)
            if n_headers:
                if n_headers < 0 or p > stop:
                    raise CorruptRecordError("record length does not match its fields")
                headers(buf, p, n_headers, stop)  # ends at `stop`, or it raises
            elif p != stop:
                raise CorruptRecordError("record length does not match its fields")
            p = stop
            deltas.append(delta)
            offsets.append(offset)
    except IndexError:  # a field said to be longer than the batch
        raise CorruptRecordError("a record runs past the end of its batch") from None
    if p != end:
        raise CorruptRecordError(f"{end - p} bytes left after the last record")
    return deltas, offsets, no_key


def _check_many(body, p: int, first: int, count: int, base_ts: int, rules: Rules, earliest,
                latest) -> int:
    """Records `first` to `count` - 1, from `p` on, a column at a time. The columns are read
    in place, without copying the batch: a read past its end (a varint near the end, or
    damage) starts again on a copy padded as the columns expect."""
    try:
        return _check_columns(body, len(body), p, first, count, base_ts, rules, earliest, latest)
    except IndexError:
        pass
    try:
        return _check_columns(b"".join((body, PAD)), len(body), p, first, count, base_ts, rules,
                              earliest, latest)
    except IndexError:  # padded, the columns stay inside it: should it not, it is damage
        raise CorruptRecordError("a record runs past the end of its batch") from None


def _check_columns(buf, size: int, p: int, first: int, count: int, base_ts: int, rules: Rules,
                   earliest, latest) -> int:
    arr = np.frombuffer(buf, np.uint8)
    max_delta = None
    begins = record_starts(buf, arr, (p,), (count - first,), size)  # every byte used, or it raises
    problems: tuple[list, list, list, list, list] = ([], [], [], [], [])
    for start in range(0, len(begins), SLICE):
        f = fields(arr, begins[start : start + SLICE], size)
        start += first  # the index of the slice's first record in the batch
        if f.n_headers.any():  # (each numpy call counts: the common case skips what it can)
            for i in np.flatnonzero(f.n_headers).tolist():
                headers(buf, int(f.headers_at[i]), int(f.n_headers[i]), int(f.rec_end[i]))
        wrong = f.off_delta != np.arange(start, start + len(f.off_delta))
        if wrong.any():
            bad = np.flatnonzero(wrong)
            problems[0].extend((bad + start).tolist())
            problems[1].extend(f.off_delta[bad].tolist())
        if rules.keys_required and f.key_len.min() < 0:
            problems[2].extend((np.flatnonzero(f.key_len < 0) + start).tolist())
        deltas = f.ts_delta
        low, top = int(deltas.min()), int(deltas.max())
        max_delta = top if max_delta is None else max(max_delta, top)
        if (earliest is not None and base_ts + low < earliest) or \
                (latest is not None and base_ts + top > latest):  # some record is out: which
            stamps = base_ts + deltas.astype(np.int64)
            out = np.zeros(len(stamps), bool)
            if earliest is not None:
                out |= stamps < earliest
            if latest is not None:
                out |= stamps > latest
            bad = np.flatnonzero(out)
            if len(bad):
                problems[3].extend((bad + start).tolist())
                problems[4].extend(stamps[bad].tolist())
    if any(problems):
        _refuse(*problems, count, rules, earliest, latest)
    return base_ts + max_delta


def _refuse(bad_offsets: list, deltas: list, no_key: list, bad_times: list, stamps: list,
            count: int, rules: Rules, earliest, latest) -> None:
    """Raise the error naming each refused record (one reason each: offset, key, timestamp)."""
    errors: dict[int, str] = {}
    for i, delta in zip(bad_offsets, deltas):
        errors.setdefault(i, f"Invalid offset delta {delta} of record {i}: a batch's records "
                             f"have offset deltas 0 to {count - 1} in order")
    for i in no_key:
        errors.setdefault(i, f"Compacted topic cannot accept message without key in topic "
                             f"partition {rules.where}")
    timestamps = False
    for i, ts in zip(bad_times, stamps):
        if i not in errors:
            timestamps = True
            errors[i] = (f"Timestamp {ts} of record {i} is out of range "
                         f"[{'-inf' if earliest is None else earliest}, "
                         f"{'+inf' if latest is None else latest}] "
                         f"(message.timestamp.before.max.ms, message.timestamp.after.max.ms)")
    record_errors = tuple(sorted(errors.items()))
    shown = "; ".join(message for _, message in record_errors[:SHOWN])
    summary = (f"{len(record_errors)} record(s) of the batch to {rules.where} refused"
               f"{', the first ' + str(SHOWN) if len(record_errors) > SHOWN else ''}: {shown}")
    if timestamps:
        raise InvalidTimestampError(summary, record_errors)
    raise InvalidRecordError(summary, record_errors)
