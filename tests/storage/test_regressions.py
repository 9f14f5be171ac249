"""Regression tests from a review of the storage engine."""

import os
import struct

import pytest

from brook.clock import FakeClock
from brook.records import Record, encode_batch
from brook.storage.checkpoint import CorruptCheckpointError, read_checkpoint
from brook.storage.config import LogConfig
from brook.storage.errors import OffsetOutOfRangeError
from brook.storage.log import Log
from brook.storage.manager import RECOVERY_POINT_CHECKPOINT, LogManager

from tests.support.storage_helpers import make_batch, read_all

CONFIG = LogConfig(segment_bytes=1200, index_interval_bytes=150)


def open_log(d, **kw):
    return Log(d, CONFIG, clock=FakeClock(), **kw)


def _fsync_spy(monkeypatch):
    synced = []
    real = os.fsync

    def spy(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    return synced


def test_flush_fsyncs_indexes_of_rolled_segments_and_the_directory(tmp_path, monkeypatch):
    d = str(tmp_path / "t-0")
    lg = open_log(d)
    synced = _fsync_spy(monkeypatch)
    for i in range(10):
        lg.append(make_batch(3, 1000 + i, size=50))
    assert len(lg.segments) > 2
    lg.flush()
    for seg in lg.segments:
        assert seg.log_path in synced
        assert seg.index.path in synced  # written unsynced at roll: flush must still sync it
        assert seg.time_index.path in synced
    assert os.path.realpath(d) in synced  # the new segments' directory entries
    lg.close()


def test_non_utf8_checkpoint_is_corrupt_not_a_crash(tmp_path):
    path = tmp_path / "cp"
    path.write_bytes(b"\xff\xfe\n1\n")
    with pytest.raises(CorruptCheckpointError):
        read_checkpoint(str(path))
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / RECOVERY_POINT_CHECKPOINT).write_bytes(b"\xff\xfe\n")
    manager = LogManager([str(tmp_path / "logs")], CONFIG, clock=FakeClock())
    manager.startup()  # the checkpoint is ignored, as other corrupt ones are
    manager.shutdown()


def test_recovery_below_the_log_start_offset_restarts_the_log_at_it(tmp_path):
    d = str(tmp_path / "t-0")
    lg = open_log(d)
    for i in range(3):
        lg.append(make_batch(1, 1000 + i))
    lg.increase_log_start_offset(3)
    lg.close()
    path = os.path.join(d, "00000000000000000000.log")
    os.truncate(path, os.path.getsize(path) - 5)  # the crash lost part of the last batch
    lg = open_log(d, log_start_offset=3)
    assert lg.log_start_offset == 3
    assert lg.log_end_offset == 3
    assert lg.recovery_point == 3
    info = lg.append(make_batch(1, 2000))
    assert info.first_offset == 3
    assert [r[0] for r in read_all(lg)] == [3]
    lg.close()


def test_recovery_truncates_a_batch_whose_offset_overflows_the_segment(tmp_path):
    d = str(tmp_path / "t-0")
    lg = open_log(d)
    for i in range(3):
        lg.append(make_batch(1, 1000 + i))
    pos = lg.read(2, 1000).regions[0].position
    lg.close()
    with open(os.path.join(d, "00000000000000000000.log"), "r+b") as f:
        f.seek(pos)
        f.write(struct.pack(">q", 2**40))  # the CRC does not cover the base offset
    lg = open_log(d)
    assert lg.log_end_offset == 2
    assert lg.recovered_bytes_truncated > 0
    lg.close()


@pytest.mark.parametrize("first", [0, 7])
def test_append_with_offsets_beyond_int32_of_the_segment_base_rolls_there(tmp_path, first):
    d = str(tmp_path / "t-0")
    lg = open_log(d)
    if first:
        lg.append(encode_batch([Record(first, 1000, b"a", b"v")]), assign_offsets=False)
    far = 2**32 + 5
    for i in range(20):
        lg.append(encode_batch([Record(far + i, 1000 + i, b"k", b"v" * 40)]), assign_offsets=False)
    assert lg.active_segment.base_offset >= far
    for seg in lg.segments:
        assert seg.next_offset - 1 - seg.base_offset <= 2**31 - 1
    lg.flush()
    lg.close()
    lg = open_log(d)
    assert [r[0] for r in read_all(lg)] == ([first] if first else []) + [far + i for i in range(20)]
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(lg.log_end_offset + 1, 100)
    lg.close()


_SMALL_INDEX = LogConfig(segment_bytes=700, index_interval_bytes=64)


def _truncated_to_0_and_appended_again(d, crash: bool) -> Log:
    """A log of two batches rolled (the first segment's index, entry 1 at position 70, on
    disk), maybe crashed and reopened, then cut to 0 and given one batch of 3 records, closed
    and opened again."""
    lg = Log(d, _SMALL_INDEX, clock=FakeClock())
    lg.append(make_batch(1, 0))
    lg.append(make_batch(1, 0))
    lg.roll()
    if crash:
        for seg in lg.segments:
            seg.close_without_index()
        lg = Log(d, _SMALL_INDEX, clock=FakeClock())
    lg.truncate_to(0)
    lg.append(make_batch(3, 0))
    lg.close()
    lg = Log(d, _SMALL_INDEX, clock=FakeClock(), had_clean_shutdown=True)
    assert lg.recovered_bytes_truncated == 0
    assert [r[0] for r in read_all(lg)] == [0, 1, 2]
    return lg


def test_an_index_truncated_to_as_many_entries_as_it_then_holds_is_rewritten(tmp_path):
    """Truncating a rolled segment's index to 0 and appending again left the file's stale
    entry (the flush saw as many entries as it had written), and the next clean load found an
    entry pointing into the middle of a batch."""
    lg = _truncated_to_0_and_appended_again(str(tmp_path / "t-0"), crash=False)
    assert lg.segments[-1].load_indexes()
    lg.close()


def test_a_recovered_segment_whose_index_is_rebuilt_empty_rewrites_its_file(tmp_path):
    """The index file of a segment recovered after a crash had an entry the rebuilt index no
    longer has (a truncation took it): it was never rewritten, as nothing was flushed since."""
    _truncated_to_0_and_appended_again(str(tmp_path / "t-0"), crash=True).close()
