"""Online migration between the two group protocols (``group.consumer.migration.policy``), as
Kafka 4's coordinator does it.

- **Upgrade**: a ConsumerGroupHeartbeat joining a classic group of the consumer protocol type
  that has members converts it: the classic group's metadata is tombstoned and its members
  become classic members of a consumer group, at the classic generation as group epoch, member
  epochs and target assignment epoch, each with its last assignment as target and current
  assignment (Stable); the joining member's heartbeat then bumps the epoch as any join does.
- **Downgrade**: when the last member of the new protocol leaves (or is fenced) and classic
  members remain, the consumer group's records are tombstoned (the leaving member's with them,
  no epoch bump) and a classic group is written with the remaining members (their supported
  protocols, their current assignments), at the group epoch as generation; it then prepares
  a rebalance, so they all rejoin.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..common.result import CoordinatorRecord
from .classic_group import ClassicGroup, GroupMember, GroupState
from .consumer_group import ConsumerGroup, by_topic, current_assignment_value
from .consumer_protocol import (
    PROTOCOL_TYPE,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    protocol_version,
    MalformedProtocol,
)
from .consumer_schemas import (
    ClassicMemberMetadata,
    ConsumerGroupCurrentMemberAssignmentKey,
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
)
from .reconciliation import MemberAssignment, MemberState
from .schemas import GroupMetadataKey

__all__ = ["MalformedProtocol", "classic_group_of", "consumer_group_records", "group_records",
           "tombstones"]


def consumer_group_records(classic: ClassicGroup,
                           topics: Mapping[str, tuple[object, int]]) -> list[CoordinatorRecord]:
    """The records that convert ``classic`` into a consumer group (Kafka's
    ``convertToConsumerGroup``), in Kafka's order; MalformedProtocol when a member's
    subscription or assignment cannot be read."""
    gid, generation = classic.group_id, classic.generation
    records = [CoordinatorRecord(GroupMetadataKey(gid), None)]
    members = []
    for m in classic.members.values():
        metadata = m.metadata(classic.protocol) if classic.protocol else m.protocols[0][1]
        subscription = decode_subscription(metadata)
        assigned = frozenset((topics[t][0], p) for t, ps in decode_assignment(m.assignment).items()
                             if t in topics for p in ps)
        members.append((m, subscription, assigned))
    for m, subscription, _ in members:
        records.append(CoordinatorRecord(
            ConsumerGroupMemberMetadataKey(gid, m.member_id),
            ConsumerGroupMemberMetadataValue(
                m.group_instance_id, subscription.rack_id, m.client_id, m.client_host,
                tuple(subscription.topics), None, m.rebalance_timeout_ms, None,
                ClassicMemberMetadata(m.session_timeout_ms, tuple(m.protocols)))))
    records.append(CoordinatorRecord(ConsumerGroupMetadataKey(gid),
                                     ConsumerGroupMetadataValue(generation)))
    for m, _, assigned in members:
        records.append(CoordinatorRecord(
            ConsumerGroupTargetAssignmentMemberKey(gid, m.member_id),
            ConsumerGroupTargetAssignmentMemberValue(by_topic(assigned))))
    records.append(CoordinatorRecord(ConsumerGroupTargetAssignmentMetadataKey(gid),
                                     ConsumerGroupTargetAssignmentMetadataValue(generation)))
    for m, _, assigned in members:
        records.append(CoordinatorRecord(
            ConsumerGroupCurrentMemberAssignmentKey(gid, m.member_id),
            current_assignment_value(MemberAssignment(generation, generation,
                                                      MemberState.STABLE, assigned))))
    return records


def tombstones(group: ConsumerGroup) -> list[CoordinatorRecord]:
    """Every record of the group, tombstoned (Kafka's ``createGroupTombstoneRecords``)."""
    gid = group.group_id
    records = []
    for member_id in group.members:
        records.append(CoordinatorRecord(ConsumerGroupCurrentMemberAssignmentKey(gid, member_id),
                                         None))
    for member_id in group.target:
        records.append(CoordinatorRecord(ConsumerGroupTargetAssignmentMemberKey(gid, member_id),
                                         None))
    records.append(CoordinatorRecord(ConsumerGroupTargetAssignmentMetadataKey(gid), None))
    for member_id in group.members:
        records.append(CoordinatorRecord(ConsumerGroupMemberMetadataKey(gid, member_id), None))
    records.append(CoordinatorRecord(ConsumerGroupPartitionMetadataKey(gid), None))
    records.append(CoordinatorRecord(ConsumerGroupMetadataKey(gid), None))
    return records


def group_records(group: ConsumerGroup) -> list[CoordinatorRecord]:
    """Records that make ``group`` again from nothing, replayed after ``tombstones`` of what is
    there now (a failed write rolled back): its members, subscribed topics, epoch, target
    assignment and each member's current assignment."""
    gid = group.group_id
    records = [CoordinatorRecord(ConsumerGroupMemberMetadataKey(gid, m.member_id),
                                 m.metadata_value()) for m in group.members.values()]
    if group.topics:
        records.append(CoordinatorRecord(
            ConsumerGroupPartitionMetadataKey(gid),
            ConsumerGroupPartitionMetadataValue(tuple(group.topics[n]
                                                      for n in sorted(group.topics)))))
    records.append(CoordinatorRecord(ConsumerGroupMetadataKey(gid),
                                     ConsumerGroupMetadataValue(group.group_epoch)))
    for member_id, partitions in group.target.items():
        records.append(CoordinatorRecord(ConsumerGroupTargetAssignmentMemberKey(gid, member_id),
                                         ConsumerGroupTargetAssignmentMemberValue(
                                             by_topic(partitions))))
    records.append(CoordinatorRecord(ConsumerGroupTargetAssignmentMetadataKey(gid),
                                     ConsumerGroupTargetAssignmentMetadataValue(
                                         group.assignment_epoch)))
    for m in group.members.values():
        records.append(CoordinatorRecord(ConsumerGroupCurrentMemberAssignmentKey(gid, m.member_id),
                                         current_assignment_value(m.assignment)))
    return records


def classic_group_of(group: ConsumerGroup, generation: int, now: int) -> ClassicGroup:
    """The classic group of a consumer group whose members all speak the classic protocol
    (Kafka's ``ClassicGroup.fromConsumerGroup``): Stable at the group epoch, each member with
    its supported protocols and its current assignment in its protocol's version."""
    names = {t.topic_id: t.topic_name for t in group.topics.values()}
    classic = ClassicGroup(group.group_id, now, state=GroupState.STABLE)
    classic.generation = generation
    classic.protocol_type = PROTOCOL_TYPE
    for m in group.members.values():
        assert m.classic is not None
        protocols = tuple(m.classic.supported_protocols)
        partitions: dict[str, list[int]] = {}
        for topic_id, p in m.assignment.assigned:
            if topic_id in names:
                partitions.setdefault(names[topic_id], []).append(p)
        try:
            version = protocol_version(protocols[0][1])
        except MalformedProtocol:
            version = 0
        classic.add(GroupMember(
            m.member_id, m.instance_id, m.client_id, m.client_host,
            m.rebalance_timeout_ms if m.rebalance_timeout_ms > 0 else m.classic.session_timeout_ms,
            m.classic.session_timeout_ms, PROTOCOL_TYPE, protocols,
            encode_assignment({t: tuple(ps) for t, ps in partitions.items()}, version)))
    classic.protocol = classic.select_protocol()
    return classic
