"""Retention by time and size, driven by a fake clock; reads survive deletions."""

import os

import pytest

from brook.clock import FakeClock
from brook.storage.config import LogConfig
from brook.storage.errors import OffsetOutOfRangeError
from brook.storage.log import Log

from tests.support.storage_helpers import make_batch, read_all

HOUR = 3600 * 1000


def fill(lg, clock, batches, step_ms=0):
    for _ in range(batches):
        lg.append(make_batch(2, clock.milliseconds(), size=200))
        clock.advance(step_ms)


def test_retention_ms_deletes_old_segments_but_never_the_active_one(tmp_path):
    clock = FakeClock()
    lg = Log(str(tmp_path / "t-0"), LogConfig(segment_bytes=1000, retention_ms=HOUR), clock=clock)
    fill(lg, clock, 12, step_ms=10 * 60 * 1000)  # 2 hours of data, 10 minutes apart
    n_before = len(lg.segments)
    assert lg.delete_old_segments() > 0
    now = clock.milliseconds()
    assert all(now - s.largest_timestamp <= HOUR for s in lg.segments[:-1])
    assert lg.log_start_offset == lg.segments[0].base_offset > 0
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(0, 1000)
    clock.advance(10 * HOUR)
    lg.delete_old_segments()
    assert len(lg.segments) == 1 and len(lg.segments) < n_before  # the active one stays
    assert lg.log_start_offset == lg.active_segment.base_offset
    assert read_all(lg)[-1][0] == lg.log_end_offset - 1


def test_retention_bytes(tmp_path):
    clock = FakeClock()
    lg = Log(str(tmp_path / "t-0"), LogConfig(segment_bytes=1000, retention_bytes=2500), clock=clock)
    fill(lg, clock, 20)
    deleted = lg.delete_old_segments()
    assert deleted > 0 and lg.log_start_offset > 0
    sizes = [s.size for s in lg.segments]
    assert sum(sizes) >= 2500  # only whole segments that were over the limit went
    assert sum(sizes) - sizes[0] < 2500  # and every one that was


def test_compact_only_topics_keep_old_segments(tmp_path):
    clock = FakeClock()
    lg = Log(str(tmp_path / "t-0"), LogConfig(segment_bytes=1000, retention_ms=1, cleanup_policy="compact"),
             clock=clock)
    fill(lg, clock, 10)
    clock.advance(HOUR)
    assert lg.delete_old_segments() == 0


def test_infinite_retention(tmp_path):
    clock = FakeClock()
    lg = Log(str(tmp_path / "t-0"), LogConfig(segment_bytes=1000, retention_ms=-1), clock=clock)
    fill(lg, clock, 10)
    clock.advance(1000 * 24 * HOUR)
    assert lg.delete_old_segments() == 0


def test_log_start_offset_deletes_segments_below_it(tmp_path):
    clock = FakeClock()
    lg = Log(str(tmp_path / "t-0"), LogConfig(segment_bytes=1000, retention_ms=-1), clock=clock)
    fill(lg, clock, 10)
    target = lg.segments[2].base_offset + 1
    lg.increase_log_start_offset(target)
    assert lg.delete_old_segments() == 2
    assert lg.log_start_offset == target
    assert read_all(lg)[0][0] == target


def test_reads_in_progress_survive_deletion(tmp_path):
    clock = FakeClock()
    lg = Log(str(tmp_path / "t-0"), LogConfig(segment_bytes=1000, retention_ms=HOUR, file_delete_delay_ms=60_000),
             clock=clock)
    fill(lg, clock, 10)
    first = lg.segments[0]
    in_flight = lg.read(0, 1 << 20)  # e.g. a fetch response being written to a socket
    expected = in_flight.read()
    clock.advance(2 * HOUR)
    assert lg.delete_old_segments() > 0
    names = os.listdir(tmp_path / "t-0")
    assert f"{first.base_offset:020d}.log.deleted" in names
    assert in_flight.read() == expected  # the region still reads, by fd
    assert lg.delete_pending_files(clock.milliseconds() + 59_999) == 0
    assert in_flight.read() == expected
    assert lg.delete_pending_files(clock.milliseconds() + 60_000) > 0
    assert not any(n.endswith(".deleted") for n in os.listdir(tmp_path / "t-0"))


def test_leftover_deleted_files_are_removed_on_load(tmp_path):
    clock = FakeClock()
    d = str(tmp_path / "t-0")
    lg = Log(d, LogConfig(segment_bytes=1000, retention_ms=HOUR), clock=clock)
    fill(lg, clock, 10)
    clock.advance(2 * HOUR)
    lg.delete_old_segments()
    start = lg.log_start_offset
    for seg in lg.segments:
        seg.close()  # a crash: pending deletes never ran
    lg = Log(d, LogConfig(segment_bytes=1000), clock=clock, log_start_offset=start, had_clean_shutdown=True)
    assert not any(n.endswith(".deleted") for n in os.listdir(d))
    assert lg.log_start_offset == start
