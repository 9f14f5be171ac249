"""The classic group state machine, its members, and its stored form."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from kio.schema.errors import ErrorCode

from brook.coordinator.group.classic_group import (
    VALID_PREVIOUS_STATES,
    ClassicGroup,
    GroupMember,
    GroupState,
    IllegalStateTransition,
)
from brook.coordinator.group.schemas import GroupMetadataValue, MemberMetadata

S = GroupState
NOW = 1_700_000_000_000

# Kafka's table of valid previous states, written out pair by pair.
ALLOWED = {
    (S.PREPARING_REBALANCE, S.EMPTY),
    (S.STABLE, S.PREPARING_REBALANCE),
    (S.COMPLETING_REBALANCE, S.PREPARING_REBALANCE),
    (S.EMPTY, S.PREPARING_REBALANCE),
    (S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE),
    (S.COMPLETING_REBALANCE, S.STABLE),
    (S.STABLE, S.DEAD),
    (S.PREPARING_REBALANCE, S.DEAD),
    (S.COMPLETING_REBALANCE, S.DEAD),
    (S.EMPTY, S.DEAD),
    (S.DEAD, S.DEAD),
}


def group_in(state: GroupState) -> ClassicGroup:
    return ClassicGroup("g", NOW, state=state)


# --- states as data -----------------------------------------------------------------------------


def test_state_names_are_kafkas():
    assert [str(s) for s in S] == [
        "Empty",
        "PreparingRebalance",
        "CompletingRebalance",
        "Stable",
        "Dead",
    ]


def test_every_state_is_documented():
    for state in S:
        assert state.__doc__ and state.__doc__ != GroupState.__doc__


def test_the_table_is_kafkas():
    table = {(prev, target) for target, prevs in VALID_PREVIOUS_STATES.items() for prev in prevs}
    assert table == ALLOWED


@pytest.mark.parametrize(
    "previous,target", sorted(ALLOWED, key=str), ids=lambda s: str(s)
)
def test_allowed_transition(previous, target):
    group = group_in(previous)
    group.transition_to(target, NOW + 5)
    assert group.state is target
    assert group.previous_state is previous
    assert group.state_timestamp == NOW + 5


@pytest.mark.parametrize(
    "previous,target",
    sorted(set(itertools.product(S, S)) - ALLOWED, key=str),
    ids=lambda s: str(s),
)
def test_refused_transition(previous, target):
    group = group_in(previous)
    with pytest.raises(IllegalStateTransition):
        group.transition_to(target, NOW + 5)
    assert group.state is previous
    assert group.state_timestamp == NOW


def test_can_rebalance_from_the_states_preparing_rebalance_follows():
    assert {s for s in S if group_in(s).can_rebalance()} == {
        S.EMPTY,
        S.STABLE,
        S.COMPLETING_REBALANCE,
    }


# --- the group ----------------------------------------------------------------------------------


def member(member_id, protocols=(("range", b"r"),), instance=None, ptype="consumer", **kw):
    return GroupMember(
        member_id=member_id,
        group_instance_id=instance,
        client_id=kw.pop("client_id", "client"),
        client_host=kw.pop("client_host", "/10.0.0.1"),
        rebalance_timeout_ms=kw.pop("rebalance_timeout_ms", 60_000),
        session_timeout_ms=kw.pop("session_timeout_ms", 10_000),
        protocol_type=ptype,
        protocols=tuple(protocols),
        **kw,
    )


def test_first_member_sets_protocol_type_and_leads():
    group = ClassicGroup("g", NOW)
    group.add(member("a", ptype="connect"))
    group.add(member("b", ptype="connect"))
    assert group.protocol_type == "connect"
    assert group.leader_id == "a"
    assert list(group.members) == ["a", "b"]
    assert group.is_leader("a") and not group.is_leader("b")


def test_a_member_of_another_protocol_type_is_refused():
    group = ClassicGroup("g", NOW)
    group.add(member("a"))
    with pytest.raises(ValueError):
        group.add(member("b", ptype="connect"))
    assert list(group.members) == ["a"]


def test_leader_leaving_hands_leadership_to_the_earliest_member():
    group = ClassicGroup("g", NOW)
    for m in "abc":
        group.add(member(m))
    group.remove("a")
    assert group.leader_id == "b"
    group.remove("c")
    assert group.leader_id == "b"
    group.remove("b")
    assert group.leader_id is None and not group.members


def test_static_members_map_instance_ids():
    group = ClassicGroup("g", NOW)
    group.add(member("a-1", instance="a"))
    group.add(member("dyn"))
    assert group.static_members == {"a": "a-1"}
    assert group.static_member_id("a") == "a-1"
    with pytest.raises(ValueError):
        group.add(member("a-2", instance="a"))
    group.remove("a-1")
    assert group.static_members == {}


def test_replacing_a_static_member_keeps_its_place():
    group = ClassicGroup("g", NOW)
    group.add(member("a-1", instance="a", assignment=b"asg", client_id="c1"))
    group.add(member("b"))
    new = group.replace_static_member("a", "a-1", "a-2")
    assert list(group.members) == ["b", "a-2"]
    assert group.static_members == {"a": "a-2"}
    assert group.leader_id == "a-2"
    assert (new.assignment, new.client_id, new.group_instance_id) == (b"asg", "c1", "a")


def test_validate_member():
    group = ClassicGroup("g", NOW)
    group.add(member("a-1", instance="a"))
    group.add(member("b"))
    assert group.validate_member("a-1", "a") is ErrorCode.none
    assert group.validate_member("b", None) is ErrorCode.none
    assert group.validate_member("a-0", "a") is ErrorCode.fenced_instance_id
    assert group.validate_member("a-1", "z") is ErrorCode.unknown_member_id
    assert group.validate_member("x", None) is ErrorCode.unknown_member_id
    assert group.is_static_member_fenced("a", "a-0")
    assert not group.is_static_member_fenced("a", "a-1")
    assert not group.is_static_member_fenced("z", "anything")


def test_protocol_vote_among_protocols_every_member_supports():
    group = ClassicGroup("g", NOW)
    group.add(member("a", [("roundrobin", b"1"), ("range", b"2"), ("sticky", b"3")]))
    group.transition_to(S.PREPARING_REBALANCE, NOW)
    group.add(member("b", [("sticky", b""), ("range", b"")]))
    group.add(member("c", [("range", b""), ("sticky", b"")]))
    assert group.candidate_protocols() == {"range", "sticky"}
    # a votes range (its first common one), b sticky, c range
    assert group.select_protocol() == "range"
    group.remove("c")
    group.add(member("d", [("sticky", b""), ("range", b"")]))
    assert group.select_protocol() == "sticky"


def test_protocol_vote_tie_goes_to_the_earliest_vote():
    group = ClassicGroup("g", NOW)
    group.add(member("a", [("sticky", b""), ("range", b"")]))
    group.transition_to(S.PREPARING_REBALANCE, NOW)
    group.add(member("b", [("range", b""), ("sticky", b"")]))
    assert group.select_protocol() == "sticky"


def test_supports_protocols():
    group = ClassicGroup("g", NOW)
    assert group.supports_protocols("consumer", ["anything"])
    assert not group.supports_protocols("", ["range"])
    assert not group.supports_protocols("consumer", [])
    group.add(member("a", [("range", b""), ("sticky", b"")]))
    group.transition_to(S.PREPARING_REBALANCE, NOW)
    assert group.supports_protocols("consumer", ["roundrobin", "sticky"])
    assert not group.supports_protocols("consumer", ["roundrobin"])
    assert not group.supports_protocols("connect", ["range"])
    group.add(member("b", [("range", b"")]))
    assert not group.supports_protocols("consumer", ["sticky"])
    group.remove("b")
    assert group.supports_protocols("consumer", ["sticky"])


def test_update_member_recounts_protocols():
    group = ClassicGroup("g", NOW)
    a = member("a", [("range", b"")])
    group.add(a)
    group.transition_to(S.PREPARING_REBALANCE, NOW)
    group.update_member(a, (("sticky", b"s"),), 1_000, 2_000)
    assert group.candidate_protocols() == {"sticky"}
    assert (a.rebalance_timeout_ms, a.session_timeout_ms) == (1_000, 2_000)


def test_join_phase_bookkeeping():
    group = ClassicGroup("g", NOW)
    group.add(member("a", rebalance_timeout_ms=5_000))
    group.add(member("b", rebalance_timeout_ms=9_000))
    assert group.rebalance_timeout_ms() == 9_000
    group.members["b"].awaiting_join = True
    assert not group.has_all_members_joined()
    assert [m.member_id for m in group.not_yet_rejoined()] == ["a"]
    # the leader did not rejoin: the first member that did leads
    assert group.elect_joined_leader() and group.leader_id == "b"
    group.members["a"].awaiting_join = True
    group.pending_members.add("c-1")
    assert not group.has_all_members_joined()
    group.pending_members.clear()
    assert group.has_all_members_joined()


def test_no_leader_elected_when_nobody_rejoined():
    group = ClassicGroup("g", NOW)
    group.add(member("a"))
    assert not group.elect_joined_leader()
    assert group.leader_id == "a"


def test_init_next_generation():
    group = ClassicGroup("g", NOW)
    group.transition_to(S.PREPARING_REBALANCE, NOW)
    group.add(member("a", [("range", b"")]))
    group.pending_sync.add("a")
    group.init_next_generation(NOW + 7)
    assert (group.generation, group.protocol, group.state) == (1, "range", S.COMPLETING_REBALANCE)
    assert group.state_timestamp == NOW + 7 and not group.pending_sync
    group.transition_to(S.PREPARING_REBALANCE, NOW + 8)
    group.remove("a")
    group.init_next_generation(NOW + 9)
    assert (group.generation, group.protocol, group.state) == (2, None, S.EMPTY)


def stable_group():
    group = ClassicGroup("g", NOW)
    group.transition_to(S.PREPARING_REBALANCE, NOW)
    group.add(member("a", [("roundrobin", b"a-rr"), ("range", b"a-r")], client_id="ca"))
    group.add(
        member("b-1", [("range", b"b-r")], instance="b", client_id="cb", session_timeout_ms=6_000)
    )
    group.init_next_generation(NOW + 10)
    return group


STORED = GroupMetadataValue(
    protocol_type="consumer",
    generation=1,
    protocol="range",
    leader="a",
    current_state_timestamp=NOW + 10,
    members=(
        MemberMetadata("a", None, "ca", "/10.0.0.1", 60_000, 10_000, b"a-r", b"A"),
        MemberMetadata("b-1", "b", "cb", "/10.0.0.1", 60_000, 6_000, b"b-r", b"B"),
    ),
)


def test_to_metadata_value_with_the_leaders_assignment():
    group = stable_group()
    assert group.to_metadata_value({"a": b"A", "b-1": b"B"}) == STORED


def test_to_metadata_value_needs_every_assignment():
    with pytest.raises(ValueError):
        stable_group().to_metadata_value({"a": b"A"})


def test_to_metadata_value_of_an_empty_group():
    group = ClassicGroup("g", NOW)
    group.transition_to(S.PREPARING_REBALANCE, NOW)
    group.add(member("a"))
    group.remove("a")
    group.init_next_generation(NOW + 3)
    assert group.to_metadata_value() == GroupMetadataValue(
        protocol_type="consumer",
        generation=1,
        protocol=None,
        leader=None,
        current_state_timestamp=NOW + 3,
        members=(),
    )


def test_from_metadata_value():
    group = ClassicGroup.from_metadata_value("g", STORED, now=NOW + 99)
    assert group.state is S.STABLE
    assert (group.generation, group.protocol_type, group.protocol, group.leader_id) == (
        1,
        "consumer",
        "range",
        "a",
    )
    assert group.state_timestamp == NOW + 10
    assert group.static_members == {"b": "b-1"}
    b = group.member("b-1")
    assert (b.protocols, b.assignment, b.session_timeout_ms) == ((("range", b"b-r"),), b"B", 6_000)
    assert group.to_metadata_value() == STORED


def test_from_metadata_value_keeps_the_stored_leader():
    value = dataclasses.replace(STORED, leader="b-1")
    assert ClassicGroup.from_metadata_value("g", value, NOW).leader_id == "b-1"


def test_from_metadata_value_old_versions_without_rebalance_timeout_or_timestamp():
    old = MemberMetadata("a", None, "ca", "/h", -1, 10_000, b"s", b"A")
    value = GroupMetadataValue("consumer", 4, "range", "a", -1, (old,))
    group = ClassicGroup.from_metadata_value("g", value, now=NOW + 1)
    assert group.member("a").rebalance_timeout_ms == 10_000
    assert group.state_timestamp == NOW + 1


def test_from_metadata_value_without_members_is_empty():
    value = GroupMetadataValue("", 3, None, None, NOW, ())
    group = ClassicGroup.from_metadata_value("g", value, NOW)
    assert group.state is S.EMPTY
    assert (group.generation, group.protocol_type) == (3, None)
