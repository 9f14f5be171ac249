"""The classic group coordinator for the groups of one ``__consumer_offsets`` partition, sans-I/O.

Operations take a request and ``now`` (from the runtime's injected clock) and return a
``CoordinatorResult``: records to append, the response (or None when the reply is parked under
``parked``), and completions for replies parked earlier. Timers (``heartbeat-<group>-<member>``,
``join-<group>``, ``initial-rebalance-<group>``, ``sync-<group>``) fire from ``poll(now)`` and
return results too.

As in Kafka's classic groups, an operation applies its change to the in-memory group itself and
its records (GroupMetadata) describe the group as it now is; the runtime does not replay them
(``replay=False``). What waits for the write is in the result: a leader's assignment makes the
group Stable only once stored (``on_success``); when the append fails, ``on_failure`` puts the
group back on track (the generation rebalances again, a restarted static member's replacement is
undone) while the runtime answers the request and the parked replies with the write's error.

``replay`` builds groups from GroupMetadata records when a partition is loaded, removes them on
tombstones (group deletion, expiry), and creates the Empty group of a "simple" consumer that
commits offsets without joining, as Kafka does: such a group is listed, described, deleted and
expired like any other. The rebalance in flight (who has rejoined, parked replies, timers, the
generation being formed) is soft state, as in Kafka: it is not stored and is lost with the
coordinator.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from ..common.result import Completion, CoordinatorRecord, CoordinatorResult
from ..common.timer import Timers
from .classic_group import ClassicGroup, GroupMember, GroupState, Protocols
from .schemas import GroupMetadataKey, GroupMetadataValue, OffsetCommitKey

S = GroupState



log = logging.getLogger(__name__)

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
    reason: str | None = None  # the client's, JoinGroup v8+ (KIP-800)


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
    #: JoinGroup v9+: the leader is told not to compute an assignment (a restarted static
    #: leader rejoining a Stable group with unchanged protocols keeps the current one).
    skip_assignment: bool = False


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
    reason: str | None = None  # the client's, LeaveGroup v5+ (KIP-800)


@dataclass(frozen=True)
class LeaveGroup:
    group_id: str
    members: tuple[LeavingMember, ...]


@dataclass(frozen=True)
class LeaveGroupResponse:
    error: ErrorCode
    members: tuple[tuple[str, str | None, ErrorCode], ...] = ()


def _client_reason(reason: str | None) -> str:
    return f"; client reason: {reason}" if reason else ""


def _with_client_reason(reason: str, client_reason: str | None) -> str:
    return reason + _client_reason(client_reason)


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


def sync_deadline_key(group_id: str) -> str:
    """The timer that removes members who sent no SyncGroup within the rebalance timeout."""
    return f"sync-{group_id}"


#: The member id a JoinGroup error carries when the member has none (Kafka's UNKNOWN_MEMBER_ID).
NO_MEMBER_ID = ""


@dataclass(frozen=True)
class _StaticReplacement:
    """A static member's new member id written to the log but not yet known to be stored: what
    to put back if the append fails."""

    group_instance_id: str
    old_member_id: str
    new_member_id: str
    protocols: Protocols
    rebalance_timeout_ms: int
    session_timeout_ms: int
    leader_before: str | None
    order_before: tuple[str, ...]


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
        self.timers: Timers[CoordinatorResult] = Timers()
        self._new_member_id = new_member_id
        # Initial rebalance of an empty group: whether a member joined during the current delay,
        # and how much of the rebalance timeout is left for further delays.
        self._initial: dict[str, tuple[bool, int]] = {}
        #: Join phases completed so far (each one starts a new generation of some group).
        self.rebalances = 0

    # --- timers -------------------------------------------------------------------------------

    def poll(self, now: int) -> CoordinatorResult:
        """Fire every timer due at ``now``."""
        result = CoordinatorResult()
        for fired in self.timers.expire(now):
            result.merge(fired)
        return result

    # --- replay: the only place stored state changes ------------------------------------------

    def replay(self, key: object, value: object | None, now: int) -> None:
        if type(key) is OffsetCommitKey:
            if value is not None and key.group not in self.groups:
                # A simple consumer's commit: the group exists from now on, Empty.
                self.groups[key.group] = ClassicGroup(key.group, now)
            return
        if not isinstance(key, GroupMetadataKey):
            return
        group = self.groups.get(key.group)
        if value is None:
            if group is not None:
                group.transition_to(S.DEAD, now)
                del self.groups[key.group]
            return
        assert isinstance(value, GroupMetadataValue)
        self.groups[key.group] = ClassicGroup.from_metadata_value(key.group, value, now)

    def replay_commits(self, group: str, topic: str, rows: list, now: int) -> None:
        """``replay`` of a run of offset commits of one group (the loader reads plain commits
        in runs): for this coordinator, that the group exists."""
        if rows and group not in self.groups:
            self.groups[group] = ClassicGroup(group, now)

    def replay_blocks(self, blocks: Iterable[tuple], now: int) -> None:
        """``replay`` of ``CommitBlock``s (offset commits of a group, read in bulk): for this
        coordinator, that their groups exist."""
        groups = self.groups
        for block in blocks:
            group = block[0]
            if group not in groups:
                groups[group] = ClassicGroup(group, now)

    def loaded(self, now: int) -> CoordinatorResult:
        """After a partition is loaded: every member of a loaded group gets a session
        timer, so a member that never comes back is expired as Kafka expires it."""
        for group in self.groups.values():
            for member in group.members.values():
                self._schedule_heartbeat(group, member, now)
        return CoordinatorResult()

    # --- JoinGroup ----------------------------------------------------------------------------

    def join_group(self, request: JoinGroup, now: int) -> CoordinatorResult:
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

    def _join_error(self, request: JoinGroup, error: ErrorCode) -> CoordinatorResult:
        return CoordinatorResult(
            response=JoinGroupResponse(error=error, member_id=request.member_id))

    def _join_new_member(self, group: ClassicGroup, request: JoinGroup,
                         now: int) -> CoordinatorResult:
        member_id = self._new_member_id(request.client_id, request.group_instance_id)
        if member_id in group.members or member_id in group.pending_members:
            # A clashing id from the generator: never hand out an id that is in use.
            return self._join_error(request, ErrorCode.unknown_server_error)
        iid = request.group_instance_id
        if iid is not None and group.static_member_id(iid) is not None:
            return self._update_static_member_and_rebalance(group, request, member_id, now)
        if request.group_instance_id is None and request.version >= 4:
            # KIP-394: hand out the id; the member joins again with it.
            group.pending_members.add(member_id)
            self._schedule_pending_expiry(group, member_id, request.session_timeout_ms, now)
            return CoordinatorResult(
                response=JoinGroupResponse(
                    error=ErrorCode.member_id_required, member_id=member_id
                )
            )
        return self._add_member_and_rebalance(group, request, member_id, now)

    def _join_existing_member(self, group: ClassicGroup, request: JoinGroup,
                              now: int) -> CoordinatorResult:
        member_id = request.member_id
        if member_id in group.pending_members:
            iid = request.group_instance_id
            if iid is not None and group.static_member_id(iid) is not None:
                # Handed out to a dynamic join, now used by a known static instance: a
                # restart of that instance under this id.
                group.pending_members.discard(member_id)
                return self._update_static_member_and_rebalance(group, request, member_id, now)
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
                return CoordinatorResult(response=self._join_response(group, member_id))
            return self._update_member_and_rebalance(group, member, request, now)
        if group.is_in(S.STABLE):
            if group.is_leader(member_id) or not member.matches(request.protocols):
                return self._update_member_and_rebalance(group, member, request, now)
            return CoordinatorResult(response=self._join_response(group, member_id))
        return self._join_error(request, ErrorCode.unknown_member_id)

    def _add_member_and_rebalance(
        self, group: ClassicGroup, request: JoinGroup, member_id: str, now: int
    ) -> CoordinatorResult:
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
        result = CoordinatorResult(parked=join_key(group.group_id, member_id))
        reason = _with_client_reason(
            f"adding new member {member_id} with group instance id "
            f"{request.group_instance_id}", request.reason)
        return result.merge(self._prepare_rebalance_or_complete_join(group, now, reason))

    def _update_static_member_and_rebalance(
        self, group: ClassicGroup, request: JoinGroup, new_member_id: str, now: int
    ) -> CoordinatorResult:
        """A static member rejoined without its member id (it restarted): the new id takes the
        old one's place and the old one is fenced. In a Stable group whose protocol would not
        change, no rebalance: the group is stored again with the new id and the member gets the
        current generation; otherwise the group rebalances (or goes on with the one under way)."""
        gid, iid = group.group_id, request.group_instance_id
        assert iid is not None
        old_member_id = group.static_member_id(iid)
        assert old_member_id is not None
        result = CoordinatorResult(parked=join_key(gid, new_member_id))
        old = group.member(old_member_id)
        if old.awaiting_join:
            result.completions.append(
                Completion(
                    join_key(gid, old_member_id),
                    JoinGroupResponse(error=ErrorCode.fenced_instance_id, member_id=old_member_id),
                )
            )
        if old.awaiting_sync:
            result.completions.append(
                Completion(
                    sync_key(gid, old_member_id), SyncGroupResponse(ErrorCode.fenced_instance_id)
                )
            )
        leader_before = group.leader_id
        order_before = tuple(group.members)
        saved = (old.protocols, old.rebalance_timeout_ms, old.session_timeout_ms)
        self.timers.cancel(heartbeat_key(gid, old_member_id))
        member = group.replace_static_member(iid, old_member_id, new_member_id)
        group.update_member(
            member, request.protocols, request.rebalance_timeout_ms, request.session_timeout_ms
        )
        self._schedule_heartbeat(group, member, now)
        if group.is_in(S.STABLE) and group.select_protocol() == group.protocol:
            replacement = _StaticReplacement(
                iid, old_member_id, new_member_id, *saved, leader_before, order_before
            )
            result.records.append(
                CoordinatorRecord(GroupMetadataKey(gid), group.to_metadata_value()))
            result.replay = False
            result.on_failure = lambda error, t: self._replacement_failed(
                gid, replacement, error, t)
            if request.version >= 9:
                is_leader = group.is_leader(new_member_id)
                response = self._join_response(group, new_member_id)
                response = dataclasses.replace(response, skip_assignment=is_leader)
            else:
                # Older clients are told the old leader id: a restarted leader must not assign.
                response = dataclasses.replace(
                    self._join_response(group, new_member_id),
                    members=(),
                    leader=leader_before or "",
                )
            result.completions.append(Completion(result.parked, response))
            return result
        member.awaiting_join = True
        if group.is_in(S.STABLE, S.COMPLETING_REBALANCE):
            reason = _with_client_reason(
                f"static member {new_member_id} with group instance id {iid} rejoined with "
                f"changed metadata", request.reason)
            return result.merge(self._prepare_rebalance(group, now, reason))
        return result.merge(self._maybe_complete_join(group, now))

    def _update_member_and_rebalance(
        self, group: ClassicGroup, member: GroupMember, request: JoinGroup, now: int
    ) -> CoordinatorResult:
        group.update_member(
            member, request.protocols, request.rebalance_timeout_ms, request.session_timeout_ms
        )
        state = group.state.value  # before the rebalance
        member.awaiting_join = True
        result = CoordinatorResult(parked=join_key(group.group_id, member.member_id))
        reason = _with_client_reason(
            f"updating metadata for member {member.member_id} during {state}", request.reason)
        return result.merge(self._prepare_rebalance_or_complete_join(group, now, reason))

    def _prepare_rebalance_or_complete_join(self, group: ClassicGroup, now: int,
                                            reason: str) -> CoordinatorResult:
        if group.can_rebalance():
            return self._prepare_rebalance(group, now, reason)
        return self._maybe_complete_join(group, now)

    def _prepare_rebalance(self, group: ClassicGroup, now: int, reason: str) -> CoordinatorResult:
        log.info("Preparing to rebalance group %s in state %s with old generation %d "
                 "(reason: %s)", group.group_id, group.state.value, group.generation, reason)
        result = CoordinatorResult()
        if group.is_in(S.COMPLETING_REBALANCE):
            result.completions += self._fail_parked_syncs(group, ErrorCode.rebalance_in_progress)
        gid = group.group_id
        group.pending_sync.clear()
        self.timers.cancel(sync_deadline_key(gid))
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

    def _initial_delay_expired(self, group_id: str, now: int) -> CoordinatorResult:
        joined, remaining = self._initial.pop(group_id, (False, 0))
        if joined and remaining > 0:
            delay = min(self.config.initial_rebalance_delay_ms, remaining)
            self._initial[group_id] = (False, max(remaining - delay, 0))
            self.timers.schedule(
                initial_delay_key(group_id),
                now + delay,
                lambda t: self._initial_delay_expired(group_id, t),
            )
            return CoordinatorResult()
        return self._complete_join(group_id, now)

    def _maybe_complete_join(self, group: ClassicGroup, now: int) -> CoordinatorResult:
        if (
            group.is_in(S.PREPARING_REBALANCE)
            and group.group_id not in self._initial
            and group.has_all_members_joined()
        ):
            return self._complete_join(group.group_id, now)
        return CoordinatorResult()

    def _complete_join(self, group_id: str, now: int) -> CoordinatorResult:
        group = self.groups.get(group_id)
        self.timers.cancel(join_deadline_key(group_id))
        if group is None or not group.is_in(S.PREPARING_REBALANCE):
            return CoordinatorResult()
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
            return CoordinatorResult()
        group.init_next_generation(now)
        self.rebalances += 1
        if group.is_in(S.EMPTY):
            log.info("Group %s with generation %d is now empty", group_id, group.generation)
            key = GroupMetadataKey(group_id)
            # Stored as it is now; a failed write changes nothing (the next one stores it).
            return CoordinatorResult(records=[CoordinatorRecord(key, group.to_metadata_value({}))],
                                     replay=False)
        result = CoordinatorResult()
        for member in group.members.values():
            if member.awaiting_join:  # a static member that did not rejoin has nothing parked
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
        generation = group.generation
        log.info("Completed the join phase of group %s: generation %d, %d members, protocol %s, "
                 "leader %s", group_id, generation, len(group.members), group.protocol,
                 group.leader_id)
        self.timers.schedule(
            sync_deadline_key(group_id),
            now + group.rebalance_timeout_ms(),
            lambda t: self._sync_deadline_passed(group_id, generation, t),
        )
        return result

    def _sync_deadline_passed(self, group_id: str, generation: int, now: int) -> CoordinatorResult:
        """The rebalance timeout since the join phase ended has passed: members of that
        generation that have not sent SyncGroup are removed and the group rebalances."""
        group = self.groups.get(group_id)
        if (
            group is None
            or group.generation != generation
            or not group.is_in(S.COMPLETING_REBALANCE, S.STABLE)
            or not group.pending_sync
        ):
            return CoordinatorResult()
        result = CoordinatorResult()
        late = sorted(group.pending_sync)
        for member_id in late:
            if group.has_member(member_id):
                result.completions += self._fence_parked(group, member_id)
                group.remove(member_id)
            self.timers.cancel(heartbeat_key(group_id, member_id))
        reason = f"removing members {', '.join(late)} on pending sync request expiration"
        return result.merge(self._prepare_rebalance(group, now, reason))

    def _fence_parked(self, group: ClassicGroup, member_id: str) -> list[Completion]:
        """UNKNOWN_MEMBER_ID for a member's parked replies, as it is about to be removed."""
        member = group.member(member_id)
        completions = []
        if member.awaiting_join:
            completions.append(
                Completion(
                    join_key(group.group_id, member_id),
                    JoinGroupResponse(error=ErrorCode.unknown_member_id, member_id=member_id),
                )
            )
        if member.awaiting_sync:
            completions.append(
                Completion(
                    sync_key(group.group_id, member_id),
                    SyncGroupResponse(error=ErrorCode.unknown_member_id),
                )
            )
        member.awaiting_join = member.awaiting_sync = False
        return completions

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

    def sync_group(self, request: SyncGroup, now: int) -> CoordinatorResult:
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
        if not group.pending_sync:
            self.timers.cancel(sync_deadline_key(group.group_id))
        if group.is_in(S.STABLE):
            return CoordinatorResult(response=self._sync_response(group, member.assignment))
        # CompletingRebalance: park; the leader's assignment completes everyone.
        member.awaiting_sync = True
        self._schedule_heartbeat(group, member, now)
        result = CoordinatorResult(parked=sync_key(group.group_id, request.member_id))
        if not group.is_leader(request.member_id):
            return result
        log.info("Assignment received from leader %s for group %s for generation %d; the group "
                 "has %d members", request.member_id, group.group_id, group.generation,
                 len(group.members))
        given = dict(request.assignments)
        assignments = {mid: given.get(mid, b"") for mid in group.members}
        value = group.to_metadata_value(assignments)
        result.records.append(CoordinatorRecord(GroupMetadataKey(group.group_id), value))
        result.replay = False
        gid, generation = group.group_id, group.generation
        result.on_success = lambda t: self._assignment_stored(gid, generation, assignments, t)
        result.on_failure = lambda error, t: self._assignment_failed(gid, generation, error, t)
        return result

    def _sync_error(self, error: ErrorCode) -> CoordinatorResult:
        return CoordinatorResult(response=SyncGroupResponse(error=error))

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
        return completions

    # --- online migration -------------------------------------------------------------------

    def fail_parked(self, group: ClassicGroup, error: ErrorCode) -> list[Completion]:
        """``error`` for every parked JoinGroup and SyncGroup of the group (it is converted
        into a consumer group: its members rejoin that)."""
        completions = []
        for mid, member in group.members.items():
            if member.awaiting_join:
                completions.append(Completion(join_key(group.group_id, mid),
                                              JoinGroupResponse(error=error, member_id=mid)))
            if member.awaiting_sync:
                completions.append(Completion(sync_key(group.group_id, mid),
                                              SyncGroupResponse(error=error)))
            member.awaiting_join = member.awaiting_sync = False
        return completions

    def cancel_timers(self, group: ClassicGroup) -> None:
        """The group's timers stopped (it is converted into a consumer group)."""
        gid = group.group_id
        for key in (join_deadline_key(gid), initial_delay_key(gid), sync_deadline_key(gid)):
            self.timers.cancel(key)
        self._initial.pop(gid, None)
        for mid in group.members:
            self.timers.cancel(heartbeat_key(gid, mid))

    def adopt(self, group: ClassicGroup, now: int) -> CoordinatorResult:
        """A group converted from a consumer group (Stable, in ``self.groups``): its members'
        sessions start, and it prepares a rebalance so they all rejoin."""
        for member in group.members.values():
            self._schedule_heartbeat(group, member, now)
        return self._prepare_rebalance(group, now, f"Downgrade group {group.group_id} from "
                                                   f"consumer to classic.")

    # --- Heartbeat ----------------------------------------------------------------------------

    def heartbeat(self, request: Heartbeat, now: int) -> CoordinatorResult:
        group = self.groups.get(request.group_id)
        if group is None:
            return CoordinatorResult(response=HeartbeatResponse(ErrorCode.unknown_member_id))
        if group.is_in(S.DEAD):
            return CoordinatorResult(
                response=HeartbeatResponse(ErrorCode.coordinator_not_available))
        error = group.validate_member(request.member_id, request.group_instance_id)
        if error is not ErrorCode.none:
            return CoordinatorResult(response=HeartbeatResponse(error))
        if request.generation != group.generation:
            return CoordinatorResult(response=HeartbeatResponse(ErrorCode.illegal_generation))
        self._schedule_heartbeat(group, group.member(request.member_id), now)
        if group.is_in(S.PREPARING_REBALANCE):
            return CoordinatorResult(response=HeartbeatResponse(ErrorCode.rebalance_in_progress))
        return CoordinatorResult(response=HeartbeatResponse(ErrorCode.none))

    def commit_heartbeat(self, group_id: str, member_id: str, now: int) -> bool:
        """An offset commit of ``member_id`` was accepted: as in Kafka, it keeps the member's
        session alive while the group is Stable or PreparingRebalance. Returns whether it did."""
        group = self.groups.get(group_id)
        if (
            group is None
            or not group.has_member(member_id)
            or not group.is_in(S.STABLE, S.PREPARING_REBALANCE)
        ):
            return False
        self._schedule_heartbeat(group, group.member(member_id), now)
        return True

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

        def expired(t: int) -> CoordinatorResult:
            g = self.groups.get(gid)
            if g is None or member_id not in g.pending_members:
                return CoordinatorResult()
            g.pending_members.discard(member_id)
            return self._maybe_complete_join(g, t)

        self.timers.schedule(heartbeat_key(gid, member_id), now + timeout_ms, expired)

    def _session_expired(self, group_id: str, member_id: str, now: int) -> CoordinatorResult:
        group = self.groups.get(group_id)
        if group is None or not group.has_member(member_id):
            return CoordinatorResult()
        member = group.member(member_id)
        if member.heartbeat_satisfied():
            self._schedule_heartbeat(group, member, now)
            return CoordinatorResult()
        log.info("Member %s in group %s has failed (no heartbeat within its session timeout of "
                 "%d ms), removing it from the group", member_id, group_id,
                 member.session_timeout_ms)
        return self._remove_member_and_rebalance(
            group, member_id, now, f"removing member {member_id} on heartbeat expiration")

    def _remove_member_and_rebalance(self, group: ClassicGroup, member_id: str, now: int,
                                     reason: str) -> CoordinatorResult:
        result = CoordinatorResult(completions=self._fence_parked(group, member_id))
        group.remove(member_id)
        self.timers.cancel(heartbeat_key(group.group_id, member_id))
        if group.is_in(S.STABLE, S.COMPLETING_REBALANCE):
            return result.merge(self._prepare_rebalance(group, now, reason))
        if group.is_in(S.PREPARING_REBALANCE):
            return result.merge(self._maybe_complete_join(group, now))
        return result

    # --- LeaveGroup ---------------------------------------------------------------------------

    def leave_group(self, request: LeaveGroup, now: int) -> CoordinatorResult:
        group = self.groups.get(request.group_id)
        if group is None:
            return CoordinatorResult(response=LeaveGroupResponse(ErrorCode.unknown_member_id))
        if group.is_in(S.DEAD):
            return CoordinatorResult(
                response=LeaveGroupResponse(ErrorCode.coordinator_not_available))
        result = CoordinatorResult()
        answers = []
        for leaving in request.members:
            mid, iid = leaving.member_id, leaving.group_instance_id
            if mid == NO_MEMBER_ID:
                # An administrative removal of a static member by its group.instance.id.
                current = group.static_member_id(iid) if iid is not None else None
                if current is None or not group.has_member(current):
                    answers.append((mid, iid, ErrorCode.unknown_member_id))
                    continue
                answers.append((mid, iid, ErrorCode.none))
                log.info("Static member %s with group instance id %s removed from group %s by "
                         "an administrative LeaveGroup%s", current, iid, group.group_id,
                         _client_reason(leaving.reason))
                result.merge(self._remove_member_and_rebalance(
                    group, current, now, f"removing static member {current} with group "
                    f"instance id {iid} on LeaveGroup"))
            elif mid in group.pending_members:
                group.pending_members.discard(mid)
                self.timers.cancel(heartbeat_key(group.group_id, mid))
                answers.append((mid, iid, ErrorCode.none))
                result.merge(self._maybe_complete_join(group, now))
            else:
                error = group.validate_member(mid, iid)
                answers.append((mid, iid, error))
                if error is ErrorCode.none:
                    log.info("Member %s has left group %s through explicit LeaveGroup%s", mid,
                             group.group_id, _client_reason(leaving.reason))
                    result.merge(self._remove_member_and_rebalance(
                        group, mid, now, f"removing member {mid} on LeaveGroup"))
        result.response = LeaveGroupResponse(ErrorCode.none, tuple(answers))
        return result

    # --- the outcome of a write ---------------------------------------------------------------

    def _assignment_stored(self, group_id: str, generation: int, assignments: dict[str, bytes],
                           now: int) -> list[Completion]:
        """The leader's assignment of ``generation`` is stored: the group is Stable with it, and
        every member waiting in SyncGroup then gets its part (as in Kafka, those that arrived
        while it was being written too)."""
        group = self.groups.get(group_id)
        if group is None or group.generation != generation or not group.is_in(
                S.COMPLETING_REBALANCE):
            return []
        completions = []
        for member in group.members.values():
            member.assignment = assignments.get(member.member_id, b"")
            if member.awaiting_sync:
                completions.append(Completion(sync_key(group_id, member.member_id),
                                              self._sync_response(group, member.assignment)))
            member.awaiting_sync = False
        group.transition_to(S.STABLE, now)
        return completions

    def _assignment_failed(self, group_id: str, generation: int, error: ErrorCode,
                           now: int) -> CoordinatorResult:
        """The leader's assignment of ``generation`` could not be stored (``error`` is the
        client's answer): parked SyncGroup replies get it and the group rebalances again."""
        group = self.groups.get(group_id)
        result = CoordinatorResult()
        if group is None or group.generation != generation or not group.is_in(
                S.COMPLETING_REBALANCE):
            return result
        for member in group.members.values():
            member.assignment = b""
        result.completions += self._fail_parked_syncs(group, error)
        reason = (f"the assignment of generation {group.generation} could not be written "
                  f"({error.name})")
        return result.merge(self._prepare_rebalance_or_complete_join(group, now, reason))

    def _replacement_failed(self, group_id: str, r: _StaticReplacement, error: ErrorCode,
                            now: int) -> CoordinatorResult:
        """A restarted static member's new id could not be stored: the old one is put back
        (while nothing else changed the group meanwhile) and the JoinGroup gets ``error``."""
        group = self.groups.get(group_id)
        result = CoordinatorResult()
        if (
            group is not None
            and group.is_in(S.STABLE)
            and group.static_member_id(r.group_instance_id) == r.new_member_id
            and not group.has_member(r.old_member_id)
        ):
            result.completions.append(self._undo_replacement(group, r, error, now))
        return result

    def _undo_replacement(
        self, group: ClassicGroup, r: _StaticReplacement, error: ErrorCode, now: int
    ) -> Completion:
        gid = group.group_id
        member = group.member(r.new_member_id)
        group.update_member(member, r.protocols, r.rebalance_timeout_ms, r.session_timeout_ms)
        self.timers.cancel(heartbeat_key(gid, r.new_member_id))
        old = group.replace_static_member(r.group_instance_id, r.new_member_id, r.old_member_id)
        group.restore_order(list(r.order_before))
        self._schedule_heartbeat(group, old, now)
        return Completion(
            join_key(gid, r.new_member_id),
            JoinGroupResponse(
                error=error,
                member_id=NO_MEMBER_ID,
                generation=group.generation,
                protocol_type=group.protocol_type,
                protocol=group.protocol,
                leader=r.leader_before or "",
            ),
        )
