"""The classic group coordinator for the groups of one ``__consumer_offsets`` partition, sans-I/O.

Handlers take a request and ``now`` (from the runtime's injected clock) and return a ``Result``:
records to append, the response (or None when the reply is parked under ``parked``), and
completions for replies parked earlier. The runtime appends the records, calls ``replay`` for
each, and only then sends the response and completions. Timers (``heartbeat-<group>-<member>``,
``join-<group>``, ``initial-rebalance-<group>``) fire from ``poll(now)`` and return Results too.

What is stored (the GroupMetadata record: generation, protocol, leader, members and their
assignments) changes only in ``replay``; loading a partition replays the same records. The
rebalance in flight (who has rejoined, parked replies, timers, the generation being formed) is
soft state kept by the handlers, as in Kafka: it is not stored and is lost with the coordinator.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from brook.coordinator.group import ClassicGroup, GroupMember, GroupState, Protocols
from brook.coordinator.records import GroupMetadataKey, GroupMetadataValue
from brook.coordinator.timer import Timers

S = GroupState


@dataclass(frozen=True)
class GroupConfig:
    """The broker settings the classic coordinator obeys (Kafka's keys and defaults)."""

    min_session_timeout_ms: int = 6_000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    max_size: int = 2**31 - 1  # group.max.size
    initial_rebalance_delay_ms: int = 3_000  # group.initial.rebalance.delay.ms
    new_member_join_timeout_ms: int = 300_000  # how long a new member may take to rejoin


# --- requests and responses ---------------------------------------------------------------------


@dataclass(frozen=True)
class JoinGroup:
    group_id: str
    member_id: str
    protocol_type: str
    protocols: Protocols
    session_timeout_ms: int
    rebalance_timeout_ms: int
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    version: int = 9


@dataclass(frozen=True)
class JoinedMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True)
class JoinGroupResponse:
    error: ErrorCode
    member_id: str = ""
    generation: int = -1
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str = ""
    members: tuple[JoinedMember, ...] = ()


@dataclass(frozen=True)
class SyncGroup:
    group_id: str
    member_id: str
    generation: int
    assignments: tuple[tuple[str, bytes], ...] = ()
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol: str | None = None


@dataclass(frozen=True)
class SyncGroupResponse:
    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol: str | None = None


@dataclass(frozen=True)
class Heartbeat:
    group_id: str
    member_id: str
    generation: int
    group_instance_id: str | None = None


@dataclass(frozen=True)
class HeartbeatResponse:
    error: ErrorCode


@dataclass(frozen=True)
class LeavingMember:
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True)
class LeaveGroup:
    group_id: str
    members: tuple[LeavingMember, ...]


@dataclass(frozen=True)
class LeaveGroupResponse:
    error: ErrorCode
    members: tuple[tuple[str, str | None, ErrorCode], ...] = ()


@dataclass(frozen=True)
class Record:
    """A record for ``__consumer_offsets``; a value of None is a tombstone."""

    key: object
    value: object | None


@dataclass(frozen=True)
class Completion:
    """The reply to a parked request: ``key`` is what the handler returned as ``parked``."""

    key: str
    response: object


@dataclass
class Result:
    records: list[Record] = field(default_factory=list)
    response: object | None = None
    completions: list[Completion] = field(default_factory=list)
    #: When the response is parked: the key its completion will carry.
    parked: str | None = None

    def merge(self, other: Result) -> Result:
        self.records += other.records
        self.completions += other.completions
        return self


def join_key(group_id: str, member_id: str) -> str:
    return f"join-{group_id}-{member_id}"


def sync_key(group_id: str, member_id: str) -> str:
    return f"sync-{group_id}-{member_id}"


def heartbeat_key(group_id: str, member_id: str) -> str:
    return f"heartbeat-{group_id}-{member_id}"


def join_deadline_key(group_id: str) -> str:
    return f"join-{group_id}"


def initial_delay_key(group_id: str) -> str:
    return f"initial-rebalance-{group_id}"


def random_member_id(client_id: str, group_instance_id: str | None) -> str:
    return f"{group_instance_id or client_id}-{uuid.uuid4()}"


class ClassicGroupCoordinator:
    """The classic groups of one offsets partition."""

    def __init__(
        self,
        config: GroupConfig | None = None,
        new_member_id: Callable[[str, str | None], str] = random_member_id,
    ) -> None:
        self.config = config or GroupConfig()
        self.groups: dict[str, ClassicGroup] = {}
        self.timers: Timers[Result] = Timers()
        self._new_member_id = new_member_id
        # Initial rebalance of an empty group: whether a member joined during the current delay,
        # and how much of the rebalance timeout is left for further delays.
        self._initial: dict[str, tuple[bool, int]] = {}

    # --- timers -------------------------------------------------------------------------------

    def poll(self, now: int) -> Result:
        """Fire every timer due at ``now``."""
        result = Result()
        for fired in self.timers.expire(now):
            result.merge(fired)
        return result

    # --- replay: the only place stored state changes ------------------------------------------

    def replay(self, key: object, value: object | None, now: int) -> None:
        if not isinstance(key, GroupMetadataKey):
            return
        group = self.groups.get(key.group)
        if value is None:
            if group is not None:
                group.transition_to(S.DEAD, now)
                del self.groups[key.group]
            return
        assert isinstance(value, GroupMetadataValue)
        if (
            group is not None
            and group.generation == value.generation
            and group.is_in(S.COMPLETING_REBALANCE, S.EMPTY, S.STABLE)
        ):
            # Live: the leader's assignment (or an empty group's metadata) was just written.
            assignments = {m.member_id: m.assignment for m in value.members}
            for member in group.members.values():
                member.assignment = assignments.get(member.member_id, b"")
                member.awaiting_sync = False
            if group.is_in(S.COMPLETING_REBALANCE):
                group.transition_to(S.STABLE, now)
            return
        self.groups[key.group] = ClassicGroup.from_metadata_value(key.group, value, now)

    # --- JoinGroup ----------------------------------------------------------------------------

    def join_group(self, request: JoinGroup, now: int) -> Result:
        config = self.config
        if not (
            config.min_session_timeout_ms
            <= request.session_timeout_ms
            <= config.max_session_timeout_ms
        ):
            return self._join_error(request, ErrorCode.invalid_session_timeout)
        group = self.groups.get(request.group_id)
        if group is None:
            if request.member_id:
                return self._join_error(request, ErrorCode.unknown_member_id)
            group = self.groups[request.group_id] = ClassicGroup(request.group_id, now)
        if group.is_in(S.DEAD):
            return self._join_error(request, ErrorCode.coordinator_not_available)
        if not group.supports_protocols(
            request.protocol_type, [name for name, _ in request.protocols]
        ):
            return self._join_error(request, ErrorCode.inconsistent_group_protocol)
        mid = request.member_id
        known = group.has_member(mid) or mid in group.pending_members
        if not known and len(group.members) + len(group.pending_members) >= config.max_size:
            return self._join_error(request, ErrorCode.group_max_size_reached)
        if not request.member_id:
            return self._join_new_member(group, request, now)
        return self._join_existing_member(group, request, now)

    def _join_error(self, request: JoinGroup, error: ErrorCode) -> Result:
        return Result(response=JoinGroupResponse(error=error, member_id=request.member_id))

    def _join_new_member(self, group: ClassicGroup, request: JoinGroup, now: int) -> Result:
        member_id = self._new_member_id(request.client_id, request.group_instance_id)
        if request.group_instance_id is None and request.version >= 4:
            # KIP-394: hand out the id; the member joins again with it.
            group.pending_members.add(member_id)
            self._schedule_pending_expiry(group, member_id, request.session_timeout_ms, now)
            return Result(
                response=JoinGroupResponse(
                    error=ErrorCode.member_id_required, member_id=member_id
                )
            )
        return self._add_member_and_rebalance(group, request, member_id, now)

    def _join_existing_member(self, group: ClassicGroup, request: JoinGroup, now: int) -> Result:
        member_id = request.member_id
        if member_id in group.pending_members:
            return self._add_member_and_rebalance(group, request, member_id, now)
        error = group.validate_member(member_id, request.group_instance_id)
        if error is not ErrorCode.none:
            return self._join_error(request, error)
        member = group.member(member_id)
        if group.is_in(S.PREPARING_REBALANCE):
            return self._update_member_and_rebalance(group, member, request, now)
        if group.is_in(S.COMPLETING_REBALANCE):
            if member.matches(request.protocols):
                # A retry of the join whose response was lost: the current generation again.
                return Result(response=self._join_response(group, member_id))
            return self._update_member_and_rebalance(group, member, request, now)
        if group.is_in(S.STABLE):
            if group.is_leader(member_id) or not member.matches(request.protocols):
                return self._update_member_and_rebalance(group, member, request, now)
            return Result(response=self._join_response(group, member_id))
        return self._join_error(request, ErrorCode.unknown_member_id)

    def _add_member_and_rebalance(
        self, group: ClassicGroup, request: JoinGroup, member_id: str, now: int
    ) -> Result:
        self.timers.cancel(heartbeat_key(group.group_id, member_id))
        member = GroupMember(
            member_id=member_id,
            group_instance_id=request.group_instance_id,
            client_id=request.client_id,
            client_host=request.client_host,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            session_timeout_ms=request.session_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=tuple(request.protocols),
            awaiting_join=True,
            is_new=True,
        )
        group.add(member)
        if group.group_id in self._initial:
            self._initial[group.group_id] = (True, self._initial[group.group_id][1])
        # A new member that never rejoins is dropped after the new-member timeout.
        self._schedule_heartbeat(group, member, now, self.config.new_member_join_timeout_ms)
        result = Result(parked=join_key(group.group_id, member_id))
        return result.merge(self._prepare_rebalance_or_complete_join(group, now))

    def _update_member_and_rebalance(
        self, group: ClassicGroup, member: GroupMember, request: JoinGroup, now: int
    ) -> Result:
        group.update_member(
            member, request.protocols, request.rebalance_timeout_ms, request.session_timeout_ms
        )
        member.awaiting_join = True
        result = Result(parked=join_key(group.group_id, member.member_id))
        return result.merge(self._prepare_rebalance_or_complete_join(group, now))

    def _prepare_rebalance_or_complete_join(self, group: ClassicGroup, now: int) -> Result:
        if group.can_rebalance():
            return self._prepare_rebalance(group, now)
        return self._maybe_complete_join(group, now)

    def _prepare_rebalance(self, group: ClassicGroup, now: int) -> Result:
        result = Result()
        if group.is_in(S.COMPLETING_REBALANCE):
            result.completions += self._fail_parked_syncs(group, ErrorCode.rebalance_in_progress)
        gid = group.group_id
        initial = group.is_in(S.EMPTY)
        group.transition_to(S.PREPARING_REBALANCE, now)
        if initial and self.config.initial_rebalance_delay_ms > 0:
            delay = self.config.initial_rebalance_delay_ms
            self._initial[gid] = (False, max(group.rebalance_timeout_ms() - delay, 0))
            self.timers.schedule(
                initial_delay_key(gid), now + delay, lambda t: self._initial_delay_expired(gid, t)
            )
            return result
        self.timers.schedule(
            join_deadline_key(gid),
            now + group.rebalance_timeout_ms(),
            lambda t: self._complete_join(gid, t),
        )
        return result.merge(self._maybe_complete_join(group, now))

    def _initial_delay_expired(self, group_id: str, now: int) -> Result:
        joined, remaining = self._initial.pop(group_id, (False, 0))
        if joined and remaining > 0:
            delay = min(self.config.initial_rebalance_delay_ms, remaining)
            self._initial[group_id] = (False, max(remaining - delay, 0))
            self.timers.schedule(
                initial_delay_key(group_id),
                now + delay,
                lambda t: self._initial_delay_expired(group_id, t),
            )
            return Result()
        return self._complete_join(group_id, now)

    def _maybe_complete_join(self, group: ClassicGroup, now: int) -> Result:
        if (
            group.is_in(S.PREPARING_REBALANCE)
            and group.group_id not in self._initial
            and group.has_all_members_joined()
        ):
            return self._complete_join(group.group_id, now)
        return Result()

    def _complete_join(self, group_id: str, now: int) -> Result:
        group = self.groups.get(group_id)
        self.timers.cancel(join_deadline_key(group_id))
        if group is None or not group.is_in(S.PREPARING_REBALANCE):
            return Result()
        for late in [m for m in group.not_yet_rejoined() if m.group_instance_id is None]:
            group.remove(late.member_id)
            self.timers.cancel(heartbeat_key(group_id, late.member_id))
        if not group.elect_joined_leader() and group.members:
            # Nobody rejoined: give them another rebalance timeout.
            self.timers.schedule(
                join_deadline_key(group_id),
                now + group.rebalance_timeout_ms(),
                lambda t: self._complete_join(group_id, t),
            )
            return Result()
        group.init_next_generation(now)
        if group.is_in(S.EMPTY):
            key = GroupMetadataKey(group_id)
            return Result(records=[Record(key, group.to_metadata_value({}))])
        result = Result()
        for member in group.members.values():
            result.completions.append(
                Completion(
                    join_key(group_id, member.member_id),
                    self._join_response(group, member.member_id),
                )
            )
            member.awaiting_join = False
            member.is_new = False
            group.pending_sync.add(member.member_id)
            self._schedule_heartbeat(group, member, now)
        return result

    def _join_response(self, group: ClassicGroup, member_id: str) -> JoinGroupResponse:
        members: tuple[JoinedMember, ...] = ()
        if group.is_leader(member_id):
            assert group.protocol is not None
            members = tuple(
                JoinedMember(m.member_id, m.group_instance_id, m.metadata(group.protocol))
                for m in group.members.values()
            )
        return JoinGroupResponse(
            error=ErrorCode.none,
            member_id=member_id,
            generation=group.generation,
            protocol_type=group.protocol_type,
            protocol=group.protocol,
            leader=group.leader_id or "",
            members=members,
        )

    # --- SyncGroup ----------------------------------------------------------------------------

    def sync_group(self, request: SyncGroup, now: int) -> Result:
        group = self.groups.get(request.group_id)
        if group is None:
            return self._sync_error(ErrorCode.unknown_member_id)
        if group.is_in(S.DEAD):
            return self._sync_error(ErrorCode.coordinator_not_available)
        error = group.validate_member(request.member_id, request.group_instance_id)
        if error is not ErrorCode.none:
            return self._sync_error(error)
        if request.generation != group.generation:
            return self._sync_error(ErrorCode.illegal_generation)
        if (request.protocol_type is not None and request.protocol_type != group.protocol_type) or (
            request.protocol is not None and request.protocol != group.protocol
        ):
            return self._sync_error(ErrorCode.inconsistent_group_protocol)
        if group.is_in(S.PREPARING_REBALANCE):
            return self._sync_error(ErrorCode.rebalance_in_progress)
        member = group.member(request.member_id)
        group.pending_sync.discard(request.member_id)
        if group.is_in(S.STABLE):
            return Result(response=self._sync_response(group, member.assignment))
        # CompletingRebalance: park; the leader's assignment completes everyone.
        member.awaiting_sync = True
        self._schedule_heartbeat(group, member, now)
        result = Result(parked=sync_key(group.group_id, request.member_id))
        if not group.is_leader(request.member_id):
            return result
        given = dict(request.assignments)
        assignments = {mid: given.get(mid, b"") for mid in group.members}
        value = group.to_metadata_value(assignments)
        result.records.append(Record(GroupMetadataKey(group.group_id), value))
        for mid, m in group.members.items():
            if m.awaiting_sync:
                result.completions.append(
                    Completion(
                        sync_key(group.group_id, mid), self._sync_response(group, assignments[mid])
                    )
                )
        return result

    def _sync_error(self, error: ErrorCode) -> Result:
        return Result(response=SyncGroupResponse(error=error))

    def _sync_response(self, group: ClassicGroup, assignment: bytes) -> SyncGroupResponse:
        return SyncGroupResponse(
            error=ErrorCode.none,
            assignment=assignment,
            protocol_type=group.protocol_type,
            protocol=group.protocol,
        )

    def _fail_parked_syncs(self, group: ClassicGroup, error: ErrorCode) -> list[Completion]:
        completions = []
        for mid, member in group.members.items():
            if member.awaiting_sync:
                member.awaiting_sync = False
                completions.append(
                    Completion(sync_key(group.group_id, mid), SyncGroupResponse(error=error))
                )
        group.pending_sync.clear()
        return completions

    # --- Heartbeat ----------------------------------------------------------------------------

    def heartbeat(self, request: Heartbeat, now: int) -> Result:
        group = self.groups.get(request.group_id)
        if group is None:
            return Result(response=HeartbeatResponse(ErrorCode.unknown_member_id))
        if group.is_in(S.DEAD):
            return Result(response=HeartbeatResponse(ErrorCode.coordinator_not_available))
        error = group.validate_member(request.member_id, request.group_instance_id)
        if error is not ErrorCode.none:
            return Result(response=HeartbeatResponse(error))
        if request.generation != group.generation:
            return Result(response=HeartbeatResponse(ErrorCode.illegal_generation))
        self._schedule_heartbeat(group, group.member(request.member_id), now)
        if group.is_in(S.PREPARING_REBALANCE):
            return Result(response=HeartbeatResponse(ErrorCode.rebalance_in_progress))
        return Result(response=HeartbeatResponse(ErrorCode.none))

    def _schedule_heartbeat(
        self, group: ClassicGroup, member: GroupMember, now: int, timeout_ms: int | None = None
    ) -> None:
        gid, mid = group.group_id, member.member_id
        timeout = member.session_timeout_ms if timeout_ms is None else timeout_ms
        self.timers.schedule(
            heartbeat_key(gid, mid), now + timeout, lambda t: self._session_expired(gid, mid, t)
        )

    def _schedule_pending_expiry(
        self, group: ClassicGroup, member_id: str, timeout_ms: int, now: int
    ) -> None:
        gid = group.group_id

        def expired(t: int) -> Result:
            g = self.groups.get(gid)
            if g is None or member_id not in g.pending_members:
                return Result()
            g.pending_members.discard(member_id)
            return self._maybe_complete_join(g, t)

        self.timers.schedule(heartbeat_key(gid, member_id), now + timeout_ms, expired)

    def _session_expired(self, group_id: str, member_id: str, now: int) -> Result:
        group = self.groups.get(group_id)
        if group is None or not group.has_member(member_id):
            return Result()
        member = group.member(member_id)
        if member.heartbeat_satisfied():
            self._schedule_heartbeat(group, member, now)
            return Result()
        return self._remove_member_and_rebalance(group, member_id, now)

    def _remove_member_and_rebalance(self, group: ClassicGroup, member_id: str, now: int) -> Result:
        result = Result()
        member = group.member(member_id)
        if member.awaiting_join:
            result.completions.append(
                Completion(
                    join_key(group.group_id, member_id),
                    JoinGroupResponse(error=ErrorCode.unknown_member_id, member_id=member_id),
                )
            )
        if member.awaiting_sync:
            result.completions.append(
                Completion(
                    sync_key(group.group_id, member_id),
                    SyncGroupResponse(error=ErrorCode.unknown_member_id),
                )
            )
        group.remove(member_id)
        self.timers.cancel(heartbeat_key(group.group_id, member_id))
        if group.is_in(S.STABLE, S.COMPLETING_REBALANCE):
            return result.merge(self._prepare_rebalance(group, now))
        if group.is_in(S.PREPARING_REBALANCE):
            return result.merge(self._maybe_complete_join(group, now))
        return result

    # --- LeaveGroup ---------------------------------------------------------------------------

    def leave_group(self, request: LeaveGroup, now: int) -> Result:
        group = self.groups.get(request.group_id)
        if group is None:
            return Result(response=LeaveGroupResponse(ErrorCode.unknown_member_id))
        if group.is_in(S.DEAD):
            return Result(response=LeaveGroupResponse(ErrorCode.coordinator_not_available))
        result = Result()
        answers = []
        for leaving in request.members:
            mid, iid = leaving.member_id, leaving.group_instance_id
            if iid is not None and group.is_static_member_fenced(iid, mid):
                answers.append((mid, iid, ErrorCode.fenced_instance_id))
            elif iid is None and mid in group.pending_members:
                group.pending_members.discard(mid)
                self.timers.cancel(heartbeat_key(group.group_id, mid))
                answers.append((mid, iid, ErrorCode.none))
                result.merge(self._maybe_complete_join(group, now))
            else:
                mid = group.static_member_id(iid) or mid if iid is not None else mid
                if not group.has_member(mid):
                    answers.append((leaving.member_id, iid, ErrorCode.unknown_member_id))
                    continue
                answers.append((leaving.member_id, iid, ErrorCode.none))
                result.merge(self._remove_member_and_rebalance(group, mid, now))
        result.response = LeaveGroupResponse(ErrorCode.none, tuple(answers))
        return result
