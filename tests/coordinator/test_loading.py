"""Loading a partition of __consumer_offsets: the loader's runs of commits against replaying
record by record, and replaying a compacted log against replaying it whole (the real log and
the real cleaner, before and after the tombstones' delete horizon)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from brook.broker.offsets_log import read_batches
from brook.coordinator.common.loader import replay_batches
from brook.coordinator.common.result import CoordinatorRecord
from brook.coordinator.group.batch_writer import encode_records
from brook.coordinator.group.schemas import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    UnknownKey,
    decode_key,
    decode_value,
)
from brook.coordinator.group.shard import CoordinatorShard
from brook.records import decode_batch
from brook.records.batch import read_header
from brook.storage.cleaner import clean_log
from brook.storage.config import LogConfig
from brook.storage.log import Log
from brook.storage.producer_state import AppendOrigin

T0 = 1_700_000_000_000
LOADED_AT = T0 + 3_600_000
GROUPS = ["g0", "g1", "g2", "simple"]
TOPICS = ["orders", "payments"]
MEMBERS = ["m-a", "m-b", "m-c"]


def new_cores():
    shard = CoordinatorShard()
    return shard.classic, shard.offsets


def snapshot(core, offsets):
    """What a load must reproduce: every group as stored plus its state, every offset."""
    groups = {gid: (g.state, g.to_metadata_value()) for gid, g in core.groups.items()}
    stored = {
        (g, t, p): v for g in offsets.cache.groups() for t, p, v in offsets.cache.group_offsets(g)
    }
    return groups, stored, offsets.cached_offsets


def load(batches, now=LOADED_AT):
    """The runtime's loader: runs of plain commits and single records."""
    shard = CoordinatorShard()
    replay_batches(shard.batch_replayer(now), batches)
    return shard.classic, shard.offsets


def replay_one_by_one(batches, now=LOADED_AT):
    """Every record decoded on its own and replayed through both cores."""
    core, offsets = new_cores()
    for data in batches:
        pos = 0
        while pos < len(data):
            batch = decode_batch(data, pos)
            pos += read_header(data, pos).size
            for record in batch.records:
                key = decode_key(record.key)
                if isinstance(key, UnknownKey):
                    continue
                value = decode_value(key, record.value)
                core.replay(key, value, now)
                offsets.replay(key, value, now)
    return core, offsets


def cleaned_up(core, offsets, now=LOADED_AT):
    """The state after the next expiry check with nothing old enough to expire: groups left
    Empty without offsets or stored metadata (a simple consumer's, whose offsets were deleted)
    are gone, as the periodic check removes them."""
    for group in offsets.expire(now, core.groups).dead_groups:
        core.replay(GroupMetadataKey(group), None, now)
    return snapshot(core, offsets)


# --- what a coordinator writes, one batch per operation ---------------------------------------

members = st.lists(st.sampled_from(MEMBERS), unique=True, max_size=3)
commit_values = st.builds(
    OffsetCommitValue,
    offset=st.integers(0, 2**40),
    leader_epoch=st.integers(-1, 20),
    metadata=st.sampled_from(["", "", "", "m"]),
    commit_timestamp=st.integers(T0, T0 + 1000),
    expire_timestamp=st.sampled_from([-1, -1, -1, T0 + 5000]),
)


@st.composite
def operations(draw):
    """Batches of records in the order a coordinator writes them: commits (runs over topics,
    partitions in any order), offset deletions, group deletions (offset tombstones, then the
    group's), group metadata with growing generations, and now and then a record type brook
    does not read."""
    batches: list[list[CoordinatorRecord]] = []
    committed: set[tuple[str, str, int]] = set()
    generations = dict.fromkeys(GROUPS, 0)
    for _ in range(draw(st.integers(1, 25))):
        kind = draw(st.sampled_from(["commit", "commit", "commit", "delete", "drop", "meta"]))
        group = draw(st.sampled_from(GROUPS))
        if kind == "commit":
            records = []
            for topic in draw(st.lists(st.sampled_from(TOPICS), min_size=1, unique=True)):
                for p in draw(st.lists(st.integers(0, 9), min_size=1, max_size=10, unique=True)):
                    records.append(CoordinatorRecord(OffsetCommitKey(group, topic, p), draw(commit_values)))
                    committed.add((group, topic, p))
            batches.append(records)
        elif kind == "delete":
            keys = sorted(k for k in committed if k[0] == group)
            chosen = draw(st.lists(st.sampled_from(keys), unique=True)) if keys else []
            if chosen:
                batches.append([CoordinatorRecord(OffsetCommitKey(*k), None) for k in chosen])
                committed -= set(chosen)
        elif kind == "drop":
            keys = sorted(k for k in committed if k[0] == group)
            batches.append([CoordinatorRecord(OffsetCommitKey(*k), None) for k in keys]
                           + [CoordinatorRecord(GroupMetadataKey(group), None)])
            committed -= set(keys)
            generations[group] = 0
        elif group != "simple":
            generations[group] += 1
            ids = draw(members)
            value = GroupMetadataValue(
                "consumer", generations[group], "range" if ids else None,
                ids[0] if ids else None, T0 + generations[group],
                tuple(MemberMetadata(m, None, "client", "/127.0.0.1", 30_000, 10_000, b"sub",
                                     m.encode()) for m in ids))
            batches.append([CoordinatorRecord(GroupMetadataKey(group), value)])
    return batches


def encoded(batches, now=T0):
    return [encode_records(records, now) for records in batches]


@given(operations())
def test_loading_in_runs_gives_the_state_of_replaying_record_by_record(ops):
    data = encoded(ops)
    fast = load(data)
    slow = replay_one_by_one(data)
    assert snapshot(*fast) == snapshot(*slow)


def test_loading_skips_record_types_it_does_not_read():
    data = encoded([[CoordinatorRecord(OffsetCommitKey("g", "t", 0), OffsetCommitValue(5))]])
    from brook.records import Record as BatchRecord
    from brook.records import encode_batch

    data.append(encode_batch([BatchRecord(1, T0, b"\x00\x09\x00\x01g", b"\x00\x00")],
                             base_offset=1))
    core, offsets = load(data)
    assert offsets.get("g", "t", 0) == OffsetCommitValue(5)


# --- compaction ----------------------------------------------------------------------------

DELETE_RETENTION = 1000
COMPACTED = LogConfig(segment_bytes=4096, index_interval_bytes=100, cleanup_policy="compact",
                      delete_retention_ms=DELETE_RETENTION, min_cleanable_dirty_ratio=0.0)


def write_log(path, ops) -> Log:
    lg = Log(str(path / "__consumer_offsets-0"), COMPACTED)
    for records in ops:
        lg.append(encode_records(records, T0), origin=AppendOrigin.COORDINATOR)
    lg.roll()  # the active segment is never cleaned
    return lg


def record_count(lg) -> int:
    return sum(read_header(data, p).record_count
               for data in read_batches(lg) for p in _positions(data))


def _positions(data):
    pos = 0
    while pos < len(data):
        yield pos
        pos += read_header(data, pos).size


@given(operations())
def test_replaying_a_compacted_log_gives_the_state_of_replaying_all_of_it(tmp_path_factory, ops):
    lg = write_log(tmp_path_factory.mktemp("offsets"), ops)
    try:
        whole = cleaned_up(*load(list(read_batches(lg))))
        before = record_count(lg)
        # The first pass keeps the tombstones (stamped with their delete horizon) ...
        checkpoint = clean_log(lg, None, T0).new_first_dirty_offset
        assert record_count(lg) <= before
        assert cleaned_up(*load(list(read_batches(lg)))) == whole
        # ... the next pass after the horizon drops them.
        lg.roll()
        clean_log(lg, checkpoint, T0 + DELETE_RETENTION + 1)
        assert cleaned_up(*load(list(read_batches(lg)))) == whole
    finally:
        lg.close()


def test_compaction_keeps_the_last_value_of_each_key(tmp_path):
    """The deterministic case: three rounds of commits, a deletion, a group deletion."""
    key = OffsetCommitKey
    ops = [
        [CoordinatorRecord(key(g, "t", p), OffsetCommitValue(r * 100 + p, 1, "", T0)) for g in ("a", "b")
         for p in range(10)]
        for r in range(3)
    ]
    ops.append([CoordinatorRecord(key("a", "t", 0), None)])
    ops.append([CoordinatorRecord(key("b", "t", p), None) for p in range(10)]
               + [CoordinatorRecord(GroupMetadataKey("b"), None)])
    lg = write_log(tmp_path, ops)
    try:
        assert record_count(lg) == 3 * 20 + 1 + 11
        clean_log(lg, None, T0)
        assert record_count(lg) == 9 + 12  # a's last values; the tombstones until the horizon
        lg.roll()
        clean_log(lg, lg.log_start_offset, T0 + DELETE_RETENTION + 1)
        core, offsets = load(list(read_batches(lg)))
        assert record_count(lg) == 9
        assert offsets.fetch("a") == offsets.fetch("a", [("t", range(1, 10))])
        assert [f.offset for f in offsets.fetch("a")] == [200 + p for p in range(1, 10)]
        assert not offsets.has_offsets("b") and "b" not in core.groups
    finally:
        lg.close()
