"""Reading a partition's records for the message browser and the offsets-topic page: one
confluent-kafka Consumer, assigned to the partition asked for (never subscribed: it joins no
group and commits nothing), used by one request at a time."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from ..cli.errors import CliError

CHUNK = 500  # records asked of the consumer at once


@dataclass(frozen=True)
class RawRecord:
    offset: int
    timestamp: int | None
    timestamp_type: str | None  # CreateTime, LogAppendTime
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


@dataclass
class Page:
    """Records of one partition in the order asked for, and where the pages around start."""

    low: int  # the log start offset
    high: int  # the log end offset
    records: list[RawRecord]
    scanned: int  # records read to find these (more than shown when filtered)
    scan_limited: bool  # the scan stopped at its limit before finding `limit` records
    older: int | None  # the offset the page of older records starts from (newest first)
    newer: int | None  # the offset the page of newer records starts from


class PartitionReader:
    def __init__(self, make_consumer: Callable[[], Any], timeout: float) -> None:
        self._make = make_consumer
        self._consumer = None
        self._lock = threading.Lock()
        self.timeout = timeout

    def close(self) -> None:
        with self._lock:
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None

    def read_range(self, topic: str, partition: int, start: int, stop: int,
                   limit: int) -> list[RawRecord]:
        """Records with offsets in [start, stop), `limit` at most, oldest first."""
        from confluent_kafka import KafkaError, TopicPartition

        if stop <= start or limit <= 0:
            return []
        out: list[RawRecord] = []
        with self._lock:
            if self._consumer is None:
                self._consumer = self._make()
            consumer = self._consumer
            consumer.assign([TopicPartition(topic, partition, start)])
            try:
                deadline = time.monotonic() + self.timeout
                while len(out) < limit and time.monotonic() < deadline:
                    batch = consumer.consume(min(CHUNK, limit - len(out)), 0.5)
                    done = False
                    for msg in batch:
                        err = msg.error()
                        if err is not None:
                            if err.code() == KafkaError._PARTITION_EOF:
                                done = True
                                continue
                            raise CliError(f"cannot read {topic}-{partition}: {err.str()}")
                        if msg.topic() != topic or msg.partition() != partition:
                            continue
                        if msg.offset() >= stop:
                            done = True
                            continue
                        out.append(_record(msg))
                        if msg.offset() >= stop - 1:
                            done = True
                    if done:
                        break
            finally:
                consumer.unassign()
        return out[:limit]


def _record(msg) -> RawRecord:
    ts_type, ts = msg.timestamp()
    return RawRecord(msg.offset(), ts if ts_type else None,
                     {1: "CreateTime", 2: "LogAppendTime"}.get(ts_type), msg.key(), msg.value(),
                     [(k, v) for k, v in (msg.headers() or [])])


def browse(read_range: Callable[[int, int, int], list[RawRecord]], low: int, high: int,
           position: int, newest_first: bool, limit: int, keep: Callable[[RawRecord], bool],
           scan_max: int) -> Page:
    """A page of `limit` records that `keep` accepts, from `position` onwards (oldest first) or
    from `position` back (newest first, `position` itself included when it is a record),
    reading `scan_max` records at most. `read_range(start, stop, n)` reads the log."""
    position = max(low, min(position, high))
    found: list[RawRecord] = []
    scanned = 0
    chunk = max(limit, 100)
    if not newest_first:
        pos = position
        while pos < high and len(found) < limit and scanned < scan_max:
            records = read_range(pos, high, min(chunk, scan_max - scanned))
            if not records:
                break
            for r in records:
                scanned += 1
                pos = r.offset + 1
                if keep(r):
                    found.append(r)
                    if len(found) == limit:
                        break
        return Page(low, high, found, scanned, scanned >= scan_max and len(found) < limit,
                    older=max(low, position - limit) if position > low else None,
                    newer=pos if pos < high else None)
    upper = min(high, position + 1) if position < high else high
    while upper > low and len(found) < limit and scanned < scan_max:
        lo = max(low, upper - min(chunk, scan_max - scanned))
        records = read_range(lo, upper, upper - lo)
        scanned += max(len(records), 1)
        window = [r for r in records if keep(r)]
        if not records:
            upper = lo  # a gap (compacted away, or control records): go on below it
            continue
        taken = window[-(limit - len(found)):]
        found.extend(reversed(taken))
        if len(taken) < len(window):  # stopped inside the window: the next page starts here
            upper = taken[0].offset
            break
        upper = lo
    top = found[0].offset if found else position
    return Page(low, high, found, scanned, scanned >= scan_max and len(found) < limit,
                older=upper - 1 if upper > low else None,
                newer=top + 1 + limit - 1 if top + 1 < high else None)
