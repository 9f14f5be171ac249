"""The sparse indexes as appends keep them: which index fills first decides the roll, a
time index entry only for a larger timestamp, and a recovered segment gets the same entries."""

from __future__ import annotations

from brook.clock import FakeClock
from brook.storage.config import LogConfig
from brook.storage.log import Log

from tests.support.storage_helpers import make_batch

# Room for 3 offset index entries (8 bytes) but 2 time index entries (12 bytes); every
# batch gets an index entry (index.interval.bytes 0).
CONFIG = LogConfig(segment_index_bytes=24, index_interval_bytes=0)
T0 = FakeClock().milliseconds()


def open_log(path, config=CONFIG):
    return Log(str(path / "t-0"), config, clock=FakeClock())


def index_entries(seg) -> tuple[list, list]:
    return ([seg.index._entry_bytes(i) for i in range(len(seg.index))],
            [seg.time_index._entry_bytes(i) for i in range(len(seg.time_index))])


def test_a_full_time_index_rolls_the_segment_before_the_offset_index_fills(tmp_path):
    lg = open_log(tmp_path)
    for i in range(7):
        lg.append(make_batch(1, T0 + i))  # a larger timestamp in every batch
    # The first batch of a segment is not indexed (nothing appended before it), the next two
    # fill the time index: 3 batches per segment.
    assert [s.base_offset for s in lg.segments] == [0, 3, 6]
    assert [(len(s.index), len(s.time_index), s.index_full) for s in lg.segments] == \
        [(2, 2, True), (2, 2, True), (0, 0, False)]
    lg.close()


def test_batches_without_a_larger_timestamp_add_offset_index_entries_only(tmp_path):
    lg = open_log(tmp_path)
    for i in range(9):
        lg.append(make_batch(1, T0))  # the same timestamp in every batch
    assert [s.base_offset for s in lg.segments] == [0, 4, 8]
    first = lg.segments[0]
    assert (len(first.index), len(first.time_index), first.index_full) == (3, 1, True)
    assert first.time_index.last_entry == (T0, 0)
    lg.close()


def test_a_time_index_full_on_load_still_rolls_the_segment(tmp_path):
    lg = open_log(tmp_path)
    for i in range(3):
        lg.append(make_batch(1, T0 + i))
    lg.close()
    lg = Log(str(tmp_path / "t-0"), CONFIG, clock=FakeClock(), had_clean_shutdown=True)
    assert lg.active_segment.index_full
    lg.append(make_batch(1, T0))  # no larger timestamp, yet a full index: a new segment
    assert [s.base_offset for s in lg.segments] == [0, 3]
    lg.close()


def test_recovery_rebuilds_the_indexes_that_appends_kept(tmp_path):
    config = LogConfig(index_interval_bytes=150)
    lg = open_log(tmp_path, config)
    for i, ts in enumerate([5, 5, 9, 7, 9, 12, 12, 3, 20, 20]):
        lg.append(make_batch(1 + i % 3, T0 + ts, size=40))
    live = index_entries(lg.active_segment)
    assert len(live[0]) > len(live[1]) > 1  # some entries without a time index entry
    lg.active_segment.close_without_index()
    lg = Log(str(tmp_path / "t-0"), config, clock=FakeClock())  # not clean: scanned
    assert index_entries(lg.active_segment) == live
    lg.close()
