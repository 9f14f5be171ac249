"""Moving a partition's replicas (KIP-455, as Kafka's ZooKeeper controller does it), as pure
steps the controller takes:

1. `begin`: the replicas become the target's followed by the original's that are not in the
   target (RS = TRS + ORS), with the ones being added and removed noted; the new replicas are
   told to follow and start copying.
2. `complete` once every target replica is in the ISR: the leader moves to a target replica if
   it is not one, the removed replicas leave the ISR (a new leader epoch either way), and the
   assignment becomes the target; the removed replicas are told to stop and delete.
A cancellation goes back to the original replicas the same way."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..cluster.zk_data import PartitionState


@dataclass(frozen=True, slots=True)
class Moving:
    replicas: tuple[int, ...]  # RS: the target first, then what is being removed
    adding: tuple[int, ...]
    removing: tuple[int, ...]

    @property
    def target(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def original(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.adding)


def begin(original: tuple[int, ...], target: tuple[int, ...]) -> Moving:
    return Moving(tuple(target) + tuple(r for r in original if r not in target),
                  tuple(r for r in target if r not in original),
                  tuple(r for r in original if r not in target))


def ready(state: PartitionState, moving: Moving) -> bool:
    """Every target replica is in sync."""
    return all(r in state.isr for r in moving.target)


def complete(state: PartitionState, moving: Moving, live: frozenset[int],
             controller_epoch: int) -> PartitionState | None:
    """The partition's state once the target replicas alone are its replicas; None if no
    target replica is alive and in sync to lead (the reassignment waits)."""
    target = moving.target
    isr = tuple(r for r in state.isr if r in target)
    leader = state.leader
    if leader not in target or leader not in live:
        leader = next((r for r in target if r in live and r in isr), -1)
        if leader < 0:
            return None
    return replace(state, leader=leader, leader_epoch=state.leader_epoch + 1, isr=isr,
                   controller_epoch=controller_epoch)
