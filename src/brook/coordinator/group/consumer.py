"""The consumer group protocol of KIP-848 on one ``__consumer_offsets`` partition, sans-I/O
(the consumer group half of Kafka's ``GroupMetadataManager``).

A ConsumerGroupHeartbeat is answered by records: the member's metadata when its subscription
or client changed, a new group epoch when the group's membership or subscriptions changed, the
target assignment (from the group's server-side assignor, ``assignors``) when its epoch is
behind the group's, and the member's next current assignment (``reconciliation``). The
operation computes them on a scratch copy of the group, replaying each record as it goes (the
same ``consumer_group.replay`` the runtime then applies to the real group, live and at a load),
so what the response says is exactly what the records make of the group.

Timers: a member that does not heartbeat within ``group.consumer.session.timeout.ms`` is
fenced (removed, the group epoch bumped); so is one that does not revoke partitions within its
rebalance timeout. A static member that leaves with epoch -2 keeps its assignment until its
session times out, so that the same ``group.instance.id`` can take it back.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from kio.schema.errors import ErrorCode

from ..common.result import CoordinatorRecord, CoordinatorResult
from ..common.timer import Timers
from .assignors import ASSIGNORS, MemberSpec, Partition
from .consumer_group import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerGroup,
    ConsumerMember,
    by_topic,
    current_assignment_value,
    replay,
)
from .consumer_schemas import (
    ClassicMemberMetadata,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
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
from .classic import (
    Heartbeat,
    HeartbeatResponse,
    JoinGroup,
    JoinGroupResponse,
    LeaveGroup,
    LeaveGroupResponse,
    SyncGroup,
    SyncGroupResponse,
)
from .consumer_protocol import (
    PROTOCOL_TYPE,
    MalformedProtocol,
    decode_subscription,
    encode_assignment,
    protocol_version,
)
from .reconciliation import MemberAssignment, MemberState, reconcile
from .topic_regex import InvalidRegex, compile_regex

__all__ = ["ConsumerGroupConfig", "ConsumerGroupCoordinator", "ConsumerHeartbeat",
           "ConsumerHeartbeatResponse", "TopicsImage"]

#: What the broker knows of its topics when a heartbeat runs: name -> (topic id, partitions).
TopicsImage = Mapping[str, tuple[uuid.UUID, int]]


@dataclass(frozen=True)
class ConsumerGroupConfig:
    """Kafka's broker settings of consumer groups, with Kafka's defaults."""

    session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    max_size: int = 2**31 - 1  # group.consumer.max.size
    assignors: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors
    #: group.consumer.migration.policy: bidirectional, upgrade, downgrade or disabled
    migration_policy: str = "bidirectional"

    @property
    def upgrade_enabled(self) -> bool:
        return self.migration_policy in ("bidirectional", "upgrade")

    @property
    def downgrade_enabled(self) -> bool:
        return self.migration_policy in ("bidirectional", "downgrade")


@dataclass(frozen=True)
class ConsumerHeartbeat:
    """A ConsumerGroupHeartbeat; None for a field the member did not send (unchanged)."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: frozenset[Partition] | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True)
class ConsumerHeartbeatResponse:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: tuple[tuple[uuid.UUID, tuple[int, ...]], ...] | None = None


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _record(key, value) -> CoordinatorRecord:
    return CoordinatorRecord(key, value)


class _Writer:
    """Records of one operation, each replayed on the scratch group as it is added."""

    def __init__(self, scratch: dict[str, ConsumerGroup]) -> None:
        self.scratch = scratch
        self.records: list[CoordinatorRecord] = []

    def add(self, key, value) -> None:
        self.records.append(_record(key, value))
        replay(self.scratch, key, value)


class ConsumerGroupCoordinator:
    """The consumer groups of one offsets partition."""

    def __init__(self, config: ConsumerGroupConfig | None = None,
                 new_member_id: Callable[[], str] = lambda: str(uuid.uuid4())) -> None:
        self.config = config or ConsumerGroupConfig()
        self.groups: dict[str, ConsumerGroup] = {}
        self.timers: Timers[CoordinatorResult] = Timers()
        self._new_member_id = new_member_id
        #: metrics: group epoch bumps, and members moved to a new epoch (counted when decided)
        self.rebalances = 0
        self.reconciliations = 0
        #: the shard's online downgrade: given a group id and the records that fence its last
        #: member of the new protocol, the result that also makes it a classic group (None:
        #: it stays a consumer group)
        self.downgrade: Callable[[str, list[CoordinatorRecord], int],
                                 CoordinatorResult | None] = lambda g, r, n: None

    # --- replay -----------------------------------------------------------------------------

    def replay(self, key: object, value: object | None) -> None:
        replay(self.groups, key, value)

    def loaded(self, now: int) -> None:
        """After a load: every member gets a full session to heartbeat to this coordinator,
        and one asked to revoke partitions its rebalance timeout to do it."""
        for group in self.groups.values():
            for member in group.members.values():
                self._schedule_session(group.group_id, member.member_id, now,
                                       member.classic.session_timeout_ms
                                       if member.classic is not None else None)
                self._schedule_revocation(group.group_id, member, MemberAssignment(),
                                          member.assignment, now)

    # --- the heartbeat ----------------------------------------------------------------------

    def heartbeat(self, req: ConsumerHeartbeat, topics: TopicsImage, now: int,
                  classic_group_exists: bool = False,
                  upgrade: list[CoordinatorRecord] | None = None) -> CoordinatorResult:
        """A ConsumerGroupHeartbeat; the response is a ``ConsumerHeartbeatResponse``.
        ``classic_group_exists``: a classic group with members has the id (not ours).
        ``upgrade``: the records that convert the classic group of the id into a consumer
        group (online upgrade), written before the heartbeat's own when it joins."""
        try:
            self._validate(req)
            if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                return self._leave(req, now)
            if upgrade is not None and req.member_epoch == 0:
                return self._heartbeat(req, topics, now, prelude=upgrade)
            if classic_group_exists:
                raise _Refused(ErrorCode.group_id_not_found,
                               f"Group {req.group_id} is not a consumer group.")
            return self._heartbeat(req, topics, now)
        except _Refused as refused:
            return CoordinatorResult(response=ConsumerHeartbeatResponse(
                refused.code, str(refused) or None, req.member_id or None))

    def _validate(self, req: ConsumerHeartbeat) -> None:
        if not req.group_id:
            raise _Refused(ErrorCode.invalid_request, "GroupId can't be empty.")
        if req.instance_id is not None and not req.instance_id:
            raise _Refused(ErrorCode.invalid_request, "InstanceId can't be empty.")
        if req.member_epoch == 0:
            if req.rebalance_timeout_ms == -1:
                raise _Refused(ErrorCode.invalid_request,
                               "RebalanceTimeoutMs must be provided in first request.")
            if req.owned:
                raise _Refused(ErrorCode.invalid_request,
                               "TopicPartitions must be empty when (re-)joining.")
            if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
                raise _Refused(ErrorCode.invalid_request, "SubscribedTopicNames or "
                               "SubscribedTopicRegex must be set in first request.")
        elif req.member_epoch == STATIC_LEAVE_EPOCH:
            if not req.member_id:
                raise _Refused(ErrorCode.invalid_request, "MemberId can't be empty.")
        elif req.member_epoch > 0 or req.member_epoch == LEAVE_EPOCH:
            if not req.member_id:
                raise _Refused(ErrorCode.invalid_request, "MemberId can't be empty.")
        else:
            raise _Refused(ErrorCode.invalid_request,
                           f"MemberEpoch {req.member_epoch} is invalid.")
        if req.server_assignor is not None and req.server_assignor not in self.config.assignors:
            raise _Refused(ErrorCode.unsupported_assignor,
                           f"ServerAssignor {req.server_assignor} is not supported. Supported "
                           f"assignors: {', '.join(self.config.assignors)}.")
        if req.subscribed_topic_regex:
            try:
                compile_regex(req.subscribed_topic_regex)
            except InvalidRegex as e:
                raise _Refused(ErrorCode.invalid_regular_expression, str(e)) from None

    def _heartbeat(self, req: ConsumerHeartbeat, topics: TopicsImage, now: int,
                   prelude: list[CoordinatorRecord] = (),  # type: ignore[assignment]
                   classic: ClassicMemberMetadata | None = None) -> CoordinatorResult:
        """A member's heartbeat (or a classic member's JoinGroup, with ``classic``), after the
        ``prelude`` records (an upgrade's) are applied to the scratch group."""
        group = self.groups.get(req.group_id)
        if group is None:
            if req.member_epoch != 0 and not prelude:
                raise _Refused(ErrorCode.group_id_not_found,
                               f"Consumer group {req.group_id} not found.")
            group = ConsumerGroup(req.group_id)
        scratch = {req.group_id: group.copy()}
        w = _Writer(scratch)
        for record in prelude:
            w.add(record.key, record.value)
        g = scratch[req.group_id]
        member, replaced = self._member_for(g, req, w)
        # the member's metadata, from what this heartbeat says
        updated = replace(
            member,
            instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            client_id=req.client_id, client_host=req.client_host,
            subscribed_topic_names=(tuple(req.subscribed_topic_names)
                                    if req.subscribed_topic_names is not None
                                    else member.subscribed_topic_names),
            subscribed_topic_regex=(req.subscribed_topic_regex or None
                                    if req.subscribed_topic_regex is not None
                                    else member.subscribed_topic_regex),
            rebalance_timeout_ms=(req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1
                                  else member.rebalance_timeout_ms),
            server_assignor=(req.server_assignor if req.server_assignor is not None
                             else member.server_assignor),
            classic=classic)
        new_member = req.member_id not in g.members or replaced
        bump = new_member and not replaced
        if new_member or updated.metadata_value() != member.metadata_value():
            w.add(ConsumerGroupMemberMetadataKey(g.group_id, updated.member_id),
                  updated.metadata_value())
            if (updated.subscribed_topic_names != member.subscribed_topic_names
                    or updated.subscribed_topic_regex != member.subscribed_topic_regex):
                bump = True
        metadata = _subscription_metadata(g, topics)
        if metadata != g.topics:
            w.add(ConsumerGroupPartitionMetadataKey(g.group_id),
                  ConsumerGroupPartitionMetadataValue(tuple(metadata[n] for n in sorted(metadata))))
            bump = True
        if bump or g.group_epoch == 0:
            w.add(ConsumerGroupMetadataKey(g.group_id),
                  ConsumerGroupMetadataValue(g.group_epoch + 1))
            self.rebalances += 1
        if g.group_epoch > g.assignment_epoch:
            self._assign(g, w)
        member = g.members[updated.member_id]
        before = member.assignment
        after = reconcile(before, g.assignment_epoch,
                          g.target.get(member.member_id, frozenset()), req.owned,
                          g.owned_by_other(member.member_id))
        if after.member_epoch != before.member_epoch and after.member_epoch > 0:
            self.reconciliations += 1
        if after != before or new_member:
            w.add(ConsumerGroupCurrentMemberAssignmentKey(g.group_id, member.member_id),
                  current_assignment_value(after))
        self._schedule_session(g.group_id, member.member_id, now,
                               classic.session_timeout_ms if classic is not None else None)
        if prelude:  # the converted classic members: their sessions from now on
            for m in g.members.values():
                if m.classic is not None and m.member_id != member.member_id:
                    self._schedule_session(g.group_id, m.member_id, now,
                                           m.classic.session_timeout_ms)
        self._schedule_revocation(g.group_id, member, before, after, now)
        full = (req.member_epoch == 0 or (req.rebalance_timeout_ms != -1
                                          and req.subscribed_topic_names is not None
                                          and req.owned is not None))
        send = full or after.assigned != before.assigned or new_member
        response = ConsumerHeartbeatResponse(
            ErrorCode.none, None, member.member_id, after.member_epoch,
            self.config.heartbeat_interval_ms, by_topic(after.assigned) if send else None)
        return CoordinatorResult(records=w.records, response=response)

    def _member_for(self, g: ConsumerGroup, req: ConsumerHeartbeat,
                    w: _Writer) -> tuple[ConsumerMember, bool]:
        """The member the heartbeat is from (new ones not yet in the group), and whether it
        replaces a static member that left with epoch -2."""
        member = g.members.get(req.member_id) if req.member_id else None
        if req.member_epoch == 0:
            if req.instance_id is not None:
                old_id = g.static_members.get(req.instance_id)
                old = g.members.get(old_id) if old_id is not None else None
                if old is not None:
                    if old.member_epoch != STATIC_LEAVE_EPOCH:
                        raise _Refused(ErrorCode.unreleased_instance_id,
                                       f"Static member {old.member_id} with instance id "
                                       f"{req.instance_id} is not released yet.")
                    return self._replace_static(g, old, req, w), True
            if member is not None:
                return member, False
            if len(g.members) >= self.config.max_size:
                raise _Refused(ErrorCode.group_max_size_reached,
                               f"The consumer group has reached its maximum capacity of "
                               f"{self.config.max_size} members.")
            return ConsumerMember(req.member_id or self._new_member_id()), False
        if member is None:
            raise _Refused(ErrorCode.unknown_member_id,
                           f"Member {req.member_id} is not a member of group {req.group_id}.")
        if req.instance_id is not None and g.static_members.get(req.instance_id) != member.member_id:
            raise _Refused(ErrorCode.fenced_instance_id,
                           f"Static member {req.instance_id} was replaced by another member.")
        epoch = member.member_epoch
        if req.member_epoch != epoch:
            # the previous epoch with no more than it has: the answer that bumped it was lost
            lost_answer = (req.member_epoch == member.assignment.previous_member_epoch
                           and req.owned is not None and req.owned <= member.assignment.assigned)
            if req.member_epoch > epoch or not lost_answer:
                which = "greater" if req.member_epoch > epoch else "smaller"
                raise _Refused(ErrorCode.fenced_member_epoch,
                               f"The consumer group member has a {which} member epoch "
                               f"({req.member_epoch}) than the one known by the group "
                               f"coordinator ({epoch}). The member must abandon all its "
                               f"partitions and rejoin.")
        return member, False

    def _replace_static(self, g: ConsumerGroup, old: ConsumerMember, req: ConsumerHeartbeat,
                        w: _Writer) -> ConsumerMember:
        """A static member back (a new member id, or the same) takes the old one's assignment
        at epoch 0; reconciliation then brings it to the target epoch."""
        new_id = req.member_id or self._new_member_id()
        target = g.target.get(old.member_id, frozenset())
        assignment = replace(old.assignment, member_epoch=0, previous_member_epoch=0)
        self._remove_member_records(g, old.member_id, w)
        self.timers.cancel(_session_key(g.group_id, old.member_id))
        self.timers.cancel(_revocation_key(g.group_id, old.member_id))
        new = replace(old, member_id=new_id, assignment=assignment)
        w.add(ConsumerGroupMemberMetadataKey(g.group_id, new_id), new.metadata_value())
        w.add(ConsumerGroupTargetAssignmentMemberKey(g.group_id, new_id),
              ConsumerGroupTargetAssignmentMemberValue(by_topic(target)))
        w.add(ConsumerGroupCurrentMemberAssignmentKey(g.group_id, new_id),
              current_assignment_value(assignment))
        return g.members[new_id]

    def _assign(self, g: ConsumerGroup, w: _Writer) -> None:
        """A new target assignment at the group epoch, from the group's assignor."""
        assignor = ASSIGNORS[self.assignor_of(g)]
        ids = {t.topic_name: t.topic_id for t in g.topics.values()}
        counts = {t.topic_id: t.num_partitions for t in g.topics.values()}
        specs = {}
        for m in g.members.values():
            names = _subscribed_names(m, g.topics)
            specs[m.member_id] = MemberSpec(frozenset(ids[n] for n in names if n in ids),
                                            g.target.get(m.member_id, frozenset()),
                                            m.instance_id)
        target = assignor(specs, counts)
        for member_id in sorted(target):
            if target[member_id] != g.target.get(member_id):
                w.add(ConsumerGroupTargetAssignmentMemberKey(g.group_id, member_id),
                      ConsumerGroupTargetAssignmentMemberValue(by_topic(target[member_id])))
        w.add(ConsumerGroupTargetAssignmentMetadataKey(g.group_id),
              ConsumerGroupTargetAssignmentMetadataValue(g.group_epoch))

    def assignor_of(self, g: ConsumerGroup) -> str:
        """The assignor most members ask for (ties: the configured order), else the default."""
        votes = Counter(m.server_assignor for m in g.members.values() if m.server_assignor)
        names = self.config.assignors
        if not votes:
            return names[0]
        return max(votes, key=lambda n: (votes[n], -names.index(n)))

    # --- leaving and fencing ----------------------------------------------------------------

    def _leave(self, req: ConsumerHeartbeat, now: int) -> CoordinatorResult:
        group = self.groups.get(req.group_id)
        if group is None:
            raise _Refused(ErrorCode.group_id_not_found,
                           f"Consumer group {req.group_id} not found.")
        member = group.members.get(req.member_id)
        if member is None:
            raise _Refused(ErrorCode.unknown_member_id,
                           f"Member {req.member_id} is not a member of group {req.group_id}.")
        if req.member_epoch == STATIC_LEAVE_EPOCH and member.instance_id is not None:
            # a static member's pause: it keeps its partitions for its session timeout
            a = replace(member.assignment, member_epoch=STATIC_LEAVE_EPOCH,
                        previous_member_epoch=member.member_epoch)
            records = [_record(ConsumerGroupCurrentMemberAssignmentKey(group.group_id,  # type: ignore[union-attr]
                                                                       member.member_id),
                               current_assignment_value(a))]
            self.timers.cancel(_revocation_key(req.group_id, member.member_id))
            return CoordinatorResult(records=records, response=ConsumerHeartbeatResponse(
                ErrorCode.none, None, member.member_id, STATIC_LEAVE_EPOCH))
        result = self._fence_result(req.group_id, member.member_id, now)
        result.response = ConsumerHeartbeatResponse(ErrorCode.none, None, member.member_id,
                                                    LEAVE_EPOCH)
        return result

    def _fence_result(self, group_id: str, member_id: str, now: int) -> CoordinatorResult:
        """A member removed; the group made a classic one again when only classic members are
        left (online downgrade, the shard's ``downgrade``)."""
        records = self._fence(group_id, member_id)
        if records:
            downgraded = self.downgrade(group_id, records, now)
            if downgraded is not None:
                return downgraded
        return CoordinatorResult(records=records)

    def _fence(self, group_id: str, member_id: str) -> list[CoordinatorRecord]:
        """The records that remove a member and bump the group epoch."""
        self.timers.cancel(_session_key(group_id, member_id))
        self.timers.cancel(_revocation_key(group_id, member_id))
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            return []
        scratch = {group_id: group.copy()}
        w = _Writer(scratch)
        g = scratch[group_id]
        self._remove_member_records(g, member_id, w)
        w.add(ConsumerGroupMetadataKey(group_id), ConsumerGroupMetadataValue(g.group_epoch + 1))
        self.rebalances += 1
        return w.records

    @staticmethod
    def _remove_member_records(g: ConsumerGroup, member_id: str, w: _Writer) -> None:
        w.add(ConsumerGroupCurrentMemberAssignmentKey(g.group_id, member_id), None)
        w.add(ConsumerGroupTargetAssignmentMemberKey(g.group_id, member_id), None)
        w.add(ConsumerGroupMemberMetadataKey(g.group_id, member_id), None)

    def _schedule_session(self, group_id: str, member_id: str, now: int,
                          timeout_ms: int | None = None) -> None:
        """A member's session: the group's, or a classic member's own session timeout."""
        def expired(at: int) -> CoordinatorResult:
            return self._fence_result(group_id, member_id, at)

        self.timers.schedule(_session_key(group_id, member_id),
                             now + (timeout_ms or self.config.session_timeout_ms), expired)

    def _schedule_revocation(self, group_id: str, member: ConsumerMember,
                             before: MemberAssignment, after: MemberAssignment, now: int) -> None:
        """A member asked to revoke partitions has its rebalance timeout to do it."""
        key = _revocation_key(group_id, member.member_id)
        if after.state != MemberState.UNREVOKED_PARTITIONS:
            self.timers.cancel(key)
            return
        if before.state == MemberState.UNREVOKED_PARTITIONS and key in self.timers:
            return
        timeout = member.rebalance_timeout_ms if member.rebalance_timeout_ms > 0 else 300_000
        epoch = after.member_epoch

        def expired(at: int) -> CoordinatorResult:
            group = self.groups.get(group_id)
            m = group.members.get(member.member_id) if group is not None else None
            if m is None or m.assignment.state != MemberState.UNREVOKED_PARTITIONS \
                    or m.member_epoch != epoch:
                return CoordinatorResult()
            return self._fence_result(group_id, member.member_id, at)

        self.timers.schedule(key, now + timeout, expired)

    def cancel_timers(self, group_id: str, member_id: str) -> None:
        self.timers.cancel(_session_key(group_id, member_id))
        self.timers.cancel(_revocation_key(group_id, member_id))

    def poll(self, now: int) -> list[CoordinatorResult]:
        """What is due: the results replayed by the runtime merged into one write, and each
        downgrade (applied by the shard itself) as a write of its own."""
        merged = CoordinatorResult()
        own = []
        for due in self.timers.expire(now):
            if due.replay:
                merged.merge(due)
            else:
                own.append(due)
        return [merged, *own]

    # --- groups as a whole ------------------------------------------------------------------

    def delete_records(self, group_id: str) -> list[CoordinatorRecord]:
        """Tombstones of an empty group's own records (DeleteGroups)."""
        return [_record(ConsumerGroupTargetAssignmentMetadataKey(group_id), None),
                _record(ConsumerGroupPartitionMetadataKey(group_id), None),
                _record(ConsumerGroupMetadataKey(group_id), None)]

    def subscribed_topics(self, group_id: str) -> set[str] | None:
        """The topics the group's members subscribe to, as last stored (None: no such
        group): their offsets do not expire."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        return set(group.topics) if group.members else set()  # an empty group subscribes none

    def validate_commit(self, group_id: str, member_id: str, member_epoch: int,
                        transactional: bool = False) -> ErrorCode:
        """Kafka's ``ConsumerGroup.validateOffsetCommit``: an empty group takes commits from
        anyone with no epoch (tools, simple consumers); else the member must exist and send its
        current epoch (STALE_MEMBER_EPOCH, ILLEGAL_GENERATION for a transactional commit)."""
        group = self.groups[group_id]
        if member_epoch < 0 and not group.members:
            return ErrorCode.none
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if member_epoch != member.member_epoch:
            return ErrorCode.illegal_generation if transactional else ErrorCode.stale_member_epoch
        return ErrorCode.none

    def validate_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode:
        """OffsetFetch v9+ from a member (member epoch >= 0) of a consumer group."""
        if member_id is None or member_epoch < 0:
            return ErrorCode.none
        group = self.groups[group_id]
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if member_epoch != member.member_epoch:
            return ErrorCode.stale_member_epoch
        return ErrorCode.none


def _session_key(group_id: str, member_id: str) -> str:
    return f"consumer-session-{group_id}-{member_id}"


def _revocation_key(group_id: str, member_id: str) -> str:
    return f"consumer-revocation-{group_id}-{member_id}"


def _subscribed_names(member: ConsumerMember, known: Mapping[str, object]) -> set[str]:
    names = set(member.subscribed_topic_names)
    if member.subscribed_topic_regex:
        try:
            pattern = compile_regex(member.subscribed_topic_regex)
        except InvalidRegex:
            return names
        names.update(n for n in known if pattern.fullmatch(n))
    return names


def _subscription_metadata(g: ConsumerGroup, topics: TopicsImage) -> dict[str, TopicMetadata]:
    """The subscribed topics that exist, with their ids and partition counts. A topic's count
    never goes down while its id stays (Kafka's partitions are only ever added): a broker's
    view that lacks some partitions for a moment, as a new coordinator's may while leaders
    are elected, must not take them from the group and give them back a moment later."""
    wanted: set[str] = set()
    for m in g.members.values():
        wanted |= _subscribed_names(m, topics)
    out = {}
    for name in wanted:
        found = topics.get(name)
        if found is not None:
            topic_id, count = found
            known = g.topics.get(name)
            if known is not None and known.topic_id == topic_id:
                count = max(count, known.num_partitions)
            out[name] = TopicMetadata(topic_id, name, count)
    return out



# --- classic members inside a consumer group (online migration) -------------------------------


class ClassicMembers:
    """JoinGroup, SyncGroup, Heartbeat and LeaveGroup of classic members of a consumer group
    (Kafka 4's ``classicGroup*ToConsumerGroup``): a JoinGroup is a full heartbeat of the new
    protocol whose subscription and owned partitions come from the embedded ConsumerProtocol;
    its generation is the member epoch; SyncGroup hands out the member's current assignment;
    Heartbeat answers REBALANCE_IN_PROGRESS while the member has to rejoin to progress."""

    def __init__(self, coordinator: ConsumerGroupCoordinator) -> None:
        self.c = coordinator

    def join(self, req: JoinGroup, topics: TopicsImage, now: int) -> CoordinatorResult:
        g = self.c.groups[req.group_id]

        def refuse(code: ErrorCode) -> CoordinatorResult:
            return CoordinatorResult(response=JoinGroupResponse(error=code,
                                                                member_id=req.member_id))

        names = [name for name, _ in req.protocols]
        classic = [m.classic for m in g.members.values()
                   if m.classic is not None and m.member_id != req.member_id]
        if req.protocol_type != PROTOCOL_TYPE or not names or not any(
                all(n in {p for p, _ in c.supported_protocols} for c in classic) for n in names):
            return refuse(ErrorCode.inconsistent_group_protocol)
        subscription = None
        for _, metadata in req.protocols:
            try:
                subscription = decode_subscription(metadata)
                break
            except MalformedProtocol:
                continue
        if subscription is None:
            return refuse(ErrorCode.inconsistent_group_protocol)
        member_id = req.member_id
        if not member_id:
            member_id = self.c._new_member_id()
            if req.version >= 4 and req.group_instance_id is None:  # KIP-394
                return CoordinatorResult(response=JoinGroupResponse(
                    error=ErrorCode.member_id_required, member_id=member_id))
        known = g.members.get(member_id)
        prelude: list[CoordinatorRecord] = []
        static_id = (g.static_members.get(req.group_instance_id)
                     if req.group_instance_id is not None else None)
        if static_id is not None and static_id != member_id:
            if req.member_id:
                return refuse(ErrorCode.fenced_instance_id)
            # a static member back with a new id: the old one goes, the new one joins
            prelude = self.c._fence(req.group_id, static_id)[:3]  # without its epoch bump
        owned = frozenset((topics[t][0], p) for t, ps in subscription.owned.items()
                          if t in topics for p in ps)
        hb = ConsumerHeartbeat(
            req.group_id, member_id, known.member_epoch if known is not None else 0,
            req.group_instance_id, subscription.rack_id, req.rebalance_timeout_ms,
            tuple(subscription.topics), None, None,
            owned if known is not None else frozenset(), req.client_id, req.client_host)
        metadata = ClassicMemberMetadata(req.session_timeout_ms, tuple(req.protocols))
        try:
            result = self.c._heartbeat(hb, topics, now, prelude=prelude, classic=metadata)
        except _Refused as refused:
            return refuse(refused.code)
        response = result.response
        assert isinstance(response, ConsumerHeartbeatResponse)
        result.response = JoinGroupResponse(
            error=ErrorCode.none, member_id=member_id, generation=response.member_epoch,
            protocol_type=PROTOCOL_TYPE, protocol=names[0])
        return result

    def _member(self, group_id: str, member_id: str, instance_id: str | None,
                generation: int) -> tuple[ConsumerGroup, ConsumerMember | ErrorCode]:
        """The classic member a SyncGroup or Heartbeat is from, or the error to answer."""
        g = self.c.groups[group_id]
        if instance_id is not None:
            static_id = g.static_members.get(instance_id)
            if static_id is None:
                return g, ErrorCode.unknown_member_id
            if static_id != member_id:
                return g, ErrorCode.fenced_instance_id
        member = g.members.get(member_id)
        if member is None or member.classic is None:
            return g, ErrorCode.unknown_member_id
        if generation != member.member_epoch:
            return g, ErrorCode.illegal_generation
        return g, member

    def sync(self, req: SyncGroup, now: int) -> CoordinatorResult:
        g, member = self._member(req.group_id, req.member_id, req.group_instance_id,
                                 req.generation)
        if isinstance(member, ErrorCode):
            return CoordinatorResult(response=SyncGroupResponse(member))
        assert member.classic is not None
        protocols = member.classic.supported_protocols
        if ((req.protocol_type is not None and req.protocol_type != PROTOCOL_TYPE)
                or (req.protocol is not None and req.protocol not in {n for n, _ in protocols})):
            return CoordinatorResult(response=SyncGroupResponse(
                ErrorCode.inconsistent_group_protocol))
        if (g.group_epoch > member.member_epoch
                and member.assignment.state != MemberState.UNREVOKED_PARTITIONS):
            return CoordinatorResult(response=SyncGroupResponse(ErrorCode.rebalance_in_progress))
        self.c._schedule_session(g.group_id, member.member_id, now,
                                 member.classic.session_timeout_ms)
        try:
            version = protocol_version(protocols[0][1])
        except MalformedProtocol:
            version = 0
        return CoordinatorResult(response=SyncGroupResponse(
            ErrorCode.none, encode_assignment(names_of(g, member.assignment.assigned), version),
            PROTOCOL_TYPE, req.protocol or protocols[0][0]))

    def heartbeat(self, req: Heartbeat, now: int) -> CoordinatorResult:
        g, member = self._member(req.group_id, req.member_id, req.group_instance_id,
                                 req.generation)
        if isinstance(member, ErrorCode):
            return CoordinatorResult(response=HeartbeatResponse(member))
        assert member.classic is not None
        self.c._schedule_session(g.group_id, member.member_id, now,
                                 member.classic.session_timeout_ms)
        # the member rejoins to progress: a new group epoch, partitions to revoke, or
        # partitions it waits for that are free now
        a = member.assignment
        waiting = g.target.get(member.member_id, frozenset()) - a.assigned
        free = any(g.owners.get(p) is None for p in waiting)
        rejoin = (member.member_epoch < g.group_epoch
                  or a.state == MemberState.UNREVOKED_PARTITIONS
                  or (a.state == MemberState.UNRELEASED_PARTITIONS and free))
        return CoordinatorResult(response=HeartbeatResponse(
            ErrorCode.rebalance_in_progress if rejoin else ErrorCode.none))

    def leave(self, req: LeaveGroup, now: int) -> CoordinatorResult:
        g = self.c.groups[req.group_id]
        answers = []
        leaving = []
        for m in req.members:
            member_id = m.member_id
            if m.group_instance_id is not None:
                static_id = g.static_members.get(m.group_instance_id)
                if static_id is None:
                    answers.append((member_id, m.group_instance_id, ErrorCode.unknown_member_id))
                    continue
                if member_id and member_id != static_id:
                    answers.append((member_id, m.group_instance_id, ErrorCode.fenced_instance_id))
                    continue
                member_id = static_id
            member = g.members.get(member_id)
            if member is None or member.classic is None:
                answers.append((member_id, m.group_instance_id, ErrorCode.unknown_member_id))
                continue
            answers.append((member_id, m.group_instance_id, ErrorCode.none))
            if member_id not in leaving:
                leaving.append(member_id)
        result = CoordinatorResult()
        if leaving:
            scratch = {g.group_id: g.copy()}
            w = _Writer(scratch)
            for member_id in leaving:
                self.c.cancel_timers(g.group_id, member_id)
                self.c._remove_member_records(scratch[g.group_id], member_id, w)
            w.add(ConsumerGroupMetadataKey(g.group_id),
                  ConsumerGroupMetadataValue(scratch[g.group_id].group_epoch + 1))
            self.c.rebalances += 1
            result.records = w.records
        result.response = LeaveGroupResponse(ErrorCode.none, tuple(answers))
        return result


def names_of(g: ConsumerGroup, partitions: frozenset[Partition]) -> dict[str, tuple[int, ...]]:
    """Partitions by topic name, from the group's subscribed topics (ids it does not know are
    left out)."""
    names = {t.topic_id: t.topic_name for t in g.topics.values()}
    out: dict[str, list[int]] = {}
    for topic_id, p in partitions:
        name = names.get(topic_id)
        if name is not None:
            out.setdefault(name, []).append(p)
    return {t: tuple(sorted(ps)) for t, ps in out.items()}
