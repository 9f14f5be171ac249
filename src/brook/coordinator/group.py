"""The classic consumer group: its states, its members and what is stored of it.

States are data: ``GroupState`` names each state and ``VALID_PREVIOUS_STATES`` says from which
states a group may move into it; ``ClassicGroup.transition_to`` refuses anything else.
"""

from __future__ import annotations

import enum


class IllegalStateTransition(Exception):
    """A group was asked to move to a state its current state does not lead to."""


class GroupState(enum.Enum):
    """The states of a classic group, with the names Kafka reports (DescribeGroups, ListGroups).

    Each member carries its own docstring: what the group does in that state and what moves it on.
    """

    def __new__(cls, name: str, doc: str) -> GroupState:
        member = object.__new__(cls)
        member._value_ = name
        member.__doc__ = doc
        return member

    EMPTY = (
        "Empty",
        """No members. The group lingers, holding committed offsets, until they expire; groups that
        only commit offsets (no JoinGroup) live here. A JoinGroup from a new member starts a
        rebalance; SyncGroup, Heartbeat and LeaveGroup get UNKNOWN_MEMBER_ID. Moves to Dead when
        its last offsets expire or it is deleted or unloaded.""",
    )

    PREPARING_REBALANCE = (
        "PreparingRebalance",
        """A rebalance is under way: JoinGroup requests are parked until every known member has
        rejoined or the rebalance timeout passes. Heartbeat and SyncGroup get
        REBALANCE_IN_PROGRESS, LeaveGroup removes the member. Moves to CompletingRebalance when
        the join phase ends with members, to Empty when all members have gone.""",
    )

    COMPLETING_REBALANCE = (
        "CompletingRebalance",
        """The join phase is over and the group waits for the leader's assignment: followers'
        SyncGroup requests are parked, heartbeats get REBALANCE_IN_PROGRESS. Moves to Stable when
        the leader's assignment is stored, back to PreparingRebalance when a member joins,
        changes its metadata, leaves or fails.""",
    )

    STABLE = (
        "Stable",
        """Every member has its assignment. Heartbeats are answered normally, SyncGroup returns the
        current assignment, a follower rejoining with unchanged metadata gets the current
        generation. A member failing or leaving, the leader rejoining or a follower's new
        metadata starts a rebalance.""",
    )

    DEAD = (
        "Dead",
        """The group has no members and its metadata is being removed (or its partition moved away).
        Requests from members get UNKNOWN_MEMBER_ID (offset commits COORDINATOR_NOT_AVAILABLE). A
        final state: it leads nowhere but to itself.""",
    )

    def __str__(self) -> str:
        return self.value


#: For each state, the states a group may be in just before it. Kafka's table, row for row.
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(
        {
            GroupState.STABLE,
            GroupState.PREPARING_REBALANCE,
            GroupState.COMPLETING_REBALANCE,
            GroupState.EMPTY,
            GroupState.DEAD,
        }
    ),
}


def check_transition(current: GroupState, target: GroupState) -> None:
    """Raise IllegalStateTransition unless a group in ``current`` may move to ``target``."""
    if current not in VALID_PREVIOUS_STATES[target]:
        allowed = ", ".join(sorted(str(s) for s in VALID_PREVIOUS_STATES[target]))
        raise IllegalStateTransition(
            f"cannot move from {current} to {target}: {target} is reached only from {allowed}"
        )


class ClassicGroup:
    """One classic consumer group's in-memory state."""

    def __init__(self, group_id: str, now: int, state: GroupState = GroupState.EMPTY) -> None:
        self.group_id = group_id
        self.state = state
        self.previous_state = GroupState.DEAD
        self.state_timestamp = now

    def transition_to(self, target: GroupState, now: int) -> None:
        """Move to ``target`` (stamping the time), or raise IllegalStateTransition."""
        check_transition(self.state, target)
        self.previous_state = self.state
        self.state = target
        self.state_timestamp = now

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS_STATES[GroupState.PREPARING_REBALANCE]
