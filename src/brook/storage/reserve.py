"""Disk blocks reserved ahead of a segment's appends (Linux `fallocate` with KEEP_SIZE).

An append that extends a file into blocks it does not have yet makes the file system
account for a delayed allocation on every `write`; into blocks already reserved it only
copies the bytes. Reserving a few MiB ahead of the active segment's end takes ~15% off the
kernel time of a 16 KiB append (docs/storage.md). KEEP_SIZE leaves the file's size alone, so
readers, recovery and tools see exactly the bytes written; the reserved tail is given back
(a `ftruncate` to the size, which frees blocks past it) when the segment stops being active.
Where the platform or file system cannot reserve, appends are plain writes as before.

Reserved blocks are disk space no file size shows (nor retention.bytes, nor the size
metrics), so the segments of a process together hold at most BUDGET reserved: past it a
segment writes without reserving until its next chunk. The cost does not vanish: writeback
(and an fsync) converts the reserved extents it writes, work the kernel does off the
appending thread.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
import threading

_FALLOC_FL_KEEP_SIZE = 0x01
MIN_AHEAD = 64 * 1024  # a new or small segment reserves this much ahead
MAX_AHEAD = 8 * 1024 * 1024  # a large one reserves up to this, asking again as often
BUDGET = 256 * 1024 * 1024  # reserved past the ends of all segments of the process together
# Failures a file system answers before allocating anything; after any other (ENOSPC,
# EDQUOT, EIO, ...) it may have kept some blocks: ext4 keeps every block a failed call got.
_NOTHING_ALLOCATED = frozenset({errno.EOPNOTSUPP, errno.ENOSYS, errno.ESPIPE, errno.ENODEV,
                                errno.EBADF, errno.EINVAL, errno.EPERM, errno.EISDIR})


def _load_fallocate():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    # fallocate64 takes 64-bit offsets everywhere; plain fallocate only where off_t is 64-bit.
    fallocate = getattr(libc, "fallocate64", None) or getattr(libc, "fallocate", None)
    if fallocate is None:
        return None
    fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    fallocate.restype = ctypes.c_int
    return fallocate


_fallocate = _load_fallocate()


class Budget:
    """The bytes of reservations outstanding in the process, against BUDGET. Segments of
    the cleaner's thread take and give back too, hence the lock."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.outstanding = 0
        self._lock = threading.Lock()

    def take(self, want: int, need: int) -> int:
        """`want` bytes if the budget has them, else what is left if at least `need`, else 0."""
        with self._lock:
            granted = min(want, self.limit - self.outstanding)
            if granted < need or granted <= 0:
                return 0
            self.outstanding += granted
            return granted

    def give_back(self, n: int) -> None:
        if n:
            with self._lock:
                self.outstanding -= n


BUDGET_IN_USE = Budget(BUDGET)


def ahead(size: int) -> int:
    """How far past the end to reserve for a segment of `size` bytes: as much as it holds,
    between MIN_AHEAD and MAX_AHEAD, so reservations grow with the traffic that uses them."""
    return min(max(size, MIN_AHEAD), MAX_AHEAD)


def reserve(fd: int, offset: int, length: int) -> bool:
    """Reserve blocks for [offset, offset + length) without changing the file's size.

    False when it cannot be done here (not Linux, a file system without fallocate, no
    space left): the caller stops asking and its writes allocate as they go. A failed call
    leaves nothing reserved past the file's end: what the file system allocated before it
    gave up (ext4 out of space keeps all it found) is given back at once, or it would stay
    allocated, unseen, until the file is deleted."""
    if _fallocate is None:
        return False
    if _fallocate(fd, _FALLOC_FL_KEEP_SIZE, offset, length) == 0:
        return True
    if ctypes.get_errno() not in _NOTHING_ALLOCATED:
        try:
            release(fd, os.fstat(fd).st_size)
        except OSError:
            pass
    return False


def allocated_past_end(st: os.stat_result) -> bool:
    """Whether a file (its fstat) has disk blocks past its end, e.g. a reservation a crash
    left behind."""
    block = st.st_blksize or 4096
    return st.st_blocks * 512 > -(-st.st_size // block) * block


def release(fd: int, size: int) -> None:
    """Give back the blocks reserved past `size`, keeping the file's modification time
    (retention of a segment whose records carry no timestamps goes by it)."""
    st = os.fstat(fd)
    os.ftruncate(fd, size)
    os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))
