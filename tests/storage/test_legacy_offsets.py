"""ListOffsets v0's lookup (``Log.legacy_offsets_before``): segment base offsets by the time
each segment's file was last modified, as Kafka 3.9's UnifiedLog.legacyFetchOffsetsBefore."""

import os

import pytest

from brook.clock import FakeClock
from brook.storage.config import LogConfig
from brook.storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, Log
from tests.support.storage_helpers import make_batch

NOW = 10_000_000  # ms, the fake clock


def _log(tmp_path, batches=3, per_batch=2):
    clock = FakeClock(NOW)
    lg = Log(str(tmp_path / "t-0"), LogConfig(segment_bytes=150), clock=clock)
    for i in range(batches):
        lg.append(make_batch(per_batch, ts=1000 * i))  # each batch fills a segment of its own
    return lg


def _set_mtime(lg, base_offset, ms):
    seg = next(s for s in lg.segments if s.base_offset == base_offset)
    os.utime(seg.log_path, ns=(ms * 1_000_000, ms * 1_000_000))


def test_latest_and_earliest(tmp_path):
    lg = _log(tmp_path)
    assert [s.base_offset for s in lg.segments] == [0, 2, 4]
    assert lg.legacy_offsets_before(LATEST_TIMESTAMP, 10) == [6, 4, 2, 0]
    assert lg.legacy_offsets_before(LATEST_TIMESTAMP, 2) == [6, 4]
    assert lg.legacy_offsets_before(LATEST_TIMESTAMP, 0) == []
    assert lg.legacy_offsets_before(EARLIEST_TIMESTAMP, 10) == [0]


def test_a_timestamp_selects_segments_by_modification_time_not_record_time(tmp_path):
    lg = _log(tmp_path)
    _set_mtime(lg, 0, 1_000_000)
    _set_mtime(lg, 2, 2_000_000)
    _set_mtime(lg, 4, 3_000_000)
    assert lg.legacy_offsets_before(999_999, 10) == []
    assert lg.legacy_offsets_before(1_500_000, 10) == [0]
    assert lg.legacy_offsets_before(2_500_000, 10) == [2, 0]
    assert lg.legacy_offsets_before(2_500_000, 1) == [2]
    assert lg.legacy_offsets_before(3_000_000, 10) == [4, 2, 0]
    # the log end offset stands for the clock's now
    assert lg.legacy_offsets_before(NOW, 10) == [6, 4, 2, 0]
    # records' own timestamps (0, 1000, 2000) play no part: v1's lookup would find offset 2
    assert lg.fetch_offset_by_timestamp(1000)[0] == 2


def test_an_empty_active_segment_adds_no_log_end_offset(tmp_path):
    lg = _log(tmp_path)
    lg.roll()
    assert [s.base_offset for s in lg.segments] == [0, 2, 4, 6]
    assert lg.legacy_offsets_before(LATEST_TIMESTAMP, 10) == [6, 4, 2, 0]
    fresh = Log(str(tmp_path / "empty-0"), LogConfig(), clock=FakeClock(NOW))
    assert fresh.legacy_offsets_before(LATEST_TIMESTAMP, 10) == [0]
    assert fresh.legacy_offsets_before(EARLIEST_TIMESTAMP, 10) == [0]


def test_the_log_start_offset_bounds_a_segment_base(tmp_path):
    lg = _log(tmp_path)
    lg.increase_log_start_offset(3)
    assert lg.legacy_offsets_before(EARLIEST_TIMESTAMP, 10) == [3]
    assert lg.legacy_offsets_before(LATEST_TIMESTAMP, 10) == [6, 4, 3, 3]


def test_a_negative_count_is_refused(tmp_path):
    with pytest.raises(ValueError):
        _log(tmp_path).legacy_offsets_before(LATEST_TIMESTAMP, -1)


def test_a_consumer_sees_no_offset_above_the_high_watermark(tmp_path):
    """ListOffsets v0's answer to a consumer (replica id -1): the offsets above the high
    watermark give way to the high watermark itself; a replica sees them all."""
    from types import SimpleNamespace

    from brook.broker.handlers.list_offsets import _legacy_offsets

    partition = SimpleNamespace(log=_log(tmp_path), high_watermark=5)
    assert _legacy_offsets(partition, LATEST_TIMESTAMP, 10, from_consumer=True) == [5, 4, 2, 0]
    assert _legacy_offsets(partition, LATEST_TIMESTAMP, 10, from_consumer=False) == [6, 4, 2, 0]
    partition.high_watermark = 3
    assert _legacy_offsets(partition, LATEST_TIMESTAMP, 2, from_consumer=True) == [3]
    partition.high_watermark = 6
    assert _legacy_offsets(partition, LATEST_TIMESTAMP, 10, from_consumer=True) == [6, 4, 2, 0]
