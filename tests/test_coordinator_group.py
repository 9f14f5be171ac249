"""The classic group state machine, its members, and its stored form."""

from __future__ import annotations

import itertools

import pytest

from brook.coordinator.group import (
    VALID_PREVIOUS_STATES,
    ClassicGroup,
    GroupState,
    IllegalStateTransition,
)

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
