"""The cluster's topics, partitions and brokers as one Metadata request tells them, kept for a
few seconds and shared by the pages: the topics list, the cluster page, the message browser's
partition check and its reader's leaders. On 10,000 partitions one Metadata answer is most of
what the topics page costs, the broker's and the console's; a page opened again, or another
page right after, costs none. A change made through the console drops it at once."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from ..protocol.messages import request_class

METADATA = 3
METADATA_VERSION = 12
MAX_AGE = 3.0  # seconds a snapshot serves the pages
_REQUEST = load_payload_module(METADATA, METADATA_VERSION, EntityType.request)


@dataclass(frozen=True)
class PartitionInfo:
    leader: int  # -1: none (offline)
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class TopicInfo:
    name: str
    internal: bool
    error: str | None  # the error name the broker gave for this topic, if any
    partitions: dict[int, PartitionInfo]


@dataclass(frozen=True)
class Snapshot:
    taken: float  # monotonic time
    brokers: dict[int, tuple[str, int, str | None]]  # id: (host, port, rack)
    controller: int
    topics: dict[str, TopicInfo]


def metadata_request(topics: list[str] | None = None):
    """Metadata v12 of every topic (None) or of `topics`, creating none."""
    asked = None if topics is None else tuple(
        _REQUEST.MetadataRequestTopic(topic_id=None, name=t) for t in topics)
    return request_class(METADATA, METADATA_VERSION)(
        topics=asked, allow_auto_topic_creation=False, include_topic_authorized_operations=False)


def snapshot_of(response, taken: float) -> Snapshot:
    topics = {}
    for t in response.topics:
        if t.name is None:
            continue
        topics[t.name] = TopicInfo(
            t.name, bool(t.is_internal),
            None if t.error_code == ErrorCode.none else t.error_code.name.upper(),
            {int(p.partition_index): PartitionInfo(int(p.leader_id), tuple(p.replica_nodes),
                                                   tuple(p.isr_nodes))
             for p in t.partitions})
    brokers = {int(b.node_id): (b.host, int(b.port), b.rack) for b in response.brokers}
    return Snapshot(taken, brokers, int(response.controller_id), topics)


class MetadataCache:
    """The last snapshot while it is younger than `max_age`; else one request, shared by the
    pages asking meanwhile. `fetch()` sends the Metadata request and returns its answer."""

    def __init__(self, fetch: Callable[[], object], max_age: float = MAX_AGE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._fetch = fetch
        self.max_age = max_age
        self._clock = clock
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self.requests = 0  # Metadata requests sent: what the cache saved can be measured

    def get(self, max_age: float | None = None) -> Snapshot:
        age = self.max_age if max_age is None else max_age
        with self._lock:
            snap = self._snapshot
            if snap is None or self._clock() - snap.taken >= age:
                self.requests += 1
                taken = self._clock()
                snap = self._snapshot = snapshot_of(self._fetch(), taken)
            return snap

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
