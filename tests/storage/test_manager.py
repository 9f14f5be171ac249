"""LogManager: log dirs, checkpoints, clean-shutdown marker, and the scheduled work."""

import os

from brook.clock import FakeClock
from brook.records import Record, encode_batch
from brook.storage.checkpoint import read_checkpoint, write_checkpoint
from brook.storage.config import LogConfig
from brook.storage.manager import (
    CLEAN_SHUTDOWN_MARKER,
    CLEANER_CHECKPOINT,
    LOG_START_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    LogManager,
    ManagerConfig,
)

from tests.support.storage_helpers import make_batch, read_all

HOUR = 3600 * 1000


def manager(dirs, clock, config=LogConfig(), **kw):
    m = LogManager([str(d) for d in dirs], config, clock=clock, **kw)
    m.startup()
    return m


def test_logs_spread_over_log_dirs_and_reload(tmp_path):
    clock = FakeClock()
    dirs = [tmp_path / "a", tmp_path / "b"]
    m = manager(dirs, clock)
    for p in range(4):
        m.get_or_create_log("t", p).append(make_batch(p + 1, 1000))
    assert {len(os.listdir(d)) for d in dirs} == {2}
    m.shutdown()
    for d in dirs:
        assert os.path.exists(d / CLEAN_SHUTDOWN_MARKER)
        assert read_checkpoint(str(d / RECOVERY_POINT_CHECKPOINT))  # flushed at shutdown
    m = manager(dirs, clock)
    assert {tp: lg.log_end_offset for tp, lg in m.logs.items()} == {("t", p): p + 1 for p in range(4)}
    assert not any(os.path.exists(d / CLEAN_SHUTDOWN_MARKER) for d in dirs)  # consumed at start


def test_unclean_start_recovers_from_the_recovery_point(tmp_path):
    clock = FakeClock()
    m = manager([tmp_path], clock)
    lg = m.get_or_create_log("t", 0)
    lg.append(make_batch(3, 1000))
    lg.flush()
    m.checkpoint_recovery_points()
    lg.append(make_batch(3, 1000))
    path = lg.active_segment.log_path
    for seg in lg.segments:
        seg.close_without_index()  # killed: no marker, no final checkpoint
    with open(path, "ab") as f:
        f.write(b"garbage after a crash")
    assert read_checkpoint(str(tmp_path / RECOVERY_POINT_CHECKPOINT)) == {("t", 0): 3}
    m = manager([tmp_path], clock)
    lg = m.get_log("t", 0)
    assert lg.log_end_offset == 6 and lg.recovered_bytes_truncated == len(b"garbage after a crash")
    assert [r[0] for r in read_all(lg)] == list(range(6))


def test_tick_flushes_by_time_and_checkpoints(tmp_path):
    clock = FakeClock()
    mc = ManagerConfig(flush_scheduler_interval_ms=100, recovery_point_checkpoint_interval_ms=1000)
    m = manager([tmp_path], clock, LogConfig(flush_ms=500), manager_config=mc)
    lg = m.get_or_create_log("t", 0)
    lg.append(make_batch(2, 1000))
    clock.advance(400)
    m.tick()
    assert lg.recovery_point == 0
    clock.advance(200)
    m.tick()
    assert lg.recovery_point == 2
    assert not os.path.exists(tmp_path / RECOVERY_POINT_CHECKPOINT)
    clock.advance(500)
    m.tick()
    assert read_checkpoint(str(tmp_path / RECOVERY_POINT_CHECKPOINT)) == {("t", 0): 2}
    assert m.next_due_ms() > clock.milliseconds()


def test_tick_applies_retention_and_deletes_files_later(tmp_path):
    clock = FakeClock()
    mc = ManagerConfig(retention_check_interval_ms=60_000, start_offset_checkpoint_interval_ms=60_000)
    m = manager([tmp_path], clock, LogConfig(segment_bytes=600, retention_ms=HOUR, file_delete_delay_ms=30_000),
                manager_config=mc)
    lg = m.get_or_create_log("t", 0)
    for _ in range(10):
        lg.append(make_batch(2, clock.milliseconds(), size=100))
    clock.advance(2 * HOUR)
    lg.append(make_batch(2, clock.milliseconds(), size=100))
    m.tick()
    assert lg.log_start_offset == lg.active_segment.base_offset > 0
    assert any(n.endswith(".deleted") for n in os.listdir(tmp_path / "t-0"))
    assert read_checkpoint(str(tmp_path / LOG_START_CHECKPOINT)) == {("t", 0): lg.log_start_offset}
    clock.advance(30_000)
    m.tick()
    assert not any(n.endswith(".deleted") for n in os.listdir(tmp_path / "t-0"))


def test_tick_compacts_and_the_cleaner_checkpoint_survives_restart(tmp_path):
    clock = FakeClock()
    compacted = LogConfig(segment_bytes=1000, cleanup_policy="compact", min_cleanable_dirty_ratio=0.1)
    m = manager([tmp_path], clock, compacted, manager_config=ManagerConfig(cleaner_backoff_ms=1000))
    lg = m.get_or_create_log("profiles", 0)
    for i in range(40):
        lg.append(encode_batch([Record(0, clock.milliseconds(), b"key-%d" % (i % 4), b"v%d" % i)]))
    lg.roll()
    before = len(read_all(lg))
    clock.advance(1000)
    m.tick()
    after = read_all(lg)
    assert len(after) < before
    assert {r[2]: r[3] for r in after} == {b"key-%d" % k: b"v%d" % (36 + k) for k in range(4)}
    first_dirty = m.cleaner.checkpoints[("profiles", 0)]
    assert first_dirty == lg.active_segment.base_offset
    m.shutdown()
    assert read_checkpoint(str(tmp_path / CLEANER_CHECKPOINT)) == {("profiles", 0): first_dirty}
    m = manager([tmp_path], clock, compacted)
    assert m.cleaner.checkpoints[("profiles", 0)] == first_dirty


def test_topic_configs_and_deletion(tmp_path):
    clock = FakeClock()
    configs = {"small": LogConfig(segment_bytes=500)}
    m = manager([tmp_path], clock, topic_config=lambda t: configs.get(t, LogConfig()))
    assert m.get_or_create_log("small", 0).config.segment_bytes == 500
    assert m.get_or_create_log("big", 0).config.segment_bytes == LogConfig().segment_bytes
    m.delete_log("small", 0)
    assert m.get_log("small", 0) is None and not os.path.exists(tmp_path / "small-0")


def test_corrupt_checkpoint_falls_back_to_a_full_scan(tmp_path):
    clock = FakeClock()
    m = manager([tmp_path], clock)
    m.get_or_create_log("t", 0).append(make_batch(3, 1000))
    m.shutdown()
    os.unlink(tmp_path / CLEAN_SHUTDOWN_MARKER)
    (tmp_path / RECOVERY_POINT_CHECKPOINT).write_text("0\n5\nbroken")
    m = manager([tmp_path], clock)
    assert m.get_log("t", 0).log_end_offset == 3


def test_checkpoint_format_round_trip(tmp_path):
    path = str(tmp_path / "cp")
    entries = {("a", 0): 5, ("a", 1): 0, ("topic.with-dash_1", 12): 2**40}
    write_checkpoint(path, entries)
    assert open(path).read().splitlines()[:2] == ["0", "3"]
    assert read_checkpoint(path) == entries
