"""What the coordinator tells an operator: every rebalance with its reason (Kafka's wording),
the end of a join phase, the leader's assignment, failed and leaving members, empty groups."""

from __future__ import annotations

import logging

import pytest

from brook.coordinator.group.classic import JoinGroup, LeaveGroup, LeavingMember
from tests.support.classic_harness import Harness

LOGGER = "brook.coordinator.group.classic"


@pytest.fixture
def lines(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)

    def messages() -> list[str]:
        out = [r.getMessage() for r in caplog.records if r.name == LOGGER]
        caplog.clear()
        return out

    return messages


def test_a_new_member_joining_a_stable_group(lines):
    h = Harness()
    [a] = h.stable("a")
    lines()
    h.join_new("b")
    assert lines() == [
        "Preparing to rebalance group g in state Stable with old generation 1 "
        "(reason: adding new member b-2 with group instance id None)"]
    h.join(member_id=a, client="a")
    assert lines() == ["Completed the join phase of group g: generation 2, 2 members, "
                       "protocol range, leader a-1"]
    h.sync(a, 2, [(a, b"x"), ("b-2", b"y")])
    assert lines() == ["Assignment received from leader a-1 for group g for generation 2; "
                       "the group has 2 members"]


def test_the_clients_reason_is_kept(lines):
    h = Harness()
    [a] = h.stable("a")
    lines()
    h._run(h.core.join_group(
        JoinGroup("g", a, "consumer", (("range", b"changed"),), 10_000, 30_000, None, "a", "/h",
                  9, reason="subscription changed"), h.clock.milliseconds()))
    assert lines() == [
        "Preparing to rebalance group g in state Stable with old generation 1 (reason: "
        "updating metadata for member a-1 during Stable; client reason: subscription changed)",
        "Completed the join phase of group g: generation 2, 1 members, protocol range, "
        "leader a-1"]


def test_a_member_whose_session_runs_out(lines):
    h = Harness()
    a, b = h.stable("a", "b")
    lines()
    for _ in range(2):
        h.advance(6_000)
        h.heartbeat(a, 1)
    assert lines() == [
        f"Member {b} in group g has failed (no heartbeat within its session timeout of 10000 "
        f"ms), removing it from the group",
        f"Preparing to rebalance group g in state Stable with old generation 1 (reason: "
        f"removing member {b} on heartbeat expiration)"]


def test_members_leaving_and_the_group_becoming_empty(lines):
    h = Harness()
    a, b = h.stable("a", "b")
    lines()
    h._run(h.core.leave_group(LeaveGroup("g", (LeavingMember(b, None, "shutting down"),)),
                              h.clock.milliseconds()))
    assert lines() == [
        f"Member {b} has left group g through explicit LeaveGroup; client reason: shutting down",
        f"Preparing to rebalance group g in state Stable with old generation 1 (reason: "
        f"removing member {b} on LeaveGroup)"]
    h.leave((a,))
    assert lines() == [f"Member {a} has left group g through explicit LeaveGroup",
                       "Group g with generation 2 is now empty"]


def test_members_that_never_sync_are_removed_with_a_reason(lines):
    h = Harness()
    a, b = h.stable("a", "b")
    h.join(member_id=a, client="a", protocols=(("range", b"changed"),))
    h.join(member_id=b, client="b")
    lines()
    for _ in range(4):  # the rebalance timeout (30 s) passes without a SyncGroup
        h.advance(8_000)
        h.heartbeat(a, 2)
        h.heartbeat(b, 2)
    assert lines()[0] == (
        f"Preparing to rebalance group g in state CompletingRebalance with old generation 2 "
        f"(reason: removing members {a}, {b} on pending sync request expiration)")


def test_replaying_the_log_says_nothing(lines):
    h = Harness()
    h.stable("a", "b")
    records = list(h.log)
    lines()
    fresh = Harness()
    for record in records:
        fresh.core.replay(record.key, record.value, 0)
    assert lines() == []
