"""Reading a partition's records for the message browser and the offsets-topic page, with Fetch
requests of its own (brook.client's connection, kio's entities): a reader that joins no group
and commits nothing, and that sees what confluent-kafka's consumer hides, the transaction
markers (control records) and which records belong to an aborted transaction.

Two isolation levels, as a consumer has:

- read_uncommitted: every record up to the high watermark, the markers among them. A
  transactional record is marked "committed", "aborted" or "open" (its transaction not decided,
  or decided past the last stable offset). Kafka's brokers name the aborted transactions only
  to a read_committed Fetch, so when a read_uncommitted answer holds transactional batches the
  reader sends that second Fetch from the same offset for its `aborted_transactions` and last
  stable offset (a plain topic costs nothing more). A marker further on in what was read
  decides the transactions past the last stable offset too.
- read_committed: what a read_committed consumer gets: records up to the last stable offset,
  without the markers and without the records of aborted transactions.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Callable

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from ..cli.errors import CliError
from ..client.connection import BrokerConnection, KafkaClientError
from ..protocol.messages import request_class
from ..records.batch import (LOG_APPEND_TIME, BatchHeader, decode_batch, scan_batches,
                             whole_batches_size)
from ..records.control import parse_marker
from ..records.errors import CorruptRecordError

FETCH, FETCH_VERSION = 1, 11
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
ISOLATION_LEVELS = {"read_uncommitted": READ_UNCOMMITTED, "read_committed": READ_COMMITTED}
PARTITION_MAX_BYTES = 1 << 20  # a Fetch answer's records, at most (but always a whole batch)
_FETCH = load_payload_module(FETCH, FETCH_VERSION, EntityType.request)
_RETRIABLE = {ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch,
              ErrorCode.leader_not_available, ErrorCode.unknown_topic_or_partition}


@dataclass(frozen=True)
class RawRecord:
    offset: int
    timestamp: int | None
    timestamp_type: str | None  # CreateTime, LogAppendTime
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    control: str | None = None  # a transaction marker: "COMMIT" or "ABORT" (else the type id)
    producer_id: int | None = None  # of a transactional record or a marker
    transaction: str | None = None  # a transactional record's: committed, aborted, open


@dataclass
class Page:
    """Records of one partition in the order asked for, and where the pages around start."""

    low: int  # the log start offset
    high: int  # the log end offset (the last stable offset, read_committed)
    records: list[RawRecord]
    scanned: int  # records read to find these (more than shown when filtered)
    scan_limited: bool  # the scan stopped at its limit before finding `limit` records
    older: int | None  # the offset the page of older records starts from (newest first)
    newer: int | None  # the offset the page of newer records starts from


def transaction_states(headers: list[BatchHeader], aborted: list[tuple[int, int]] | None,
                       last_stable: int) -> list[str | None]:
    """Per batch (in offset order, as one Fetch answered them): None for a plain batch or a
    marker, else its transaction's outcome: "aborted" (the consumer's rule: a producer's batches
    from an aborted transaction's first offset until that producer's next marker), "committed"
    (below the last stable offset and not aborted), or what a marker of its producer further
    on says, or "open"."""
    pending = sorted(aborted or [], key=lambda a: a[1])  # (producer id, first offset)
    aborting: set[int] = set()
    out: list[str | None] = []
    for h in headers:
        while pending and pending[0][1] <= h.last_offset:
            aborting.add(pending.pop(0)[0])
        if h.is_control:
            aborting.discard(h.producer_id)
            out.append(None)
        elif not h.is_transactional:
            out.append(None)
        elif h.producer_id in aborting:
            out.append("aborted")
        elif 0 <= last_stable and h.last_offset < last_stable:
            out.append("committed")
        else:
            out.append("open")
    return out


def decide_by_markers(headers: list[BatchHeader], states: list[str | None],
                      markers: dict[int, str]) -> list[str | None]:
    """Open transactions whose producer's next marker is among `headers` take its outcome
    (`markers`: batch index of a marker batch -> COMMIT or ABORT)."""
    out = list(states)
    for i, state in enumerate(states):
        if state != "open":
            continue
        pid = headers[i].producer_id
        for j in range(i + 1, len(headers)):
            if headers[j].is_control and headers[j].producer_id == pid:
                outcome = markers.get(j)
                if outcome is not None:
                    out[i] = "committed" if outcome == "COMMIT" else "aborted"
                break
    return out


class PartitionReader:
    """Fetches from partitions' leaders (`leader(topic, partition)` says where; `forget()` after
    a leader moved), keeping a connection per broker; one request at a time."""

    def __init__(self, leader: Callable[[str, int], tuple[str, int]], forget: Callable[[], None],
                 security, timeout: float, client_id: str = "brook-console") -> None:
        self._leader = leader
        self._forget = forget
        self.security = security
        self.timeout = timeout
        self.client_id = client_id
        self._connections: dict[tuple[str, int], BrokerConnection] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            for connection in self._connections.values():
                connection.close()
            self._connections.clear()

    def read_range(self, topic: str, partition: int, start: int, stop: int, limit: int,
                   isolation: str = "read_uncommitted") -> list[RawRecord]:
        """Records with offsets in [start, stop), `limit` at most, oldest first (markers count
        as records under read_uncommitted; under read_committed they, and aborted records, are
        left out)."""
        if stop <= start or limit <= 0:
            return []
        committed_only = isolation == "read_committed"
        out: list[RawRecord] = []
        position = start
        deadline = time.monotonic() + self.timeout
        with self._lock:
            while len(out) < limit and position < stop and time.monotonic() < deadline:
                data = self._fetch(topic, partition, position,
                                   READ_COMMITTED if committed_only else READ_UNCOMMITTED)
                if data is None:
                    break
                records = bytes(data.records or b"")
                records = records[:whole_batches_size(records)]
                if not records:
                    break  # the end (the high watermark, or the last stable offset)
                try:
                    batches = [(pos, h) for pos, h in scan_batches(records)]
                    headers = [h for _, h in batches]
                    if committed_only:
                        states = transaction_states(headers, _aborted(data),
                                                    int(data.last_stable_offset))
                    elif any(h.is_transactional for h in headers):
                        stable = self._fetch(topic, partition, position, READ_COMMITTED)
                        states = transaction_states(
                            headers, _aborted(stable) if stable else [],
                            int(stable.last_stable_offset) if stable else -1)
                    else:
                        states = [None] * len(headers)
                    # the records of the batches asked for (a page of 50 needs few of the
                    # megabyte read), and every marker (they decide transactions)
                    decoded = {i: decode_batch(records, pos, verify=False)
                               for i, (pos, h) in enumerate(batches)
                               if h.is_control or (h.last_offset >= start and h.base_offset < stop)}
                except CorruptRecordError as exc:
                    raise CliError(f"cannot read {topic}-{partition} at offset {position}: "
                                   f"a damaged record batch ({exc})") from None
                markers = {}
                for i, batch in decoded.items():
                    if batch.is_control and batch.records:
                        r = batch.records[0]
                        markers[i] = _control_name(r.key, r.value)
                states = decide_by_markers(headers, states, markers)
                position = max(position, headers[-1].last_offset + 1)
                for i, batch in sorted(decoded.items()):
                    if committed_only and (batch.is_control or states[i] == "aborted"):
                        continue
                    ts_type = "LogAppendTime" if batch.timestamp_type == LOG_APPEND_TIME \
                        else "CreateTime"
                    pid = batch.producer_id if batch.is_transactional else None
                    for r in batch.records:
                        if not start <= r.offset < stop:
                            continue
                        ts = batch.max_timestamp if ts_type == "LogAppendTime" else r.timestamp
                        out.append(RawRecord(
                            r.offset, ts if ts >= 0 else None, ts_type, r.key, r.value,
                            list(r.headers),
                            control=markers.get(i) if batch.is_control else None,
                            producer_id=pid, transaction=states[i]))
        return out[:limit]

    def _fetch(self, topic: str, partition: int, position: int, isolation: int):
        """One partition's part of a Fetch answer from its leader (asked again once, after a
        leader that moved or a connection that broke)."""
        for attempt in (1, 2):
            address = self._leader(topic, partition)
            try:
                connection = self._connections.get(address)
                if connection is None:
                    connection = self._connections[address] = BrokerConnection(
                        address[0], address[1], self.timeout, self.client_id, self.security)
                response = connection.request(_fetch_body(topic, partition, position,
                                                          isolation))
            except KafkaClientError as exc:
                self._connections.pop(address, None)
                if attempt == 2:
                    raise CliError(f"cannot read {topic}-{partition}: {exc}") from None
                continue
            except Exception as exc:  # noqa: BLE001 - an answer kio cannot read
                self._connections.pop(address, None)
                raise CliError(f"cannot read {topic}-{partition}: {address[0]}:{address[1]} "
                               f"answered Fetch v{FETCH_VERSION} with what cannot be read "
                               f"({type(exc).__name__})") from None
            if response.error_code != ErrorCode.none:
                raise CliError(f"cannot read {topic}-{partition}: "
                               f"{response.error_code.name.upper()}")
            found = [p for t in response.responses if t.topic == topic
                     for p in t.partitions if p.partition_index == partition]
            if not found:  # an answer without the partition: nothing to read now
                return None
            data = found[0]
            if data.error_code in _RETRIABLE and attempt == 1:
                self._forget()
                continue
            if data.error_code != ErrorCode.none:
                raise CliError(f"cannot read {topic}-{partition} from offset {position}: "
                               f"{data.error_code.name.upper()}")
            return data
        raise AssertionError("unreachable")


def _fetch_body(topic: str, partition: int, position: int, isolation: int):
    return request_class(FETCH, FETCH_VERSION)(
        # min_bytes 0: the answer comes at once; a max_wait of 0 makes some brokers (Tansu)
        # answer nothing at all
        replica_id=-1, max_wait=timedelta(milliseconds=10), min_bytes=0,
        max_bytes=PARTITION_MAX_BYTES, isolation_level=isolation, session_id=0,
        session_epoch=-1,
        topics=(_FETCH.FetchTopic(topic=topic, partitions=(_FETCH.FetchPartition(
            partition=partition, current_leader_epoch=-1, fetch_offset=position,
            log_start_offset=-1, partition_max_bytes=PARTITION_MAX_BYTES),)),),
        forgotten_topics_data=(), rack_id="")


def _aborted(data) -> list[tuple[int, int]]:
    """A Fetch answer's aborted transactions: (producer id, first offset)."""
    return [(int(a.producer_id), int(a.first_offset)) for a in data.aborted_transactions or ()]


def _control_name(key: bytes | None, value: bytes | None) -> str:
    try:
        marker = parse_marker(key, value)
    except CorruptRecordError:
        marker = None
    if marker is not None:
        return marker.control_type.name
    return "CONTROL"


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
