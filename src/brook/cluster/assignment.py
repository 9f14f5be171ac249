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
    if replication_factor <= 0:
        raise ReplicationFactorError("Replication factor must be larger than 0.")
    ids = sorted(brokers)
    n = len(ids)
    if replication_factor > n:
        raise ReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: {n}.")
    if partitions <= 0:
        return {}
    rng = rng or _random.Random()
    start = start_index if start_index >= 0 else rng.randrange(n)
    shift = start_index if start_index >= 0 else rng.randrange(n)
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
