"""Where a new topic's replicas go, as Kafka's AdminUtils.assignReplicasToBrokers spreads them
(rack-unaware form): the first replica of each partition walks the brokers from a random
start, so leaders are spread evenly; the followers follow at a shift that grows every time the
partitions have gone once round the brokers, so no two brokers pair up for every partition."""

from __future__ import annotations

import random as _random
from typing import Sequence


class ReplicationFactorError(ValueError):
    """More replicas asked for than there are brokers (INVALID_REPLICATION_FACTOR)."""


def assign_replicas(brokers: Sequence[int], partitions: int, replication_factor: int, *,
                    rng: _random.Random | None = None, first_partition: int = 0,
                    start_index: int = -1) -> dict[int, tuple[int, ...]]:
    """{partition: replicas} for `partitions` new partitions numbered from `first_partition`."""
    ids = sorted(brokers)
    n = len(ids)
    start, shift = _start(n, partitions, replication_factor, rng, start_index)
    if partitions <= 0:
        return {}
    out: dict[int, tuple[int, ...]] = {}
    current = max(0, first_partition)
    for _ in range(partitions):
        if current > 0 and current % n == 0:
            shift += 1
        first = (current + start) % n
        replicas = [ids[first]]
        for j in range(replication_factor - 1):
            replicas.append(ids[(first + 1 + (shift + j) % (n - 1)) % n])
        out[current] = tuple(replicas)
        current += 1
    return out


def _start(n: int, partitions: int, replication_factor: int, rng: _random.Random | None,
           start_index: int) -> tuple[int, int]:
    """Kafka's checks, then where the first replicas start and the followers' first shift
    (random unless a start index is fixed)."""
    if replication_factor <= 0:
        raise ReplicationFactorError("Replication factor must be larger than 0.")
    if replication_factor > n:
        raise ReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: {n}.")
    if start_index >= 0 or partitions <= 0:
        return start_index, start_index
    rng = rng or _random.Random()
    return rng.randrange(n), rng.randrange(n)


def rack_alternated(racks: dict[int, str]) -> list[int]:
    """Brokers ordered so that racks alternate (Kafka's getRackAlternatedBrokerList): racks
    in name order, each rack's brokers in id order, one from each rack in turn."""
    by_rack: dict[str, list[int]] = {}
    for broker, rack in sorted(racks.items()):
        by_rack.setdefault(rack, []).append(broker)
    queues = [by_rack[r] for r in sorted(by_rack)]
    out: list[int] = []
    while len(out) < len(racks):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out


def assign_replicas_rack_aware(racks: dict[int, str], partitions: int, replication_factor: int, *,
                               rng: _random.Random | None = None, first_partition: int = 0,
                               start_index: int = -1) -> dict[int, tuple[int, ...]]:
    """As `assign_replicas`, with the brokers' racks (Kafka's assignReplicasToBrokersRackAware):
    each partition's replicas go to as many racks as there are replicas (or every rack), and
    leaders and followers still spread evenly."""
    n = len(racks)
    start, shift = _start(n, partitions, replication_factor, rng, start_index)
    if partitions <= 0:
        return {}
    arranged = rack_alternated(racks)
    num_racks = len(set(racks.values()))
    out: dict[int, tuple[int, ...]] = {}
    current = max(0, first_partition)
    for _ in range(partitions):
        if current > 0 and current % n == 0:
            shift += 1
        first = (current + start) % n
        leader = arranged[first]
        replicas = [leader]
        used_racks, used_brokers = {racks[leader]}, {leader}
        k = 0
        for _ in range(replication_factor - 1):
            while True:
                broker = arranged[(first + 1 + (shift * num_racks + k) % (n - 1)) % n]
                rack = racks[broker]
                k += 1
                if ((rack not in used_racks or len(used_racks) == num_racks)
                        and (broker not in used_brokers or len(used_brokers) == n)):
                    replicas.append(broker)
                    used_racks.add(rack)
                    used_brokers.add(broker)
                    break
        out[current] = tuple(replicas)
        current += 1
    return out
