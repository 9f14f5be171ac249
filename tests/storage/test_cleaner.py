"""Log compaction: what survives, tombstones and their delete horizon, dirty-ratio and lag
gating, the offset map limit, grouping, and crash safety of the swap."""

import os
import shutil

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from tests.support.examples import examples

from brook.clock import FakeClock
from brook.records import Codec, Record, decode_batch, encode_batch
from brook.records.batch import read_header
from brook.storage.cleaner import (
    CleanableStats,
    LogCleaner,
    build_offset_map,
    clean_log,
    cleanable_stats,
    pick_dirtiest,
)
from brook.storage.config import LogConfig
from brook.storage.log import Log
from brook.storage.producer_state import AppendOrigin
from brook.storage.segment import DELETED_SUFFIX, LOG_SUFFIX, SWAP_SUFFIX

from tests.support.storage_helpers import read_all

RETENTION = 1000
COMPACT = LogConfig(segment_bytes=600, index_interval_bytes=100, cleanup_policy="compact",
                    delete_retention_ms=RETENTION, min_cleanable_dirty_ratio=0.5)
PROPERTY = LogConfig(segment_bytes=400, index_interval_bytes=60, cleanup_policy="compact",
                     delete_retention_ms=RETENTION)


def open_log(path, config=COMPACT, clock=None, name="topic-0", **kw):
    return Log(str(path / name), config, clock=clock or FakeClock(), **kw)


def append(lg, clock, pairs, codec=Codec.NONE, **batch_kw):
    """Append one batch of (key, value) records at the clock's time; return the records as
    the log holds them: (offset, timestamp, key, value, headers)."""
    now = clock.milliseconds()
    records = [Record(i, now + i, k, v, (("h", b"%d" % i),)) for i, (k, v) in enumerate(pairs)]
    # Keyless records in a compacted log were written before its policy became compact (a
    # producer's are refused now), so they go in as the broker's own append.
    origin = AppendOrigin.COORDINATOR if any(k is None for k, _ in pairs) else AppendOrigin.CLIENT
    info = lg.append(encode_batch(records, codec=codec, **batch_kw), origin=origin)
    return [(info.first_offset + i, r.timestamp, r.key, r.value, r.headers) for i, r in enumerate(records)]


def raw_batches(lg):
    """(header, raw bytes) of every batch in the log, segment by segment."""
    return [(read_header(raw), raw) for seg in lg.segments for _, raw in seg.batches()]


def latest_by_key(records):
    out = {}
    for rec in records:
        if rec[2] is not None:
            out[rec[2]] = rec
    return out


def k(i):
    return b"k%d" % i


# ---------------------------------------------------------------- the property


def check_compacted(lg, expected, end, horizon_may_have_passed):
    """Invariants of a compacted log against everything appended (`expected`, by offset)."""
    got = read_all(lg)
    offsets = [r[0] for r in got]
    assert offsets == sorted(set(offsets)), "offsets must be unique and increasing"
    by_offset = {r[0]: r for r in expected}
    for rec in got:
        assert by_offset[rec[0]] == rec, "a retained record must be unchanged"
    kept = {r[0] for r in got}
    # keyless records are never removed
    assert all(r[0] in kept for r in expected if r[2] is None)
    # every key's latest value is still the latest; a latest tombstone may only be gone
    # once its delete horizon could have passed
    got_latest = latest_by_key(got)
    for key, last in latest_by_key(expected).items():
        if last[3] is not None:
            assert got_latest.get(key) == last, key
        elif key in got_latest:
            assert got_latest[key] == last, key
        else:
            assert horizon_may_have_passed, key
    # below the new first dirty offset, each key appears at most once: its latest record
    # there (or nothing, if that was a tombstone whose horizon passed)
    below = [r for r in got if r[0] < end and r[2] is not None]
    assert len({r[2] for r in below}) == len(below)
    latest_below = latest_by_key(r for r in expected if r[0] < end)
    for rec in below:
        assert latest_below[rec[2]] == rec
    for key, last in latest_below.items():
        if last[0] not in kept:
            assert last[3] is None and horizon_may_have_passed
    return got


keys = st.integers(0, 7).map(lambda i: None if i == 7 else k(i))
values = st.one_of(st.none(), st.binary(max_size=25))
appends = st.tuples(st.just("append"), st.lists(st.tuples(keys, values), min_size=1, max_size=6),
                   st.sampled_from(list(Codec)))
ops = st.lists(
    st.one_of(
        appends,
        appends,
        appends,
        st.tuples(st.just("clean"), st.sampled_from([None, None, 1, 3, 6])),
        st.tuples(st.just("advance"), st.integers(0, 2 * RETENTION)),
    ),
    min_size=20,
    max_size=80,
)


@settings(max_examples=examples(100))
@given(ops=ops, reopen=st.sampled_from([True, False]))
def test_compaction_keeps_the_latest_value_of_every_key(tmp_path_factory, ops, reopen):
    path = tmp_path_factory.mktemp("prop")
    clock = FakeClock()
    lg = open_log(path, config=PROPERTY, clock=clock)
    expected, batches = [], {}
    dirty = None
    advanced = 0
    horizon_may_have_passed = False
    end = 0
    for op in ops + [("clean", None)]:
        if op[0] == "append":
            recs = append(lg, clock, op[1], op[2])
            expected += recs
            batches[recs[0][0]] = (recs[-1][0], op[2])
        elif op[0] == "advance":
            clock.advance(op[1])
            advanced += op[1]
            if advanced >= RETENTION:  # the horizon is inclusive: dropped once now >= it
                horizon_may_have_passed = True
        else:
            leo = lg.log_end_offset
            active_base = lg.active_segment.base_offset
            result = clean_log(lg, dirty, clock.milliseconds(), max_map_entries=op[1])
            assert lg.log_end_offset == leo
            assert result.start_offset <= result.new_first_dirty_offset <= active_base
            dirty = end = result.new_first_dirty_offset
            event(f"segments > 5: {len(lg.segments) > 5}")
            event(f"tombstones removed: {result.tombstones_removed > 0}")
            event(f"offset map full: {result.map_full}")
            got = check_compacted(lg, expected, end, horizon_may_have_passed)
            kept = {r[0] for r in got}
            assert all(r[0] in kept for r in expected if r[0] >= active_base), "active segment touched"
    # batches keep their offsets and codec (an emptied batch is only kept uncompressed)
    for h, _ in raw_batches(lg):
        last, codec = batches[h.base_offset]
        assert h.last_offset == last
        if h.record_count:
            assert h.compression == codec
    assert lg.log_end_offset == len(expected)
    got = read_all(lg)
    lg.close()
    lg = open_log(path, config=PROPERTY, clock=clock, had_clean_shutdown=reopen)
    assert read_all(lg) == got
    assert lg.log_end_offset == len(expected)
    lg.close()


# ---------------------------------------------------------------- tombstones


def test_tombstones_survive_the_first_clean_and_go_after_the_delete_horizon(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock=clock)
    expected = append(lg, clock, [(k(1), b"a"), (k(2), b"b")])
    clock.advance(7)
    expected += append(lg, clock, [(k(1), None), (k(3), b"c")])  # tombstone for k1
    lg.roll()
    expected += append(lg, clock, [(k(4), b"d")])
    clock.advance(100)
    first = clean_log(lg, None, clock.milliseconds())
    assert first.new_first_dirty_offset == lg.active_segment.base_offset
    # timestamps and headers survive the horizon taking the base timestamp's place
    assert read_all(lg) == expected[1:]
    tomb = next(h for h, _ in raw_batches(lg) if h.base_offset == 2)
    assert tomb.has_delete_horizon and tomb.base_timestamp == clock.milliseconds() + RETENTION
    horizon = tomb.base_timestamp

    clock.advance(RETENTION - 1)
    again = clean_log(lg, first.new_first_dirty_offset, clock.milliseconds())
    assert again.tombstones_removed == 0
    assert (2, k(1), None) in [(r[0], r[2], r[3]) for r in read_all(lg)]
    h2 = next(h for h, _ in raw_batches(lg) if h.base_offset == 2)
    assert h2.base_timestamp == horizon  # set once, not pushed back

    clock.advance(1)
    third = clean_log(lg, again.new_first_dirty_offset, clock.milliseconds())
    assert third.tombstones_removed == 1
    assert [(r[0], r[2]) for r in read_all(lg)] == [(1, k(2)), (3, k(3)), (4, k(4))]
    lg.close()


def test_record_timestamps_and_headers_survive_rewriting(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock=clock)
    expected = append(lg, clock, [(k(1), b"old"), (k(2), None), (k(3), b"x")], Codec.ZSTD)
    expected += append(lg, clock, [(k(1), b"new")])
    lg.roll()
    append(lg, clock, [(k(9), b"z")])
    clean_log(lg, None, clock.milliseconds() + 5)
    got = read_all(lg)
    assert got[:3] == [expected[1], expected[2], expected[3]]
    lg.close()


# ---------------------------------------------------------------- what is left alone


def test_the_active_segment_is_never_touched(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, config=LogConfig(cleanup_policy="compact"), clock=clock)
    for i in range(10):
        append(lg, clock, [(k(0), b"%d" % i), (None, b"keyless")])
    before = open(lg.active_segment.log_path, "rb").read()
    result = clean_log(lg, None, clock.milliseconds())
    assert result.new_first_dirty_offset == 0 and result.records_read == 0
    assert open(lg.active_segment.log_path, "rb").read() == before
    assert len(read_all(lg)) == 20
    lg.close()


def test_compaction_stays_below_the_cleaning_bound(tmp_path):
    # A replica's high watermark: records above it may be truncated after a failover, so no
    # key of theirs may remove a record below it, and segments reaching past it stay as they
    # are (replicas of a compacted log then agree below the high watermark).
    clock = FakeClock()
    lg = open_log(tmp_path, clock=clock)
    for i in range(40):  # key 0 again and again, over many segments
        append(lg, clock, [(k(0), b"v%d" % i)])
    assert len(lg.segments) > 4
    hw = lg.segments[2].base_offset + 1  # inside the third segment
    lg.cleaning_bound = lambda: hw
    result = clean_log(lg, None, clock.milliseconds())
    assert result.first_uncleanable_offset == lg.segments[2].base_offset
    kept = read_all(lg)
    # every record at or past the third segment's base is still there
    assert [r[0] for r in kept if r[0] >= hw - 1] == list(range(hw - 1, 40))
    # below it, key 0's latest below the bound survives: nothing above the bound removed it
    below = [r for r in kept if r[0] < hw - 1]
    assert [r[0] for r in below] == [hw - 2]
    lg.cleaning_bound = None  # without the bound, the whole log up to the active segment
    clean_log(lg, None, clock.milliseconds())
    assert [r[0] for r in read_all(lg)][0] >= lg.segments[-1].base_offset - 1
    lg.close()


def test_keyless_records_and_control_batches_are_kept(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock=clock)
    keyless = append(lg, clock, [(None, b"n1"), (k(1), b"a"), (None, b"n2")])
    now = clock.milliseconds()
    marker = encode_batch([Record(0, now, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")],
                          control=True, transactional=True, producer_id=7, producer_epoch=1)
    lg.append(marker, origin=AppendOrigin.COORDINATOR)
    append(lg, clock, [(k(1), b"b")])
    lg.roll()
    append(lg, clock, [(k(2), b"c")])
    clean_log(lg, None, clock.milliseconds())
    got = read_all(lg)
    assert keyless[0] in got and keyless[2] in got and keyless[1] not in got
    control = [raw for h, raw in raw_batches(lg) if h.is_control]
    # Kept, its record as it was; a marker of no transaction is given its delete horizon
    # (docs of the cleaner: the transactions' rules; tests/storage/test_transaction_cleaning.py)
    assert len(control) == 1
    assert read_header(control[0]).has_delete_horizon
    assert decode_batch(control[0]).records[0].key == decode_batch(marker).records[0].key
    lg.close()


def test_batches_that_lose_nothing_are_copied_byte_for_byte(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock=clock)
    for i in range(12):
        append(lg, clock, [(k(100 + i), b"v" * 40)], Codec.GZIP)
    append(lg, clock, [(k(1), b"old"), (k(2), b"keep")], Codec.GZIP)
    append(lg, clock, [(k(1), b"new")])
    lg.roll()
    append(lg, clock, [(k(9), b"z")])
    before = {h.base_offset: raw for h, raw in raw_batches(lg)}
    clean_log(lg, None, clock.milliseconds())
    after = {h.base_offset: raw for h, raw in raw_batches(lg)}
    for base in range(12):
        assert after[base] == before[base]
    assert after[12] != before[12] and decode_batch(after[12]).compression == Codec.GZIP
    lg.close()


@pytest.mark.parametrize("codec", list(Codec))
def test_compressed_batches_are_cleaned_and_keep_their_codec_and_producer_fields(tmp_path, codec):
    clock = FakeClock()
    lg = open_log(tmp_path, clock=clock)
    fields = dict(producer_id=42, producer_epoch=3, base_sequence=17, partition_leader_epoch=5)
    append(lg, clock, [(k(i % 3), b"value-%d" % i) for i in range(6)], codec, **fields)
    append(lg, clock, [(k(0), b"latest")], codec)
    lg.roll()
    append(lg, clock, [(k(5), b"z")])
    (h0, raw0), *_ = raw_batches(lg)
    clean_log(lg, None, clock.milliseconds())
    (h, raw), *_ = raw_batches(lg)
    batch = decode_batch(raw)
    assert h.base_offset == 0 and h.last_offset == h0.last_offset == 5  # offset span kept
    assert batch.compression == codec
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.partition_leader_epoch) == \
        (42, 3, 17, 5)
    assert [(r.offset, r.key) for r in batch.records] == [(4, k(1)), (5, k(2))]
    lg.close()


def test_log_append_time_and_transactional_batches_keep_their_attributes(tmp_path):
    clock = FakeClock()
    config = LogConfig(segment_bytes=600, cleanup_policy="compact", message_timestamp_type="LogAppendTime")
    lg = open_log(tmp_path, config=config, clock=clock)
    append(lg, clock, [(k(0), b"a"), (k(1), b"b"), (k(2), b"c")], Codec.SNAPPY,
           transactional=True, producer_id=9, producer_epoch=0, base_sequence=0)
    stamped = clock.milliseconds()
    lg.append_as_marker(9, 0, 0, committed=True)  # an open transaction would not be cleaned
    clock.advance(50)
    append(lg, clock, [(k(1), b"b2")])
    lg.roll()
    append(lg, clock, [(k(5), b"z")])
    clock.advance(50)
    clean_log(lg, None, clock.milliseconds())
    h, raw = raw_batches(lg)[0]
    batch = decode_batch(raw)
    assert batch.is_transactional and batch.compression == Codec.SNAPPY
    assert batch.timestamp_type == 1 and h.max_timestamp == stamped  # LogAppendTime kept
    assert [r.key for r in batch.records] == [k(0), k(2)] and h.last_offset == 2
    lg.close()


# ---------------------------------------------------------------- when to clean


def test_min_compaction_lag_keeps_recent_segments_dirty(tmp_path):
    clock = FakeClock()
    config = LogConfig(segment_bytes=300, cleanup_policy="compact", min_compaction_lag_ms=10_000,
                       min_cleanable_dirty_ratio=0.0)
    lg = open_log(tmp_path, config=config, clock=clock)
    for i in range(8):
        append(lg, clock, [(k(0), b"old-%d" % i + b"." * 100)])
    clock.advance(20_000)
    recent_start = lg.log_end_offset
    for i in range(8):
        append(lg, clock, [(k(0), b"new-%d" % i + b"." * 100)])
    recent_base = min(s.base_offset for s in lg.segments if s.base_offset >= recent_start)
    stats = cleanable_stats(lg, None, clock.milliseconds())
    assert stats.first_uncleanable_offset == recent_base < lg.active_segment.base_offset
    result = clean_log(lg, None, clock.milliseconds())
    assert result.new_first_dirty_offset == recent_base
    got = read_all(lg)
    old = [r for r in got if r[0] < recent_start]
    assert len(old) == 1 and old[0][3].startswith(b"old-7")
    assert [r[0] for r in got if r[0] >= recent_start] == list(range(recent_start, recent_start + 8))
    # once the lag has passed, the rest is cleanable (but the active segment)
    clock.advance(10_001)
    stats = cleanable_stats(lg, result.new_first_dirty_offset, clock.milliseconds())
    assert stats.first_uncleanable_offset == lg.active_segment.base_offset
    lg.close()


def test_dirty_ratio_is_dirty_bytes_over_cleanable_bytes_and_gates_cleaning(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock=clock)
    for i in range(30):
        append(lg, clock, [(k(i % 20), b"x" * 60)])
    cleaner = LogCleaner()
    first = cleaner.clean_once([lg], clock.milliseconds())
    assert first is not None and first.start_offset == 0
    dirty = cleaner.checkpoints[("topic", 0)]
    assert dirty == lg.active_segment.base_offset
    # a little more dirty data: below the 0.5 ratio, nothing to do
    append(lg, clock, [(k(0), b"y" * 60)])
    lg.roll()
    append(lg, clock, [(k(1), b"y" * 60)])
    stats = cleanable_stats(lg, dirty, clock.milliseconds())
    clean = sum(s.size for s in lg.segments if s.base_offset < dirty)
    dirty_bytes = sum(s.size for s in lg.segments[:-1] if s.base_offset >= dirty)
    assert (stats.clean_bytes, stats.dirty_bytes) == (clean, dirty_bytes)
    assert stats.dirty_ratio == pytest.approx(dirty_bytes / (clean + dirty_bytes))
    assert stats.dirty_ratio < 0.5 and not stats.should_clean
    assert cleaner.clean_once([lg], clock.milliseconds()) is None
    # lots more: over the ratio
    for i in range(40):
        append(lg, clock, [(k(i % 20), b"z" * 60)])
    assert cleanable_stats(lg, dirty, clock.milliseconds()).dirty_ratio >= 0.5
    second = cleaner.clean_once([lg], clock.milliseconds())
    assert second is not None and second.start_offset == dirty
    assert cleaner.checkpoints[("topic", 0)] == lg.active_segment.base_offset
    lg.close()


def test_max_compaction_lag_forces_cleaning_below_the_ratio(tmp_path):
    clock = FakeClock()
    config = LogConfig(segment_bytes=600, cleanup_policy="compact", min_cleanable_dirty_ratio=0.9,
                       max_compaction_lag_ms=60_000)
    lg = open_log(tmp_path, config=config, clock=clock)
    for i in range(20):
        append(lg, clock, [(k(i), b"x" * 60)])
    cleaner = LogCleaner()
    assert cleaner.clean_once([lg], clock.milliseconds()) is not None  # all dirty: ratio 1
    append(lg, clock, [(k(0), b"y" * 60)])
    lg.roll()
    append(lg, clock, [(k(1), b"y")])
    stats = cleanable_stats(lg, cleaner.checkpoints[("topic", 0)], clock.milliseconds())
    assert stats.dirty_ratio < 0.9 and not stats.need_compaction_now
    assert cleaner.clean_once([lg], clock.milliseconds()) is None
    clock.advance(60_001)
    stats = cleanable_stats(lg, cleaner.checkpoints[("topic", 0)], clock.milliseconds())
    assert stats.need_compaction_now and stats.max_compaction_delay_ms > 0 and stats.should_clean
    result = cleaner.clean_once([lg], clock.milliseconds())
    assert result is not None and result.records_removed == 1
    lg.close()


def test_the_dirtiest_log_is_cleaned_first_and_checkpoints_follow(tmp_path):
    clock = FakeClock()
    a = open_log(tmp_path, clock=clock, name="a-0")
    b = open_log(tmp_path, clock=clock, name="b-0")
    d = open_log(tmp_path, config=LogConfig(segment_bytes=600), clock=clock, name="d-0")  # delete policy
    for lg in (a, b, d):
        for i in range(20):
            append(lg, clock, [(k(i % 5), b"x" * 60)])
    cleaner = LogCleaner({("a", 0): a.active_segment.base_offset - 2})  # a: almost all clean
    picked = pick_dirtiest([a, b, d], cleaner.checkpoints, clock.milliseconds())
    assert isinstance(picked, CleanableStats) and picked.log is b and picked.dirty_ratio == 1.0
    assert cleaner.clean_once([a, b, d], clock.milliseconds()).topic == "b"
    assert cleaner.checkpoints[("b", 0)] == b.active_segment.base_offset
    assert ("d", 0) not in cleaner.checkpoints
    # a's checkpoint out of range is reset to the log start: then a is the dirtiest
    cleaner.checkpoints[("a", 0)] = 10**9
    result = cleaner.clean_once([a, b, d], clock.milliseconds())
    assert result.topic == "a" and result.start_offset == 0
    assert cleaner.clean_once({("a", 0): a, ("b", 0): b, ("d", 0): d}, clock.milliseconds()) is None
    with pytest.raises(ValueError):
        clean_log(d, None, clock.milliseconds())
    for lg in (a, b, d):
        lg.close()


# ---------------------------------------------------------------- offset map and grouping


def test_a_full_offset_map_cleans_part_of_the_range_and_later_passes_finish(tmp_path):
    def build(path):
        clock = FakeClock()
        lg = open_log(path, clock=clock)
        for rnd in range(3):
            for i in range(12):
                append(lg, clock, [(k(i), b"%d-%d" % (rnd, i) + b"." * 40)])
        lg.roll()
        append(lg, clock, [(k(99), b"z")])
        return lg, clock

    full, clock = build(tmp_path / "full")
    clean_log(full, None, clock.milliseconds())
    expected = read_all(full)

    lg, clock = build(tmp_path / "part")
    offsets, covered, is_full = build_offset_map(lg, 0, lg.active_segment.base_offset, max_entries=4)
    assert is_full and len(offsets) == 4 and covered == 4
    dirty, passes = None, 0
    while dirty != lg.active_segment.base_offset:
        result = clean_log(lg, dirty, clock.milliseconds(), max_map_entries=4)
        assert result.new_first_dirty_offset > result.start_offset  # progress every pass
        assert result.map_entries <= 4
        dirty = result.new_first_dirty_offset
        passes += 1
    assert passes > 3
    assert read_all(lg) == expected
    full.close()
    lg.close()


def test_cleaned_groups_fit_in_a_segment(tmp_path):
    clock = FakeClock()
    lg = open_log(tmp_path, clock=clock)
    for i in range(60):
        append(lg, clock, [(k(i % 15), b"v" * (20 + i % 7))])
    lg.roll()
    n = len(lg.segments)
    result = clean_log(lg, None, clock.milliseconds())
    # full segments clean one by one; the shrunk ones merge on the next pass
    assert result.groups_cleaned >= 1 and len(lg.segments) == n
    again = clean_log(lg, result.new_first_dirty_offset, clock.milliseconds())
    assert again.new_first_dirty_offset == result.new_first_dirty_offset
    assert again.groups_cleaned >= 1 and len(lg.segments) < n
    assert all(s.size <= COMPACT.segment_bytes for s in lg.segments)
    assert sorted(r[2] for r in read_all(lg)) == sorted(k(i) for i in range(15))
    lg.close()


# ---------------------------------------------------------------- reopening and crashes


@pytest.mark.parametrize("clean_shutdown", [True, False])
def test_a_compacted_log_reopens_with_the_same_records(tmp_path, clean_shutdown):
    clock = FakeClock()
    lg = open_log(tmp_path, clock=clock)
    for i in range(40):
        append(lg, clock, [(k(i % 6), None if i % 9 == 0 else b"v%d" % i), (None, b"n")], Codec.LZ4)
    clean_log(lg, None, clock.milliseconds())
    got = read_all(lg)
    end = lg.log_end_offset
    lg.close()
    lg = open_log(tmp_path, clock=clock, had_clean_shutdown=clean_shutdown)
    assert read_all(lg) == got and lg.log_end_offset == end
    # and reading from any retained offset, through the rebuilt or reloaded indexes
    for rec in got[::5]:
        assert read_all(lg, start=rec[0])[0] == rec
    lg.close()


class Crash(Exception):
    pass


def crash_config():
    return LogConfig(segment_bytes=1000, index_interval_bytes=100, cleanup_policy="compact",
                     delete_retention_ms=RETENTION)


def build_crash_log(path):
    """Small manually rolled segments, two per cleaning group. The second segment only holds
    records superseded by the third, so the first group's cleaned segment keeps its last
    batch empty, to end where the old segments ended."""
    clock = FakeClock()
    d = str(path / "t-0")
    lg = Log(d, crash_config(), clock=clock)
    pad = b"v" * 40
    plan = [
        [[k(i) for i in range(5)]],
        [[k(i) for i in range(5, 10)]],
        [[k(i) for i in range(5, 10)], [None]],
        [[k(0), k(10), k(11), k(12), k(13)]],
        [[k(20), k(0), k(21), k(22)]],  # k0 is deleted here
        [[k(1), k(6), k(10), k(30), k(31)]],
    ]
    for n, segment in enumerate(plan):
        for keys_ in segment:
            values_ = [None if (n == 4 and key == k(0)) else b"r%d-" % n + pad for key in keys_]
            append(lg, clock, list(zip(keys_, values_)))
        lg.roll()
    append(lg, clock, [(k(99), b"active")])
    lg.close()
    return d, clock


def test_crash_at_every_step_of_the_swap_keeps_old_or_new_content(tmp_path):
    d, clock = build_crash_log(tmp_path / "orig")
    now = clock.milliseconds()
    ref = str(tmp_path / "ref" / "t-0")
    shutil.copytree(d, ref)
    lg = Log(ref, crash_config(), clock=FakeClock(), had_clean_shutdown=True)
    states = [read_all(lg)]
    real = lg.replace_segments
    group_sizes = []

    def recording(new, old):
        group_sizes.append((len(old), old[-1].next_offset))
        real(new, old)
        assert new.next_offset == group_sizes[-1][1]  # the cleaned segment covers its group
        states.append(read_all(lg))

    lg.replace_segments = recording
    clean_log(lg, None, now)
    assert any(h.record_count == 0 for h, _ in raw_batches(lg))  # the case this is about
    lg.close()
    assert len(group_sizes) >= 2 and group_sizes[0][0] >= 2
    old, new = states[0], states[-1]
    assert old != new

    runs = 0
    for g, (n_old, _) in enumerate(group_sizes, start=1):
        for step in range(2 * n_old + 5):
            work = str(tmp_path / f"work-{g}-{step}" / "t-0")
            snap = str(tmp_path / f"snap-{g}-{step}" / "t-0")
            shutil.copytree(d, work)
            lg = Log(work, crash_config(), clock=FakeClock(), had_clean_shutdown=True)
            _install_crash(lg, snap, g, step)
            with pytest.raises(Crash):
                clean_log(lg, None, now)
            for seg in lg.segments:
                seg.close_without_index()
            lg.delete_pending_files(force=True)
            recovered = Log(snap, crash_config(), clock=FakeClock(), had_clean_shutdown=False)
            got = read_all(recovered)
            # a crash inside group g's swap: the content before or after that swap
            assert got in (states[g - 1], states[g]), (g, step)
            assert recovered.log_end_offset == old[-1][0] + 1
            names = os.listdir(snap)
            assert not [n for n in names if n.endswith((SWAP_SUFFIX, DELETED_SUFFIX, ".cleaned"))], names
            # cleaning the recovered log again gives the same result as an uninterrupted clean
            clean_log(recovered, None, now)
            assert read_all(recovered) == new
            recovered.close()
            runs += 1
    assert runs > 10


def _install_crash(lg, snapshot, crash_group, step):
    """Replace lg.replace_segments by one that runs the real swap for the groups before
    `crash_group` and, in that group, stops before file operation number `step`, copying
    the directory as a crashed broker would leave it."""
    real = lg.replace_segments
    calls = [0]

    def crash():
        shutil.copytree(lg.directory, snapshot)
        raise Crash()

    def rename_log_only(seg, suffix):  # a crash in the middle of change_suffix
        base = seg.log_path[: seg.log_path.index(LOG_SUFFIX)]
        os.replace(seg.log_path, base + LOG_SUFFIX + suffix)

    def replace(new, old):
        calls[0] += 1
        if calls[0] < crash_group:
            return real(new, old)
        new.flush()
        # (complete?, operation): a crash at a partial operation leaves only its .log renamed
        ops = [(False, lambda: rename_log_only(new, SWAP_SUFFIX)),
               (True, lambda: new.change_suffix(SWAP_SUFFIX))]
        for seg in old:
            ops.append((False, lambda seg=seg: rename_log_only(seg, DELETED_SUFFIX)))
            ops.append((True, lambda seg=seg: seg.change_suffix(DELETED_SUFFIX)))
        ops.append((False, lambda: rename_log_only(new, "")))
        ops.append((True, lambda: new.change_suffix("")))
        # step 0: only the .cleaned files; step i: ops[i - 1] done (partial ones alone)
        if step == 0:
            crash()
        for i, (complete, op) in enumerate(ops, start=1):
            if complete or i == step:
                op()
            if i == step:
                crash()
        crash()

    lg.replace_segments = replace


def test_a_stored_bomb_is_inflated_no_further_than_produce_allows(tmp_path):
    """A zstd batch that inflates to 1 GiB, written before Produce checked records (here as the
    broker's own append, which is not walked): the cleaner stops at the topic's limit and
    fails the pass, as damage does (LogCleaner then leaves the log uncleanable)."""
    import struct
    import time

    from brook.records.batch import ATTRIBUTES_OFFSET, CRC_OFFSET, HEADER_SIZE
    from brook.records.crc import crc32c
    from brook.records.errors import InflationLimitError
    from tests.records.test_compression import zstd_rle_bomb

    clock = FakeClock()
    lg = open_log(tmp_path, LogConfig(cleanup_policy="compact", segment_bytes=1 << 20), clock=clock)
    head = encode_batch([Record(0, clock.milliseconds(), b"a", b"v")], codec=Codec.ZSTD)[:HEADER_SIZE]
    bomb = bytearray(head + zstd_rle_bomb(8192))
    struct.pack_into(">i", bomb, 8, len(bomb) - 12)
    struct.pack_into(">I", bomb, CRC_OFFSET, crc32c(memoryview(bomb)[ATTRIBUTES_OFFSET:]))
    lg.append(bytes(bomb), origin=AppendOrigin.COORDINATOR)
    lg.roll()
    started = time.perf_counter()
    with pytest.raises(InflationLimitError, match="over the limit of 8388704"):  # 8 x max.message.bytes
        build_offset_map(lg, 0, lg.log_end_offset)
    assert time.perf_counter() - started < 0.05
