"""The classic consumer group: its states, its members and what is stored of it.

States are data: ``GroupState`` names each state and ``VALID_PREVIOUS_STATES`` says from which
states a group may move into it; ``ClassicGroup.transition_to`` refuses anything else.

``ClassicGroup`` holds the members, the generation, the chosen protocol and the leader, and
converts to and from the ``GroupMetadataValue`` stored in ``__consumer_offsets`` after a sync.
The coordinator (``brook.coordinator.group.classic``) decides what happens; this module only keeps
the bookkeeping consistent (supported-protocol counts, static members, leader re-election).
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from brook.coordinator.group.schemas import GroupMetadataValue, MemberMetadata


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
        SyncGroup requests are parked, heartbeats are answered normally (members may heartbeat
        between their JoinGroup and SyncGroup). Members that send no SyncGroup within the
        rebalance timeout are removed. Moves to Stable when the leader's assignment is stored,
        back to PreparingRebalance when a member joins, changes its metadata, leaves or fails,
        or when storing the assignment fails.""",
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
        JoinGroup, SyncGroup, Heartbeat, LeaveGroup and offset commits get
        COORDINATOR_NOT_AVAILABLE, so the client looks the coordinator up again and retries. A
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


#: Protocols a member supports, in its order of preference: (name, metadata) pairs.
Protocols = tuple[tuple[str, bytes], ...]


@dataclass(eq=False, slots=True)  # slots: a loaded group's members, made by the thousand
class GroupMember:
    """One member of a classic group, as the coordinator knows it."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    assignment: bytes = b""
    #: A JoinGroup of this member is parked until the join phase ends.
    awaiting_join: bool = False
    #: A SyncGroup of this member is parked until the leader's assignment is stored.
    awaiting_sync: bool = False
    #: Joined during the current rebalance and not yet through it (expires on the new-member
    #: timeout even while its JoinGroup is parked).
    is_new: bool = False

    @property
    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str) -> bytes:
        """The member's metadata for ``protocol``; KeyError when it does not support it."""
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise KeyError(f"member {self.member_id} does not support protocol {protocol!r}")

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among ``candidates``."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def matches(self, protocols: Protocols) -> bool:
        """Whether ``protocols`` (names, metadata and order) are the member's own."""
        return tuple(protocols) == tuple(self.protocols)

    def heartbeat_satisfied(self) -> bool:
        """A member parked in a rebalance needs no heartbeat, unless it is new to the group."""
        return not self.is_new and (self.awaiting_join or self.awaiting_sync)


class ClassicGroup:
    """One classic consumer group's in-memory state.

    Members keep the order they joined in: the first is the leader, and when the leader leaves
    the earliest remaining member takes over.
    """

    def __init__(self, group_id: str, now: int, state: GroupState = GroupState.EMPTY) -> None:
        self.group_id = group_id
        self.state = state
        self.previous_state = GroupState.DEAD
        self.state_timestamp = now
        self.generation = 0
        self.protocol_type: str | None = None
        self.protocol: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, GroupMember] = {}
        #: group.instance.id -> member id of the static members.
        self.static_members: dict[str, str] = {}
        #: Member ids handed out with MEMBER_ID_REQUIRED, not yet joined with them (KIP-394).
        self.pending_members: set[str] = set()
        #: Members whose SyncGroup the current generation still waits for.
        self.pending_sync: set[str] = set()
        #: How many members support each protocol name.
        self.protocol_counts: Counter[str] = Counter()

    # --- states -----------------------------------------------------------------------------

    def transition_to(self, target: GroupState, now: int) -> None:
        """Move to ``target`` (stamping the time), or raise IllegalStateTransition."""
        check_transition(self.state, target)
        self.previous_state = self.state
        self.state = target
        self.state_timestamp = now

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS_STATES[GroupState.PREPARING_REBALANCE]

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    # --- members ----------------------------------------------------------------------------

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def member(self, member_id: str) -> GroupMember:
        return self.members[member_id]

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id is not None and self.leader_id == member_id

    def add(self, member: GroupMember) -> None:
        """Add a member; the first member fixes the group's protocol type and leads it."""
        if member.member_id in self.members:
            raise ValueError(f"member {member.member_id} is already in group {self.group_id}")
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise ValueError(
                    f"static member {member.group_instance_id} is already in group {self.group_id}"
                )
        if not self.members:
            self.protocol_type = member.protocol_type
        if member.protocol_type != self.protocol_type:
            raise ValueError("the member's protocol type is not the group's")
        names = member.protocol_names
        if not self.supports_protocols(member.protocol_type, names):
            raise ValueError("the group supports none of the member's protocols")
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        counts = self.protocol_counts
        for name in names:  # (Counter.update's own checks cost more, for a name or two)
            counts[name] += 1
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> GroupMember | None:
        """Remove a member; a leaving leader is replaced by the earliest remaining member."""
        removed = self.members.pop(member_id, None)
        if removed is not None:
            self.protocol_counts.subtract(removed.protocol_names)
            self.protocol_counts += Counter()  # drop the zero counts
            if removed.group_instance_id is not None:
                self.static_members.pop(removed.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_members.discard(member_id)
        self.pending_sync.discard(member_id)
        return removed

    def update_member(
        self,
        member: GroupMember,
        protocols: Protocols,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
    ) -> None:
        """A known member rejoined: take its new protocols and timeouts."""
        self.protocol_counts.subtract(member.protocol_names)
        member.protocols = tuple(protocols)
        self.protocol_counts.update(member.protocol_names)
        self.protocol_counts += Counter()
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms

    def replace_static_member(
        self, group_instance_id: str, old_member_id: str, new_member_id: str
    ) -> GroupMember:
        """A static member came back with a new member id: it takes the old one's place
        (assignment, leadership) and the old id is gone. Returns the new
        member; the old one's parked replies are the coordinator's to fence beforehand."""
        if self.static_members.get(group_instance_id) != old_member_id:
            raise ValueError(f"{old_member_id} is not static member {group_instance_id}")
        if new_member_id in self.members:
            raise ValueError(f"member {new_member_id} is already in group {self.group_id}")
        old = self.members[old_member_id]
        new = GroupMember(
            member_id=new_member_id,
            group_instance_id=old.group_instance_id,
            client_id=old.client_id,
            client_host=old.client_host,
            rebalance_timeout_ms=old.rebalance_timeout_ms,
            session_timeout_ms=old.session_timeout_ms,
            protocol_type=old.protocol_type,
            protocols=old.protocols,
            assignment=old.assignment,
        )
        del self.members[old_member_id]
        self.members[new_member_id] = new
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        self.static_members[group_instance_id] = new_member_id
        self.pending_sync.discard(old_member_id)
        return new

    def restore_order(self, member_ids: list[str]) -> None:
        """Put the members back in the join order ``member_ids`` (the same ids), as before an
        undone change."""
        if sorted(member_ids) != sorted(self.members):
            raise ValueError(f"{member_ids} are not the members of group {self.group_id}")
        self.members = {mid: self.members[mid] for mid in member_ids}

    def static_member_id(self, group_instance_id: str) -> str | None:
        return self.static_members.get(group_instance_id)

    def is_static_member_fenced(self, group_instance_id: str, member_id: str) -> bool:
        """Another member id holds this group.instance.id."""
        existing = self.static_members.get(group_instance_id)
        return existing is not None and existing != member_id

    def validate_member(self, member_id: str, group_instance_id: str | None) -> ErrorCode:
        """NONE, UNKNOWN_MEMBER_ID or FENCED_INSTANCE_ID for a request naming this member."""
        if group_instance_id is not None:
            existing = self.static_members.get(group_instance_id)
            if existing is None:
                return ErrorCode.unknown_member_id
            if existing != member_id:
                return ErrorCode.fenced_instance_id
        if member_id not in self.members:
            return ErrorCode.unknown_member_id
        return ErrorCode.none

    # --- the join phase ---------------------------------------------------------------------

    def awaiting_join_count(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join)

    def has_all_members_joined(self) -> bool:
        """Every member's JoinGroup is parked and no handed-out member id is still to come."""
        return (
            all(m.awaiting_join for m in self.members.values()) and not self.pending_members
        )

    def not_yet_rejoined(self) -> list[GroupMember]:
        return [m for m in self.members.values() if not m.awaiting_join]

    def rebalance_timeout_ms(self) -> int:
        """The longest rebalance timeout among the members: how long the join phase may last."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def elect_joined_leader(self) -> bool:
        """If the leader has not rejoined, make the first member that has the leader.
        False when no member has rejoined (or there is no leader)."""
        if self.leader_id is None:
            return False
        if self.members[self.leader_id].awaiting_join:
            return True
        for member in self.members.values():
            if member.awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    # --- protocols --------------------------------------------------------------------------

    def candidate_protocols(self) -> set[str]:
        """The protocols every member supports."""
        size = len(self.members)
        return {name for name, count in self.protocol_counts.items() if count == size}

    def supports_protocols(self, protocol_type: str, protocol_names: list[str]) -> bool:
        """Whether a member with this protocol type and these protocols could join: an Empty
        group takes any non-empty type and list; otherwise the type must be the group's and one
        of the protocols supported by every member."""
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(protocol_names)
        size = len(self.members)
        return protocol_type == self.protocol_type and any(
            self.protocol_counts.get(name, 0) == size for name in protocol_names
        )

    def select_protocol(self) -> str:
        """Each member votes for its most preferred protocol among those every member supports;
        the most votes win, a tie going to the protocol that got its first vote earliest (in
        join order)."""
        if not self.members:
            raise ValueError(f"cannot select a protocol for the empty group {self.group_id}")
        candidates = self.candidate_protocols()
        votes = Counter(member.vote(candidates) for member in self.members.values())
        return max(votes, key=lambda name: votes[name])  # first of the most voted, in order

    def init_next_generation(self, now: int) -> None:
        """End the join phase: a new generation, its protocol chosen, and CompletingRebalance
        (or Empty when nobody is left)."""
        self.generation += 1
        if self.members:
            self.protocol = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now)
        else:
            self.protocol = None
            self.transition_to(GroupState.EMPTY, now)
        self.pending_sync.clear()

    # --- stored form ------------------------------------------------------------------------

    def to_metadata_value(self, assignments: dict[str, bytes] | None = None) -> GroupMetadataValue:
        """What is stored of the group: generation, protocol, leader, state timestamp, and each
        member with its metadata for the chosen protocol and its assignment (from
        ``assignments`` when given, else the member's current one)."""
        members = []
        for member in self.members.values():
            if self.protocol is None:
                raise ValueError(f"group {self.group_id} has members but no protocol")
            assignment = (
                member.assignment if assignments is None else assignments.get(member.member_id)
            )
            if assignment is None:
                raise ValueError(f"member {member.member_id} has no assignment")
            members.append(
                MemberMetadata(
                    member_id=member.member_id,
                    group_instance_id=member.group_instance_id,
                    client_id=member.client_id,
                    client_host=member.client_host,
                    rebalance_timeout=member.rebalance_timeout_ms,
                    session_timeout=member.session_timeout_ms,
                    subscription=member.metadata(self.protocol),
                    assignment=assignment,
                )
            )
        return GroupMetadataValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation,
            protocol=self.protocol,
            leader=self.leader_id,
            current_state_timestamp=self.state_timestamp,
            members=tuple(members),
        )

    @classmethod
    def from_metadata_value(
        cls, group_id: str, value: GroupMetadataValue, now: int
    ) -> ClassicGroup:
        """The group as loaded from its stored metadata: Stable with its members, or Empty.
        Each member supports just the chosen protocol, with its stored subscription."""
        state = GroupState.STABLE if value.members else GroupState.EMPTY
        timestamp = value.current_state_timestamp
        group = cls(group_id, now if timestamp == -1 else timestamp, state=state)
        group.generation = value.generation
        group.protocol_type = value.protocol_type or None
        group.protocol = value.protocol
        group.leader_id = value.leader
        for stored in value.members:
            member = GroupMember(
                member_id=stored.member_id,
                group_instance_id=stored.group_instance_id,
                client_id=stored.client_id,
                client_host=stored.client_host,
                # Old versions stored no rebalance timeout (-1): the session timeout stands in.
                rebalance_timeout_ms=(
                    stored.session_timeout
                    if stored.rebalance_timeout == -1
                    else stored.rebalance_timeout
                ),
                session_timeout_ms=stored.session_timeout,
                protocol_type=value.protocol_type,
                protocols=((value.protocol or "", stored.subscription),),
                assignment=stored.assignment,
            )
            group.add(member)
        # add() elects the first member when there is no leader; the stored leader stands.
        group.leader_id = value.leader
        return group
