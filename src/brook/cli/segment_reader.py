"""Offline reading of a partition's segment files for `brook dump-log`: the batches of a .log with
their CRC checked, their records (a control batch's transaction marker decoded), and how well
the .index, .timeindex and .txnindex agree with the log.

Nothing here opens a Log or changes a file; it reads bytes with brook.records the way recovery
would, but reports damage instead of truncating it. A batch with a wrong CRC is reported and the
scan goes on (its length is still readable); bytes that do not form a whole batch end the scan.

Index conventions: brook's offset index maps a batch's base offset to its position, Kafka's its
last offset; an entry is consistent when it names the position where a batch starts and an
offset within that batch. A time index entry (timestamp, offset) is consistent when the offset
is the last offset of a batch whose max timestamp is that timestamp, as both write it.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Iterator

from ..records import BatchHeader, Record, decode_batch, read_header
from ..records.batch import compute_crc
from ..records.control import ABORT, EndTransactionMarker, parse_marker
from ..records.errors import RecordsError, TruncatedBatchError
from ..storage.txn_index import ENTRY, ENTRY_SIZE, AbortedTxn

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


@dataclass
class BatchResult:
    position: int
    header: BatchHeader
    crc_valid: bool
    records: list[Record] | None = None  # None: not decoded (asked not to, or undecodable)
    error: str | None = None  # why the records could not be decoded
    marker: EndTransactionMarker | None = None  # a control batch's, decoded whatever `decode`


@dataclass
class InvalidBytes:
    """Bytes at the end of a log that are not a whole valid batch."""

    position: int
    size: int
    reason: str


def base_offset_of(name: str) -> int | None:
    """The base offset in a segment file's name (`00000000000000000042.log` -> 42)."""
    stem = name.split(".", 1)[0]
    return int(stem) if stem.isdigit() else None


def scan_log(buf: bytes | memoryview, decode: bool = True) -> Iterator[BatchResult | InvalidBytes]:
    """Every batch of a .log's bytes, then an InvalidBytes if the file does not end cleanly."""
    pos, end = 0, len(buf)
    while pos < end:
        try:
            header = read_header(buf, pos)
        except TruncatedBatchError as exc:
            yield InvalidBytes(pos, end - pos, f"truncated: {exc}")
            return
        except RecordsError as exc:
            yield InvalidBytes(pos, end - pos, str(exc))
            return
        result = BatchResult(pos, header, compute_crc(buf, pos, header.size) == header.crc)
        if decode or header.is_control:
            try:
                records = decode_batch(buf, pos, verify=False).records
                if header.is_control and records:
                    result.marker = parse_marker(records[0].key, records[0].value)
                if decode:
                    result.records = records
            except RecordsError as exc:
                result.error = str(exc)
        yield result
        pos += header.size


@dataclass
class LogSummary:
    """What the index checks need to know of the log, kept compact (one entry per batch)."""

    positions: array = field(default_factory=lambda: array("q"))
    base_offsets: array = field(default_factory=lambda: array("q"))
    last_offsets: array = field(default_factory=lambda: array("q"))
    max_timestamps: array = field(default_factory=lambda: array("q"))
    size: int = 0  # bytes of whole batches
    aborts: dict[int, int] = field(default_factory=dict)  # an ABORT marker's offset -> producer

    def add(self, position: int, header: BatchHeader,
            marker: EndTransactionMarker | None = None) -> None:
        self.positions.append(position)
        self.base_offsets.append(header.base_offset)
        self.last_offsets.append(header.last_offset)
        self.max_timestamps.append(header.max_timestamp)
        self.size = position + header.size
        if marker is not None and marker.control_type == ABORT:
            self.aborts[header.base_offset] = header.producer_id


@dataclass
class IndexCheck:
    entries: list[tuple[int, int]]  # (offset, position) or (timestamp, offset)
    problems: list[str]


def check_offset_index(data: bytes, base_offset: int, log: LogSummary) -> IndexCheck:
    problems: list[str] = []
    if len(data) % _OFFSET_ENTRY.size:
        problems.append(f"size {len(data)} is not a multiple of {_OFFSET_ENTRY.size}")
    usable = len(data) - len(data) % _OFFSET_ENTRY.size
    entries: list[tuple[int, int]] = []
    last_offset = last_position = -1
    for i, (rel, position) in enumerate(_OFFSET_ENTRY.iter_unpack(data[:usable])):
        if i > 0 and rel == 0 and position == 0:
            break  # the zeros of a preallocated (Kafka) index file: no more entries
        offset = base_offset + rel
        entries.append((offset, position))
        if offset <= last_offset or position <= last_position:
            problems.append(f"entry {i} (offset {offset}, position {position}) is not after "
                            "the previous entry")
        last_offset, last_position = offset, position
        j = bisect_left(log.positions, position)
        if j == len(log.positions) or log.positions[j] != position:
            where = ("past the end of the log" if position >= log.size
                     else "not where a batch starts")
            problems.append(f"entry {i} (offset {offset}): position {position} is {where}")
        elif not log.base_offsets[j] <= offset <= log.last_offsets[j]:
            problems.append(f"entry {i}: offset {offset} is not in the batch at position "
                            f"{position} (offsets {log.base_offsets[j]}-{log.last_offsets[j]})")
    return IndexCheck(entries, problems)


def check_time_index(data: bytes, base_offset: int, log: LogSummary) -> IndexCheck:
    problems: list[str] = []
    if len(data) % _TIME_ENTRY.size:
        problems.append(f"size {len(data)} is not a multiple of {_TIME_ENTRY.size}")
    usable = len(data) - len(data) % _TIME_ENTRY.size
    entries: list[tuple[int, int]] = []
    last_ts = last_offset = None
    for i, (ts, rel) in enumerate(_TIME_ENTRY.iter_unpack(data[:usable])):
        if i > 0 and ts == 0 and rel == 0:
            break  # preallocated zeros
        offset = base_offset + rel
        entries.append((ts, offset))
        if last_ts is not None and (ts <= last_ts or offset < last_offset):
            problems.append(f"entry {i} (timestamp {ts}, offset {offset}) is not after the "
                            "previous entry")
        last_ts, last_offset = ts, offset
        j = bisect_left(log.last_offsets, offset)
        if j == len(log.last_offsets):
            problems.append(f"entry {i}: offset {offset} is past the end of the log")
        elif log.last_offsets[j] != offset:
            problems.append(f"entry {i}: offset {offset} is not the last offset of a batch "
                            f"(the batch holding it ends at {log.last_offsets[j]})")
        elif log.max_timestamps[j] != ts:
            problems.append(f"entry {i}: timestamp {ts} differs from the max timestamp "
                            f"{log.max_timestamps[j]} of the batch ending at offset {offset}")
    return IndexCheck(entries, problems)


@dataclass
class TxnIndexCheck:
    entries: list[AbortedTxn]
    problems: list[str]


def check_txn_index(data: bytes, base_offset: int, log: LogSummary | None) -> TxnIndexCheck:
    """A `.txnindex` (Kafka's 34-byte entries): entries in marker order within the segment,
    each naming an ABORT marker of its producer in the log (when `log` is given). (An ABORT
    marker need not have an entry: one that ended no transaction has none.)"""
    problems: list[str] = []
    if len(data) % ENTRY_SIZE:
        problems.append(f"size {len(data)} is not a multiple of {ENTRY_SIZE}")
    usable = len(data) - len(data) % ENTRY_SIZE
    entries: list[AbortedTxn] = []
    last = base_offset - 1
    for i, (version, *fields) in enumerate(ENTRY.iter_unpack(data[:usable])):
        txn = AbortedTxn(*fields)
        entries.append(txn)
        if version != 0:
            problems.append(f"entry {i}: version {version}")
        if txn.last_offset <= last:
            problems.append(f"entry {i}: marker offset {txn.last_offset} is not after "
                            f"{'the previous entry' if i else f'the segment base {base_offset}'}")
        if txn.first_offset > txn.last_offset:
            problems.append(f"entry {i}: first offset {txn.first_offset} is after its marker "
                            f"{txn.last_offset}")
        last = txn.last_offset
        if log is not None:
            pid = log.aborts.get(txn.last_offset)
            if pid is None:
                problems.append(f"entry {i}: no ABORT marker at offset {txn.last_offset} "
                                "in the log")
            elif pid != txn.producer_id:
                problems.append(f"entry {i}: the ABORT marker at offset {txn.last_offset} is "
                                f"producer {pid}'s, not {txn.producer_id}'s")
    return TxnIndexCheck(entries, problems)
