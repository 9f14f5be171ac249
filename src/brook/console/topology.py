"""The cluster's topics, partitions and brokers as one Metadata request tells them, kept for a
few seconds and shared by the pages: the topics list, the cluster page, the message browser's
partition check and its reader's leaders. On 10,000 partitions one Metadata answer is most of
what the topics page costs, the broker's and the console's; a page opened again, or another
page right after, costs none, and a snapshot a little older is taken again in the background
while it serves one more page. A change made through the console drops it at once."""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Callable, NamedTuple

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from ..protocol.messages import request_class

METADATA = 3
METADATA_VERSION = 9  # Kafka 2.4 and later answer it; 4.0 too
MAX_AGE = 3.0  # seconds a snapshot serves the pages before it is asked for again
STALE_AGE = 10.0  # seconds an older one still serves them while the next is asked for
REFRESH_DELAY = 0.3  # seconds after a page found the snapshot old that the next is asked for
log = logging.getLogger("brook.console")
_REQUEST = load_payload_module(METADATA, METADATA_VERSION, EntityType.request)


class PartitionInfo(NamedTuple):
    leader: int  # -1: none (offline)
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


class Partitions(Mapping):
    """A topic's partitions: {partition: PartitionInfo}, kept as plain tuples of ints, which
    Python's garbage collector stops tracking: the 10,000 partitions of a snapshot taken every
    few seconds would otherwise set off full collections of the console's heap (a 200 ms pause
    of every page, measured)."""

    __slots__ = ("_raw",)

    def __init__(self, raw: dict[int, tuple[int, tuple[int, ...], tuple[int, ...]]]) -> None:
        self._raw = raw

    def __getitem__(self, partition: int) -> PartitionInfo:
        return PartitionInfo(*self._raw[partition])

    def __iter__(self):
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)

    def __contains__(self, partition) -> bool:
        return partition in self._raw


@dataclass(frozen=True)
class TopicInfo:
    name: str
    internal: bool
    error: str | None  # the error name the broker gave for this topic, if any
    partitions: Partitions


@dataclass(frozen=True)
class Snapshot:
    taken: float  # monotonic time
    brokers: dict[int, tuple[str, int, str | None]]  # id: (host, port, rack)
    controller: int
    topics: dict[str, TopicInfo]


def metadata_request(topics: list[str] | None = None):
    """Metadata v9 of every topic (None) or of `topics`, creating none."""
    asked = None if topics is None else tuple(
        _REQUEST.MetadataRequestTopic(name=t) for t in topics)
    return request_class(METADATA, METADATA_VERSION)(
        topics=asked, allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False, include_topic_authorized_operations=False)


def snapshot_of(response, taken: float) -> Snapshot:
    topics = {}
    for t in response.topics:
        if t.name is None:
            continue
        topics[t.name] = TopicInfo(
            t.name, bool(t.is_internal),
            None if t.error_code == ErrorCode.none else t.error_code.name.upper(),
            Partitions({int(p.partition_index): (int(p.leader_id), tuple(map(int, p.replica_nodes)),
                                                 tuple(map(int, p.isr_nodes)))
                        for p in t.partitions}))
    brokers = {int(b.node_id): (b.host, int(b.port), b.rack) for b in response.brokers}
    return Snapshot(taken, brokers, int(response.controller_id), topics)


def take_snapshot(fetch: Callable[[], object], taken: float) -> Snapshot:
    """`fetch()`'s answer made a snapshot with the garbage collector paused: the answer's tens
    of thousands of short-lived entities would otherwise be counted as survivors and set off a
    full collection; they are freed (by their reference counts) before it resumes."""
    paused = gc.isenabled()
    gc.disable()
    try:
        return snapshot_of(fetch(), taken)
    finally:
        if paused:
            gc.enable()


def _after_the_page(fn: Callable[[], None]) -> None:
    """Run `fn` in a thread of its own once the page that asked has had time to be served:
    decoding 10,000 partitions at the same time would slow that page down (one interpreter
    lock)."""
    timer = threading.Timer(REFRESH_DELAY, fn)
    timer.name, timer.daemon = "brook-console-metadata", True
    timer.start()


class MetadataCache:
    """The last snapshot while it is younger than `max_age`. An older one, up to `stale_age`,
    still serves the page that finds it, while one request in the background (`spawn` runs it)
    takes the next: a page never waits for the Metadata answer unless no page was opened for
    `stale_age` seconds (or at the start, or after a change). `fetch()` sends the Metadata
    request and returns its answer; the pages asking meanwhile share one request."""

    def __init__(self, fetch: Callable[[], object], max_age: float = MAX_AGE,
                 stale_age: float = STALE_AGE, clock: Callable[[], float] = time.monotonic,
                 spawn: Callable[[Callable[[], None]], None] | None = None) -> None:
        self._fetch = fetch
        self.max_age = max_age
        self.stale_age = stale_age
        self._clock = clock
        self._spawn = spawn or _after_the_page
        self._lock = threading.Lock()  # one request at a time
        self._snapshot: Snapshot | None = None
        self._refreshing = False
        self.requests = 0  # Metadata requests sent: what the cache saved can be measured

    def get(self, max_age: float | None = None) -> Snapshot:
        snap = self._snapshot
        now = self._clock()
        if max_age is None and snap is not None and now - snap.taken < self.stale_age:
            if now - snap.taken >= self.max_age and not self._refreshing:
                self._refreshing = True
                self._spawn(self._refresh)
            return snap
        age = self.max_age if max_age is None else max_age
        with self._lock:
            snap = self._snapshot
            if snap is None or self._clock() - snap.taken >= age:
                snap = self._take()
            return snap

    def _take(self) -> Snapshot:
        self.requests += 1
        taken = self._clock()
        snap = self._snapshot = take_snapshot(self._fetch, taken)
        return snap

    def _refresh(self) -> None:
        try:
            with self._lock:
                if self._snapshot is not None and \
                        self._clock() - self._snapshot.taken >= self.max_age:
                    self._take()
        except Exception as exc:  # noqa: BLE001 - the next page asks again, and says why
            log.info("console: metadata refresh failed: %s", exc)
        finally:
            self._refreshing = False

    def topic(self, name: str) -> TopicInfo | None:
        """A topic as known now: one missing from the snapshot is asked about again (it may
        have been created since)."""
        info = self.get().topics.get(name)
        if info is None or info.error is not None:
            info = self.get(max_age=0).topics.get(name)
        return info

    def invalidate(self) -> None:
        with self._lock:
            self._snapshot = None
