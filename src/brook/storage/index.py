"""Sparse offset and time indexes of a segment.

Both are caches that recovery can rebuild from the .log file, so they are kept in memory
(arrays, binary search at C speed) and written to disk on flush, roll and close.
On-disk entries are Kafka's: the offset index holds (relative offset int32, position int32),
the time index (timestamp int64, relative offset int32), all big-endian.
"""

from __future__ import annotations

import os
import struct
from array import array
from abc import ABC, abstractmethod
from bisect import bisect_left, bisect_right

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class CorruptIndexError(Exception):
    """An index file that does not hold a sane sequence of entries."""


class _Index(ABC):
    entry_size: int

    def __init__(self, path: str, base_offset: int, max_index_size: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_size // self.entry_size)
        self._flushed = 0  # entries already written to the file
        self._synced = False  # and fsynced (a flush with sync=False leaves them unsynced)
        # The file may hold entries past _flushed: ones a truncation removed, or any while the
        # file was neither loaded nor written (a segment being recovered rebuilds it)
        self._stale = True

    @abstractmethod
    def __len__(self) -> int: ...

    @property
    def is_full(self) -> bool:
        return len(self) >= self.max_entries

    @abstractmethod
    def _entry_bytes(self, i: int) -> bytes: ...

    def flush(self, sync: bool = True) -> None:
        """Write entries added since the last flush (rewriting the file if it was truncated)."""
        n = len(self)
        if self._flushed == n and not self._stale and os.path.exists(self.path):
            if sync and not self._synced:  # written by an earlier flush(sync=False)
                fd = os.open(self.path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                self._synced = True
            return
        data = b"".join(self._entry_bytes(i) for i in range(self._flushed, n))
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, self._flushed * self.entry_size)
            os.pwrite(fd, data, self._flushed * self.entry_size)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        self._flushed = n
        self._synced = sync
        self._stale = False

    def reset(self) -> None:
        self.truncate_entries(0)

    @abstractmethod
    def truncate_entries(self, n: int) -> None: ...

    def _mark_truncated(self, n: int) -> None:
        if n < self._flushed:
            self._flushed = n
            self._stale = True

    def rename(self, path: str) -> None:
        if os.path.exists(self.path):
            os.replace(self.path, path)
        self.path = path

    def delete(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def _read_file(self) -> bytes:
        with open(self.path, "rb") as f:
            data = f.read()
        if len(data) % self.entry_size:
            raise CorruptIndexError(f"{self.path}: size {len(data)} is not a multiple of {self.entry_size}")
        return data


class OffsetIndex(_Index):
    """Maps relative offsets to byte positions of batches in the segment's .log file."""

    entry_size = 8

    def __init__(self, path: str, base_offset: int, max_index_size: int) -> None:
        super().__init__(path, base_offset, max_index_size)
        self._offsets = array("q")  # absolute offsets, for bisect without arithmetic
        self._positions = array("q")
        self._last_offset = -1  # the last entry's, kept to check appends cheaply

    def __len__(self) -> int:
        return len(self._offsets)

    def _entry_bytes(self, i: int) -> bytes:
        return _OFFSET_ENTRY.pack(self._offsets[i] - self.base_offset, self._positions[i])

    def append(self, offset: int, position: int) -> bool:
        """Add an entry; return True when the index is now full (the segment must roll)."""
        if offset <= self._last_offset:
            raise ValueError(f"index entry {offset} is not after {self._last_offset}")
        self._last_offset = offset
        offsets = self._offsets
        offsets.append(offset)
        self._positions.append(position)
        return len(offsets) >= self.max_entries

    def lookup(self, offset: int) -> tuple[int, int]:
        """The last entry at or before `offset`: (offset, position); (base, 0) if none."""
        i = bisect_right(self._offsets, offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self._offsets[i], self._positions[i]

    @property
    def last_entry(self) -> tuple[int, int]:
        if not self._offsets:
            return self.base_offset, 0
        return self._offsets[-1], self._positions[-1]

    def upper_bound_offset(self, position: int) -> int | None:
        """The offset of the first entry at or past `position`: no batch before `position`
        holds it or any later offset (Kafka's fetchUpperBoundOffset). None if no entry is."""
        i = bisect_left(self._positions, position)
        return self._offsets[i] if i < len(self._offsets) else None

    def truncate_to(self, offset: int) -> None:
        """Drop entries for offsets >= `offset`."""
        self.truncate_entries(bisect_left(self._offsets, offset))

    def truncate_entries(self, n: int) -> None:
        del self._offsets[n:]
        del self._positions[n:]
        self._last_offset = self._offsets[-1] if self._offsets else -1
        self._mark_truncated(n)

    def load(self, segment_size: int) -> None:
        """Read the file and check it is sane: relative offsets grow, positions within the log."""
        data = self._read_file()
        offsets, positions = array("q"), array("q")
        last_off, last_pos = -1, -1
        for rel, pos in _OFFSET_ENTRY.iter_unpack(data):
            off = self.base_offset + rel
            if rel < 0 or off <= last_off or pos < last_pos or pos >= max(segment_size, 1):
                raise CorruptIndexError(f"{self.path}: entry ({rel}, {pos}) out of order or range")
            offsets.append(off)
            positions.append(pos)
            last_off, last_pos = off, pos
        self._offsets, self._positions = offsets, positions
        self._last_offset = last_off
        self._flushed = len(offsets)
        self._stale = False


class TimeIndex(_Index):
    """Maps the largest timestamp seen so far to the offset of the record that had it."""

    entry_size = 12

    def __init__(self, path: str, base_offset: int, max_index_size: int) -> None:
        super().__init__(path, base_offset, max_index_size)
        self._timestamps = array("q")
        self._offsets = array("q")
        # The last entry, or what Kafka takes for it in an empty index: (no timestamp, base).
        # Appenders read last_timestamp to skip calls that would not add an entry.
        self.last_timestamp, self._last_offset = -1, base_offset

    def __len__(self) -> int:
        return len(self._timestamps)

    def _entry_bytes(self, i: int) -> bytes:
        return _TIME_ENTRY.pack(self._timestamps[i], self._offsets[i] - self.base_offset)

    def maybe_append(self, timestamp: int, offset: int) -> bool:
        """Add an entry if the timestamp is larger than the last one (entries only grow; as in
        Kafka, an empty index takes no entry without a timestamp); return True when the
        index is full."""
        if timestamp > self.last_timestamp and offset >= self._last_offset:
            self._timestamps.append(timestamp)
            self._offsets.append(offset)
            self.last_timestamp, self._last_offset = timestamp, offset
        return len(self._timestamps) >= self.max_entries

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """The last entry whose timestamp is < `timestamp`: (timestamp, offset); or (-1, base).

        A search for the first record at or after `timestamp` may start at that offset.
        """
        i = bisect_left(self._timestamps, timestamp) - 1
        if i < 0:
            return -1, self.base_offset
        return self._timestamps[i], self._offsets[i]

    @property
    def last_entry(self) -> tuple[int, int]:
        if not self._timestamps:
            return -1, self.base_offset
        return self._timestamps[-1], self._offsets[-1]

    def truncate_to(self, offset: int) -> None:
        n = len(self._offsets)
        while n and self._offsets[n - 1] >= offset:
            n -= 1
        self.truncate_entries(n)

    def truncate_entries(self, n: int) -> None:
        del self._timestamps[n:]
        del self._offsets[n:]
        self.last_timestamp, self._last_offset = self.last_entry
        self._mark_truncated(n)

    def load(self, next_offset: int) -> None:
        data = self._read_file()
        timestamps, offsets = array("q"), array("q")
        last_ts, last_off = -(2**63), -1
        for ts, rel in _TIME_ENTRY.iter_unpack(data):
            off = self.base_offset + rel
            if rel < 0 or ts <= last_ts or off < last_off or off >= max(next_offset, self.base_offset + 1):
                raise CorruptIndexError(f"{self.path}: entry ({ts}, {rel}) out of order or range")
            timestamps.append(ts)
            offsets.append(off)
            last_ts, last_off = ts, off
        self._timestamps, self._offsets = timestamps, offsets
        self.last_timestamp, self._last_offset = self.last_entry
        self._flushed = len(timestamps)
        self._stale = False
