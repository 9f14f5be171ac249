"""Disk blocks reserved ahead of a segment's appends (Linux `fallocate` with KEEP_SIZE).

An append that extends a file into blocks it does not have yet makes the file system
account for a delayed allocation on every `write`; into blocks already reserved it only
copies the bytes. Reserving a few MiB ahead of the active segment's end takes ~15% off the
kernel time of a 16 KiB append (docs/storage.md). KEEP_SIZE leaves the file's size alone, so
readers, recovery and tools see exactly the bytes written; the reserved tail is given back
(a `ftruncate` to the size, which frees blocks past it) when the segment stops being active.
Where the platform or file system cannot reserve, appends are plain writes as before.
"""

from __future__ import annotations

import ctypes
import os
import sys

_FALLOC_FL_KEEP_SIZE = 0x01
MIN_AHEAD = 64 * 1024  # a quiet partition's active segment holds at most this much unused
MAX_AHEAD = 8 * 1024 * 1024  # a busy one asks again every 8 MiB


def _load_fallocate():
    if not sys.platform.startswith("linux"):
        return None
    try:
        fallocate = ctypes.CDLL(None, use_errno=True).fallocate
    except (OSError, AttributeError):
        return None
    fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    fallocate.restype = ctypes.c_int
    return fallocate


_fallocate = _load_fallocate()


def ahead(size: int) -> int:
    """How far past the end to reserve for a segment of `size` bytes: as much as it holds,
    between MIN_AHEAD and MAX_AHEAD, so reservations grow with the traffic that uses them."""
    return min(max(size, MIN_AHEAD), MAX_AHEAD)


def reserve(fd: int, offset: int, length: int) -> bool:
    """Reserve blocks for [offset, offset + length) without changing the file's size.

    False when it cannot be done here (not Linux, a file system without fallocate, no
    space left): the caller stops asking and its writes allocate as they go."""
    if _fallocate is None:
        return False
    return _fallocate(fd, _FALLOC_FL_KEEP_SIZE, offset, length) == 0


def release(fd: int, size: int) -> None:
    """Give back the blocks reserved past `size`, keeping the file's modification time
    (retention of a segment whose records carry no timestamps goes by it)."""
    st = os.fstat(fd)
    os.ftruncate(fd, size)
    os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))
