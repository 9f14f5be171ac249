"""What a broker knows of the whole cluster, as the controller last told it (UpdateMetadata):
the live brokers with their endpoints, and each partition's leader, leader epoch, replicas,
ISR and offline replicas. Metadata answers from here in a cluster; the broker's own
partitions (those it leads or follows) are the replica manager's."""

from __future__ import annotations

import uuid
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    broker_id: int
    endpoints: dict[str, tuple[str, int]]  # listener name -> (host, port)
    rack: str | None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    offline: tuple[int, ...]


class MetadataCache:
    def __init__(self) -> None:
        self.controller_id = -1
        self.controller_epoch = -1
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, dict[int, PartitionInfo]] = {}
        self.topic_ids: dict[str, uuid.UUID] = {}
        self.version = 0  # bumped by every update (Metadata's response cache keys on it)

    def update(self, request) -> None:
        """Apply an UpdateMetadata request (the controller sends the whole picture)."""
        self.controller_id = request.controller_id
        self.controller_epoch = request.controller_epoch
        self.brokers = {b.id_: BrokerInfo(b.id_, {e.listener: (e.host, e.port) for e in b.endpoints},
                                          b.rack) for b in request.live_brokers}
        topics: dict[str, dict[int, PartitionInfo]] = {}
        ids: dict[str, uuid.UUID] = {}
        for t in request.topic_states:
            topics[t.topic_name] = {p.partition_index: PartitionInfo(
                p.leader, p.leader_epoch, tuple(p.isr), tuple(p.replicas), tuple(p.offline_replicas))
                for p in t.partition_states}
            if t.topic_id is not None:
                ids[t.topic_name] = t.topic_id
        self.topics = topics
        self.topic_ids = ids
        self.version += 1

    def partition(self, topic: str, partition: int) -> PartitionInfo | None:
        return self.topics.get(topic, {}).get(partition)

    def may_exist(self, topic: str, partition: int) -> bool:
        """False only for a partition the controller's last picture does not hold (its topic
        deleted, or never created); before any picture, nothing is known gone."""
        return self.version == 0 or self.partition(topic, partition) is not None

    def endpoint(self, broker_id: int, listener: str) -> tuple[str, int] | None:
        b = self.brokers.get(broker_id)
        return None if b is None else b.endpoints.get(listener)
