"""How a consumer group member moves from its current assignment to its target (Kafka's
``CurrentAssignmentBuilder``), pure.

A member owns its *assigned* partitions and those *pending revocation*; a partition is never
owned by two members. Given the target assignment (and its epoch) and the partitions the member
says it owns in this heartbeat (None: it did not say), the member's next state is:

* partitions it holds that the target takes away must be revoked first: while the member still
  owns any of them it stays at its epoch in ``UNREVOKED_PARTITIONS``, told to keep only the rest;
* once they are revoked (or if there were none), it moves to the target epoch and gets the new
  partitions that nobody else owns; those another member still owns are withheld
  (``UNRELEASED_PARTITIONS``) until that member has revoked them;
* with everything in place the member is ``STABLE`` at the target epoch.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, replace

from .assignors import Partition

__all__ = ["MemberAssignment", "MemberState", "reconcile"]


class MemberState(enum.IntEnum):
    """Kafka's MemberState ids, as stored in ConsumerGroupCurrentMemberAssignmentValue."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 3


@dataclass(frozen=True)
class MemberAssignment:
    """A member's current assignment: its epochs, its state, and what it owns."""

    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: frozenset[Partition] = frozenset()
    pending_revocation: frozenset[Partition] = frozenset()


def reconcile(current: MemberAssignment, target_epoch: int, target: frozenset[Partition],
              owned: frozenset[Partition] | None,
              owned_by_other: Callable[[Partition], bool]) -> MemberAssignment:
    """The member's next assignment. ``owned_by_other(p)``: another member owns ``p``."""
    state = current.state
    if state == MemberState.UNREVOKED_PARTITIONS:
        if _still_owns(owned, current.pending_revocation):
            return current
    elif state == MemberState.STABLE and current.member_epoch == target_epoch:
        return current
    return _next(current, target_epoch, target, owned, owned_by_other)


def _still_owns(owned: frozenset[Partition] | None, revoking: frozenset[Partition]) -> bool:
    """Whether the member may still own some of ``revoking``: it did not say what it owns, or
    it said so."""
    if not revoking:
        return False
    return owned is None or not owned.isdisjoint(revoking)


def _next(current: MemberAssignment, target_epoch: int, target: frozenset[Partition],
          owned: frozenset[Partition] | None,
          owned_by_other: Callable[[Partition], bool]) -> MemberAssignment:
    kept = current.assigned & target
    revoking = current.assigned - target
    if _still_owns(owned, revoking):
        # revoke first: no new partition, no new epoch, until the member has let them go
        return replace(current, state=MemberState.UNREVOKED_PARTITIONS, assigned=kept,
                       pending_revocation=revoking)
    wanted = target - current.assigned
    free = frozenset(p for p in wanted if not owned_by_other(p))
    state = MemberState.UNRELEASED_PARTITIONS if len(free) < len(wanted) else MemberState.STABLE
    epoch = current.member_epoch
    return MemberAssignment(
        member_epoch=target_epoch,
        previous_member_epoch=epoch if epoch != target_epoch else current.previous_member_epoch,
        state=state, assigned=kept | free, pending_revocation=frozenset())
