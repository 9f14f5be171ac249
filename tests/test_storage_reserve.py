"""Disk blocks reserved ahead of the active segment: the file's size is always exactly the
bytes appended, the reservation grows with the segment and stays within segment.bytes, and
a segment that stops being active (roll, close) gives the rest back, keeping its mtime."""

from __future__ import annotations

import os

import pytest

from brook.clock import FakeClock
from brook.storage import reserve
from brook.storage.config import LogConfig
from brook.storage.log import Log

from storage_helpers import make_batch, read_all

T0 = FakeClock().milliseconds()
BLOCK = 4096


def _can_reserve(directory) -> bool:
    fd = os.open(os.path.join(directory, "probe"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        return reserve.reserve(fd, 0, BLOCK)
    finally:
        os.close(fd)
        os.unlink(os.path.join(directory, "probe"))


@pytest.fixture
def log_dir(tmp_path):
    if not _can_reserve(tmp_path):
        pytest.skip("this file system cannot reserve blocks (fallocate)")
    return tmp_path


def allocated(fd: int) -> int:
    return os.fstat(fd).st_blocks * 512


def test_appends_reserve_blocks_past_the_end_without_changing_the_size(log_dir):
    lg = Log(str(log_dir / "t-0"), LogConfig(), clock=FakeClock())
    batch = make_batch(10, T0, size=1000)
    for _ in range(5):
        lg.append(batch)
    seg = lg.active_segment
    assert os.fstat(seg.fd).st_size == seg.size == 5 * len(batch)
    # Reserved ahead of the first append by MIN_AHEAD, then by as much as the segment held.
    assert seg.reserved_to > seg.size
    assert allocated(seg.fd) >= seg.reserved_to
    assert len(read_all(lg)) == 50
    lg.close()


def test_the_reservation_grows_with_the_segment_up_to_max_ahead(log_dir):
    lg = Log(str(log_dir / "t-0"), LogConfig(), clock=FakeClock())
    batch = make_batch(16, T0, size=1024)
    seen = set()
    for _ in range(2000):  # 33 MB
        lg.append(batch)
        seg = lg.active_segment
        seen.add(seg.reserved_to)
        assert seg.size <= seg.reserved_to <= seg.size + reserve.MAX_AHEAD + len(batch)
    # Few reservations, each larger than the one before until MAX_AHEAD.
    assert len(seen) < 20
    lg.close()


def test_no_reservation_reaches_past_segment_bytes(log_dir):
    config = LogConfig(segment_bytes=300_000)
    lg = Log(str(log_dir / "t-0"), config, clock=FakeClock())
    batch = make_batch(10, T0, size=1000)
    for _ in range(60):
        lg.append(batch)
        assert lg.active_segment.reserved_to <= config.segment_bytes
    assert len(lg.segments) > 1
    lg.close()


def test_a_rolled_segment_gives_back_its_reservation_and_keeps_its_mtime(log_dir):
    config = LogConfig(segment_bytes=200_000)
    lg = Log(str(log_dir / "t-0"), config, clock=FakeClock())
    batch = make_batch(10, T0, size=1000)
    while len(lg.segments) == 1:
        first = lg.active_segment
        mtime = os.fstat(first.fd).st_mtime_ns
        lg.append(batch)
    assert first.reserved_to == first.size
    assert allocated(first.fd) < first.size + BLOCK * 4  # its data, rounded to blocks
    assert os.fstat(first.fd).st_mtime_ns == mtime  # retention without timestamps uses it
    assert os.fstat(first.fd).st_size == first.size
    lg.close()


def test_close_gives_back_the_active_segments_reservation(log_dir):
    lg = Log(str(log_dir / "t-0"), LogConfig(), clock=FakeClock())
    batch = make_batch(10, T0, size=1000)
    for _ in range(20):
        lg.append(batch)
    path = lg.active_segment.log_path
    size = lg.active_segment.size
    lg.close()
    st = os.stat(path)
    assert st.st_size == size and st.st_blocks * 512 < size + BLOCK * 4
    lg = Log(str(log_dir / "t-0"), LogConfig(), clock=FakeClock(), had_clean_shutdown=True)
    assert len(read_all(lg)) == 200
    lg.close()


def test_a_crash_with_blocks_reserved_recovers_exactly_the_appended_data(log_dir):
    lg = Log(str(log_dir / "t-0"), LogConfig(), clock=FakeClock())
    batch = make_batch(10, T0, size=1000)
    for _ in range(20):
        lg.append(batch)
    seg = lg.active_segment
    assert allocated(seg.fd) > seg.size + BLOCK  # reserved, and now "crash": nothing released
    expected = read_all(lg)
    lg2 = Log(str(log_dir / "t-0"), LogConfig(), clock=FakeClock(), had_clean_shutdown=False)
    assert read_all(lg2) == expected and lg2.log_end_offset == 200
    lg2.append(batch)  # appends go on after the recovered end
    assert read_all(lg2)[-10:] == [(200 + i, *r[1:]) for i, r in enumerate(expected[:10])]
    lg2.close()
    lg.close()


def test_truncation_frees_the_reservation_and_appends_reserve_again(log_dir):
    lg = Log(str(log_dir / "t-0"), LogConfig(), clock=FakeClock())
    batch = make_batch(10, T0, size=1000)
    for _ in range(10):
        lg.append(batch)
    seg = lg.active_segment
    seg.truncate_to(50)  # as a follower's truncation will
    assert seg.reserved_to == seg.size == os.fstat(seg.fd).st_size
    lg.append(batch)
    assert seg.reserved_to > seg.size
    assert [r[0] for r in read_all(lg)][-10:] == list(range(50, 60))
    lg.close()


def test_reserve_answers_false_where_it_cannot(tmp_path):
    r, w = os.pipe()
    try:
        assert reserve.reserve(w, 0, BLOCK) is False
    finally:
        os.close(r)
        os.close(w)
