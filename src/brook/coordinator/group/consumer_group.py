"""A consumer group of the KIP-848 protocol and the replay of its records (Kafka's
``ConsumerGroup`` and ``ConsumerGroupMember``).

The group is what its records in ``__consumer_offsets`` say, nothing more: ``replay`` applies
one record (``consumer_schemas``), live and at a load alike, and the protocol
(``brook.coordinator.group.consumer``) only reads the group to decide which records to write.
It keeps the group epoch, the subscribed topics' metadata, each member's subscription and
current assignment, the target assignment and its epoch, and which member owns each partition
(assigned or pending revocation), the index reconciliation needs.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field, replace

from .assignors import Partition
from .consumer_schemas import (
    ClassicMemberMetadata,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    TopicMetadata,
)
from .reconciliation import MemberAssignment, MemberState

__all__ = ["ConsumerGroup", "ConsumerGroupState", "ConsumerMember", "by_topic", "partitions_of",
           "replay"]

#: The member epochs of a heartbeat that leaves: for good, or a static member's pause.
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    assignment: MemberAssignment = MemberAssignment()
    #: a member that speaks the classic protocol (JoinGroup, SyncGroup) inside the group
    classic: ClassicMemberMetadata | None = None

    @property
    def member_epoch(self) -> int:
        return self.assignment.member_epoch

    def metadata_value(self) -> ConsumerGroupMemberMetadataValue:
        return ConsumerGroupMemberMetadataValue(
            self.instance_id, self.rack_id, self.client_id, self.client_host,
            self.subscribed_topic_names, self.subscribed_topic_regex, self.rebalance_timeout_ms,
            self.server_assignor, self.classic)


@dataclass
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    #: the subscribed topics by name, as last stored (ConsumerGroupPartitionMetadata)
    topics: dict[str, TopicMetadata] = field(default_factory=dict)
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, frozenset[Partition]] = field(default_factory=dict)
    owners: dict[Partition, str] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id

    def copy(self) -> ConsumerGroup:
        """A scratch copy to replay records on (members and assignments are immutable)."""
        return ConsumerGroup(self.group_id, self.group_epoch, self.assignment_epoch,
                             dict(self.topics), dict(self.members), dict(self.target),
                             dict(self.owners), dict(self.static_members))

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for m in self.members.values():
            a = m.assignment
            if a.member_epoch != self.assignment_epoch or a.state != MemberState.STABLE:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def owned_by_other(self, member_id: str):
        owners = self.owners

        def check(partition: Partition) -> bool:
            owner = owners.get(partition)
            return owner is not None and owner != member_id

        return check


def by_topic(partitions: frozenset[Partition]) -> tuple[tuple[uuid.UUID, tuple[int, ...]], ...]:
    """Partitions grouped by topic id as the records and responses carry them, sorted."""
    topics: dict[uuid.UUID, list[int]] = {}
    for topic_id, partition in partitions:
        topics.setdefault(topic_id, []).append(partition)
    return tuple((t, tuple(sorted(ps))) for t, ps in sorted(topics.items(), key=lambda i: str(i[0])))


def partitions_of(topic_partitions) -> frozenset[Partition]:
    return frozenset((t, p) for t, ps in topic_partitions for p in ps)


def current_assignment_value(a: MemberAssignment) -> ConsumerGroupCurrentMemberAssignmentValue:
    return ConsumerGroupCurrentMemberAssignmentValue(
        a.member_epoch, a.previous_member_epoch, int(a.state), by_topic(a.assigned),
        by_topic(a.pending_revocation))


# --- replay -----------------------------------------------------------------------------------


def replay(groups: dict[str, ConsumerGroup], key: object, value: object | None) -> None:
    """Apply one consumer group record to ``groups`` (a record with a value creates its group;
    the group metadata tombstone deletes it)."""
    group_id = key.group  # type: ignore[attr-defined]
    group = groups.get(group_id)
    if group is None:
        if value is None:
            return
        group = groups[group_id] = ConsumerGroup(group_id)
    kind = type(key)
    if kind is ConsumerGroupMetadataKey:
        if value is None:
            del groups[group_id]
        else:
            assert type(value) is ConsumerGroupMetadataValue
            group.group_epoch = value.epoch
    elif kind is ConsumerGroupPartitionMetadataKey:
        group.topics = {} if value is None else {
            t.topic_name: t for t in value.topics}  # type: ignore[attr-defined]
    elif kind is ConsumerGroupMemberMetadataKey:
        _replay_member(group, key.member_id, value)  # type: ignore[attr-defined]
    elif kind is ConsumerGroupTargetAssignmentMetadataKey:
        group.assignment_epoch = 0 if value is None else value.assignment_epoch  # type: ignore
    elif kind is ConsumerGroupTargetAssignmentMemberKey:
        if value is None:
            group.target.pop(key.member_id, None)  # type: ignore[attr-defined]
        else:
            assert type(value) is ConsumerGroupTargetAssignmentMemberValue
            group.target[key.member_id] = partitions_of(  # type: ignore[attr-defined]
                value.topic_partitions)
    elif kind is ConsumerGroupCurrentMemberAssignmentKey:
        _replay_assignment(group, key.member_id, value)  # type: ignore[attr-defined]


def _replay_member(group: ConsumerGroup, member_id: str,
                   value: ConsumerGroupMemberMetadataValue | None) -> None:
    old = group.members.get(member_id)
    if value is None:
        if old is not None:
            _release(group, old)
            del group.members[member_id]
            if old.instance_id is not None and group.static_members.get(old.instance_id) == member_id:
                del group.static_members[old.instance_id]
        return
    member = ConsumerMember(
        member_id, value.instance_id, value.rack_id, value.client_id, value.client_host,
        tuple(value.subscribed_topic_names), value.subscribed_topic_regex,
        value.rebalance_timeout_ms, value.server_assignor,
        old.assignment if old is not None else MemberAssignment(),
        value.classic_member_metadata)
    group.members[member_id] = member
    if value.instance_id is not None:
        group.static_members[value.instance_id] = member_id


def _replay_assignment(group: ConsumerGroup, member_id: str,
                       value: ConsumerGroupCurrentMemberAssignmentValue | None) -> None:
    member = group.members.get(member_id)
    if member is None:  # Kafka writes a member's metadata first; nothing to attach it to
        if value is None:
            return
        member = ConsumerMember(member_id)
    _release(group, member)
    if value is None:
        assignment = MemberAssignment()
    else:
        state = value.state if value.state in MemberState._value2member_map_ else MemberState.UNKNOWN
        assignment = MemberAssignment(value.member_epoch, value.previous_member_epoch,
                                      MemberState(state),
                                      partitions_of(value.assigned_partitions),
                                      partitions_of(value.partitions_pending_revocation))
    group.members[member_id] = replace(member, assignment=assignment)
    for p in assignment.assigned:
        group.owners[p] = member_id
    for p in assignment.pending_revocation:
        group.owners[p] = member_id


def _release(group: ConsumerGroup, member: ConsumerMember) -> None:
    owners = group.owners
    for p in member.assignment.assigned | member.assignment.pending_revocation:
        if owners.get(p) == member.member_id:
            del owners[p]
