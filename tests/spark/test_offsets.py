"""brook.spark.offsets: the offsets JSON, maxOffsetsPerTrigger limits and read splits.

Pure functions: example tests for the documented cases, hypothesis for the invariants.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brook.spark import offsets as om
from brook.spark.offsets import OffsetsError, Range

# ------------------------------------------------------------------------ JSON


def test_json_is_spark_kafka_offsets_in_a_fixed_order():
    offsets = {("b", 10): 5, ("b", 2): 7, ("a", 0): 1}
    assert om.dumps(offsets) == '{"a":{"0":1},"b":{"2":7,"10":5}}'
    assert list(om.to_json(offsets)) == ["a", "b"]
    assert list(om.to_json(offsets)["b"]) == ["2", "10"]  # partitions in numeric order


def test_json_reads_strings_and_dicts():
    text = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
    assert om.from_json(text) == {("topicA", 0): 23, ("topicA", 1): -1, ("topicB", 0): -2}
    assert om.from_json(json.loads(text)) == om.from_json(text)


@pytest.mark.parametrize("text, message", [
    ("{", "not valid JSON"),
    ("[1]", "must be a JSON object"),
    ('{"t": 5}', "must map partitions to offsets"),
    ('{"t": {"x": 5}}', "is not a partition number"),
    ('{"t": {"-1": 5}}', "is not a partition number"),
    ('{"t": {"01": 5}}', "is not a partition number"),
    ('{"t": {"0": "5"}}', "must be an integer"),
    ('{"t": {"0": 1.5}}', "must be an integer"),
    ('{"t": {"0": true}}', "must be an integer"),
])
def test_bad_offsets_json_says_what_is_wrong(text, message):
    with pytest.raises(OffsetsError, match=message):
        om.from_json(text, "startingOffsets")


names = st.text(alphabet="abcxyz._-", min_size=1, max_size=5)
offset_maps = st.dictionaries(st.tuples(names, st.integers(0, 1000)),
                              st.integers(-2, 2**63 - 1), max_size=20)


@given(offset_maps)
def test_json_round_trip(offsets):
    assert om.from_json(om.dumps(offsets)) == offsets
    assert om.from_json(om.to_json(offsets)) == offsets


@given(offset_maps)
def test_equal_offsets_have_equal_json_whatever_the_order(offsets):
    reordered = dict(reversed(list(offsets.items())))
    assert om.dumps(reordered) == om.dumps(offsets)


def test_assign():
    assert om.assign_from_json('{"b": [2, 0], "a": [1]}') == [("a", 1), ("b", 0), ("b", 2)]
    for bad, message in [('{"a": []}', "non-empty list"), ("{}", "non-empty JSON object"),
                         ('{"a": [0, 0]}', "more than once"), ('{"a": ["x"]}', "partition"),
                         ("x", "not valid JSON")]:
        with pytest.raises(OffsetsError, match=message):
            om.assign_from_json(bad)


# ------------------------------------------------------------------------ limits


def test_limit_splits_in_proportion_to_what_is_available():
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 50}
    latest = {("t", 0): 300, ("t", 1): 200, ("t", 2): 50}
    end = om.limit(start, latest, 200)
    # 300 and 100 available: 150 and 50 of 200; the empty partition keeps its offset
    assert end == {("t", 0): 150, ("t", 1): 150, ("t", 2): 50}


def test_limit_gives_the_rounding_leftover_to_the_largest_remainders():
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}
    latest = {("t", 0): 10, ("t", 1): 10, ("t", 2): 10}
    end = om.limit(start, latest, 2)
    assert sum(end[tp] - start[tp] for tp in start) == 2  # not 0 (floors) nor 3 (ceilings)


def test_limit_takes_everything_when_under_the_limit_and_counts_new_partitions_from_zero():
    assert om.limit({("t", 0): 5}, {("t", 0): 8, ("t", 1): 4}, 100) == {("t", 0): 8, ("t", 1): 4}
    assert om.limit({("t", 0): 5}, {("t", 0): 8, ("t", 1): 4}, 1) == {("t", 0): 5, ("t", 1): 1}


partitions = st.lists(st.tuples(st.integers(0, 2**40), st.integers(-5, 10**6)), min_size=1,
                      max_size=12)


@given(partitions, st.integers(1, 2**40))
def test_limit_takes_exactly_the_limit_or_all_that_is_available(ranges, max_offsets):
    start = {("t", i): s for i, (s, _) in enumerate(ranges)}
    latest = {("t", i): s + n for i, (s, n) in enumerate(ranges)}
    end = om.limit(start, latest, max_offsets)
    assert set(end) == set(latest)
    available = sum(max(0, latest[tp] - start[tp]) for tp in start)
    taken = 0
    for tp in start:
        if latest[tp] <= start[tp]:
            assert end[tp] == latest[tp]  # nothing to read: unchanged
        else:
            assert start[tp] <= end[tp] <= latest[tp]
            taken += end[tp] - start[tp]
    assert taken == min(max_offsets, available)


# A limit of at least a 200th of what is available: at most 200 triggers, where a limit of 1
# on 12 partitions of a million offsets each looped 12 million times (over 30 s of one core).
# Any ratio of the limit to the sizes is still drawn (a limit of 1 where up to 200 offsets are
# available), and each single trigger's total is checked for any limit above.
@given(partitions, st.data())
def test_limit_reaches_the_latest_offsets_in_finitely_many_triggers(ranges, data):
    start = {("t", i): s for i, (s, _) in enumerate(ranges)}
    latest = {("t", i): s + max(n, 0) for i, (s, n) in enumerate(ranges)}
    available = sum(latest[tp] - start[tp] for tp in start)
    max_offsets = data.draw(st.integers(max(1, -(-available // 200)), max(1, 2 * available)),
                            label="max_offsets")
    triggers = 0
    while start != latest:
        start = om.limit(start, latest, max_offsets)
        triggers += 1
    assert triggers == -(-available // max_offsets)


# ------------------------------------------------------------------------ splits


def test_split_by_max_records_and_min_partitions():
    ranges = [Range("t", 0, 0, 10), Range("t", 1, 5, 5), Range("t", 2, 100, 103)]
    assert om.split(ranges) == [Range("t", 0, 0, 10), Range("t", 2, 100, 103)]
    assert om.split(ranges, max_records=4) == [
        Range("t", 0, 0, 4), Range("t", 0, 4, 7), Range("t", 0, 7, 10), Range("t", 2, 100, 103)]
    # 13 offsets over 6 splits: t-0 gets round(10/13*6) = 5 pieces, t-2 round(3/13*6) = 1
    assert [r.partition for r in om.split(ranges, min_partitions=6)] == [0] * 5 + [2]


# A limit of at least a 200th of the largest range: at most 200 pieces a range, where a limit
# of 1 on ranges of a million offsets made millions of pieces (from a second to minutes of a
# core). Any ratio of the limit to the sizes up to 200 is still drawn.
@given(st.lists(st.tuples(st.integers(0, 10**9), st.integers(0, 10**6)), max_size=8),
       st.data(), st.one_of(st.none(), st.integers(1, 64)))
def test_split_covers_each_range_exactly_with_bounded_pieces(ranges, data, min_parts):
    largest = max((n for _, n in ranges), default=0)
    max_records = data.draw(st.one_of(st.none(), st.integers(max(1, -(-largest // 200)),
                                                             max(1, 2 * largest))),
                            label="max_records")
    wanted = [Range("t", i, s, s + n) for i, (s, n) in enumerate(ranges)]
    pieces = om.split(wanted, max_records, min_parts)
    for r in wanted:
        mine = [p for p in pieces if p.partition == r.partition]
        if r.size == 0:
            assert not mine
            continue
        assert mine[0].start == r.start and mine[-1].end == r.end
        assert all(a.end == b.start for a, b in zip(mine, mine[1:]))
        assert all(p.size > 0 for p in mine)
        assert max(p.size for p in mine) - min(p.size for p in mine) <= 1
        if max_records:
            assert all(p.size <= max_records for p in mine)


def test_pack_balances_by_size_and_keeps_every_item_once():
    sizes = [5, 1, 1, 1, 8, 2]
    groups = om.pack(list(range(6)), 2, lambda i: sizes[i])
    assert sorted(i for g in groups for i in g) == list(range(6))
    assert sorted(sum(sizes[i] for i in g) for g in groups) == [9, 9]
    assert all(g == sorted(g) for g in groups)  # the items' order within a group
    assert om.pack([1, 2], 4, lambda i: i) == [[1], [2]]
    with pytest.raises(ValueError):
        om.pack([1], 0, lambda i: i)


@given(st.lists(st.integers(0, 10_000), max_size=40), st.integers(1, 12))
def test_pack_covers_every_item_in_at_most_tasks_groups_within_the_largest_of_the_mean(sizes, tasks):
    groups = om.pack(list(range(len(sizes))), tasks, lambda i: sizes[i])
    assert sorted(i for g in groups for i in g) == list(range(len(sizes)))
    assert len(groups) <= tasks and all(groups)
    if sizes:
        loads = [sum(sizes[i] for i in g) for g in groups]
        assert max(loads) <= sum(sizes) / min(tasks, len(sizes)) + max(sizes)


# ------------------------------------------------------------------------ lag


def test_offsets_behind_latest_are_spark_kafka_sources_metrics():
    end = '{"a":{"0":10,"1":40}}'
    latest = {"a": {"0": 25, "1": 40, "2": 6}}  # partition 2 not read yet: behind from 0
    assert om.offsets_behind_latest(end, latest) == {
        "minOffsetsBehindLatest": "0", "maxOffsetsBehindLatest": "15",
        "avgOffsetsBehindLatest": str(21 / 3)}
    assert om.offsets_behind_latest(None, latest) == {}
    assert om.offsets_behind_latest(end, None) == {}
