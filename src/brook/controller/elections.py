"""The controller's decisions on partition leadership, as pure functions of what it knows
(assignments, partition states, live brokers): who leads a new partition, who takes over from
a dead leader, who leaves the ISR with a dead replica. Every change bumps the leader epoch,
as Kafka's ZooKeeper controller does, so followers and clients can tell old leaders from new.

The I/O (reading ZooKeeper, writing the states conditionally, telling the brokers) is the
controller's (`controller.py`); these functions are what the simulation drives."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Collection, Iterable, Mapping

from ..cluster.zk_data import PartitionState

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
               unclean: Mapping[str, bool] | None = None,
               reelect: Collection[tuple[str, int]] = ()) -> list[Change]:
    """Every partition state that must change for the live brokers `live`: new partitions
    come online, partitions of a dead leader get a new one from their ISR (or go offline:
    leader -1, ISR kept, as Kafka keeps it for a later clean election), and dead followers
    leave the ISR of partitions whose leader lives.

    `reelect`: partitions whose leader is alive but registered again after their state was
    written (it restarted, or lost its session, since it was elected). Each gets a new leader
    epoch even if nothing else changed, with the same leader: a leader that restarted may have
    lost the tail of its log that followers had fetched, and only a new epoch makes them
    truncate it before they fetch what it writes next at the same offsets."""
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
                                bool(unclean and unclean.get(topic)), (topic, p) in reelect)
            if after is not None:
                changes.append(Change(topic, p, state, after))
    return changes


def _next_state(replicas, state: PartitionState, live: frozenset[int], controller_epoch: int,
                unclean: bool, reelect: bool = False) -> PartitionState | None:
    if state.leader in live:
        isr = tuple(b for b in state.isr if b in live)
        if isr == state.isr and not reelect:
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


PREFERRED = 0
UNCLEAN = 1


def elected_on_request(replicas, state: PartitionState, live: frozenset[int], election_type: int,
                       controller_epoch: int) -> tuple[str, PartitionState | None]:
    """ElectLeaders for one partition: ("elected", new state), or the reason nothing changes:
    "not needed" (the preferred replica leads already; for an unclean election, a leader lives),
    "not available" (the preferred replica is dead or out of the ISR; for an unclean election,
    no replica is alive)."""
    replicas = tuple(replicas)
    if election_type == PREFERRED:
        preferred = replicas[0] if replicas else NO_LEADER
        if state.leader == preferred:
            return "not needed", None
        if preferred not in live or preferred not in state.isr:
            return "not available", None
        return "elected", replace(state, leader=preferred, leader_epoch=state.leader_epoch + 1,
                                  controller_epoch=controller_epoch)
    if state.leader in live:
        return "not needed", None
    elected = elect_leader(replicas, state.isr, live, unclean=True)
    if elected is None:
        return "not available", None
    leader, isr = elected
    return "elected", replace(state, leader=leader, leader_epoch=state.leader_epoch + 1, isr=isr,
                              controller_epoch=controller_epoch)


def imbalanced(assignments: Mapping[str, Mapping[int, tuple[int, ...]]],
               states: Mapping[tuple[str, int], PartitionState], live: frozenset[int],
               max_ratio: float) -> list[tuple[str, int]]:
    """The partitions to give back to their preferred replica (auto.leader.rebalance.enable):
    for each live broker whose share of partitions it prefers but does not lead is above
    `max_ratio` (leader.imbalance.per.broker.percentage / 100), those of them where it is in
    the ISR."""
    preferred_of: dict[int, list[tuple[str, int]]] = {}
    for topic, partitions in assignments.items():
        for p, replicas in partitions.items():
            if replicas and (topic, p) in states:
                preferred_of.setdefault(replicas[0], []).append((topic, p))
    out = []
    for broker, tps in preferred_of.items():
        if broker not in live:
            continue
        not_led = [tp for tp in tps if states[tp].leader != broker]
        if tps and len(not_led) / len(tps) > max_ratio:
            out += [tp for tp in not_led if broker in states[tp].isr]
    return sorted(out)
