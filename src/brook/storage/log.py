"""A partition log: an ordered list of segments with one active (last) segment.

The segment list is an immutable tuple that is replaced, never mutated, when segments are
rolled, deleted or swapped in by the cleaner; a reader that took a snapshot keeps working on
it. Deleted segments are renamed `.deleted` and their files closed and removed only after
`file.delete.delay.ms`, so regions handed to `sendfile` stay valid meanwhile.
"""

from __future__ import annotations

import logging
import os
import struct
from bisect import bisect_right
from dataclasses import dataclass
from typing import Callable, NamedTuple

from ..records.crc import crc32c

from ..clock import SYSTEM_CLOCK, Clock
from ..records.batch import (
    ATTRIBUTES_OFFSET,
    CONTROL_BIT,
    CRC_OFFSET,
    HEADER_SIZE,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_BIT,
    RecordBatch,
    decode_batch,
    read_header,
)
from ..records.control import NO_MARKER, end_txn_marker_batch, read_marker
from ..records.errors import CorruptRecordError, RecordsError, TruncatedBatchError
from ..records.validate import Rules, check_batch, inflate_limit
from .config import LogConfig
from .errors import (
    InvalidRecordError,
    InvalidTimestampError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
)
from .leader_epoch import LeaderEpochCache
from .producer_budget import ProducerIdBudget
from .producer_state import (
    AppendOrigin,
    CorruptSnapshotError,
    ProducerAppendPlan,
    ProducerBatch,
    ProducerStateManager,
    UNVERIFIED,
    delete_snapshot_file,
    list_snapshot_offsets,
    remove_temporary_snapshot_files,
    snapshot_file_name,
    write_snapshot_file,
)
from .segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INT32_MAX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    BatchEntry,
    FileRegion,
    LogSegment,
)
from .txn_index import AbortedTxn

log = logging.getLogger(__name__)

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3

_HEADER = HEADER_STRUCT
_new_tuple = tuple.__new__
_PREFIX = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch
_ATTRS = struct.Struct(">h")
_MAX_TS = struct.Struct(">q")
_CRC = struct.Struct(">I")
_CLIENT = AppendOrigin.CLIENT
_REPLICATION = AppendOrigin.REPLICATION
_REPLAY_CHUNK = 4096  # batches replayed per plan when producer state is rebuilt from the log


class LogAppendInfo(NamedTuple):
    """The outcome of an append. For a duplicate (an idempotent producer's retry of a batch
    already in the log) nothing was written: the offsets and timestamps are those of the
    original batch, and record_count and valid_bytes are 0."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    record_count: int
    valid_bytes: int
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    fetch_offset: int
    regions: tuple[FileRegion, ...]
    #: (producer id, first offset) of the aborted transactions overlapping the read, when
    #: asked for (a read_committed fetch); None otherwise
    aborted_transactions: list[tuple[int, int]] | None = None

    @property
    def size(self) -> int:
        return sum(r.length for r in self.regions)

    def read(self) -> bytes:
        return b"".join(r.read() for r in self.regions)

    def batches(self) -> list[RecordBatch]:
        """Decode the whole batches of this fetch (a partial last batch is dropped, as
        clients do)."""
        data = self.read()
        out, pos = [], 0
        while pos < len(data):
            try:
                h = read_header(data, pos)
            except TruncatedBatchError:
                break
            out.append(decode_batch(data, pos))
            pos += h.size
        return out


def parse_topic_partition(dirname: str) -> tuple[str, int]:
    topic, _, partition = os.path.basename(dirname.rstrip("/")).rpartition("-")
    if not topic or not partition.isdigit():
        raise ValueError(f"{dirname!r} is not a <topic>-<partition> log directory")
    return topic, int(partition)


class Log:
    def __init__(self, directory: str, config: LogConfig, *, clock: Clock = SYSTEM_CLOCK,
                 recovery_point: int = 0, log_start_offset: int = 0,
                 had_clean_shutdown: bool = False, producer_budget: ProducerIdBudget | None = None) -> None:
        self.directory = directory
        self.topic, self.partition = parse_topic_partition(directory)
        self.config = config  # the setter also derives what append needs
        self.clock = clock
        self._now_ms = clock.milliseconds  # bound once: append reads the clock every call
        self.recovery_point = recovery_point
        self.log_start_offset = log_start_offset
        self.last_flush_ms = clock.milliseconds()
        self.unflushed_messages = 0
        self.pending_deletes: list[tuple[int, LogSegment]] = []
        #: The offset compaction must stay below, asked when a pass is planned (the owner's
        #: high watermark; None: the whole log up to the active segment may be cleaned).
        self.cleaning_bound: Callable[[], int | None] | None = None
        self.recovered_bytes_truncated = 0
        os.makedirs(directory, exist_ok=True)
        self._segments: tuple[LogSegment, ...] = ()
        self._bases: list[int] = []
        self._producer_budget = producer_budget
        self.producer_state = ProducerStateManager(config.producer_id_expiration_ms, producer_budget)
        rebuild = self._load(had_clean_shutdown)
        self._load_producer_state(rebuild)
        self.epoch_cache = LeaderEpochCache(directory)
        self.epoch_cache.truncate_from_end(self.log_end_offset)
        self.epoch_cache.truncate_from_start(self.log_start_offset)

    # ------------------------------------------------------------ state

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return self._segments

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def size(self) -> int:
        return sum(s.size for s in self._segments)

    def _set_segments(self, segments: tuple[LogSegment, ...]) -> None:
        self._segments = segments
        self._bases = [s.base_offset for s in segments]

    def _segment_index_for(self, offset: int) -> int:
        return max(bisect_right(self._bases, offset) - 1, 0)

    # ------------------------------------------------------------ loading and recovery

    def _load(self, had_clean_shutdown: bool) -> set[int]:
        """Open, check and recover the segments; return the base offsets of those whose
        aborted transactions must be rebuilt from the log (segments scanned again that hold
        markers: without one a segment has no aborted transaction)."""
        names = os.listdir(self.directory)
        rebuild: set[int] = set()
        for name in names:
            if name.endswith(DELETED_SUFFIX) or name.endswith(CLEANED_SUFFIX):
                os.unlink(os.path.join(self.directory, name))  # unfinished delete or clean
        for name in sorted(n for n in names if n.endswith(LOG_SUFFIX + SWAP_SUFFIX)):
            if self._complete_swap(int(name[:20])):
                rebuild.add(int(name[:20]))
        for name in os.listdir(self.directory):
            if name.endswith(SWAP_SUFFIX):  # index files of a swap whose .log was renamed
                os.unlink(os.path.join(self.directory, name))  # before a crash: rebuilt
        bases = sorted(int(n[:20]) for n in os.listdir(self.directory) if n.endswith(LOG_SUFFIX))
        segments = [LogSegment.open(self.directory, b, self.config) for b in bases]
        if not segments:
            now = self.clock.milliseconds()
            segments = [LogSegment.create(self.directory, self.log_start_offset, self.config, now)]
        recover_from = len(segments)  # index of the first segment to scan
        if not had_clean_shutdown:
            recover_from = 0
            for i, seg in enumerate(segments):
                if seg.base_offset <= self.recovery_point:
                    recover_from = i
        for i, seg in enumerate(segments):
            if i < recover_from and seg.load_indexes():
                continue
            truncated = seg.recover()
            if seg.has_markers:
                rebuild.add(seg.base_offset)
            if truncated:
                log.warning("%s: truncated %d invalid bytes at the end of segment %d",
                            self.directory, truncated, seg.base_offset)
                self.recovered_bytes_truncated += truncated
                for later in segments[i + 1:]:
                    log.warning("%s: deleting segment %d after the damage", self.directory, later.base_offset)
                    later.delete_files()
                del segments[i + 1:]
                break
        for seg in segments:
            if seg.next_offset == seg.base_offset and seg.size:
                try:
                    seg.read_next_offset()  # loaded, not scanned: find where its last batch ends
                except RecordsError as exc:
                    if seg is not segments[-1]:  # reads of the damage will answer an error
                        log.error("%s: segment %d is damaged: %s", self.directory, seg.base_offset, exc)
                        continue
                    log.warning("%s: active segment %d is damaged (%s); recovering it",
                                self.directory, seg.base_offset, exc)
                    self.recovered_bytes_truncated += seg.recover()
                    if seg.has_markers:
                        rebuild.add(seg.base_offset)
        if segments[-1].next_offset < self.log_start_offset:
            # The crash lost records up to the log start offset (as Kafka: start over there).
            log.warning("%s: log end %d is below the log start offset %d; starting empty there",
                        self.directory, segments[-1].next_offset, self.log_start_offset)
            for seg in segments:
                seg.delete_files()
            segments = [LogSegment.create(self.directory, self.log_start_offset, self.config,
                                          self.clock.milliseconds())]
        self._set_segments(tuple(segments))
        self.log_start_offset = max(self.log_start_offset, segments[0].base_offset)
        self.recovery_point = min(max(self.recovery_point, self.log_start_offset), self.log_end_offset)
        return {seg.base_offset for seg in segments if seg.base_offset in rebuild}

    def _complete_swap(self, base: int) -> bool:
        """Finish a cleaner swap interrupted by a crash: the .swap segment replaces the
        segments whose offsets it covers. True if it holds markers: its aborted transactions
        are then rebuilt from the log (a crash may have come between the renames of its
        files)."""
        swap = LogSegment.open(self.directory, base, self.config, suffix=SWAP_SUFFIX)
        swap.recover()
        end = swap.next_offset
        for name in os.listdir(self.directory):
            if name.endswith(LOG_SUFFIX) and base <= int(name[:20]) < end:
                old = LogSegment.open(self.directory, int(name[:20]), self.config)
                old.delete_files()
        swap.change_suffix("")
        swap.close()
        return swap.has_markers

    # ------------------------------------------------------------ producer state

    def _load_producer_state(self, rebuild: set[int] = frozenset()) -> None:
        """Newest valid snapshot in [log start, log end], then the batch headers after it.

        Snapshots outside that range describe offsets that are gone (deleted by retention,
        or truncated away by recovery) and are removed, as are corrupt ones. Without a
        usable snapshot the state is rebuilt from the log start offset.

        The aborted transactions of the segments in `rebuild` (base offsets of segments just
        recovered, their `.txnindex` emptied) are written again by the replay, which then
        starts at a snapshot at or before the first of them: the same code as an append's
        (`_apply_producer_plan`).
        """
        directory = self.directory
        remove_temporary_snapshot_files(directory)
        start, end = self.log_start_offset, self.log_end_offset
        candidates = []
        for offset in list_snapshot_offsets(directory):
            if start <= offset <= end:
                candidates.append(offset)
            else:
                log.info("%s: removing producer snapshot %d outside the log [%d, %d]",
                         directory, offset, start, end)
                delete_snapshot_file(directory, offset)
        now = self.clock.milliseconds()
        replay_from = start
        rebuild_from = min(rebuild) if rebuild else None
        for offset in reversed(candidates):
            if rebuild_from is not None and offset > rebuild_from:
                continue  # valid, but later than the transactions to rebuild
            try:
                with open(os.path.join(directory, snapshot_file_name(offset)), "rb") as f:
                    self.producer_state.load_snapshot(f.read(), offset, now)
            except (OSError, CorruptSnapshotError) as exc:
                log.warning("%s: ignoring producer snapshot %d: %s", directory, offset, exc)
                delete_snapshot_file(directory, offset)
                continue
            replay_from = offset
            break
        if replay_from < end:
            batches: list[ProducerBatch] = []
            for batch in self._producer_batches(replay_from):
                batches.append(batch)
                if len(batches) >= _REPLAY_CHUNK:
                    self._replay(batches, now, rebuild)
                    batches = []
            if batches:
                self._replay(batches, now, rebuild)
            self.take_producer_snapshot()
        log.debug("%s: producer state of %d producers, from offset %d", directory,
                  len(self.producer_state), replay_from)

    def _replay(self, batches: list[ProducerBatch], now: int, rebuild: set[int]) -> None:
        state = self.producer_state
        plan = state.prepare(batches, AppendOrigin.REPLICATION, now)
        self._apply_producer_plan(plan, rebuild)

    def _apply_producer_plan(self, plan: ProducerAppendPlan, only: set[int] | None = None) -> None:
        """Store a plan of batches now in the log, and note the transactions it aborted in
        the `.txnindex` of the segments holding their markers (with `only`, of those
        segments only: a replay writes the entries of segments being rebuilt)."""
        self.producer_state.apply(plan)
        for txn in plan.completed:
            if txn.aborted:
                seg = self._segments[self._segment_index_for(txn.last_offset)]
                if only is None or seg.base_offset in only:
                    seg.txn_index.append(AbortedTxn(txn.producer_id, txn.first_offset,
                                                    txn.last_offset, txn.last_stable_offset))

    def _producer_batches(self, start: int):
        """ProducerBatch of every batch with a producer id from `start` to the log end,
        from batch headers only, and the record of each control batch (its marker). A
        damaged segment is skipped (reads of it answer errors)."""
        segments = self._segments
        for i, seg in enumerate(segments):
            if i + 1 < len(segments) and segments[i + 1].base_offset <= start:
                continue
            try:
                pos = 0
                if start > seg.base_offset:
                    loc = seg.translate_offset(start)
                    if loc is None:
                        continue
                    pos = loc.position
                size = seg.size
                fd = seg.file.pin()
                try:
                    while pos < size:
                        head = os.pread(fd, HEADER_SIZE, pos)
                        if len(head) < HEADER_SIZE:
                            raise CorruptRecordError(f"truncated batch header at position {pos}")
                        (base, length, _, magic, _, attrs, delta, _, max_ts, pid, pepoch, bseq, _) = \
                            _HEADER.unpack(head)
                        if magic != MAGIC_V2 or length < MIN_BATCH_LENGTH:
                            raise CorruptRecordError(f"invalid batch header at position {pos}")
                        if pid >= 0 and base + delta >= start:
                            ctype, cepoch = NO_MARKER, -1
                            if attrs & CONTROL_BIT:
                                ctype, cepoch = _marker_of(os.pread(fd, length + LOG_OVERHEAD, pos))
                            yield ProducerBatch(pid, pepoch, bseq, base, base + delta, max_ts,
                                                attrs, ctype, cepoch)
                        pos += length + LOG_OVERHEAD
                finally:
                    seg.file.unpin_soon()  # run by the collector if the generator is dropped
            except RecordsError as exc:
                log.error("%s: producer state skips damaged segment %d: %s",
                          self.directory, seg.base_offset, exc)

    def take_producer_snapshot(self, *, sync: bool = False) -> str:
        """Write the producer state as `<log end offset>.snapshot`; return its path."""
        offset = self.log_end_offset
        return write_snapshot_file(self.directory, offset, self.producer_state.snapshot(offset), sync=sync)

    def remove_expired_producers(self, now: int | None = None) -> list[int]:
        """Forget producers idle for `producer.id.expiration.ms`; return their ids. The log
        manager calls this periodically (Kafka: every
        producer.id.expiration.check.interval.ms)."""
        now = self.clock.milliseconds() if now is None else now
        self.producer_state.producer_id_expiration_ms = self.config.producer_id_expiration_ms
        return self.producer_state.remove_expired_producers(now)

    # ------------------------------------------------------------ append

    @property
    def config(self) -> LogConfig:
        return self._config

    @config.setter
    def config(self, config: LogConfig) -> None:
        """Replace the config (the log manager does on a topic config change)."""
        self._config = config
        # What append needs of it, derived once.
        self._max_batch_size = min(config.max_message_bytes, config.segment_bytes)
        self._log_append_time = config.message_timestamp_type == "LogAppendTime"
        # What a producer's records are held to (brook.records.validate).
        self._rules = Rules(inflate_limit=inflate_limit(config.max_message_bytes),
                            keys_required=config.compact,
                            before_max_ms=config.timestamp_before_max_ms,
                            after_max_ms=config.timestamp_after_max_ms,
                            check_timestamps=not self._log_append_time,
                            where=f"{self.topic}-{self.partition}")
        self._before_max_ms = config.timestamp_before_max_ms
        self._after_max_ms = config.timestamp_after_max_ms
        self._flush_messages = config.flush_messages

    def check_records(self, records: bytes | bytearray | memoryview) -> int | None:
        """The record-level checks append() makes of a producer's one batch (decompressing
        it), for a caller to make off the event loop and hand to append() as `checked`:
        the batch's largest record timestamp. None when the batch would fail its header,
        size or CRC checks, which append() answers. Raises what append() would for its records
        (InvalidRecordError, InvalidTimestampError, InflationLimitError; records.errors)."""
        view = memoryview(records)
        end = len(view)
        if end < HEADER_SIZE:
            return None
        (_, length, _, magic, crc, attrs, delta, base_ts, _, _, _, _, count) = _HEADER.unpack_from(view)
        if not (length + LOG_OVERHEAD == end and magic == MAGIC_V2 and count == delta + 1
                and delta >= 0 and end <= self._max_batch_size and not attrs & CONTROL_BIT
                and crc32c(view[ATTRIBUTES_OFFSET:]) == crc):
            return None
        return check_batch(view, 0, end, attrs, count, base_ts, self._rules, self._now_ms())

    def append(self, records: bytes | bytearray | memoryview, *, leader_epoch: int | None = None,
               assign_offsets: bool = True, origin: AppendOrigin = AppendOrigin.CLIENT,
               checked: int | None = None, guard: object = UNVERIFIED) -> LogAppendInfo:
        """Validate batches (header, CRC, sizes, records, timestamps, producer state), assign
        offsets and write them.

        Either every batch is written or none is. A producer's records are checked
        (brook.records.validate: they decode, count and offset deltas agree, keys on a
        compacted topic, timestamps) but not kept decoded, and the batches are not copied:
        each is written as a rewritten 16-byte prefix (base offset, length, leader epoch; the
        CRC does not cover them) followed by the rest as received. `checked`, the result of
        check_records() for this one batch, spares the record checks (and the
        decompression) here.
        With `assign_offsets=False` the batches keep their offsets, which must be beyond the
        log end (the cleaner and, later, followers append that way); they are not checked
        beyond their headers and CRC, and update producer state as replication does.

        `origin` CLIENT (a Produce request) gets Kafka's client checks: base offset 0,
        idempotent batches with a sequence, duplicates answered with the original offsets
        (`LogAppendInfo.duplicate`), sequence numbers in order. COORDINATOR appends only
        have their producer epochs checked. `guard`: a leader's verification of the batch's
        transaction (KIP-890, `ProducerStateManager.start_verification`), which a client's
        batch beginning a transaction needs unless it is UNVERIFIED (the default).

        Raises InvalidRecordError, InvalidTimestampError, OutOfOrderSequenceError,
        InvalidProducerEpochError, RecordTooLargeError, RecordBatchTooLargeError,
        CorruptRecordError (records.errors) and KafkaStorageError.
        """
        view = memoryview(records)
        end = len(view)
        now = self._now_ms()
        # The common Produce takes a short path: one batch without a producer id, with
        # timestamps, passing every check of the general path. Anything else, errors
        # included, takes the general path. (Failed checks return at once: CPython 3.11
        # specializes a comparison only when it is followed by a short jump.)
        if not assign_offsets or origin is not _CLIENT or self._log_append_time or end < HEADER_SIZE:
            return self._append(view, now, leader_epoch, assign_offsets, origin, checked, guard)
        (base, length, epoch, magic, crc, attrs, delta, base_ts, max_ts, pid, _, _, count) = \
            _HEADER.unpack_from(view)
        if not (length + LOG_OVERHEAD == end and magic == MAGIC_V2 and base == 0 and pid < 0
                and count == delta + 1 and delta >= 0 and not attrs & CONTROL_BIT
                and end <= self._max_batch_size and 0 <= max_ts <= now + self._after_max_ms
                and (base_ts >= now - self._before_max_ms or base_ts == NO_TIMESTAMP)
                and crc32c(view[ATTRIBUTES_OFFSET:]) == crc):
            return self._append(view, now, leader_epoch, assign_offsets, origin, checked, guard)
        if checked is None:
            checked = check_batch(view, 0, end, attrs, count, base_ts, self._rules, now)
        if checked != max_ts:  # the header's max timestamp is wrong: rewritten there
            return self._append(view, now, leader_epoch, assign_offsets, origin, checked, guard)
        segment = self._segments[-1]
        first = segment.next_offset
        last = first + delta
        if segment.should_roll(end, last, now, max_ts):
            segment = self.roll(now)
        if leader_epoch is not None:
            epoch = leader_epoch
        segment.append_batch(_PREFIX.pack(first, length, epoch), view[16:], end, first, last, max_ts)
        self.unflushed_messages += count
        if self.unflushed_messages >= self._flush_messages:
            self.flush()
        # tuple.__new__ skips the NamedTuple's Python-level constructor
        return _new_tuple(LogAppendInfo, (first, last, max_ts, last, -1, count, end, False))

    def _append(self, view: memoryview, now: int, leader_epoch: int | None, assign_offsets: bool,
                origin: AppendOrigin, checked: int | None = None,
                guard: object = UNVERIFIED) -> LogAppendInfo:
        """append() in general: any number of batches, any origin, every check."""
        end = len(view)
        config = self._config
        append_time = self._log_append_time
        client = assign_offsets and origin is _CLIENT
        check_timestamps = assign_offsets and not append_time
        earliest, latest = now - self._before_max_ms, now + self._after_max_ms
        pieces: list = []
        entries: list[tuple[int, int, int, int, int]] = []
        producer_batches: list[ProducerBatch] = []
        next_offset = first_offset = self._segments[-1].next_offset
        max_ts = offset_of_max_ts = -1
        true_max_ts = None
        pos = 0
        while pos < end:
            if end - pos < HEADER_SIZE:
                read_header(view, pos)  # raises the precise error
            (base, length, epoch, magic, crc, attrs, delta, base_ts, batch_max_ts, pid, pepoch, bseq,
             count) = _HEADER.unpack_from(view, pos)
            size = length + LOG_OVERHEAD
            stop = pos + size
            if magic != MAGIC_V2 or length < MIN_BATCH_LENGTH or delta < 0 or count < 0 or stop > end:
                read_header(view, pos)  # raises the precise error
            if crc32c(view[pos + ATTRIBUTES_OFFSET:stop]) != crc:
                raise CorruptRecordError(f"batch at position {pos} of the append has a bad CRC")
            if size > self._max_batch_size:
                if size > config.max_message_bytes:
                    raise RecordTooLargeError(
                        f"batch of {size} bytes is over max.message.bytes {config.max_message_bytes}")
                raise RecordBatchTooLargeError(
                    f"batch of {size} bytes is over segment.bytes {config.segment_bytes}")
            if assign_offsets:
                if count != delta + 1:
                    raise InvalidRecordError(f"batch has {count} records but last offset delta {delta}")
                if client:
                    if attrs & CONTROL_BIT:
                        raise InvalidRecordError("producers may not write control batches")
                    if base != 0:
                        raise InvalidRecordError(f"batch base offset is {base}; a producer's must be 0")
                    if pid >= 0 and bseq < 0:
                        raise InvalidRecordError(f"batch of producer {pid} has no sequence number ({bseq})")
                    # Records last: Kafka checks the batch's header fields before them.
                    if checked is None or pos or stop != end:
                        checked = check_batch(view, pos, size, attrs, count, base_ts, self._rules, now)
                    if checked != batch_max_ts and not append_time:
                        true_max_ts = checked  # Kafka's rule: the header says the records' max
                    checked = None
                if check_timestamps:
                    # Other origins: the header's base timestamp stands for the earliest
                    # record, its max timestamp for the latest (a producer's are checked each).
                    if not client and (batch_max_ts > latest
                                       or (base_ts != NO_TIMESTAMP and base_ts < earliest)):
                        raise InvalidTimestampError(
                            f"batch timestamps [{base_ts}, {batch_max_ts}] are outside "
                            f"[{earliest}, {latest}] (message.timestamp.before/after.max.ms)")
                elif attrs & TIMESTAMP_TYPE_BIT:
                    raise InvalidTimestampError("a producer may not set LogAppendTime; the topic stamps it")
                base = next_offset
            elif base < next_offset:
                raise InvalidRecordError(f"batch offset {base} is below the log end {next_offset}")
            if leader_epoch is not None:
                epoch = leader_epoch
            if append_time:
                batch = bytearray(view[pos:stop])
                _stamp_log_append_time(batch, attrs, now, size)
                _PREFIX.pack_into(batch, 0, base, length, epoch)
                pieces.append(batch)
                batch_max_ts = now
            elif true_max_ts is not None:
                batch = bytearray(view[pos:stop])
                _set_max_timestamp(batch, true_max_ts, size)
                _PREFIX.pack_into(batch, 0, base, length, epoch)
                pieces.append(batch)
                batch_max_ts, true_max_ts = true_max_ts, None
            else:
                pieces.append(_PREFIX.pack(base, length, epoch))
                pieces.append(view[pos + 16:stop])
            last = base + delta
            if batch_max_ts > max_ts:
                max_ts, offset_of_max_ts = batch_max_ts, last
            if pid >= 0:
                ctype, cepoch = NO_MARKER, -1
                if attrs & CONTROL_BIT:
                    ctype, cepoch = _marker_of(view[pos:stop])
                producer_batches.append(_new_tuple(ProducerBatch, (
                    pid, pepoch, bseq, base, last, batch_max_ts, attrs, ctype, cepoch)))
            entries.append((pos, base, last, batch_max_ts, size))  # a BatchEntry, built cheaply
            next_offset = last + 1
            pos = stop
        if not entries:
            raise CorruptRecordError("no record batch in the appended data")
        if not assign_offsets:
            first_offset = entries[0][1]
        segment = self._segments[-1]
        if next_offset - 1 - first_offset > INT32_MAX:
            raise InvalidRecordError(f"offsets {first_offset}..{next_offset - 1} do not fit in one segment")
        plan = None
        if producer_batches:
            plan = self.producer_state.prepare(
                producer_batches, origin if assign_offsets else _REPLICATION, now, guard)
            dup = plan.duplicate
            if dup is not None:
                return _new_tuple(LogAppendInfo, (dup.first_offset, dup.last_offset, dup.max_timestamp,
                                                  dup.last_offset, dup.max_timestamp if append_time else -1,
                                                  0, 0, True))
        if next_offset - 1 - segment.base_offset > INT32_MAX:
            segment = self.roll(now, first_offset)  # relative offsets must fit in int32
        elif segment.should_roll(end, next_offset - 1, now, max_ts):
            segment = self.roll(now)
        segment.append(pieces, entries, end)
        if plan is not None:
            self._apply_producer_plan(plan)
        count = next_offset - first_offset
        self.unflushed_messages += count
        if self.unflushed_messages >= config.flush_messages:
            self.flush()
        return _new_tuple(LogAppendInfo, (first_offset, next_offset - 1, max_ts, offset_of_max_ts,
                                          now if append_time else -1, count, end, False))

    def append_as_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                         committed: bool, *, leader_epoch: int | None = None) -> LogAppendInfo:
        """Append a transaction marker (COMMIT or ABORT, Kafka's EndTransactionMarker) for a
        producer, as its transaction coordinator asked (WriteTxnMarkers): it ends the
        producer's open transaction here, if it has one, and an ABORT notes the transaction in
        the segment's `.txnindex`. Its epochs are checked as Kafka checks a coordinator's
        append: InvalidProducerEpochError, TransactionCoordinatorFencedError."""
        batch = end_txn_marker_batch(producer_id, producer_epoch, coordinator_epoch, committed,
                                     self._now_ms())
        return self.append(batch, leader_epoch=leader_epoch, origin=AppendOrigin.COORDINATOR)

    # ------------------------------------------------------------ transactions

    def first_unstable_offset(self, high_watermark: int | None = None) -> int | None:
        """The first offset of the earliest transaction still open or whose marker is at or
        past `high_watermark`, not below the log start; None if there is none."""
        state = self.producer_state
        if not state.ongoing and not state.unreplicated:
            return None
        first = state.first_unstable_offset(high_watermark)
        return None if first is None else max(first, self.log_start_offset)

    def last_stable_offset(self, high_watermark: int) -> int:
        """Kafka's LSO: the high watermark, or the first unstable offset if that is lower. A
        read_committed consumer reads up to it."""
        state = self.producer_state
        if not state.ongoing and not state.unreplicated:
            return high_watermark
        first = self.first_unstable_offset(high_watermark)
        return high_watermark if first is None or first >= high_watermark else first

    def collect_aborted_transactions(self, start: int, upper_bound: int,
                                     segment_index: int | None = None) -> list[AbortedTxn]:
        """The aborted transactions overlapping [start, upper_bound), from the `.txnindex` of
        the segment holding `start` (or the one at `segment_index`) and of the later segments
        as far as needed (Kafka's collectAbortedTransactions)."""
        segments = self._segments
        i = self._segment_index_for(start) if segment_index is None else segment_index
        out: list[AbortedTxn] = []
        for seg in segments[i:]:
            found, complete = seg.txn_index.collect(start, upper_bound)
            out.extend(found)
            if complete:
                break
        return out

    def all_aborted_transactions(self) -> list[AbortedTxn]:
        """Every entry of every segment's `.txnindex`, in order."""
        return [txn for seg in self._segments for txn in seg.txn_index.entries]

    def roll(self, now: int | None = None, base_offset: int | None = None) -> LogSegment:
        """Start a new active segment at the log end offset, or at `base_offset` if that is
        beyond it (an append with offsets too far from the active segment's base)."""
        now = self.clock.milliseconds() if now is None else now
        base = max(self.log_end_offset, base_offset or 0)
        old = self._segments[-1]
        kept = self._segments
        if old.size == 0:
            if old.base_offset == base:
                return old
            old.delete_files()  # an empty active segment: replace it by one at `base`
            kept = kept[:-1]
        else:
            old.on_become_inactive()
            # The state of every batch so far: a later load replays from here, not from the start.
            write_snapshot_file(self.directory, base, self.producer_state.snapshot(base), sync=False)
        new = LogSegment.create(self.directory, base, self.config, now)
        new.next_offset = base
        self._set_segments(kept + (new,))
        return new

    # ------------------------------------------------------------ flush

    def flush(self) -> None:
        """fsync every segment with data past the recovery point; advance the recovery point."""
        end = self.log_end_offset
        if end > self.recovery_point:
            segs = self._segments[self._segment_index_for(self.recovery_point):]
            for seg in segs:
                seg.flush()
            if any(seg.base_offset >= self.recovery_point for seg in segs):
                _fsync_dir(self.directory)  # segments created since the last flush
        self.recovery_point = end
        self.unflushed_messages = 0
        self.last_flush_ms = self.clock.milliseconds()

    def flush_if_due(self, now: int) -> bool:
        """The time half of the flush policy: flush if `flush.ms` passed with data unflushed."""
        if self.unflushed_messages and now - self.last_flush_ms >= self.config.flush_ms:
            self.flush()
            return True
        return False

    # ------------------------------------------------------------ read

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_message: bool = True, aborted: bool = False) -> FetchDataInfo:
        """File regions holding batches from `offset`, up to `max_bytes` (see LogSegment.read).

        `max_offset` (exclusive) bounds what is visible, e.g. the high watermark, or the last
        stable offset for read_committed, which also asks for the `aborted` transactions of
        the range read (`FetchDataInfo.aborted_transactions`).
        Raises OffsetOutOfRangeError outside [log start, log end].
        """
        segments = self._segments  # snapshot: deletions and swaps do not disturb this read
        bases = self._bases
        end_offset = segments[-1].next_offset
        if offset == end_offset:
            return FetchDataInfo(offset, (), [] if aborted else None)
        if offset < self.log_start_offset or offset > end_offset:
            raise OffsetOutOfRangeError(offset, self.log_start_offset, end_offset)
        limit = end_offset if max_offset is None else min(max_offset, end_offset)
        if offset >= limit:
            return FetchDataInfo(offset, (), [] if aborted else None)
        i = max(bisect_right(bases, offset) - 1, 0)
        while i < len(segments):
            seg = segments[i]
            max_position = seg.size
            if i + 1 >= len(segments) or limit < segments[i + 1].base_offset:
                if limit < end_offset:
                    loc = seg.translate_offset(limit)
                    max_position = loc.position if loc is not None else seg.size
            region = seg.read(offset, max_bytes, max_position, min_one_message)
            if region is not None:
                regions = (region,) if region.length else ()
                if not aborted:
                    return FetchDataInfo(offset, regions)
                # The end of what was read, from the offset index (Kafka's fetchUpperBoundOffset)
                upper = seg.index.upper_bound_offset(region.position + region.length)
                if upper is None:
                    upper = segments[i + 1].base_offset if i + 1 < len(segments) else end_offset
                txns = self.collect_aborted_transactions(offset, min(upper, limit), i)
                return FetchDataInfo(offset, regions,
                                     [(t.producer_id, t.first_offset) for t in txns])
            i += 1
        return FetchDataInfo(offset, (), [] if aborted else None)

    def fetch_offset_by_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """Kafka's ListOffsets lookup: (offset, timestamp) or None if no record is that new.

        EARLIEST_TIMESTAMP (-2) and LATEST_TIMESTAMP (-1) give the log start and end with
        timestamp -1; MAX_TIMESTAMP (-3) the record with the largest timestamp.
        """
        if timestamp == EARLIEST_TIMESTAMP:
            return self.log_start_offset, -1
        if timestamp == LATEST_TIMESTAMP:
            return self.log_end_offset, -1
        segments = self._segments
        if timestamp == MAX_TIMESTAMP:
            best = max(segments, key=lambda s: s.max_timestamp_so_far)
            if best.max_timestamp_so_far < 0:
                return None
            return self._record_of_max_timestamp(best), best.max_timestamp_so_far
        for seg in segments:
            if seg.size and seg.largest_timestamp >= timestamp:
                found = seg.find_offset_by_timestamp(timestamp, self.log_start_offset)
                if found is not None:
                    return found
        return None

    def legacy_offsets_before(self, timestamp: int, max_num_offsets: int) -> list[int]:
        """ListOffsets v0 (before KIP-79): up to ``max_num_offsets`` offsets, newest first,
        taken from the segments' base offsets (at least the log start offset) and, when the
        active segment holds data, the log end offset. Each segment stands for the time its
        file was last modified (the log end offset for now): LATEST_TIMESTAMP starts from the
        newest, EARLIEST_TIMESTAMP from the oldest only, and a timestamp from the newest
        modified at or before it (none if every segment is newer)."""
        if max_num_offsets < 0:
            raise ValueError(f"max_num_offsets {max_num_offsets} is negative")
        segments = self._segments
        points = [(max(seg.base_offset, self.log_start_offset), seg.stat().st_mtime_ns // 1_000_000)
                  for seg in segments]
        if segments[-1].size > 0:
            points.append((self.log_end_offset, self._now_ms()))
        if timestamp == LATEST_TIMESTAMP:
            start = len(points) - 1
        elif timestamp == EARLIEST_TIMESTAMP:
            start = 0
        else:
            start = len(points) - 1
            while start >= 0 and points[start][1] > timestamp:
                start -= 1
        count = min(max_num_offsets, start + 1)
        return sorted((points[start - j][0] for j in range(count)), reverse=True)

    def _record_of_max_timestamp(self, seg: LogSegment) -> int:
        """The offset of the first record with the segment's largest timestamp, as Kafka answers
        since 3.8 (KAFKA-16310; before, the last offset of its batch). The segment keeps the
        batch; only that batch is read and decoded."""
        last = seg.offset_of_max_timestamp
        largest = seg.max_timestamp_so_far
        try:
            [batch, *_] = self.read(last, self.config.max_message_bytes + 1024,
                                    max_offset=last + 1).batches()
        except (ValueError, RecordsError, OSError):  # unreadable: the batch's last offset
            return last
        if batch.attributes & TIMESTAMP_TYPE_BIT or batch.is_control:  # one time for all
            return max(batch.base_offset, self.log_start_offset)
        for record in batch.records:
            if record.timestamp == largest and record.offset >= self.log_start_offset:
                return record.offset
        return last

    # ------------------------------------------------------------ retention

    def delete_old_segments(self) -> int:
        """Apply retention.ms, retention.bytes and the log start offset; return segments deleted.

        Whole segments only, oldest first, never the active one.
        """
        now = self.clock.milliseconds()
        segments = self._segments
        config = self.config
        total = sum(s.size for s in segments)
        n = 0
        for i, seg in enumerate(segments[:-1]):
            if segments[i + 1].base_offset <= self.log_start_offset:
                pass
            elif config.delete and config.retention_ms >= 0 and now - seg.largest_timestamp > config.retention_ms:
                pass
            elif config.delete and config.retention_bytes >= 0 and total - seg.size >= config.retention_bytes:
                pass
            else:
                break
            total -= seg.size
            n += 1
        if n:
            self._delete_segments(segments[:n], now)
        return n

    def _delete_segments(self, doomed: tuple[LogSegment, ...], now: int) -> None:
        remaining = self._segments[len(doomed):]
        self._set_segments(remaining)
        self.log_start_offset = max(self.log_start_offset, remaining[0].base_offset)
        self.recovery_point = max(self.recovery_point, self.log_start_offset)
        for seg in doomed:
            seg.change_suffix(DELETED_SUFFIX)
            self.pending_deletes.append((now + self.config.file_delete_delay_ms, seg))
        for offset in list_snapshot_offsets(self.directory):
            if offset < self.log_start_offset:
                delete_snapshot_file(self.directory, offset)  # the batches it covers are gone
        self.epoch_cache.truncate_from_start(self.log_start_offset)
        log.info("%s: deleted %d segment(s), log start offset now %d",
                 self.directory, len(doomed), self.log_start_offset)

    def increase_log_start_offset(self, offset: int) -> None:
        """Kafka's DeleteRecords: records below `offset` become unreadable at once and their
        segments go at the next retention pass."""
        if offset > self.log_end_offset:
            raise OffsetOutOfRangeError(offset, self.log_start_offset, self.log_end_offset)
        self.log_start_offset = max(self.log_start_offset, offset)

    def delete_pending_files(self, now: int | None = None, force: bool = False,
                             in_use: frozenset[int] = frozenset()) -> int:
        """Remove `.deleted` files whose delay has passed (all of them with `force`), except
        those of segments whose id is in `in_use` (a cleaner pass still reads them)."""
        now = self.clock.milliseconds() if now is None else now
        keep, done = [], 0
        for due, seg in self.pending_deletes:
            if (force or due <= now) and id(seg) not in in_use:
                seg.delete_files()
                done += 1
            else:
                keep.append((due, seg))
        self.pending_deletes = keep
        return done

    # ------------------------------------------------------------ cleaner support

    def holds_segments(self, segments: tuple[LogSegment, ...]) -> bool:
        """Whether `segments` (taken from an earlier snapshot) are still exactly a run of
        this log's inactive segments, i.e. retention deleted none of them since."""
        current = self._segments
        try:
            first = current.index(segments[0])
        except ValueError:
            return False
        end = first + len(segments)
        return end < len(current) and current[first:end] == segments

    def replace_segments(self, new: LogSegment, old: tuple[LogSegment, ...]) -> None:
        """Swap a cleaned segment (suffix .cleaned) in for `old`, crash-safely.

        Order, as in Kafka: .cleaned -> .swap (durable), old -> .deleted, .swap -> .log.
        A crash at any point leaves either the old segments or the new one on load.
        `old` must still be the log's (see `holds_segments`).
        """
        if not self.holds_segments(old):
            raise ValueError(f"{self}: segments {old} are no longer the log's")
        current = self._segments
        first = current.index(old[0])
        new.flush()
        new.change_suffix(SWAP_SUFFIX)
        _fsync_dir(self.directory)
        # The swap is durable from here on (a load completes it), so the log serves the new
        # segment at once: if a rename below fails, no replaced segment stays live while its
        # file is queued for deletion (its descriptor closed under readers).
        self._set_segments(current[:first] + (new,) + current[first + len(old):])
        due = self.clock.milliseconds() + self.config.file_delete_delay_ms
        for seg in old:
            self.pending_deletes.append((due, seg))
            seg.change_suffix(DELETED_SUFFIX)
        new.change_suffix("")
        _fsync_dir(self.directory)

    # ------------------------------------------------------------ replication

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> LogAppendInfo:
        """Append batches copied from the leader: their offsets and leader epochs kept, each
        new epoch noted in the epoch cache (Kafka's appendAsFollower)."""
        view = memoryview(records)
        pos, end = 0, len(view)
        while pos + 17 <= end:
            base, length, epoch = _PREFIX.unpack_from(view, pos)
            if epoch > self.epoch_cache.latest_epoch:
                self.epoch_cache.assign(epoch, base)
            pos += LOG_OVERHEAD + length
        return self.append(view, assign_offsets=False, origin=AppendOrigin.REPLICATION)

    def truncate_to(self, offset: int) -> int:
        """Cut the log at `offset` (a follower dropping a tail its new leader does not have);
        return the bytes removed. Producer state is rebuilt for the shorter log."""
        if offset >= self.log_end_offset:
            return 0
        if offset < self.log_start_offset:
            offset = self.log_start_offset
        segments = self._segments
        keep = [s for s in segments if s.base_offset < offset] or [segments[0]]
        removed = 0
        for seg in segments[len(keep):]:
            removed += seg.size
            seg.delete_files()
        self._set_segments(tuple(keep))
        removed += keep[-1].truncate_to(offset)
        if keep[-1].next_offset > offset or keep[-1].base_offset > offset:
            # the first segment starts past `offset` (offset below its base): start over there
            for seg in keep:
                seg.delete_files()
            fresh = LogSegment.create(self.directory, offset, self.config, self.clock.milliseconds())
            fresh.next_offset = offset
            self._set_segments((fresh,))
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.epoch_cache.truncate_from_end(self.log_end_offset)
        for snap in list_snapshot_offsets(self.directory):
            if snap > self.log_end_offset:
                delete_snapshot_file(self.directory, snap)
        self.producer_state.clear()
        self.producer_state = ProducerStateManager(self._config.producer_id_expiration_ms,
                                                   self._producer_budget)
        self._load_producer_state()
        log.info("%s: truncated to offset %d (%d bytes removed)", self.directory,
                 self.log_end_offset, removed)
        return removed

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every record and start empty at `offset` (a follower whose log ends before
        its leader's log start: what it lacks is gone from the leader too)."""
        for seg in self._segments:
            seg.delete_files()
        fresh = LogSegment.create(self.directory, offset, self.config, self.clock.milliseconds())
        fresh.next_offset = offset
        self._set_segments((fresh,))
        self.log_start_offset = offset
        self.recovery_point = offset
        self.epoch_cache.clear()
        for snap in list_snapshot_offsets(self.directory):
            delete_snapshot_file(self.directory, snap)
        self.producer_state.clear()
        self.producer_state = ProducerStateManager(self._config.producer_id_expiration_ms,
                                                   self._producer_budget)
        log.info("%s: emptied, starting at offset %d", self.directory, offset)

    # ------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Close a log cleanly: a producer snapshot at the log end spares the next load
        any replay."""
        self._segments[-1].release_reserved()  # first: on a full disk the snapshot needs the space
        if self.log_end_offset > 0:  # an empty log has nothing to replay (and 10,000 fsyncs is slow)
            self.take_producer_snapshot(sync=True)
        for seg in self._segments:
            seg.close()
        self.delete_pending_files(force=True)
        self.producer_state.clear()  # out of the broker's producer budget

    def delete(self) -> None:
        """Remove the whole log directory (topic deletion)."""
        self.producer_state.clear()
        for seg in self._segments:
            seg.delete_files()
        self.delete_pending_files(force=True)
        for name in os.listdir(self.directory):
            os.unlink(os.path.join(self.directory, name))
        os.rmdir(self.directory)

    def __repr__(self) -> str:
        return f"Log({self.topic}-{self.partition}, start={self.log_start_offset}, end={self.log_end_offset})"


def _marker_of(batch: bytes | memoryview) -> tuple[int, int]:
    """(control type, coordinator epoch) of a control batch's marker; NO_MARKER if it holds
    none. Raises CorruptRecordError."""
    marker = read_marker(batch)
    if marker is None:
        return NO_MARKER, -1
    return int(marker.control_type), marker.coordinator_epoch


def _stamp_log_append_time(batch: bytearray, attributes: int, now: int, size: int) -> None:
    """Mark a batch LogAppendTime with max timestamp `now`; the CRC covers both, so redo it."""
    _ATTRS.pack_into(batch, ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_BIT)
    _MAX_TS.pack_into(batch, 35, now)
    _CRC.pack_into(batch, CRC_OFFSET, crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:size]))


def _set_max_timestamp(batch: bytearray, max_ts: int, size: int) -> None:
    """Put the records' largest timestamp in a batch's header; the CRC covers it, so redo it."""
    _MAX_TS.pack_into(batch, 35, max_ts)
    _CRC.pack_into(batch, CRC_OFFSET, crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:size]))


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
