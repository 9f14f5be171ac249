"""The server-side assignors of consumer groups (KIP-848): ``uniform`` and ``range``, pure.

An assignor gets every member's subscribed topic ids and its current *target* partitions, and
the partition count of every subscribed topic, and returns each member's new target partitions.
A partition is a (topic id, partition) pair. Every partition of a subscribed topic is given to
exactly one member subscribed to it; a topic nobody subscribes to is not assigned.

``uniform`` (Kafka's default, ``UniformAssignor``): balanced and sticky. A member keeps the
partitions it had that it still subscribes to; the rest go one by one to the subscribed member
holding the fewest; then partitions move from the fullest member to the emptiest one that
subscribes to their topic until no such move narrows the gap. With the same subscriptions every
member ends with ``n // m`` or ``n // m + 1`` partitions and moves are as few as that allows.
Kafka reaches the same balance with other tie-breaks, so the exact partitions may differ.

``range`` (Kafka's ``RangeAssignor``): per topic, the members subscribed to it, in Kafka's order
(static members first, by instance id, then the others by member id), each take a contiguous
range, the first ``n % m`` one more. Co-partitioned topics land together. As Kafka's, it is not
sticky: a membership change can move ranges; static members keep theirs across restarts.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["ASSIGNORS", "MemberSpec", "Partition", "range_assignor", "uniform_assignor"]

Partition = tuple[uuid.UUID, int]


@dataclass(frozen=True)
class MemberSpec:
    topics: frozenset[uuid.UUID]  # subscribed topic ids (that exist)
    current: frozenset[Partition]  # the member's current target partitions
    instance_id: str | None = None  # a static member's group.instance.id


Assignor = Callable[[Mapping[str, MemberSpec], Mapping[uuid.UUID, int]],
                    dict[str, frozenset[Partition]]]


def _valid(spec: MemberSpec, topics: Mapping[uuid.UUID, int]) -> set[Partition]:
    return {(t, p) for t, p in spec.current if t in spec.topics and 0 <= p < topics.get(t, 0)}


def uniform_assignor(members: Mapping[str, MemberSpec],
                     topics: Mapping[uuid.UUID, int]) -> dict[str, frozenset[Partition]]:
    owned: dict[str, set[Partition]] = {}
    taken: set[Partition] = set()
    for member_id in sorted(members):
        kept = _valid(members[member_id], topics) - taken
        owned[member_id] = kept
        taken |= kept
    subscribed = {t for spec in members.values() for t in spec.topics if t in topics}
    free = [(t, p) for t in sorted(subscribed, key=str) for p in range(topics[t])
            if (t, p) not in taken]
    for partition in free:
        eligible = [m for m in owned if partition[0] in members[m].topics]
        best = min(eligible, key=lambda m: (len(owned[m]), m))
        owned[best].add(partition)
    _balance(owned, members)
    return {m: frozenset(ps) for m, ps in owned.items()}


def _balance(owned: dict[str, set[Partition]], members: Mapping[str, MemberSpec]) -> None:
    """Move partitions from fuller members to emptier ones subscribed to their topics while a
    move narrows a gap of two or more."""
    while True:
        order = sorted(owned, key=lambda m: (len(owned[m]), m))
        moved = False
        for full in reversed(order):
            for empty in order:
                if len(owned[full]) - len(owned[empty]) < 2:
                    break
                topics = members[empty].topics
                candidate = max((p for p in owned[full] if p[0] in topics), default=None,
                                key=lambda p: (str(p[0]), p[1]))
                if candidate is not None:
                    owned[full].discard(candidate)
                    owned[empty].add(candidate)
                    moved = True
                    break
            if moved:
                break
        if not moved:
            return


def range_assignor(members: Mapping[str, MemberSpec],
                   topics: Mapping[uuid.UUID, int]) -> dict[str, frozenset[Partition]]:
    owned: dict[str, set[Partition]] = {m: set() for m in members}
    subscribed = {t for spec in members.values() for t in spec.topics if t in topics}
    for topic in subscribed:
        takers = sorted((m for m, spec in members.items() if topic in spec.topics),
                        key=lambda m: _range_order(m, members[m]))
        count = topics[topic]
        quota, extra = divmod(count, len(takers))
        start = 0
        for i, member_id in enumerate(takers):
            size = quota + (1 if i < extra else 0)
            owned[member_id].update((topic, p) for p in range(start, start + size))
            start += size
    return {m: frozenset(ps) for m, ps in owned.items()}


def _range_order(member_id: str, spec: MemberSpec) -> tuple:
    if spec.instance_id is not None:
        return (0, spec.instance_id)
    return (1, member_id)


#: ``group.consumer.assignors`` names; the first configured one is the group's default.
ASSIGNORS: dict[str, Assignor] = {"uniform": uniform_assignor, "range": range_assignor}
