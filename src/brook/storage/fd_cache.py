"""Segment files opened lazily, through a bounded cache of descriptors (as Redpanda does).

A `.log` file is opened when something reads or writes it, and stays open afterwards only
while it is among the `capacity` most recently used: one descriptor per segment for ever
made a broker of 30,000 partitions run out of descriptors, and then unable to start.

Every use of a descriptor *pins* it (`CachedFile.pin` returns it, `unpin` lets it go):
eviction closes only unpinned descriptors, the least recently used first (by the clock
algorithm: a use sets a file's bit, and eviction passes over a file whose bit is set once,
clearing it, which costs a use no reordering), so a `pread`, a
`sendfile` of a fetched region (a `FileRegion` holds a pin as long as it lives) or the
cleaner thread reading a segment never sees its descriptor closed, or its number reused by
another file, under it. When every open descriptor is pinned the cache holds more than
`capacity` for that long (pins are short: a call, or one response being sent). `close`
(a segment deleted, or its log closed) closes the descriptor at once, or at its last
`unpin` if it is pinned; the file is never opened again.

The indexes (`.index`, `.timeindex`) are not here: they live in memory and their files are
opened only to be read at load and written at flush, roll and close. Producer snapshots and
checkpoints are opened, written and closed.

One cache serves the whole process (`SEGMENT_FILES`), since the limit it protects,
RLIMIT_NOFILE, is the process's; the log manager sizes it from `log.segment.fd.cache.size`.
Its lock makes it safe to pin from the cleaner thread while the event loop appends.
"""

from __future__ import annotations

import os
import resource
import threading
from collections import OrderedDict

DEFAULT_CAPACITY = 1024  # log.segment.fd.cache.size
MIN_CAPACITY = 16
# At most this share of the soft RLIMIT_NOFILE goes to cached segment files: the rest is for
# connections, index and snapshot writes, and descriptors pinned past the capacity.
LIMIT_SHARE = 4


def capacity_for(configured: int) -> int:
    """`configured`, lowered to a quarter of the process's soft open files limit (at least
    MIN_CAPACITY)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return configured
    return max(MIN_CAPACITY, min(configured, soft // LIMIT_SHARE))


class FdCache:
    """The open descriptors of segment files, at most `capacity` of them unpinned."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("a descriptor cache holds at least one descriptor")
        self.capacity = capacity
        self.lock = threading.Lock()
        # Every file with an open descriptor (pinned ones too: eviction skips them), in the
        # order the clock's hand meets them: opened, or passed over by eviction, longest ago
        # first.
        self._open: OrderedDict[CachedFile, None] = OrderedDict()
        self.opens = 0  # descriptors opened (for a file's first use, or again after eviction)
        self.evictions = 0
        # Files whose `unpin_soon` found the lock held: unpinned by the next operation.
        self._deferred: list[CachedFile] = []

    def file(self, path: str, flags: int, fd: int = -1) -> CachedFile:
        """A file of this cache, not opened until pinned (or opened already: `fd`)."""
        f = CachedFile(self, path, flags)
        if fd >= 0:
            with self.lock:
                self._drain()
                f.fd = fd
                self._open[f] = None
                self.opens += 1
                self._evict()
        return f

    @property
    def open_count(self) -> int:
        """Descriptors open through the cache now, pinned or not."""
        return len(self._open)

    @property
    def pinned_count(self) -> int:
        with self.lock:
            self._drain()
            return sum(1 for f in self._open if f.pins)

    def resize(self, capacity: int) -> None:
        """A new capacity; descriptors over it are closed now (those not pinned)."""
        if capacity < 1:
            raise ValueError("a descriptor cache holds at least one descriptor")
        with self.lock:
            self.capacity = capacity
            self._drain()
            self._evict()

    def _drain(self) -> None:
        """The unpins `unpin_soon` deferred. The caller holds the lock."""
        deferred = self._deferred
        while deferred:
            deferred.pop()._unpin_locked()

    def _evict(self) -> None:
        """Close unpinned descriptors, the least recently used first, until at most
        `capacity` are open (or only pinned ones are left over it). The caller holds the
        lock. The hand passes over a pinned file, or one used since the hand last passed
        (its bit cleared then), moving it to the back."""
        files = self._open
        excess = len(files) - self.capacity
        turns = 2 * len(files)  # every bit is clear after one round: two end the search
        while excess > 0 and turns:
            turns -= 1
            f = next(iter(files))
            if f.pins or f.used:
                f.used = False
                files.move_to_end(f)
                continue
            del files[f]
            fd, f.fd = f.fd, -1
            os.close(fd)
            excess -= 1
            self.evictions += 1


class CachedFile:
    """One segment file of an `FdCache`: a path, and a descriptor while it is open."""

    __slots__ = ("cache", "lock", "path", "flags", "fd", "pins", "used", "closed", "__weakref__")

    def __init__(self, cache: FdCache, path: str, flags: int) -> None:
        self.cache = cache
        self.lock = cache.lock
        self.path = path
        self.flags = flags
        self.fd = -1
        self.pins = 0
        self.used = False  # used since the clock's hand last passed
        self.closed = False

    def pin(self) -> int:
        """The open descriptor (opened now if it is not), kept open until `unpin`."""
        # acquire/release rather than `with`, and no reordering: this is on every append
        # and every read (about 0.3 us for both calls).
        lock = self.lock
        lock.acquire()
        try:
            if self.cache._deferred:
                self.cache._drain()
            fd = self.fd
            if fd < 0:
                return self._open_locked()
            self.pins += 1
            self.used = True
            return fd
        finally:
            lock.release()

    def _open_locked(self) -> int:
        if self.closed:
            raise ValueError(f"{self.path} is closed")
        cache = self.cache
        fd = self.fd = os.open(self.path, self.flags)
        cache._open[self] = None  # at the back, its bit clear: met last by the hand
        cache.opens += 1
        self.pins += 1
        cache._evict()
        return fd

    def unpin(self) -> None:
        lock = self.lock
        lock.acquire()
        try:
            if self.cache._deferred:
                self.cache._drain()
            self._unpin_locked()
        finally:
            lock.release()

    def unpin_soon(self) -> None:
        """`unpin` from a finalizer (a region or a reading generator garbage collected): the
        collector may run it on a thread that holds the lock already, in the middle of an
        operation, where waiting for the lock would wait for ever. If the lock is not free
        the unpin is left to the next operation on the cache."""
        lock = self.lock
        if lock.acquire(blocking=False):
            try:
                self._unpin_locked()
            finally:
                lock.release()
        else:
            self.cache._deferred.append(self)  # atomic: no lock needed

    def _unpin_locked(self) -> None:
        self.pins -= 1
        if not self.pins:
            if self.closed:
                if self.fd >= 0:
                    self._close_locked()
            elif len(self.cache._open) > self.cache.capacity:  # pins held it over
                self.cache._evict()

    def rename(self, path: str) -> None:
        """Rename the file (an open descriptor stays valid); under the lock, so that no
        other thread opens it by the old name meanwhile."""
        with self.cache.lock:
            self.cache._drain()
            os.replace(self.path, path)
            self.path = path

    def close(self) -> None:
        """Close the descriptor (at its last `unpin` if pinned); the file is not opened again."""
        with self.cache.lock:
            self.cache._drain()
            self.closed = True
            if self.fd >= 0 and not self.pins:
                self._close_locked()

    def _close_locked(self) -> None:
        del self.cache._open[self]
        fd, self.fd = self.fd, -1
        os.close(fd)

    def __repr__(self) -> str:
        return f"CachedFile({self.path!r}, fd={self.fd}, pins={self.pins})"


SEGMENT_FILES = FdCache()
