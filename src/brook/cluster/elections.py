"""The controller's decisions on partition leadership, as pure functions of what it knows
(assignments, partition states, live brokers): who leads a new partition, who takes over from
a dead leader, who leaves the ISR with a dead replica. Every change bumps the leader epoch,
as Kafka's ZooKeeper controller does, so followers and clients can tell old leaders from new.

The I/O (reading ZooKeeper, writing the states conditionally, telling the brokers) is the
controller's (`controller.py`); these functions are what the simulation drives."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Mapping

from .zk_data import PartitionState

NO_LEADER = -1  # LeaderAndIsr.NoLeader
INITIAL_LEADER_EPOCH = 0


@dataclass(frozen=True, slots=True)
class Change:
    """A partition's new state, to be written over `before` (None: a partition without state)."""

    topic: str
    partition: int
    before: PartitionState | None
    after: PartitionState

    @property
    def leader_changed(self) -> bool:
        return self.before is None or self.before.leader != self.after.leader


def new_partition_state(replicas: Iterable[int], live: frozenset[int],
                        controller_epoch: int) -> PartitionState | None:
    """A new partition comes online led by its first live replica, with every live replica
    in the ISR (Kafka's NewPartition -> OnlinePartition); None while no replica is alive."""
    alive = tuple(r for r in replicas if r in live)
    if not alive:
        return None
    return PartitionState(alive[0], INITIAL_LEADER_EPOCH, alive, controller_epoch)


def elect_leader(replicas: Iterable[int], isr: Iterable[int], live: frozenset[int], *,
                 unclean: bool = False) -> tuple[int, tuple[int, ...]] | None:
    """The new leader and ISR of a partition whose leader is gone (OfflinePartitionLeaderElection
    strategy): the first replica in assignment order that is alive and in the ISR; with
    `unclean`, failing that, the first live replica, alone in its ISR (data may be lost). None
    if nobody may lead."""
    isr = tuple(isr)
    order = tuple(replicas)
    for r in order:
        if r in live and r in isr:
            return r, tuple(b for b in isr if b in live)
    if unclean:
        for r in order:
            if r in live:
                return r, (r,)
    return None


def on_brokers(assignments: Mapping[str, Mapping[int, tuple[int, ...]]],
               states: Mapping[tuple[str, int], PartitionState],
               live: frozenset[int], controller_epoch: int, *,
               unclean: Mapping[str, bool] | None = None) -> list[Change]:
    """Every partition state that must change for the live brokers `live`: new partitions
    come online, partitions of a dead leader get a new one from their ISR (or go offline:
    leader -1, ISR kept, as Kafka keeps it for a later clean election), and dead followers
    leave the ISR of partitions whose leader lives."""
    changes: list[Change] = []
    for topic, partitions in assignments.items():
        for p, replicas in partitions.items():
            state = states.get((topic, p))
            if state is None:
                new = new_partition_state(replicas, live, controller_epoch)
                if new is not None:
                    changes.append(Change(topic, p, None, new))
                continue
            after = _next_state(replicas, state, live, controller_epoch,
                                bool(unclean and unclean.get(topic)))
            if after is not None:
                changes.append(Change(topic, p, state, after))
    return changes


def _next_state(replicas, state: PartitionState, live: frozenset[int], controller_epoch: int,
                unclean: bool) -> PartitionState | None:
    if state.leader in live:
        isr = tuple(b for b in state.isr if b in live)
        if isr == state.isr:
            return None
        return replace(state, leader_epoch=state.leader_epoch + 1, isr=isr or (state.leader,),
                       controller_epoch=controller_epoch)
    elected = elect_leader(replicas, state.isr, live, unclean=unclean)
    if elected is None:
        if state.leader == NO_LEADER:
            return None  # offline already; it comes back when an ISR member does
        # Offline: no leader, ISR left as it was so the last leader can come back cleanly.
        return replace(state, leader=NO_LEADER, leader_epoch=state.leader_epoch + 1,
                       controller_epoch=controller_epoch)
    leader, isr = elected
    return replace(state, leader=leader, leader_epoch=state.leader_epoch + 1, isr=isr,
                   controller_epoch=controller_epoch)


def moved_away(replicas, state: PartitionState, leaving: int, live: frozenset[int],
               controller_epoch: int) -> PartitionState | None:
    """The state of a partition `leaving` leads, with leadership moved to another ISR member
    that is alive (ControlledShutdownLeaderElection); None if there is none."""
    others = live - {leaving}
    elected = elect_leader(replicas, [b for b in state.isr if b != leaving], others)
    if elected is None:
        return None
    leader, isr = elected
    return replace(state, leader=leader, leader_epoch=state.leader_epoch + 1, isr=isr,
                   controller_epoch=controller_epoch)
