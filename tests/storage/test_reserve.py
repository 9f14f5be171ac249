"""Disk blocks reserved ahead of the active segment: the file's size is always exactly the
bytes appended, the reservation grows with the segment and stays within segment.bytes, and
a segment that stops being active (roll, close) gives the rest back, keeping its mtime; so
do recovery after a crash and a reservation that fails (a full disk fails no append)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from brook.clock import FakeClock
from brook.storage import reserve
from brook.storage import segment as segment_module
from brook.storage.config import LogConfig
from brook.storage.log import Log

from tests.support.storage_helpers import make_batch, read_all

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
    first = lg.active_segment
    while first.size + len(batch) <= config.segment_bytes:
        lg.append(batch)
    assert first.reserved_to > first.size
    # An mtime far from now, so that a release leaving the time of its truncation shows.
    mtime = 1_000_000_000 * 10**9
    os.utime(first.fd, ns=(mtime, mtime))
    lg.append(batch)  # rolls
    assert len(lg.segments) == 2
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
    seg = lg.active_segment
    path, size = seg.log_path, seg.size
    assert seg.reserved_to > size
    mtime = 1_000_000_000 * 10**9
    os.utime(seg.fd, ns=(mtime, mtime))
    lg.close()
    st = os.stat(path)
    assert st.st_size == size and st.st_blocks * 512 < size + BLOCK * 4
    assert st.st_mtime_ns == mtime  # the next load takes the segment's creation time from it
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
    mtime = 1_000_000_000 * 10**9
    os.utime(seg.fd, ns=(mtime, mtime))
    for s in lg.segments:
        s.close_without_index()  # the process dies
    lg2 = Log(str(log_dir / "t-0"), LogConfig(), clock=FakeClock(), had_clean_shutdown=False)
    assert read_all(lg2) == expected and lg2.log_end_offset == 200
    # Recovery gives back what the crash left reserved (nothing else would: the segment
    # may take no append for a long time), keeping the mtime.
    seg2 = lg2.active_segment
    assert allocated(seg2.fd) < seg2.size + BLOCK * 4
    assert os.fstat(seg2.fd).st_mtime_ns == mtime
    lg2.append(batch)  # appends go on after the recovered end
    after = read_all(lg2)
    assert after[-10:] == [(200 + i, *r[1:]) for i, r in enumerate(expected[:10])]
    lg2.close()
    lg3 = Log(str(log_dir / "t-0"), LogConfig(), clock=FakeClock(), had_clean_shutdown=True)
    assert read_all(lg3) == after and lg3.log_end_offset == 210
    lg3.close()


def test_a_failed_reservation_leaves_nothing_reserved_past_the_end(log_dir):
    # A file system that fails a reservation may keep what it allocated before failing
    # (ext4 out of space keeps every block it found): reserve() gives it back. Here the
    # failure is a range past the largest file size (EFBIG, or ENOSPC where the limit is
    # higher), after a reservation that succeeded.
    fd = os.open(str(log_dir / "f.log"), os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, b"x" * 1000)
        assert reserve.reserve(fd, 1000, 1 << 20)
        assert allocated(fd) > 1 << 20
        assert reserve.reserve(fd, 1000, 1 << 62) is False
        assert os.fstat(fd).st_size == 1000
        assert allocated(fd) <= BLOCK * 2
        assert os.pread(fd, 2000, 0) == b"x" * 1000
    finally:
        os.close(fd)


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


# A full disk, for real: a small tmpfs mounted in a private mount namespace (needs root and
# unshare(1); skipped elsewhere). tmpfs reserves as ext4 does, and gives the blocks back
# on the same truncation.
_FULL_DISK = r'''
import os, subprocess, sys
from brook.clock import FakeClock
from brook.storage.config import LogConfig
from brook.storage.log import Log
from tests.support.storage_helpers import make_batch

mnt = sys.argv[1]
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", mnt], check=True)
T0 = FakeClock().milliseconds()
batch = make_batch(10, T0, size=1000)
a = Log(mnt + "/a-0", LogConfig(), clock=FakeClock())
b = Log(mnt + "/b-0", LogConfig(), clock=FakeClock())
for _ in range(20):
    a.append(batch)
seg = a.active_segment
assert seg.reserved_to - seg.size > 100_000, seg.reserved_to
fd = os.open(mnt + "/filler", os.O_WRONLY | os.O_CREAT, 0o644)
try:
    while True:
        os.write(fd, bytes(4096))
except OSError:
    pass
a.append(batch)  # into its reservation: a full disk does not stop it
os.ftruncate(fd, os.fstat(fd).st_size - 8 * 4096)  # room for a batch, not for a reservation
b.append(batch)  # the reservation fails (ENOSPC): the append must not
new = b.active_segment
assert new.size == len(batch) and os.fstat(new.fd).st_blocks * 512 < new.size + 4 * 4096
print("appends ok")
try:
    while True:
        os.write(fd, bytes(4096))
except OSError:
    pass
seg.close()  # gives its reservation back before writing its indexes into the full disk
print("close ok", os.stat(seg.log_path).st_blocks * 512 < seg.size + 4 * 4096)
'''


def _can_mount_tmpfs(tmp_path) -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = tmp_path / "probe-mnt"
    probe.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe)]
    done = subprocess.run(["unshare", "-m", *mount], capture_output=True)
    return done.returncode == 0


def test_a_full_disk_fails_no_append_for_a_reservation_and_close_gives_it_back(tmp_path):
    if not _can_mount_tmpfs(tmp_path):
        pytest.skip("cannot mount a small tmpfs here (needs root and unshare)")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    paths = [root] + os.environ.get("PYTHONPATH", "").split(os.pathsep)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))
    done = subprocess.run(["unshare", "-m", sys.executable, "-c", _FULL_DISK, str(mnt)],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["appends ok", "close ok True"]


def test_the_process_holds_at_most_its_budget_in_reservations(log_dir, monkeypatch):
    """Past the budget a segment writes without reserving; what segments give back (roll,
    close) is reserved again by others."""
    budget = reserve.Budget(3 * reserve.MIN_AHEAD)
    monkeypatch.setattr(segment_module, "BUDGET_IN_USE", budget)
    batch = make_batch(10, T0, size=1000)  # ~10 KB
    logs = [Log(str(log_dir / f"t-{i}"), LogConfig(), clock=FakeClock()) for i in range(5)]
    for lg in logs:
        lg.append(batch)
    held = [lg.active_segment.reserved_to - lg.active_segment.size for lg in logs]
    assert budget.outstanding <= budget.limit
    assert sum(allocated(lg.active_segment.fd) - lg.active_segment.size for lg in logs) \
        <= budget.limit + 5 * BLOCK
    assert sum(1 for lg in logs if lg.active_segment._reserved_chunk) == 3, held
    for lg in logs:
        for _ in range(3):
            lg.append(batch)  # without a reservation: plain writes, same data
        assert len(read_all(lg)) == 40
    logs[0].close()
    logs[1].close()
    assert budget.outstanding <= reserve.MIN_AHEAD + 2 * 20_000  # two gave theirs back
    for _ in range(10):
        logs[4].append(batch)  # the last one reserves again once its skipped chunk is written
    assert logs[4].active_segment._reserved_chunk > 0
    for lg in logs[2:]:
        lg.close()
    assert budget.outstanding == 0
