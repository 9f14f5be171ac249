"""Static membership (KIP-345) in the classic coordinator: restarts, fencing, expiry, leaving."""

from __future__ import annotations

from kio.schema.errors import ErrorCode as E
from tests.support.classic_harness import PROTOS, Harness, mm, stored

from brook.coordinator.common.result import Completion
from brook.coordinator.group.classic import (
    ClassicGroupCoordinator,
    JoinedMember,
    JoinGroup,
    JoinGroupResponse,
    SyncGroupResponse,
)
from brook.coordinator.group.classic_group import GroupState as S


def static_stable(*instances: str) -> tuple[Harness, list[str]]:
    """A Stable group of static members (instance i joins as client i) that all joined during
    a 100 ms initial delay: generation 1 at t=100, assignment b"<member id>"."""
    h = Harness(initial_rebalance_delay_ms=100)
    ids = []
    for i in instances:
        r = h.join(client=i, instance=i)
        assert r.parked is not None  # static members join at once (no MEMBER_ID_REQUIRED)
        ids.append(r.parked.removeprefix("join-g-"))
    h.advance(100)  # members joined during the delay: one more delay
    h.advance(100)
    assert h.group.state is S.COMPLETING_REBALANCE and h.group.generation == 1
    h.sync(ids[0], 1, [(m, m.encode()) for m in ids], instance=instances[0])
    for m, i in zip(ids[1:], instances[1:]):
        h.sync(m, 1, instance=i)
    assert h.group.state is S.STABLE
    return h, ids


def test_restart_in_stable_with_unchanged_protocols_takes_the_old_place_without_rebalance():
    h, (a, b) = static_stable("a", "b")
    r = h.join(client="b", instance="b")  # b restarted: no member id
    new = "b-3"
    assert r.parked == f"join-g-{new}"
    # no rebalance: the group is stored again with the new member id, same generation
    assert h.group.state is S.STABLE and h.group.generation == 1
    assert r.records == [stored(1, a, [mm(a, a.encode(), "a", instance="a"),
                                       mm(new, b.encode(), "b", instance="b")], ts=200)]
    assert r.completions == [
        Completion(f"join-g-{new}", JoinGroupResponse(E.none, new, 1, "consumer", "range", a))
    ]
    assert list(h.group.members) == [a, new] and h.group.static_members["b"] == new
    # its SyncGroup gets the old member's assignment
    assert h.sync(new, 1, instance="b").response == SyncGroupResponse(
        E.none, b.encode(), "consumer", "range"
    )


def test_the_old_member_id_is_fenced_after_a_restart():
    h, (a, b) = static_stable("a", "b")
    h.join(client="b", instance="b")
    assert h.heartbeat(b, 1, instance="b").response.error is E.fenced_instance_id
    assert h.sync(b, 1, instance="b").response.error is E.fenced_instance_id
    assert h.join(member_id=b, client="b", instance="b").response.error is E.fenced_instance_id
    assert h.leave((b, "b")).response.members == ((b, "b", E.fenced_instance_id),)
    # without its instance id the old id is simply unknown
    assert h.heartbeat(b, 1).response.error is E.unknown_member_id
    assert h.group.state is S.STABLE


def test_the_old_member_ids_heartbeat_timer_goes_and_the_new_one_is_watched():
    h, (a, b) = static_stable("a", "b")
    h.join(client="b", instance="b")
    keys = h.core.timers.keys()
    assert f"heartbeat-g-{b}" not in keys and "heartbeat-g-b-3" in keys


def test_restarted_static_leader_old_clients_are_told_the_old_leader():
    """Before JoinGroup v9 a restarted leader must not compute an assignment: it is told the
    previous leader id, so it acts as a follower."""
    h, (a, b) = static_stable("a", "b")
    r = h.join(client="a", instance="a", version=8)
    assert r.completions[-1].response == JoinGroupResponse(
        E.none, "a-3", 1, "consumer", "range", a, ()
    )
    assert h.group.leader_id == "a-3" and h.group.state is S.STABLE


def test_restarted_static_leader_v9_skips_assignment():
    h, (a, b) = static_stable("a", "b")
    r = h.join(client="a", instance="a", version=9)
    assert r.completions[-1].response == JoinGroupResponse(
        E.none, "a-3", 1, "consumer", "range", "a-3",
        (JoinedMember(b, "b", b"sub"), JoinedMember("a-3", "a", b"sub")),
        skip_assignment=True,
    )


def test_restart_in_stable_with_a_changed_protocol_rebalances():
    h, (a, b) = static_stable("a", "b")
    h.join(member_id=a, client="a", instance="a", protocols=(("rr", b""), ("range", b"sub")))
    # a rejoined (the leader: a rebalance); complete it so both support rr and range
    h.join(member_id=b, client="b", instance="b", protocols=(("rr", b""), ("range", b"sub")))
    assert h.group.protocol == "rr" and h.group.generation == 2
    h.sync(a, 2, [(a, b"A"), (b, b"B")], instance="a")
    h.sync(b, 2, instance="b")
    assert h.group.state is S.STABLE
    # b restarts supporting range only: the group's protocol would change, so it rebalances
    r = h.join(client="b", instance="b", protocols=(("range", b"sub"),))
    assert r.records == [] and r.parked == "join-g-b-3"
    assert h.group.state is S.PREPARING_REBALANCE
    r = h.join(member_id=a, client="a", instance="a", protocols=(("rr", b""), ("range", b"sub")))
    assert sorted(c.key for c in r.completions) == ["join-g-a-1", "join-g-b-3"]
    assert h.group.protocol == "range" and h.group.generation == 3


def test_restart_in_stable_with_other_metadata_for_the_same_protocol_does_not_rebalance():
    """As Kafka: only a change of the group's selected protocol makes a restart rebalance."""
    h, (a, b) = static_stable("a", "b")
    r = h.join(client="b", instance="b", protocols=(("range", b"other"),))
    assert h.group.state is S.STABLE
    assert r.records[0].value.members[1].subscription == b"other"


def test_restart_while_completing_rebalance_fences_the_parked_sync_and_rebalances():
    h = Harness(initial_rebalance_delay_ms=100)
    h.join(client="a", instance="a")
    h.join(client="b", instance="b")
    h.advance(100)
    h.advance(100)
    assert h.group.state is S.COMPLETING_REBALANCE and h.group.generation == 1
    h.sync("b-2", 1, instance="b")  # parked
    r = h.join(client="b", instance="b")
    assert r.parked == "join-g-b-3"
    assert r.completions == [Completion("sync-g-b-2", SyncGroupResponse(E.fenced_instance_id))]
    assert h.group.state is S.PREPARING_REBALANCE
    # the generation completes once a (the only other member) rejoins
    r = h.join(member_id="a-1", client="a", instance="a")
    assert sorted(c.key for c in r.completions) == ["join-g-a-1", "join-g-b-3"]
    assert h.group.generation == 2 and list(h.group.members) == ["a-1", "b-3"]


def test_restart_while_preparing_rebalance_fences_the_parked_join():
    h, (a, b) = static_stable("a", "b")
    h.join(member_id=b, client="b", instance="b", protocols=(("range", b"x"),))  # rebalance
    assert h.group.state is S.PREPARING_REBALANCE
    r = h.join(client="b", instance="b")
    assert r.completions[0] == Completion(
        f"join-g-{b}", JoinGroupResponse(E.fenced_instance_id, b)
    )
    r = h.join(member_id=a, client="a", instance="a")
    assert sorted(c.key for c in r.completions) == [f"join-g-{a}", "join-g-b-3"]


def test_static_members_that_do_not_rejoin_are_kept_through_the_join_phase():
    h, (a, b) = static_stable("a", "b")
    h.join(member_id=a, client="a", instance="a")  # the leader rejoins: rebalance
    for _ in range(3):  # b heartbeats (told to rejoin) but does not rejoin
        h.advance(9_000)
        assert h.heartbeat(b, 1, instance="b").response.error is E.rebalance_in_progress
    r = h.advance(3_000)  # the rebalance timeout: b (static) is not removed
    assert [c.key for c in r.completions] == [f"join-g-{a}"]
    assert list(h.group.members) == [a, b] and h.group.generation == 2


def test_static_member_session_expiry_removes_it_and_rebalances():
    h, (a, b) = static_stable("a", "b")
    for _ in range(2):
        h.advance(6_000)
        h.heartbeat(a, 1, instance="a")
    assert list(h.group.members) == [a] and h.group.static_members == {"a": a}
    assert h.group.state is S.PREPARING_REBALANCE
    # b comes back as a new static member: a new member id, and it is added
    r = h.join(client="b", instance="b")
    assert r.parked == "join-g-b-3"
    assert h.group.static_members == {"a": a, "b": "b-3"}


def test_leave_by_instance_id_removes_the_static_member():
    h, (a, b) = static_stable("a", "b")
    r = h.leave(("", "b"), ("", "nobody"))
    assert r.response.members == (("", "b", E.none), ("", "nobody", E.unknown_member_id))
    assert list(h.group.members) == [a] and h.group.static_members == {"a": a}
    assert h.group.state is S.PREPARING_REBALANCE


def test_leave_with_member_id_and_unknown_instance_id_is_refused():
    h, (a, b) = static_stable("a", "b")
    assert h.leave((b, "zzz")).response.members == ((b, "zzz", E.unknown_member_id),)
    assert list(h.group.members) == [a, b]


def test_append_failure_of_a_restart_puts_the_old_member_back():
    h, (a, b) = static_stable("a", "b")
    # the operation's result, not run through the harness: its append fails
    request = JoinGroup("g", "", "consumer", (("range", b"new"),), 10_000, 30_000, "b", "b", "/h")
    r = h.core.join_group(request, h.clock.milliseconds())
    assert r.records and r.parked == "join-g-b-3"
    failed = r.failed(E.kafka_storage_error, h.clock.milliseconds())
    assert failed.records == []
    assert failed.completions == [
        Completion(
            "join-g-b-3", JoinGroupResponse(E.not_coordinator, "", 1, "consumer", "range", a)
        )
    ]
    assert h.group.static_members["b"] == b and set(h.group.members) == {a, b}
    assert h.group.member(b).protocols == PROTOS
    assert f"heartbeat-g-{b}" in h.core.timers.keys()
    assert "heartbeat-g-b-3" not in h.core.timers.keys()
    assert h.heartbeat(b, 1, instance="b").response.error is E.none
    assert h.group.state is S.STABLE


def test_reloading_after_a_restart_gives_the_new_member_id_and_the_assignment():
    h, (a, b) = static_stable("a", "b")
    h.join(client="b", instance="b")
    loaded = ClassicGroupCoordinator()
    for record in h.log:  # the leader's assignment, then the same generation with b-3
        loaded.replay(record.key, record.value, 999)
    g = loaded.groups["g"]
    assert list(g.members) == [a, "b-3"] and g.static_members == {"a": a, "b": "b-3"}
    assert g.member("b-3").assignment == b.encode() and g.state is S.STABLE
    assert g.to_metadata_value() == h.group.to_metadata_value()
