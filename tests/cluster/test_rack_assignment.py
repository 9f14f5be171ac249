"""Rack-aware replica assignment (Kafka's assignReplicasToBrokersRackAware), as properties:
every partition on distinct brokers across as many racks as it can, leaders spread evenly."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings, strategies as st
from tests.support.examples import examples

from brook.controller.assignment import (ReplicationFactorError, assign_replicas_rack_aware,
                                      rack_alternated)


@st.composite
def clusters(draw):
    n = draw(st.integers(1, 9))
    racks = draw(st.lists(st.sampled_from("abcd"), min_size=n, max_size=n))
    ids = draw(st.lists(st.integers(0, 50), min_size=n, max_size=n, unique=True))
    return dict(zip(ids, racks))


@settings(max_examples=examples(300), deadline=None)
@given(clusters(), st.integers(1, 40), st.integers(1, 4), st.integers(0, 2**32))
def test_replicas_span_as_many_racks_as_they_can_and_leaders_spread(racks, partitions, rf, seed):
    if rf > len(racks):
        with pytest.raises(ReplicationFactorError):
            assign_replicas_rack_aware(racks, partitions, rf, rng=random.Random(seed))
        return
    out = assign_replicas_rack_aware(racks, partitions, rf, rng=random.Random(seed))
    assert sorted(out) == list(range(partitions))
    num_racks = len(set(racks.values()))
    for replicas in out.values():
        assert len(replicas) == rf and len(set(replicas)) == rf
        assert set(replicas) <= set(racks)
        assert len({racks[b] for b in replicas}) == min(rf, num_racks)
    leaders = Counter(r[0] for r in out.values())
    if partitions % len(racks) == 0:
        assert set(leaders.values()) == {partitions // len(racks)}
    else:
        assert max(leaders.values()) - min(leaders.get(b, 0) for b in racks) <= 1


def test_racks_alternate_in_the_broker_order():
    assert rack_alternated({1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}) == [1, 3, 5, 2, 4, 6]
    assert rack_alternated({0: "r1", 1: "r2", 2: "r2", 3: "r3", 4: "r3", 5: "r1"}) == [0, 1, 3, 5, 2, 4]


def test_the_assignment_is_kafkas_for_a_fixed_start():
    """Six brokers on three racks, seven partitions of three replicas from start index 0: the
    assignment Apache Kafka's algorithm gives for the same input."""
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated(racks) == [0, 3, 1, 5, 4, 2]
    assert assign_replicas_rack_aware(racks, 7, 3, start_index=0) == {
        0: (0, 3, 1), 1: (3, 1, 5), 2: (1, 5, 4), 3: (5, 4, 2), 4: (4, 2, 0), 5: (2, 0, 3), 6: (0, 4, 2)}
