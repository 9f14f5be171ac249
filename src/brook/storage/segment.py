"""One segment of a partition log: a .log file of v2 batches plus its two sparse indexes and
its index of aborted transactions (`.txnindex`, storage.txn_index).

The `.log` file is opened with O_APPEND when it is first used, through the process's cache
of descriptors (`storage.fd_cache`), which may close it again when it has not been used for
a while; every use pins the descriptor meanwhile. Appends are plain `write`s of the batches as
received (offsets already rewritten), into disk blocks reserved ahead of them (storage.reserve);
reads are `pread`s of batch headers, and fetches hand (fd, position, length) regions to
`sendfile`, each region pinning its descriptor for as long as it lives.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
from dataclasses import dataclass
from typing import NamedTuple, Sequence

from ..records.batch import (
    CONTROL_BIT,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_BIT,
    decode_batch,
    scan_batches,
)
from ..records.errors import CorruptRecordError, RecordsError
from .config import LogConfig
from .errors import KafkaStorageError
from .fd_cache import SEGMENT_FILES, CachedFile
from .index import CorruptIndexError, OffsetIndex, TimeIndex
from .reserve import BUDGET_IN_USE, ahead, allocated_past_end, release, reserve
from .txn_index import TXN_INDEX_SUFFIX, TransactionIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
INT32_MAX = 2**31 - 1

# The fields of a batch header the read path needs: baseOffset, batchLength, then
# lastOffsetDelta at 23 and maxTimestamp at 35.
_PREFIX = struct.Struct(">qi")
_LAST_DELTA = struct.Struct(">i")
_MAX_TS = struct.Struct(">q")
_ATTRS = struct.Struct(">h")
_MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
_IOV_MAX = 1024
log = logging.getLogger(__name__)
_CANNOT_RESERVE = 1 << 62  # reserved_to of a segment whose file system cannot reserve


def _write_joined(fd: int, pieces: list) -> int:
    return os.write(fd, b"".join(pieces))


def file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class FileRegion:
    """Bytes of a segment file that a network layer can `sendfile` without copying them.

    A region made by a segment holds a pin on the segment's descriptor (`file`) until it is
    released or garbage collected, so `fd` stays this file's descriptor while it lives."""

    __slots__ = ("fd", "position", "length", "_file")

    def __init__(self, fd: int, position: int, length: int, file: CachedFile | None = None) -> None:
        self.fd = fd
        self.position = position
        self.length = length
        self._file = file  # pinned for us

    def read(self) -> bytes:
        return os.pread(self.fd, self.length, self.position)

    def release(self) -> None:
        """Let the descriptor go (it may then be closed); the region must not be read after."""
        file, self._file = self._file, None
        if file is not None:
            file.unpin()

    def __del__(self) -> None:
        file, self._file = self._file, None
        if file is not None:
            file.unpin_soon()  # the collector may run this inside an operation on the cache

    def __repr__(self) -> str:
        return f"FileRegion(fd={self.fd}, position={self.position}, length={self.length})"


@dataclass(frozen=True, slots=True)
class BatchLocation:
    position: int
    base_offset: int
    last_offset: int
    size: int


class BatchEntry(NamedTuple):
    """What an append tells the segment about each batch it writes."""

    position: int  # within the data being appended
    base_offset: int
    last_offset: int
    max_timestamp: int
    size: int


class LogSegment:
    def __init__(self, directory: str, base_offset: int, config: LogConfig, file: CachedFile,
                 size: int, created_ms: int, suffix: str = "") -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.config = config
        self.file = file  # the .log file, through the descriptor cache
        self.size = size
        self.created_ms = created_ms
        self.suffix = suffix
        self.index = OffsetIndex(self._path(INDEX_SUFFIX), base_offset, config.segment_index_bytes)
        self.time_index = TimeIndex(self._path(TIME_INDEX_SUFFIX), base_offset, config.segment_index_bytes)
        self.txn_index = TransactionIndex(self._path(TXN_INDEX_SUFFIX), base_offset)
        self.bytes_since_last_index = 0
        self.max_timestamp_so_far = -1
        self.offset_of_max_timestamp = -1
        self.rolling_base_ms: int | None = None  # max timestamp of the first batch
        self.next_offset = base_offset  # exact for the active segment
        self.index_full = False  # set when an index reaches segment.index.bytes
        self.closed = False
        #: set by recover(): whether the segment holds control batches (transaction markers,
        #: from which the log rebuilds its `.txnindex`)
        self.has_markers = False
        self.reserved_to = size  # disk blocks are reserved up to here (storage.reserve)
        self._reserved_chunk = 0  # bytes of the last reservation, counted in the budget

    # ------------------------------------------------------------ files

    def _path(self, kind: str) -> str:
        return os.path.join(self.directory, file_name(self.base_offset, kind) + self.suffix)

    @property
    def log_path(self) -> str:
        return self._path(LOG_SUFFIX)

    @classmethod
    def create(cls, directory: str, base_offset: int, config: LogConfig, now_ms: int,
               suffix: str = "") -> "LogSegment":
        path = os.path.join(directory, file_name(base_offset, LOG_SUFFIX) + suffix)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        file = SEGMENT_FILES.file(path, os.O_RDWR | os.O_APPEND, fd)
        return cls(directory, base_offset, config, file, 0, now_ms, suffix)

    @classmethod
    def open(cls, directory: str, base_offset: int, config: LogConfig, suffix: str = "") -> "LogSegment":
        """The segment of an existing file, which is not opened until it is used."""
        path = os.path.join(directory, file_name(base_offset, LOG_SUFFIX) + suffix)
        st = os.stat(path)
        file = SEGMENT_FILES.file(path, os.O_RDWR | os.O_APPEND)
        return cls(directory, base_offset, config, file, st.st_size, st.st_mtime_ns // 1_000_000, suffix)

    @property
    def fd(self) -> int:
        """An open descriptor of the .log file, not pinned: for a use at once on the thread
        that owns the log, with no other segment file opened before it (tests, tools).
        Code that may run beside the cleaner thread pins (`file.pin()` / `file.unpin()`)."""
        fd = self.file.pin()
        self.file.unpin()
        return fd

    def pread(self, n: int, position: int) -> bytes:
        fd = self.file.pin()
        try:
            return os.pread(fd, n, position)
        finally:
            self.file.unpin()

    def stat(self) -> os.stat_result:
        fd = self.file.pin()
        try:
            return os.fstat(fd)
        finally:
            self.file.unpin()

    def dup_fd(self) -> int:
        """A descriptor of the .log file of the caller's own (to close), which eviction from
        the cache does not touch."""
        fd = self.file.pin()
        try:
            return os.dup(fd)
        finally:
            self.file.unpin()

    def load_indexes(self) -> bool:
        """Load the indexes from disk; False if the offset or time index is missing, or any
        is not sane (then recover the segment: the log rebuilds its aborted transactions). A
        missing `.txnindex` is an empty one, as in Kafka."""
        try:
            self.index.load(self.size)
            self.time_index.load(INT32_MAX + self.base_offset)
            self.txn_index.load()
        except (OSError, CorruptIndexError):
            self.index.reset()
            self.time_index.reset()
            return False
        ts, off = self.time_index.last_entry
        self.max_timestamp_so_far, self.offset_of_max_timestamp = ts, off
        self.index_full = self.index.is_full or self.time_index.is_full
        return True

    def change_suffix(self, suffix: str) -> None:
        """Rename all the files (used for .deleted, .cleaned and .swap). The `.txnindex` goes
        before the offset index: a load that finds the offset index of a segment renamed after a
        crash found its aborted transactions too (a missing `.txnindex` is an empty one)."""
        self.suffix = suffix
        self.file.rename(self.log_path)
        self.txn_index.rename(self._path(TXN_INDEX_SUFFIX))
        self.index.rename(self._path(INDEX_SUFFIX))
        self.time_index.rename(self._path(TIME_INDEX_SUFFIX))

    # ------------------------------------------------------------ writes

    def append(self, data: bytes | bytearray | memoryview | Sequence, batches: Sequence[BatchEntry],
               length: int | None = None) -> None:
        """Write batches whose offsets are already assigned; update the sparse indexes.

        `data` is one buffer, or a list of buffers written with one `writev` (the hot path
        passes each batch's rewritten 16-byte prefix and the rest of the batch as received,
        so nothing is copied); `length` is then their total size.
        """
        start = self.size
        if isinstance(data, list):
            expected = length if length is not None else sum(len(d) for d in data)
            write = os.writev if len(data) <= _IOV_MAX else _write_joined
        else:
            expected = len(data)
            write = os.write
        file = self.file
        fd = file.pin()
        try:
            if start + expected > self.reserved_to:
                self._reserve(fd, start + expected)
            try:
                written = write(fd, data)
            except OSError as exc:
                self._undo_partial_write(fd, start)
                raise KafkaStorageError(f"append to {self.log_path} failed: {exc}") from exc
            if written != expected:
                self._undo_partial_write(fd, start)
                raise KafkaStorageError(f"short write to {self.log_path}: {written} of {expected} bytes")
        finally:
            file.unpin()
        self._index_batches(batches, start)
        self.size = start + expected

    def append_batch(self, prefix: bytes, rest: memoryview, size: int, base_offset: int,
                     last_offset: int, max_timestamp: int) -> None:
        """append() of one batch given as its rewritten 16-byte prefix and the rest as
        received, with one `writev`: the Produce hot path, which builds no lists."""
        start = self.size
        file = self.file
        fd = file.pin()
        try:
            if start + size > self.reserved_to:
                self._reserve(fd, start + size)
            try:
                written = os.writev(fd, (prefix, rest))
            except OSError as exc:
                self._undo_partial_write(fd, start)
                raise KafkaStorageError(f"append to {self.log_path} failed: {exc}") from exc
            if written != size:
                self._undo_partial_write(fd, start)
                raise KafkaStorageError(f"short write to {self.log_path}: {written} of {size} bytes")
        finally:
            file.unpin()
        self._index_batch(start, base_offset, last_offset, max_timestamp, size)
        self.size = start + size
        self.next_offset = last_offset + 1

    def _reserve(self, fd: int, end: int) -> None:
        """Reserve blocks past `end` (as many as the segment holds, within storage.reserve's
        bounds, and not past segment.bytes) before a write that goes beyond the reservation."""
        target = min(end + ahead(end), max(end, self.config.segment_bytes))
        # The last chunk is used up (this write goes past it): its budget comes back.
        BUDGET_IN_USE.give_back(self._reserved_chunk)
        self._reserved_chunk = 0
        granted = BUDGET_IN_USE.take(target - self.size, end - self.size)
        if not granted:  # the process holds its budget: plain writes until `target`
            self.reserved_to = target
        elif reserve(fd, self.size, granted):
            self._reserved_chunk = granted
            self.reserved_to = self.size + granted
        else:
            BUDGET_IN_USE.give_back(granted)
            self.reserved_to = _CANNOT_RESERVE

    def release_reserved(self) -> None:
        """Give back blocks reserved past the end: the segment takes no more appends."""
        if self._reserved_chunk and self.size < self.reserved_to:
            try:
                fd = self.file.pin()
                try:
                    release(fd, self.size)
                finally:
                    self.file.unpin()
            except OSError as exc:  # only disk space is at stake, until the file is deleted
                log.warning("could not release space reserved past %s: %s", self.log_path, exc)
        self._forget_reservation()

    def _forget_reservation(self) -> None:
        """The blocks past the end are gone (released, truncated, or the file closed)."""
        BUDGET_IN_USE.give_back(self._reserved_chunk)
        self._reserved_chunk = 0
        if self.reserved_to < _CANNOT_RESERVE:
            self.reserved_to = min(self.reserved_to, self.size)

    def _index_batches(self, batches: Sequence[BatchEntry], start: int) -> None:
        """The index bookkeeping of appended batches, `start` being where they begin."""
        for position, base_offset, last_offset, max_timestamp, size in batches:
            self._index_batch(start + position, base_offset, last_offset, max_timestamp, size)
        self.next_offset = batches[-1][2] + 1

    def _index_batch(self, position: int, base_offset: int, last_offset: int, max_timestamp: int,
                     size: int) -> None:
        """As Kafka: a batch gets an offset index entry, and the time index one for the
        largest timestamp so far, when more than index.interval.bytes were appended since
        the last entry."""
        if max_timestamp > self.max_timestamp_so_far:
            self.max_timestamp_so_far = max_timestamp
            self.offset_of_max_timestamp = last_offset
        if self.rolling_base_ms is None:
            self.rolling_base_ms = max_timestamp
        if self.bytes_since_last_index > self.config.index_interval_bytes:
            self.bytes_since_last_index = size
            if self.index.append(base_offset, position):
                self.index_full = True  # until a truncation, as an index only grows
            # Batches larger than index.interval.bytes get here on every append: the time
            # index is not called unless the largest timestamp grew (it would add nothing).
            time_index, largest = self.time_index, self.max_timestamp_so_far
            if largest > time_index.last_timestamp and \
                    time_index.maybe_append(largest, self.offset_of_max_timestamp):
                self.index_full = True
        else:
            self.bytes_since_last_index += size

    @staticmethod
    def _undo_partial_write(fd: int, size: int) -> None:
        try:
            os.ftruncate(fd, size)
        except OSError:
            pass

    def should_roll(self, incoming_bytes: int, last_offset: int, now_ms: int, incoming_max_ts: int) -> bool:
        size = self.size
        if not size:
            return False
        config = self.config
        if (size + incoming_bytes > config.segment_bytes or self.index_full
                or last_offset - self.base_offset > INT32_MAX):
            return True
        # As Kafka: time is measured in record timestamps from the first batch's, or by the
        # wall clock from the segment's creation when records carry no timestamps.
        base_ms = self.rolling_base_ms
        if base_ms is not None and base_ms >= 0:
            return incoming_max_ts - base_ms > config.segment_ms
        return now_ms - self.created_ms > config.segment_ms

    def on_become_inactive(self) -> None:
        """The segment was rolled: record its final max timestamp, write its indexes and
        give back the disk space reserved past its end (first, as in close)."""
        self.release_reserved()
        if self.max_timestamp_so_far >= 0:
            self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp)
        self.index.flush(sync=False)
        self.time_index.flush(sync=False)

    def flush(self) -> None:
        try:
            fd = self.file.pin()
            try:
                os.fsync(fd)
            finally:
                self.file.unpin()
            self.index.flush()
            self.time_index.flush()
            self.txn_index.flush()
        except OSError as exc:
            raise KafkaStorageError(f"flush of {self.log_path} failed: {exc}") from exc

    def truncate_to(self, offset: int) -> int:
        """Remove every batch at or after `offset`; return the number of bytes removed."""
        loc = self.translate_offset(offset)
        if loc is None:
            return 0
        removed = self.size - loc.position
        fd = self.file.pin()
        try:
            os.ftruncate(fd, loc.position)  # frees reserved blocks too
        finally:
            self.file.unpin()
        self.size = loc.position
        self._forget_reservation()
        self.index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self.index_full = self.index.is_full or self.time_index.is_full
        self.next_offset = loc.base_offset
        self.bytes_since_last_index = 0
        ts, off = self.time_index.last_entry
        self.max_timestamp_so_far, self.offset_of_max_timestamp = ts, off
        if self.size == 0:
            self.rolling_base_ms = None
        return removed

    # ------------------------------------------------------------ reads

    def _batch_at(self, fd: int, position: int) -> BatchLocation:
        head = os.pread(fd, 27, position)
        if len(head) < 27:
            raise CorruptRecordError(f"{self.log_path}: truncated batch header at {position}")
        base, length = _PREFIX.unpack_from(head)
        if length < _MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"{self.log_path}: batch length {length} at {position}")
        (delta,) = _LAST_DELTA.unpack_from(head, 23)
        return BatchLocation(position, base, base + delta, length + LOG_OVERHEAD)

    def translate_offset(self, offset: int, max_position: int | None = None) -> BatchLocation | None:
        """The first batch whose last offset is >= `offset`, or None if there is none."""
        fd = self.file.pin()
        try:
            return self._translate(fd, offset, max_position)
        finally:
            self.file.unpin()

    def _translate(self, fd: int, offset: int, max_position: int | None) -> BatchLocation | None:
        end = self.size if max_position is None else max_position
        _, pos = self.index.lookup(offset)
        while pos < end:
            loc = self._batch_at(fd, pos)
            if loc.last_offset >= offset:
                return loc
            pos += loc.size
        return None

    def read(self, offset: int, max_size: int, max_position: int | None = None,
             min_one_message: bool = True) -> FileRegion | None:
        """A region from the batch holding `offset` up to `max_size` bytes.

        As in Kafka, the region may end inside a batch (clients drop a partial last batch),
        except that with `min_one_message` the first batch is always whole.
        """
        end = self.size if max_position is None else max_position
        file = self.file
        fd = file.pin()
        try:
            loc = self._translate(fd, offset, end)
        except BaseException:
            file.unpin()
            raise
        if loc is None:
            file.unpin()
            return None
        available = end - loc.position
        length = min(available, max_size)
        if min_one_message and length < loc.size:
            length = min(available, loc.size)
        return FileRegion(fd, loc.position, length, file)  # the region holds our pin

    def batches(self, start_position: int = 0, end_position: int | None = None):
        """Yield (position, raw batch bytes) for tools and the cleaner; stops at a torn tail."""
        end = self.size if end_position is None else end_position
        pos = start_position
        if pos >= end:
            return
        fd = self.file.pin()
        try:
            while pos < end:
                loc = self._batch_at(fd, pos)
                if pos + loc.size > end:
                    return
                yield pos, os.pread(fd, loc.size, pos)
                pos += loc.size
        finally:
            self.file.unpin_soon()  # run by the collector if the generator is dropped unfinished

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after `timestamp`, or None."""
        fd = self.file.pin()
        try:
            return self._find_by_timestamp(fd, timestamp, start_offset)
        finally:
            self.file.unpin()

    def _find_by_timestamp(self, fd: int, timestamp: int, start_offset: int) -> tuple[int, int] | None:
        _, from_offset = self.time_index.lookup(timestamp)
        _, pos = self.index.lookup(max(from_offset, start_offset))
        while pos < self.size:
            loc = self._batch_at(fd, pos)
            head = os.pread(fd, 43, pos)
            (max_ts,) = _MAX_TS.unpack_from(head, 35)
            if max_ts >= timestamp and loc.last_offset >= start_offset:
                (attrs,) = _ATTRS.unpack_from(head, 21)
                if attrs & TIMESTAMP_TYPE_BIT:  # LogAppendTime: every record has max_ts
                    return max(loc.base_offset, start_offset), max_ts
                batch = decode_batch(os.pread(fd, loc.size, pos), verify=False)
                for rec in batch.records:
                    if rec.offset >= start_offset and rec.timestamp >= timestamp:
                        ts = batch.max_timestamp if batch.timestamp_type == LOG_APPEND_TIME else rec.timestamp
                        return rec.offset, ts
            pos += loc.size
        return None

    @property
    def largest_timestamp(self) -> int:
        """Newest record timestamp, or the file's modification time if records carry none."""
        if self.max_timestamp_so_far >= 0:
            return self.max_timestamp_so_far
        return self.stat().st_mtime_ns // 1_000_000

    # ------------------------------------------------------------ recovery

    def recover(self) -> int:
        """Rebuild the indexes by scanning every batch; truncate at the first invalid one.
        The aborted transactions are emptied: their rebuild needs the producer state before
        the segment, which is the log's (Log._load_producer_state).

        Returns the number of bytes truncated (0 when the whole file is valid).
        """
        self.index.reset()
        self.time_index.reset()
        self.txn_index.reset()
        self.max_timestamp_so_far = self.offset_of_max_timestamp = -1
        self.rolling_base_ms = None
        self.bytes_since_last_index = 0
        self.index_full = False
        self.next_offset = self.base_offset
        self.has_markers = False
        fd = self.file.pin()
        try:
            return self._recover(fd)
        finally:
            self.file.unpin()

    def _recover(self, fd: int) -> int:
        st = os.fstat(fd)
        size = st.st_size
        valid = 0
        entries: list[BatchEntry] = []
        if size:
            with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as mm:
                view = memoryview(mm)
                try:
                    for pos, h in scan_batches(view, verify=True):
                        if h.base_offset < self.next_offset:
                            break  # offsets going backwards: not a batch this log wrote
                        if h.last_offset - self.base_offset > INT32_MAX:
                            break  # not a relative offset (the CRC does not cover the base offset)
                        entries.append(BatchEntry(pos, h.base_offset, h.last_offset, h.max_timestamp, h.size))
                        if h.attributes & CONTROL_BIT:
                            self.has_markers = True
                        self.next_offset = h.last_offset + 1
                        valid = pos + h.size
                except RecordsError:
                    pass
                finally:
                    view.release()
        truncated = size - valid
        if truncated:
            os.ftruncate(fd, valid)  # frees reserved blocks too
        elif allocated_past_end(st):
            # Blocks reserved ahead before a crash: nothing else would give them back (a
            # segment gives back what it reserved since it was opened, if it ever rolls).
            try:
                release(fd, valid)
            except OSError as exc:
                log.warning("could not release space reserved past %s: %s", self.log_path, exc)
        self.size = 0
        self.next_offset = self.base_offset
        if entries:
            self._index_batches(entries, 0)
        self.size = valid
        self._forget_reservation()
        return truncated

    def read_next_offset(self) -> int:
        """Scan from the last index entry to find the offset after the last batch."""
        _, pos = self.index.last_entry
        next_offset = self.base_offset
        first = True
        fd = self.file.pin()
        try:
            while pos < self.size:
                loc = self._batch_at(fd, pos)
                if first or loc.last_offset >= next_offset:
                    next_offset = loc.last_offset + 1
                first = False
                pos += loc.size
            if self.rolling_base_ms is None and self.size:
                head = os.pread(fd, 43, 0)
                (self.rolling_base_ms,) = _MAX_TS.unpack_from(head, 35)
        finally:
            self.file.unpin()
        self.next_offset = max(next_offset, self.base_offset)
        return self.next_offset

    # ------------------------------------------------------------ lifecycle

    def close(self) -> None:
        if self.closed:
            return
        self.release_reserved()  # first: on a full disk the index writes need the space
        if self.max_timestamp_so_far >= 0:
            self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp)
        self.index.flush(sync=False)
        self.time_index.flush(sync=False)
        self.file.close()
        self.closed = True

    def close_without_index(self) -> None:
        if not self.closed:
            self.file.close()
            self.closed = True
            self._forget_reservation()  # its budget: the blocks go with the file or at recovery

    def delete_files(self) -> None:
        """Close and unlink all the files (after any delay the caller wanted). A descriptor
        pinned meanwhile (a region being sent, the cleaner reading) is closed at its last
        unpin, and reads the unlinked file until then."""
        self.close_without_index()
        for path in (self.log_path, self.index.path, self.time_index.path, self.txn_index.path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def __repr__(self) -> str:
        return f"LogSegment(base={self.base_offset}, size={self.size}, next={self.next_offset})"
