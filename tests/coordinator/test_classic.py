"""The classic group coordinator core, driven by a fake clock: exact records and replies."""

from __future__ import annotations

import dataclasses
import random

import pytest
from kio.schema.errors import ErrorCode as E

from brook.clock import FakeClock
from brook.coordinator.common.result import Completion, CoordinatorRecord
from brook.coordinator.group.classic import (
    ClassicGroupCoordinator,
    GroupConfig,
    Heartbeat,
    HeartbeatResponse,
    JoinedMember,
    JoinGroup,
    JoinGroupResponse,
    LeaveGroup,
    LeavingMember,
    SyncGroup,
    SyncGroupResponse,
)
from brook.coordinator.group.classic_group import GroupState as S
from brook.coordinator.group.schemas import GroupMetadataKey, GroupMetadataValue
from tests.support.classic_harness import Harness, mm, stored
from tests.support.coordinator_harness import CoordinatorHarness
from tests.support.examples import SCALE

# --- JoinGroup ------------------------------------------------------------------------------------


def test_first_join_without_member_id_gets_member_id_required():
    h = Harness()
    r = h.join(client="a")
    assert r.response == JoinGroupResponse(E.member_id_required, member_id="a-1")
    assert r.records == [] and h.group.pending_members == {"a-1"}
    assert h.group.state is S.EMPTY and not h.group.members


def test_old_versions_join_at_once_without_member_id_required():
    h = Harness()
    r = h.join(client="a", version=3)
    assert r.parked == "join-g-a-1"
    assert h.replies["join-g-a-1"].error is E.none


def test_single_member_join_completes_with_itself_as_leader():
    h = Harness()
    r = h.join_new("a")
    assert r.response is None and r.parked == "join-g-a-1" and r.records == []
    assert r.completions == [
        Completion(
            "join-g-a-1",
            JoinGroupResponse(E.none, "a-1", 1, "consumer", "range", "a-1",
                              (JoinedMember("a-1", None, b"sub"),)),
        )
    ]
    assert h.group.state is S.COMPLETING_REBALANCE


def test_join_with_unknown_member_id():
    h = Harness()
    assert h.join(member_id="nobody").response.error is E.unknown_member_id
    h.join_new("a")
    assert h.join(member_id="nobody").response.error is E.unknown_member_id


@pytest.mark.parametrize("session", [5_999, 1_800_001])
def test_session_timeout_out_of_bounds(session):
    h = Harness()
    assert h.join(session=session).response.error is E.invalid_session_timeout
    assert "g" not in h.core.groups


def test_session_timeout_bounds_are_inclusive():
    h = Harness()
    assert h.join(session=6_000).response.error is E.member_id_required
    assert h.join(session=1_800_000).response.error is E.member_id_required


def test_protocol_type_and_protocols_must_match_the_group():
    h = Harness()
    h.join_new("a")
    assert h.join(ptype="connect").response.error is E.inconsistent_group_protocol
    assert h.join(protocols=(("sticky", b""),)).response.error is E.inconsistent_group_protocol
    assert h.join(protocols=()).response.error is E.inconsistent_group_protocol


def test_group_max_size():
    h = Harness(max_size=2)
    h.join_new("a")
    assert h.join(client="b").response.error is E.member_id_required
    assert h.join(client="c").response.error is E.group_max_size_reached
    # the handed-out id is still welcome
    assert h.join(member_id="b-2", client="b").parked == "join-g-b-2"


def test_second_member_starts_a_rebalance_that_completes_when_all_rejoined():
    h = Harness()
    [a] = h.stable("a")
    r = h.join_new("b")
    assert r.parked == "join-g-b-2" and r.completions == []
    assert h.group.state is S.PREPARING_REBALANCE
    r = h.join(member_id=a, client="a")
    assert [c.key for c in r.completions] == ["join-g-a-1", "join-g-b-2"]
    leader, follower = (c.response for c in r.completions)
    assert leader.generation == follower.generation == 2 and leader.leader == "a-1"
    assert [m.member_id for m in leader.members] == ["a-1", "b-2"] and follower.members == ()
    assert h.group.state is S.COMPLETING_REBALANCE


def test_rebalance_timeout_removes_members_that_did_not_rejoin():
    h = Harness()
    a, b = h.stable("a", "b")
    h.join(member_id=b, client="b", protocols=(("range", b"new"),), rebalance=20_000)
    assert h.group.state is S.PREPARING_REBALANCE
    for _ in range(3):  # a heartbeats (and is told to rejoin) but does not rejoin
        assert h.advance(9_000).completions == []
        assert h.heartbeat(a, 1).response.error is E.rebalance_in_progress
    assert h.advance(2_999).completions == []
    r = h.advance(1)
    # the rebalance timeout is the group's longest (a's 30 s); a never rejoined: gone, b leads
    assert [c.key for c in r.completions] == [f"join-g-{b}"]
    assert r.completions[0].response.leader == b and r.completions[0].response.generation == 2
    assert list(h.group.members) == [b]


def test_initial_rebalance_delay_waits_for_more_members():
    h = Harness(initial_rebalance_delay_ms=3_000)
    h.join_new("a")
    assert h.group.state is S.PREPARING_REBALANCE and h.replies == {}
    h.advance(2_000)
    h.join_new("b")
    assert h.advance(1_000).completions == []  # b joined during the delay: another one
    r = h.advance(3_000)
    assert sorted(c.key for c in r.completions) == ["join-g-a-1", "join-g-b-2"]
    assert h.group.generation == 1


def test_initial_rebalance_delay_ends_with_the_delay_when_nobody_else_joins():
    h = Harness(initial_rebalance_delay_ms=3_000)
    h.join_new("a")
    assert h.advance(2_999).completions == []
    assert [c.key for c in h.advance(1).completions] == ["join-g-a-1"]


def test_follower_rejoining_unchanged_in_stable_gets_the_current_generation():
    h = Harness()
    a, b = h.stable("a", "b")
    r = h.join(member_id=b, client="b")
    assert r.response == JoinGroupResponse(E.none, b, 1, "consumer", "range", a, ())
    assert h.group.state is S.STABLE


def test_leader_rejoining_in_stable_starts_a_rebalance():
    h = Harness()
    a, b = h.stable("a", "b")
    assert h.join(member_id=a, client="a").parked == f"join-g-{a}"
    assert h.group.state is S.PREPARING_REBALANCE


# --- SyncGroup ------------------------------------------------------------------------------------


def test_leader_sync_writes_group_metadata_then_answers_everyone():
    h = Harness()
    h.join_new("a")
    h.join_new("b")
    h.join(member_id="a-1", client="a")  # completes generation 2
    assert h.group.generation == 2
    r = h.sync("b-2", 2)
    assert r.parked == "sync-g-b-2" and r.records == [] and r.completions == []
    r = h.sync("a-1", 2, [("a-1", b"A"), ("b-2", b"B")])
    assert r.records == [stored(2, "a-1", [mm("a-1", b"A", "a"), mm("b-2", b"B", "b")])]
    assert r.completions == [
        Completion("sync-g-a-1", SyncGroupResponse(E.none, b"A", "consumer", "range")),
        Completion("sync-g-b-2", SyncGroupResponse(E.none, b"B", "consumer", "range")),
    ]
    assert h.group.state is S.STABLE
    assert h.group.member("b-2").assignment == b"B"


def test_members_left_out_of_the_assignment_get_an_empty_one():
    h = Harness()
    h.join_new("a")
    r = h.sync("a-1", 1, [])
    assert r.records == [stored(1, "a-1", [mm("a-1", b"", "a")])]


def test_sync_in_stable_returns_the_current_assignment():
    h = Harness()
    a, b = h.stable("a", "b")
    assert h.sync(b, 1).response == SyncGroupResponse(E.none, b.encode(), "consumer", "range")


def test_sync_errors():
    h = Harness()
    assert h.sync("x", 0).response.error is E.unknown_member_id
    a, b = h.stable("a", "b")
    assert h.sync("x", 1).response.error is E.unknown_member_id
    assert h.sync(a, 7).response.error is E.illegal_generation
    h.join_new("c")
    assert h.sync(a, 1).response.error is E.rebalance_in_progress


def test_a_rebalance_fails_parked_syncs_with_rebalance_in_progress():
    h = Harness()
    h.join_new("a")
    h.join_new("b")
    h.join(member_id="a-1", client="a")
    h.sync("b-2", 2)
    r = h.join_new("c")
    assert r.completions == [
        Completion("sync-g-b-2", SyncGroupResponse(E.rebalance_in_progress))
    ]
    assert h.group.state is S.PREPARING_REBALANCE


# --- Heartbeat and session expiry -----------------------------------------------------------------


def test_heartbeat_answers():
    h = Harness()
    assert h.heartbeat("x", 0).response == HeartbeatResponse(E.unknown_member_id)
    a, b = h.stable("a", "b")
    assert h.heartbeat(a, 1).response == HeartbeatResponse(E.none)
    assert h.heartbeat(a, 0).response == HeartbeatResponse(E.illegal_generation)
    assert h.heartbeat("x", 1).response == HeartbeatResponse(E.unknown_member_id)
    h.join_new("c")
    assert h.heartbeat(a, 1).response == HeartbeatResponse(E.rebalance_in_progress)


def test_session_expiry_removes_the_member_and_rebalances():
    h = Harness()
    a, b = h.stable("a", "b")
    for _ in range(3):
        assert h.advance(9_000).completions == []
        h.heartbeat(a, 1)
    assert list(h.group.members) == [a]  # b's session ran out at 10 s
    # a alone was still awaited: its rejoin completes the rebalance
    assert h.group.state is S.PREPARING_REBALANCE
    r = h.join(member_id=a, client="a")
    assert [c.key for c in r.completions] == [f"join-g-{a}"] and h.group.generation == 2


def test_heartbeat_timer_key_is_per_member():
    h = Harness()
    a, b = h.stable("a", "b")
    assert {f"heartbeat-g-{a}", f"heartbeat-g-{b}"} <= h.core.timers.keys()


def test_last_member_expiring_leaves_an_empty_group_and_writes_it():
    h = Harness()
    [a] = h.stable("a")
    r = h.advance(10_000)
    assert r.records == [
        CoordinatorRecord(GroupMetadataKey("g"), GroupMetadataValue("consumer", 2, None, None, 10_000, ()))
    ]
    assert h.group.state is S.EMPTY and h.group.generation == 2


def test_unused_member_id_required_expires():
    h = Harness(initial_rebalance_delay_ms=0)
    [a] = h.stable("a")
    h.join(client="b")
    assert h.group.pending_members == {"b-2"}
    h.heartbeat(a, 1)
    h.advance(9_999)
    h.heartbeat(a, 1)
    h.advance(1)
    assert h.group.pending_members == set()


# --- LeaveGroup -----------------------------------------------------------------------------------


def test_leave_removes_the_member_and_rebalances():
    h = Harness()
    a, b = h.stable("a", "b")
    r = h.leave((b,), ("x",))
    assert r.response.members == ((b, None, E.none), ("x", None, E.unknown_member_id))
    assert list(h.group.members) == [a] and h.group.state is S.PREPARING_REBALANCE
    assert f"heartbeat-g-{b}" not in h.core.timers.keys()


def test_leader_leaving_mid_sync():
    h = Harness()
    h.join_new("a")
    h.join_new("b")
    h.join(member_id="a-1", client="a")
    h.sync("b-2", 2)
    r = h.leave(("a-1",))
    assert r.completions == [
        Completion("sync-g-b-2", SyncGroupResponse(E.rebalance_in_progress))
    ]
    assert h.group.leader_id == "b-2" and h.group.state is S.PREPARING_REBALANCE
    r = h.join(member_id="b-2", client="b")
    assert r.completions[0].response.leader == "b-2" and h.group.generation == 3


def test_leave_of_a_static_member_with_another_member_id_is_fenced():
    h = Harness()
    h.join(client="s", instance="i")
    assert h.leave(("other", "i")).response.members == (("other", "i", E.fenced_instance_id),)


def test_leave_of_unknown_group():
    assert Harness().leave(("x",)).response.error is E.unknown_member_id


def test_everyone_leaving_empties_the_group():
    h = Harness()
    a, b = h.stable("a", "b")
    r = h.leave((a,), (b,))
    assert r.records == [
        CoordinatorRecord(GroupMetadataKey("g"), GroupMetadataValue("consumer", 2, None, None, 0, ()))
    ]
    assert h.group.state is S.EMPTY


# --- replay ---------------------------------------------------------------------------------------


def test_replaying_the_log_gives_the_same_group():
    h = Harness()
    h.stable("a", "b")
    loaded = ClassicGroupCoordinator()
    for record in h.log:
        loaded.replay(record.key, record.value, 99)
    g, live = loaded.groups["g"], h.group
    assert g.state is S.STABLE
    assert (g.generation, g.protocol) == (live.generation, live.protocol)
    assert g.leader_id == live.leader_id
    assert {m: x.assignment for m, x in g.members.items()} == {
        m: x.assignment for m, x in live.members.items()
    }


def test_a_tombstone_removes_the_group():
    core = ClassicGroupCoordinator()
    core.replay(GroupMetadataKey("g"), GroupMetadataValue("", 1, None, None, 0, ()), 0)
    core.replay(GroupMetadataKey("g"), None, 1)
    assert core.groups == {}


# --- the sync deadline ----------------------------------------------------------------------------


def two_joined(h):
    """a-1 and b-2 through the join phase of generation 2 (CompletingRebalance at t=0)."""
    h.join_new("a")
    h.join_new("b")
    h.join(member_id="a-1", client="a")
    assert h.group.state is S.COMPLETING_REBALANCE and h.group.generation == 2


def test_members_that_send_no_sync_within_the_rebalance_timeout_are_removed():
    h = Harness()
    two_joined(h)
    assert h.core.timers.deadline("sync-g") == 30_000
    h.sync("a-1", 2, [("a-1", b"A"), ("b-2", b"B")])  # the leader: Stable, b still to sync
    assert h.group.state is S.STABLE and h.group.pending_sync == {"b-2"}
    for _ in range(3):  # both heartbeat, b never syncs
        h.advance(9_000)
        h.heartbeat("a-1", 2)
        h.heartbeat("b-2", 2)
    assert h.advance(2_999).records == [] and list(h.group.members) == ["a-1", "b-2"]
    h.advance(1)
    assert list(h.group.members) == ["a-1"] and h.group.state is S.PREPARING_REBALANCE
    assert "heartbeat-g-b-2" not in h.core.timers.keys()


def test_sync_deadline_while_completing_rebalance_answers_the_parked_syncs():
    h = Harness()
    two_joined(h)
    h.sync("b-2", 2)  # parked; the leader never syncs
    h.heartbeat("a-1", 2)
    for _ in range(3):
        h.advance(9_000)
        h.heartbeat("a-1", 2)
    r = h.advance(3_000)
    assert r.completions == [Completion("sync-g-b-2", SyncGroupResponse(E.rebalance_in_progress))]
    assert list(h.group.members) == ["b-2"] and h.group.leader_id == "b-2"
    assert h.group.state is S.PREPARING_REBALANCE


def test_all_syncs_received_cancels_the_sync_deadline():
    h = Harness()
    two_joined(h)
    h.sync("b-2", 2)
    h.sync("a-1", 2, [("a-1", b"A"), ("b-2", b"B")])
    assert "sync-g" not in h.core.timers.keys()


def test_a_rebalance_cancels_the_sync_deadline():
    h = Harness()
    two_joined(h)
    h.join_new("c")
    assert "sync-g" not in h.core.timers.keys() and h.group.pending_sync == set()


def test_a_sync_deadline_of_an_older_generation_does_nothing():
    h = Harness()
    two_joined(h)
    h.join_new("c")  # rebalance
    h.join(member_id="a-1", client="a")
    h.join(member_id="b-2", client="b")
    assert h.group.generation == 3
    assert h.core._sync_deadline_passed("g", 2, 0).completions == []
    assert set(h.group.members) == {"a-1", "b-2", "c-3"}


# --- a failed append of the leader's assignment -------------------------------------------------


def test_failed_append_of_the_assignment_answers_the_parked_syncs_and_rebalances():
    h = Harness()
    two_joined(h)
    h.sync("b-2", 2)  # parked
    r = h.core.sync_group(SyncGroup("g", "a-1", 2, (("a-1", b"A"), ("b-2", b"B"))), 0)
    assert r.records and r.parked == "sync-g-a-1"
    after = r.failed(E.not_coordinator, 0)
    assert after.completions == [
        Completion("sync-g-a-1", SyncGroupResponse(E.not_coordinator)),
        Completion("sync-g-b-2", SyncGroupResponse(E.not_coordinator)),
    ]
    assert h.group.state is S.PREPARING_REBALANCE and h.group.generation == 2
    assert all(m.assignment == b"" for m in h.group.members.values())
    # everyone rejoins: the next generation
    h.join(member_id="a-1", client="a")
    r = h.join(member_id="b-2", client="b")
    assert h.group.generation == 3 and h.group.state is S.COMPLETING_REBALANCE


def test_a_failed_append_error_is_mapped_as_kafka_does():
    h = Harness()
    two_joined(h)
    r = h.core.sync_group(SyncGroup("g", "a-1", 2, ()), 0)
    after = r.failed(E.request_timed_out, 0)
    assert after.completions[0].response.error is E.coordinator_not_available


def test_a_failed_append_of_an_empty_groups_metadata_changes_nothing():
    h = Harness()
    a, b = h.stable("a", "b")
    r = h.core.leave_group(LeaveGroup("g", (LeavingMember(a), LeavingMember(b))), 0)
    assert r.records and h.group.state is S.EMPTY
    after = r.failed(E.not_coordinator, 0)
    assert after.completions == [] and after.records == [] and h.group.state is S.EMPTY


# --- Dead ---------------------------------------------------------------------------------------


def test_a_dead_group_answers_coordinator_not_available():
    h = Harness()
    a, b = h.stable("a", "b")
    h.group.transition_to(S.DEAD, 0)  # e.g. its partition is being unloaded
    assert h.join(member_id=a, client="a").response.error is E.coordinator_not_available
    assert h.sync(a, 1).response.error is E.coordinator_not_available
    assert h.heartbeat(a, 1).response.error is E.coordinator_not_available
    assert h.leave((a,)).response.error is E.coordinator_not_available
    assert "COORDINATOR_NOT_AVAILABLE" in S.DEAD.__doc__
    assert "UNKNOWN_MEMBER_ID" not in S.DEAD.__doc__


# --- a seeded multi-client simulation -------------------------------------------------------------

SIM_PROTOCOLS = [
    (("range", b"s"),),
    (("rr", b""), ("range", b"s")),
    (("range", b"t"), ("rr", b"")),
    (("rr", b""),),
]
SIM_ERRORS = [E.not_coordinator, E.coordinator_not_available, E.unknown_server_error,
              E.kafka_storage_error, E.request_timed_out]


class SimClient:
    def __init__(self, name, group_id, instance):
        self.name, self.group_id, self.instance = name, group_id, instance
        self.member_id, self.generation, self.members = "", -1, ()
        self.protocols = SIM_PROTOCOLS[0]


class Simulation:
    """Clients that join, sync, heartbeat, leave, restart and misbehave against one shard's
    groups on a fake clock, through the shared harness (which fails some appends)."""

    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.h = CoordinatorHarness(0, GroupConfig(
            initial_rebalance_delay_ms=self.rng.choice([0, 0, 500]), max_size=6))
        self.core = self.h.shard.classic
        self.log = self.h.log
        self.written: dict[str, GroupMetadataValue] = {}
        self.parked: dict[str, SimClient | None] = {}
        self.leaders: dict[tuple[str, int], set[str]] = {}
        self.highest: dict[str, int] = {}
        #: (group, generation) a garbage SyncGroup was sent for: its assignment may be that one
        self.garbage_synced: set[tuple[str, int]] = set()
        self.clients = []
        for n in range(self.rng.randint(2, 7)):
            group = self.rng.choice(["g", "g", "h"])
            instance = f"i{n}" if self.rng.random() < 0.5 else None
            self.clients.append(SimClient(f"c{n}", group, instance))

    @property
    def now(self):
        return self.h.now

    # the runtime: the harness, with one append in seven or so failing
    def run(self, result, owner=None):
        if result.parked is not None:
            self.parked[result.parked] = owner
        fail = self.rng.choice(SIM_ERRORS) if result.records and self.rng.random() < 0.15 else None
        logged, delivered = len(self.h.log), len(self.h.deliveries)
        self.h.run(result, fail=fail)
        for record in self.h.log[logged:]:
            if isinstance(record.key, GroupMetadataKey):
                self.written[record.key.group] = record.value
        for key, response in self.h.deliveries[delivered:]:
            self.deliver(key, response)
        if fail is not None:
            return None
        if result.response is not None and owner is not None:
            self.handle(owner, result.response)
        return result.response

    def deliver(self, key, response):
        owner = self.parked.pop(key, None)
        if owner is not None and response is not None:
            self.handle(owner, response)

    # the clients
    def handle(self, c, response):
        if isinstance(response, JoinGroupResponse):
            if response.error is E.member_id_required:
                c.member_id = response.member_id
            elif response.error in (E.unknown_member_id, E.fenced_instance_id):
                c.member_id, c.generation = "", -1
            elif response.error is E.none:
                c.member_id, c.generation = response.member_id, response.generation
                if response.members and not response.skip_assignment:
                    self.leaders.setdefault((c.group_id, response.generation), set()).add(
                        response.member_id
                    )
                c.members = response.members if not response.skip_assignment else ()
        elif isinstance(response, (SyncGroupResponse, HeartbeatResponse)):
            if response.error in (E.unknown_member_id, E.fenced_instance_id):
                c.member_id, c.generation = "", -1

    def step(self):
        rng, c = self.rng, self.rng.choice(self.clients)
        action = rng.choices(
            ["join", "sync", "heartbeat", "leave", "restart", "advance", "garbage"],
            [6, 6, 6, 1, 1, 5, 1],
        )[0]
        now = self.now
        if action == "join":
            if rng.random() < 0.1:
                c.protocols = rng.choice(SIM_PROTOCOLS)
            request = JoinGroup(c.group_id, c.member_id, "consumer", c.protocols,
                                rng.choice([6_000, 10_000]), rng.choice([5_000, 20_000]),
                                c.instance, c.name, "/h", rng.choice([3, 5, 8, 9]))
            self.run(self.core.join_group(request, now), c)
        elif action == "sync":
            assignments = tuple((m.member_id, f"gen{c.generation}".encode()) for m in c.members)
            request = SyncGroup(c.group_id, c.member_id, c.generation, assignments, c.instance)
            self.run(self.core.sync_group(request, now), c)
        elif action == "heartbeat":
            request = Heartbeat(c.group_id, c.member_id, c.generation, c.instance)
            self.run(self.core.heartbeat(request, now), c)
        elif action == "leave":
            by_instance = c.instance is not None and rng.random() < 0.5
            leaving = LeavingMember("" if by_instance else c.member_id, c.instance)
            self.run(self.core.leave_group(LeaveGroup(c.group_id, (leaving,)), now))
            c.member_id, c.generation, c.members = "", -1, ()
        elif action == "restart":
            c.member_id, c.generation, c.members = "", -1, ()
        elif action == "advance":
            self.h.clock.advance(rng.choice([1, 100, 1_000, 3_000, 7_000, 12_000]))
            self.run(self.core.poll(self.now))
        else:
            self.garbage(c)

    def garbage(self, c):
        rng, now = self.rng, self.now
        group = self.core.groups.get(c.group_id)
        member = rng.choice(["", "nobody", c.member_id, *(group.members if group else ())])
        instance = rng.choice([None, c.instance, "i0", "zzz"])
        generation = rng.choice([-1, 0, c.generation, c.generation + 1, 2**31 - 1])
        kind = rng.randrange(4)
        if kind == 0:
            request = JoinGroup(c.group_id, member, rng.choice(["", "consumer", "connect"]),
                                rng.choice([(), (("", b""),), *SIM_PROTOCOLS]),
                                rng.choice([0, 6_000, 10**9]), rng.choice([0, 1, 30_000]),
                                instance, "x", "/h", rng.choice([0, 4, 9]))
            self.run(self.core.join_group(request, now))
        elif kind == 1:
            # Sent by the leader of the current generation, it is a real assignment.
            self.garbage_synced.add((c.group_id, generation))
            request = SyncGroup(c.group_id, member, generation,
                                ((member, b"x"), ("nobody", b"y")), instance,
                                rng.choice([None, "consumer", "other"]),
                                rng.choice([None, "range", "rr", "zz"]))
            self.run(self.core.sync_group(request, now))
        elif kind == 2:
            self.run(self.core.heartbeat(Heartbeat(c.group_id, member, generation, instance), now))
        else:
            leaving = tuple(LeavingMember(m, i) for m, i in [(member, instance), ("", None)])
            self.run(self.core.leave_group(LeaveGroup(c.group_id, leaving), now))

    # the invariants
    def check(self):
        for gid, group in self.core.groups.items():
            assert group.generation >= self.highest.get(gid, 0), "generations only grow"
            self.highest[gid] = group.generation
            if group.members:
                assert group.leader_id in group.members
            for iid, mid in group.static_members.items():
                assert group.member(mid).group_instance_id == iid
            assert {m.group_instance_id for m in group.members.values()} - {None} == set(
                group.static_members
            )
            if group.is_in(S.STABLE):
                if (gid, group.generation) not in self.garbage_synced:
                    generations = {m.assignment for m in group.members.values()}
                    assert generations == {f"gen{group.generation}".encode()}, generations
                stored_value = dataclasses.replace(
                    group.to_metadata_value(), current_state_timestamp=0
                )
                assert stored_value == dataclasses.replace(
                    self.written[gid], current_state_timestamp=0
                )
        for (gid, generation), leaders in self.leaders.items():
            assert len(leaders) == 1, f"{gid} generation {generation} had leaders {leaders}"

    def check_reload(self):
        fresh = ClassicGroupCoordinator()
        for record in self.log:
            fresh.replay(record.key, record.value, self.now)
        assert set(fresh.groups) == set(self.written)
        for gid, value in self.written.items():
            assert fresh.groups[gid].to_metadata_value() == value


@pytest.mark.parametrize("seed", range(int(200 * min(1.0, SCALE))))  # 50 in make test-fast
def test_simulation(seed):
    sim = Simulation(seed)
    stable_seen = False
    for _ in range(600):
        sim.step()
        sim.check()
        stable_seen |= any(g.is_in(S.STABLE) for g in sim.core.groups.values())
    sim.check_reload()
    assert sim.log  # something was stored
    if seed < 10:
        assert stable_seen or not sim.written


def test_members_of_a_loaded_group_expire_if_they_never_come_back():
    h = Harness()
    record = stored(3, "a", [mm("a", b"A", session=10_000), mm("b", b"B", session=20_000)])
    h.core.replay(record.key, record.value, 0)
    assert h.group.state is S.STABLE
    h._run(h.core.loaded(0))
    h.advance(5_000)
    h.heartbeat("b", 3)  # b is back; a never returns
    h.advance(6_000)
    assert list(h.group.members) == ["b"] and h.group.state is S.PREPARING_REBALANCE


# --- offset commits: sessions kept alive, simple groups -------------------------------------------


def test_an_accepted_commit_keeps_the_members_session_alive():
    h = Harness()
    a, b = h.stable("a", "b")
    for _ in range(3):  # b only commits, never heartbeats
        h.advance(9_000)
        h.heartbeat(a, 1)
        assert h.core.commit_heartbeat("g", b, h.clock.milliseconds())
    assert list(h.group.members) == [a, b] and h.group.state is S.STABLE
    h.advance(9_000)
    h.heartbeat(a, 1)
    h.advance(1_000)  # 10 s since b's last commit
    assert list(h.group.members) == [a]


def test_commits_keep_sessions_only_of_members_of_stable_or_rebalancing_groups():
    h = Harness()
    assert not h.core.commit_heartbeat("g", "x", 0)  # no group
    a, b = h.stable("a", "b")
    assert not h.core.commit_heartbeat("g", "x", 0)  # not a member
    h.join_new("c")
    assert h.group.state is S.PREPARING_REBALANCE
    assert h.core.commit_heartbeat("g", a, 0)
    h.join(member_id=a, client="a")
    h.join(member_id=b, client="b")
    assert h.group.state is S.COMPLETING_REBALANCE
    assert not h.core.commit_heartbeat("g", a, 0)


def commit_record(group, partition=0, offset=1):
    from brook.coordinator.group.schemas import OffsetCommitKey, OffsetCommitValue

    return OffsetCommitKey(group, "t", partition), OffsetCommitValue(offset, -1, "", 0)


def test_a_commit_for_an_unknown_group_creates_it_empty_without_a_protocol_type():
    core = ClassicGroupCoordinator()
    key, value = commit_record("simple")
    core.replay(key, None, 5)  # a tombstone creates nothing
    assert core.groups == {}
    core.replay(key, value, 7)
    group = core.groups["simple"]
    assert group.state is S.EMPTY and group.protocol_type is None
    assert (group.generation, group.members, group.state_timestamp) == (0, {}, 7)
    core.replay(*commit_record("simple", 1), 8)
    assert core.groups["simple"] is group


def test_a_commit_leaves_a_known_group_as_it_is():
    h = Harness()
    a, b = h.stable("a", "b")
    before = h.group
    h.core.replay(*commit_record("g"), 1)
    assert h.core.groups["g"] is before and h.group.state is S.STABLE


def test_a_simple_group_can_be_joined_and_deleted():
    h = Harness()
    h.core.replay(*commit_record("g"), 0)
    [a] = h.stable("a")
    assert h.group.protocol_type == "consumer" and h.group.generation == 1
    h.leave((a,))
    h.core.replay(GroupMetadataKey("g"), None, 1)
    assert h.core.groups == {}


def test_simple_groups_are_loaded_from_their_commits_and_expire_with_them():
    from brook.coordinator.group.offsets import OffsetsConfig, OffsetsManager

    clock = FakeClock(1_000)
    core = ClassicGroupCoordinator()
    manager = OffsetsManager(
        OffsetsConfig(offsets_retention_minutes=1, offsets_retention_check_interval_ms=1_000),
        core.groups,
    )
    for record in (commit_record("simple", 0), commit_record("simple", 1)):
        core.replay(*record, clock.milliseconds())
        manager.replay(*record, clock.milliseconds())
    assert core.groups["simple"].state is S.EMPTY
    manager.poll(clock.milliseconds())  # schedules the first check
    clock.advance(60_000)
    expired = manager.poll(clock.milliseconds())
    from brook.coordinator.group.schemas import OffsetCommitKey

    assert expired.records == [
        CoordinatorRecord(OffsetCommitKey("simple", "t", 0), None),
        CoordinatorRecord(OffsetCommitKey("simple", "t", 1), None),
        CoordinatorRecord(GroupMetadataKey("simple"), None),
    ]
    for record in expired.records:
        core.replay(record.key, record.value, clock.milliseconds())
        manager.replay(record.key, record.value, clock.milliseconds())
    assert core.groups == {} and not manager.has_offsets("simple")


# --- the rebalance counter ------------------------------------------------------------------------


def test_rebalances_count_completed_join_phases():
    h = Harness()
    assert h.core.rebalances == 0
    [a] = h.stable("a")
    assert h.core.rebalances == 1
    h.heartbeat(a, 1)
    h.sync(a, 1)
    h.join(member_id=a, client="a")  # the leader rejoining starts a rebalance...
    assert h.core.rebalances == 2  # ...that completes at once: it is the only member
    h.sync(a, 2, [(a, b"x")])
    b = h.join_new("b").parked.removeprefix("join-g-")
    assert h.core.rebalances == 2  # the join phase waits for a
    h.join(member_id=a, client="a")
    assert h.core.rebalances == 3
    h.sync(a, 3, [(a, b"x"), (b, b"y")])
    h.sync(b, 3)
    h.advance(10_000)  # both sessions run out: a rebalance that ends Empty
    assert h.group.state is S.EMPTY and h.core.rebalances == 4


def test_rebalances_after_the_initial_delay_and_a_rebalance_timeout():
    h = Harness(initial_rebalance_delay_ms=3_000)
    h.join_new("a")
    h.join_new("b")
    assert h.core.rebalances == 0
    h.advance(3_000)  # b joined during the delay: it is extended once
    assert h.core.rebalances == 0
    h.advance(3_000)  # one join phase for both
    assert h.core.rebalances == 1 and h.group.generation == 1
    a, b = h.group.members
    h.sync(a, 1, [(a, b"x"), (b, b"y")])
    h.sync(b, 1)
    h.join(member_id=a, client="a", protocols=(("range", b"new"),))
    h.heartbeat(b, 1)
    h.advance(30_000)  # b never rejoins: the rebalance timeout ends the join phase without it
    assert list(h.group.members) == [a] and h.core.rebalances == 2


def test_a_run_of_loaded_commits_creates_the_group_as_single_commits_do():
    core = ClassicGroupCoordinator()
    core.replay_commits("simple", "t", [], 1)  # nothing in the run: nothing happens
    assert core.groups == {}
    core.replay_commits("simple", "t", [(0, 5, -1, 0), (1, 7, -1, 0)], 2)
    group = core.groups["simple"]
    assert group.state is S.EMPTY and group.protocol_type is None and group.state_timestamp == 2
    h = Harness()
    a, b = h.stable("a", "b")
    h.core.replay_commits("g", "t", [(0, 5, -1, 0)], 3)
    assert h.group.state is S.STABLE and list(h.group.members) == [a, b]
