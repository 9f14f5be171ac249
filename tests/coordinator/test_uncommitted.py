"""Uncommitted writes in a shard, sans-I/O: OffsetFetch answers the committed offsets only, and a
write that fails is rolled back with every later one (brook.coordinator.group.uncommitted).

The property: whatever the writes (commits as runs and as single records, with and without
metadata, tombstones, partitions stored as rows and sparse ones) and whatever order the high
watermark and the failures come in, OffsetFetch answers exactly what replaying the committed
writes alone gives; the shard's latest state is that plus the writes still waiting; and the
log (every write appended, failed ones and the records a rollback writes back included)
replayed into a fresh shard gives the shard's latest state."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from brook.coordinator.common.result import CoordinatorRecord, record_pairs
from brook.coordinator.group.commit_runs import CommitRun
from brook.coordinator.group.offsets_cache import OffsetsCache, RowsSnapshot, saved_value
from brook.coordinator.group.schemas import OffsetCommitKey, OffsetCommitValue
from brook.coordinator.group.shard import CoordinatorShard
from brook.coordinator.group.uncommitted import Uncommitted
from tests.support.examples import examples

NOW = 1_000

GROUPS = ("g1", "g2")
TOPICS = ("t", "u")
PARTITIONS = (0, 1, 2, 3, 5, 100_000)  # 100,000: stored sparse, not in a row
ASKED = tuple(range(16)) + (100_000,)


def fetched(shard: CoordinatorShard, group: str) -> dict:
    """{(topic, partition): (offset, leader epoch, metadata)} of what OffsetFetch answers for
    all the group's offsets, checked against asking for each partition by name."""
    every = {(f.topic, f.partition): (f.offset, f.leader_epoch, f.metadata)
             for f in shard.fetch_offsets(group, None)}
    named = shard.fetch_offsets(group, [(t, ASKED) for t in TOPICS])
    assert {(f.topic, f.partition): (f.offset, f.leader_epoch, f.metadata)
            for f in named if f.offset != -1} == every
    return every


def model_view(state: dict, group: str) -> dict:
    return {(t, p): (v.offset, v.leader_epoch, v.metadata)
            for (g, t, p), v in state.items() if g == group}


def apply(state: dict, records: list) -> None:
    for key, value in record_pairs(records):
        k = (key.group, key.topic, key.partition)
        if value is None:
            state.pop(k, None)
        else:
            state[k] = value


# --- a few cases by hand ------------------------------------------------------------------------


def commit(group: str, topic: str, partition: int, offset: int, metadata: str = "") -> list:
    if metadata:
        return [CoordinatorRecord(OffsetCommitKey(group, topic, partition),
                                  OffsetCommitValue(offset, 1, metadata, NOW))]
    return [CommitRun(group, topic, [(partition, offset, 1, NOW)])]


def test_a_commit_waiting_to_be_committed_is_not_fetched_until_it_is():
    shard = CoordinatorShard()
    shard.replay_records(commit("g", "t", 0, 5), NOW)  # committed at once
    shard.replay_records(commit("g", "t", 0, 6), NOW, end=2)
    shard.replay_records(commit("g", "t", 0, 7), NOW, end=3)
    assert fetched(shard, "g") == {("t", 0): (5, 1, "")}
    assert shard.offsets.get("g", "t", 0).offset == 7  # what writes are checked against
    shard.committed(2)
    assert fetched(shard, "g") == {("t", 0): (6, 1, "")}
    shard.committed(3)
    assert fetched(shard, "g") == {("t", 0): (7, 1, "")}
    assert not shard.offsets.uncommitted.writes


def test_a_failed_write_is_rolled_back_with_every_later_one():
    shard = CoordinatorShard()
    shard.replay_records(commit("g", "t", 0, 5), NOW)
    shard.replay_records(commit("g", "t", 1, 50), NOW, end=2)  # will be committed
    shard.replay_records(commit("g", "t", 0, 6, "m"), NOW, end=3)  # fails
    shard.replay_records([CoordinatorRecord(OffsetCommitKey("g", "t", 1), None)], NOW, end=4)
    shard.replay_records(commit("g", "u", 0, 9), NOW, end=5)
    restore = shard.roll_back(3)
    assert sorted((r.key.topic, r.key.partition, r.value and r.value.offset) for r in restore) == [
        ("t", 0, 5), ("t", 1, 50), ("u", 0, None)]
    shard.replay_records(restore, NOW)
    assert fetched(shard, "g") == {("t", 0): (5, 1, "")}  # write 2 is not committed yet
    shard.committed(2)
    assert fetched(shard, "g") == {("t", 0): (5, 1, ""), ("t", 1): (50, 1, "")}


def test_a_write_that_changes_no_offset_leaves_no_undo_record():
    shard = CoordinatorShard()
    shard.replay_records([], NOW, end=1)
    assert not shard.offsets.uncommitted.writes


def test_the_journal_keeps_what_an_offset_held_before_the_first_change():
    cache = OffsetsCache()
    cache.put("g", "t", 0, OffsetCommitValue(5, 1, "", NOW))
    cache.put("g", "t", 1, OffsetCommitValue(6, 1, "meta", NOW, 99))
    cache.journal = {}
    cache.put_rows("g", "t", iter([(0, 7, 1, NOW), (1, 8, 1, NOW), (2, 9, 1, NOW)]))
    cache.put_rows("g", "t", [(0, 10, 1, NOW)])
    cache.delete("g", "t", 1)
    cache.put("g", "t", 100_000, OffsetCommitValue(1))
    saved = cache.journal[("g", "t")]
    assert {p: saved_value(s, p) for p, s in saved.items()} == {
        0: OffsetCommitValue(5, 1, "", NOW), 1: OffsetCommitValue(6, 1, "meta", NOW, 99),
        2: None, 100_000: None}
    assert cache.get("g", "t", 0).offset == 10


def test_a_commit_to_many_partitions_is_journaled_as_one_copy_of_their_rows():
    cache = OffsetsCache()
    cache.put_rows("g", "t", [(p, p, 1, NOW) for p in range(20)])
    cache.put("g", "t", 3, OffsetCommitValue(33, 1, "meta", NOW))
    cache.put("g", "t", 4, OffsetCommitValue(44, 2**31, "", NOW))  # does not fit a row
    cache.delete("g", "t", 5)
    before = {p: cache.get("g", "t", p) for p in range(20)}
    cache.journal = {}
    cache.put_rows("g", "t", [(p, 1000 + p, 1, NOW) for p in range(2, 12)])
    cache.put_rows("g", "t", [(p, 2000 + p, 1, NOW) for p in range(0, 10)])
    saved = cache.journal[("g", "t")]
    assert sorted(saved) == list(range(12))
    assert len({id(s) for s in saved.values() if isinstance(s, RowsSnapshot)}) == 2
    assert {p: saved_value(s, p) for p, s in saved.items()} == {p: before[p] for p in range(12)}


def test_undo_records_count_the_groups_they_change():
    undo = Uncommitted()
    undo.add(1, {("a", "t"): {0: None}})
    undo.add(2, {("a", "t"): {1: None}, ("b", "t"): {0: (1, 2, 3)}})
    assert undo.changes("a") and undo.changes("b")
    undo.committed(1)
    assert undo.changes("a") and undo.changes("b")
    assert undo.committed_values("b") == {("t", 0): OffsetCommitValue(1, 2, "", 3)}
    assert undo.roll_back(2) == {("a", "t", 1): None, ("b", "t", 0): OffsetCommitValue(1, 2, "", 3)}
    assert not undo.changes("a") and not undo.changes("b") and not undo.writes


# --- the property -------------------------------------------------------------------------------

offsets = st.integers(0, 2**40)
# Runs of many partitions of the rows are journaled as one RowsSnapshot; an epoch of 2**31 does
# not fit a row and is kept apart (sparse) even for a partition inside the rows.
wide = st.lists(st.tuples(st.integers(0, 15), offsets, st.integers(-1, 5), st.just(NOW)),
                min_size=8, max_size=12)
records = st.one_of(
    st.builds(lambda g, t, rows: CommitRun(g, t, rows), st.sampled_from(GROUPS),
              st.sampled_from(TOPICS),
              st.lists(st.tuples(st.sampled_from(PARTITIONS), offsets, st.integers(-1, 5),
                                 st.just(NOW)), min_size=1, max_size=4) | wide),
    st.builds(lambda g, t, p, o, e, m: CoordinatorRecord(OffsetCommitKey(g, t, p),
                                                         OffsetCommitValue(o, e, m, NOW)),
              st.sampled_from(GROUPS), st.sampled_from(TOPICS),
              st.sampled_from(PARTITIONS) | st.integers(0, 15), offsets,
              st.sampled_from([2, 2**31]), st.sampled_from(["", "meta"])),
    st.builds(lambda g, t, p: CoordinatorRecord(OffsetCommitKey(g, t, p), None),
              st.sampled_from(GROUPS), st.sampled_from(TOPICS), st.sampled_from(PARTITIONS)),
)
# ("write", records) appends a write; ("commit", i) / ("fail", i): the i-th waiting write (mod
# how many wait) is committed (with those before it) / fails (with those after it).
steps = st.lists(st.one_of(st.tuples(st.just("write"), st.lists(records, min_size=1, max_size=4)),
                           st.tuples(st.sampled_from(["commit", "fail"]), st.integers(0, 100))),
                 max_size=40)


@settings(max_examples=examples(300), deadline=None)
@given(steps)
def test_fetch_answers_exactly_the_committed_writes_whatever_fails(steps):
    shard = CoordinatorShard()
    log: list = []  # every record appended, in order
    committed: dict = {}  # the committed writes replayed, in order: what fetch must answer
    waiting: list[tuple[int, list]] = []  # (end, records) of the writes not yet committed
    for kind, arg in steps:
        if kind == "write":
            log += arg
            shard.replay_records(arg, NOW, end=len(log))
            waiting.append((len(log), arg))
        elif waiting:
            end, _ = waiting[arg % len(waiting)]
            if kind == "commit":
                shard.committed(end)
                for _, write in [w for w in waiting if w[0] <= end]:
                    apply(committed, write)
                waiting = [w for w in waiting if w[0] > end]
            else:
                restore = shard.roll_back(end)
                shard.replay_records(restore, NOW)
                log += restore
                waiting = [w for w in waiting if w[0] < end]
        for group in GROUPS:
            assert fetched(shard, group) == model_view(committed, group)
        latest = dict(committed)
        for _, write in waiting:
            apply(latest, write)
        reloaded = CoordinatorShard()
        reloaded.replay_records(log, NOW)
        for group in GROUPS:
            assert model_view(latest, group) == {
                (t, p): (v.offset, v.leader_epoch, v.metadata)
                for t, p, v in shard.offsets.group_offsets(group)}
            assert fetched(reloaded, group) == model_view(latest, group)
    assert len(shard.offsets.uncommitted.writes) <= len(waiting)
