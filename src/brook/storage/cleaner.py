"""Log compaction: keep at least the latest record of every key, as Kafka's LogCleaner does.

A compacted log has a clean head and a dirty tail. The cleaner checkpoints, per log, the
*first dirty offset*: everything below it was compacted by an earlier pass. A pass

1. picks the range [first dirty offset, first uncleanable offset). The first uncleanable
   offset is the base of the active segment, lowered to the base of the first segment whose
   newest record is younger than `min.compaction.lag.ms`;
2. builds an offset map, key -> latest offset, from the records of that range (a plain dict,
   optionally bounded: when it is full the pass stops at a batch boundary and cleans only
   up to there, as Kafka does);
3. rewrites every segment from the start of the log to the end of the mapped range, in
   groups of consecutive segments that fit in one segment (`segment.bytes`, index sizes),
   each group into one new segment (suffix `.cleaned`, base offset of the group's first
   segment) that `Log.replace_segments` swaps in crash-safely;
4. returns the end of the mapped range, the next first dirty offset.

Steps 2 and 3 only read closed segments from a snapshot taken when the pass is planned
(`plan_clean`), so they may run on the cleaner thread (`CleanerThread`). The swaps are then
handed back to the thread owning the log, which swaps a cleaned segment in only if the
segments it replaces are still the log's (`apply_swap`).

A record is kept unless a later record of the same key is in the map, or it is a tombstone
(null value) whose delete horizon has passed. Tombstones follow KIP-534: the first pass
that keeps a batch holding tombstones rewrites it with the delete-horizon bit and
`now + delete.retention.ms` in its base timestamp; later passes drop the batch's
tombstones once that horizon is reached, so consumers had `delete.retention.ms` to see them.

Records without a key are kept (Kafka refuses them on produce to compacted topics and its
cleaner drops them; brook's cleaner leaves whatever it cannot compact alone). Offsets never
change: a batch that lost records is re-encoded
with the same base offset, last offset delta, codec, producer fields, leader epoch,
timestamp type and transactional flag; a batch that lost nothing is copied byte for byte.

Batches that lose all their records are dropped, with two exceptions where an empty batch
(a header with record count 0, same offsets, producer fields and max timestamp) is kept,
as Kafka keeps them:

* the last batch of each producer id in the log's producer state (taken when the pass
  starts): it holds that producer's epoch and last sequence, which a load rebuilding the
  state from the log needs, or the producer's next batch would be refused as out of order;
* the last batch of each group, so that the cleaned segment ends where the segments it
  replaces ended. Crash recovery (`Log._complete_swap`) tells which old segments a `.swap`
  segment replaces by the offsets it covers, and would otherwise leave the tail of the
  group behind.

Transactions, as Kafka's cleaner treats them (its CleanedTransactionMetadata): a pass never
reaches the last stable offset (`cleanable_stats`: no open transaction is cleaned), and it
knows the aborted transactions of its range from the `.txnindex` of the segments (taken
when the pass is planned). Then, over the batches in offset order,

* a transactional batch of an aborted transaction is removed (an empty batch is kept where a
  batch would be, above), and its records never enter the offset map (an aborted record must
  not shadow a committed one of its key);
* a marker is kept while its transaction still had batches in the pass (an ABORT marker then
  keeps its `.txnindex` entry in the cleaned segment: consumers still need it wherever the
  aborted records may remain); once a pass finds no batch of its transaction, the marker is
  rewritten with a delete horizon (`now + delete.retention.ms`, KIP-534's bit, as for
  tombstones), and a later pass past the horizon removes it, unless it is its producer's
  last record (the producer state rebuilt from the log needs its epoch: an empty control
  batch is kept). An ABORT marker kept keeps its entry; a removed one takes it along.
"""

from __future__ import annotations

import functools
import logging
import os
import queue
import struct
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Mapping, Sequence

from ..records.batch import (
    LOG_APPEND_TIME,
    NO_TIMESTAMP,
    BatchHeader,
    Record,
    decode_batch,
    encode_batch,
    read_header,
    verify_crc,
)
from ..records.compression import Codec
from ..records.compression import DEFAULT_LIMIT
from ..records.control import ABORT, COMMIT, read_marker
from ..records.errors import RecordsError
from ..records.validate import inflate_limit
from .config import LONG_MAX, LogConfig
from .log import Log
from .segment import CLEANED_SUFFIX, INT32_MAX, BatchEntry, LogSegment
from .txn_index import AbortedTxn

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

_MAX_TS = struct.Struct(">q")


# ---------------------------------------------------------------- which log, which range


@dataclass(frozen=True, slots=True)
class CleanableStats:
    """How dirty a log is (Kafka's LogToClean)."""

    log: Log = field(repr=False, compare=False)
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int  # segments below the first dirty offset
    dirty_bytes: int  # segments in [first dirty, first uncleanable)
    max_compaction_delay_ms: int  # > 0: max.compaction.lag.ms is overdue by this much
    checkpoint_reset: bool = False  # the given first dirty offset was out of range

    @property
    def topic_partition(self) -> TopicPartition:
        return self.log.topic, self.log.partition

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.dirty_bytes

    @property
    def dirty_ratio(self) -> float:
        total = self.total_bytes
        return self.dirty_bytes / total if total else 0.0

    @property
    def need_compaction_now(self) -> bool:
        return self.max_compaction_delay_ms > 0

    @property
    def should_clean(self) -> bool:
        """Dirty enough for `min.cleanable.dirty.ratio`, or forced by `max.compaction.lag.ms`."""
        if not self.log.config.compact or self.dirty_bytes <= 0:
            return False
        return self.need_compaction_now or self.dirty_ratio >= self.log.config.min_cleanable_dirty_ratio


def _next_bases(segments: Sequence[LogSegment]) -> list[int]:
    """For each segment, the base of the next one (the active segment: its next offset)."""
    out = [s.base_offset for s in segments[1:]]
    out.append(max(segments[-1].next_offset, segments[-1].base_offset + 1))
    return out


def _first_batch_timestamp(seg: LogSegment) -> int:
    """Max timestamp of the segment's first batch (Kafka's rolling base timestamp)."""
    if seg.rolling_base_ms is not None:
        return seg.rolling_base_ms
    if seg.size < 43:
        return NO_TIMESTAMP
    head = seg.pread(43, 0)
    return _MAX_TS.unpack_from(head, 35)[0] if len(head) == 43 else NO_TIMESTAMP


def cleanable_stats(log_: Log, first_dirty_offset: int | None, now_ms: int) -> CleanableStats:
    """The cleanable range of a log and its dirty ratio (Kafka's cleanableOffsets and
    LogToClean). `first_dirty_offset` is the checkpointed one; None or out of range means
    the log start offset."""
    segments = log_.segments  # snapshot
    config = log_.config
    start = log_.log_start_offset
    reset = False
    if first_dirty_offset is None or first_dirty_offset < start or first_dirty_offset > log_.log_end_offset:
        reset = first_dirty_offset is not None
        first_dirty_offset = start
    first_dirty = first_dirty_offset
    nexts = _next_bases(segments)
    # Non-active segments holding offsets at or after the first dirty offset.
    dirty_non_active = [s for s, nxt in zip(segments[:-1], nexts[:-1]) if nxt > first_dirty]

    uncleanable = segments[-1].base_offset  # the active segment is never cleaned
    bound = log_.cleaning_bound() if log_.cleaning_bound is not None else None
    unstable = log_.first_unstable_offset(log_.log_end_offset if bound is None else bound)
    if unstable is not None:  # nor past the last stable offset (an open transaction's records)
        bound = unstable if bound is None else min(bound, unstable)
    if bound is not None:
        # Only segments wholly below the bound (a replica's high watermark): records above it
        # may still be truncated, so no key of theirs may remove one below (as Kafka's cleaner
        # stays below the high watermark; replicas of a compacted log then agree).
        for seg, nxt in zip(segments, nexts):
            if nxt > bound:
                uncleanable = min(uncleanable, seg.base_offset)
                break
    lag = max(config.min_compaction_lag_ms, 0)
    if lag > 0:
        for seg in dirty_non_active:
            if seg.largest_timestamp > now_ms - lag:
                uncleanable = min(uncleanable, seg.base_offset)
                break

    delay = 0
    max_lag = max(config.max_compaction_lag_ms, 0)
    if max_lag < LONG_MAX and dirty_non_active:
        firsts = [t for t in (_first_batch_timestamp(s) for s in dirty_non_active) if t > 0]
        clean_until = now_ms - max_lag
        if firsts and min(firsts) < clean_until:
            delay = clean_until - min(firsts)

    dirty_from = min(first_dirty, uncleanable)
    clean_bytes = dirty_bytes = 0
    for seg, nxt in zip(segments, nexts):
        if seg.base_offset < first_dirty:
            clean_bytes += seg.size
        if seg.base_offset < uncleanable and nxt > dirty_from:
            dirty_bytes += seg.size
    return CleanableStats(log_, first_dirty, uncleanable, clean_bytes, dirty_bytes, delay, reset)


def _all_stats(logs: Iterable[Log], checkpoints: Mapping[TopicPartition, int],
               now_ms: int) -> list[CleanableStats]:
    return [cleanable_stats(lg, checkpoints.get((lg.topic, lg.partition)), now_ms)
            for lg in logs if lg.config.compact]


def _dirtiest(stats: Iterable[CleanableStats]) -> CleanableStats | None:
    best = None
    for st in stats:
        if st.should_clean and (best is None or st.dirty_ratio > best.dirty_ratio):
            best = st
    return best


def pick_dirtiest(logs: Iterable[Log], checkpoints: Mapping[TopicPartition, int],
                  now_ms: int) -> CleanableStats | None:
    """The compacted log with the highest dirty ratio among those due for cleaning."""
    return _dirtiest(_all_stats(logs, checkpoints, now_ms))


# ---------------------------------------------------------------- cleaning


@dataclass(slots=True)
class CleanResult:
    topic: str
    partition: int
    start_offset: int  # first dirty offset this pass started from
    new_first_dirty_offset: int  # end of the cleaned range: checkpoint this
    first_uncleanable_offset: int
    map_entries: int = 0
    map_full: bool = False  # the offset map filled: the pass stopped before the uncleanable offset
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    records_removed: int = 0
    tombstones_removed: int = 0
    aborted_batches_removed: int = 0  # batches of aborted transactions
    markers_removed: int = 0  # transaction markers past their delete horizon
    batches_rewritten: int = 0
    segments_replaced: int = 0  # old segments swapped out
    groups_cleaned: int = 0  # new segments swapped in
    swaps_aborted: int = 0  # cleaned segments dropped: their old segments changed meanwhile


class CleanedTransactions:
    """What a pass knows of transactions as it reads batches in offset order (Kafka's
    CleanedTransactionMetadata): the aborted ones of its range (from the `.txnindex`), those
    under way at the current batch, and whether a marker's transaction had batches in it."""

    def __init__(self, aborted: Sequence[AbortedTxn]) -> None:
        self._pending = sorted(aborted, key=lambda t: t.first_offset, reverse=True)
        self._aborted: dict[int, list] = {}  # producer id -> [AbortedTxn, batches seen]
        self._committed: set[int] = set()  # producers with batches of a transaction not aborted

    def _reach(self, offset: int) -> None:
        pending = self._pending
        while pending and pending[-1].first_offset <= offset:
            txn = pending.pop()
            self._aborted.setdefault(txn.producer_id, [txn, False])

    def on_batch(self, h: BatchHeader) -> bool:
        """A data batch: whether it belongs to an aborted transaction (to be removed)."""
        self._reach(h.last_offset)
        if not h.is_transactional or h.producer_id < 0:
            return False
        aborted = self._aborted.get(h.producer_id)
        if aborted is not None:
            aborted[1] = True
            return True
        self._committed.add(h.producer_id)
        return False

    def on_marker(self, h: BatchHeader, raw: bytes) -> tuple[bool, AbortedTxn | None]:
        """A control batch: (whether it may go once its delete horizon passed, the `.txnindex`
        entry it keeps if it stays)."""
        self._reach(h.last_offset)
        marker = read_marker(raw)
        if marker is None:
            return True, None  # emptied by an earlier pass
        pid = h.producer_id
        if marker.control_type == ABORT:
            aborted = self._aborted.pop(pid, None)
            if aborted is None:
                return True, None
            return not aborted[1], aborted[0]
        if marker.control_type == COMMIT:
            had_batches = pid in self._committed
            self._committed.discard(pid)
            return not had_batches, None
        return False, None


def build_offset_map(log_: Log, start: int, end: int,
                     max_entries: int | None = None) -> tuple[dict[bytes, int], int, bool]:
    """key -> latest offset over the records in [start, end) (aborted transactions' left out).

    Returns (map, offset the map covers up to (exclusive), whether it filled). When adding a
    batch would take the map over `max_entries` keys, the map stops before that batch,
    unless it is still empty (a pass must make progress: it then holds one batch more).
    """
    return _build_offset_map(log_.segments, start, end, max_entries, _NEVER,
                             inflate_limit(log_.config.max_message_bytes),
                             _aborted_before(log_, end))


def _aborted_before(log_: Log, end: int) -> list[AbortedTxn]:
    """The aborted transactions that began before `end` (read on the thread owning the log)."""
    return [txn for txn in log_.all_aborted_transactions() if txn.first_offset < end]


def _build_offset_map(segments: Sequence[LogSegment], start: int, end: int, max_entries: int | None,
                      cancelled: threading.Event, limit: int = DEFAULT_LIMIT,
                      aborted: Sequence[AbortedTxn] = ()) -> tuple[dict[bytes, int], int, bool]:
    offsets: dict[bytes, int] = {}
    if end <= start:
        return offsets, start, False
    txns = CleanedTransactions(aborted)
    for seg, nxt in zip(segments, _next_bases(segments)):
        if seg.base_offset >= end:
            break
        if nxt <= start:
            continue
        for _, raw in seg.batches():
            if cancelled.is_set():
                raise CleanAborted()
            h = read_header(raw)
            if h.last_offset < start:
                continue
            if h.base_offset >= end:
                break
            if h.is_control:
                txns.on_marker(h, raw)
                continue
            if txns.on_batch(h):
                continue  # aborted: its keys shadow nothing
            verify_crc(raw, 0, h)
            keys = [(r.key, r.offset) for r in decode_batch(raw, verify=False, limit=limit).records
                    if r.key is not None and r.offset >= start]
            if max_entries is not None and offsets:
                new = len({k for k, _ in keys if k not in offsets})
                if new and len(offsets) + new > max_entries:
                    return offsets, max(h.base_offset, start), True
            for key, offset in keys:
                offsets[key] = offset
    return offsets, end, False


def group_segments(segments: Sequence[LogSegment], next_bases: Sequence[int], max_size: int,
                   max_index_size: int) -> list[list[LogSegment]]:
    """Consecutive segments merged while their total size fits in one segment and their
    indexes in one index, and offsets stay within int32 of the group's base (Kafka's
    groupSegmentsBySize). `next_bases[i]` is the offset after segment i."""
    groups: list[list[LogSegment]] = []
    i, n = 0, len(segments)
    while i < n:
        first = segments[i]
        group = [first]
        size = first.size
        index_size = len(first.index) * first.index.entry_size
        time_size = len(first.time_index) * first.time_index.entry_size
        i += 1
        while i < n:
            seg = segments[i]
            seg_index = len(seg.index) * seg.index.entry_size
            seg_time = len(seg.time_index) * seg.time_index.entry_size
            if (size + seg.size > max_size or index_size + seg_index > max_index_size
                    or time_size + seg_time > max_index_size):
                break
            if seg.size and next_bases[i] - 1 - first.base_offset > INT32_MAX:
                break
            group.append(seg)
            size += seg.size
            index_size += seg_index
            time_size += seg_time
            i += 1
        groups.append(group)
    return groups


class CleanAborted(Exception):
    """The pass was abandoned: the broker shuts down, or the log is being deleted."""


_NEVER = threading.Event()  # the cancel flag of a pass nobody cancels


@dataclass(slots=True, eq=False)
class CleanJob:
    """One pass over one log, planned by the thread that owns the log (Kafka's LogToClean
    with its offsets). It holds a snapshot of everything the pass reads of the log's live
    state, so `run_clean` may run on another thread; only the swaps touch the log again.
    """

    log: Log
    segments: tuple[LogSegment, ...]
    config: LogConfig
    first_dirty_offset: int
    first_uncleanable_offset: int
    now_ms: int
    producer_last_offsets: Mapping[int, int]
    max_map_entries: int | None = None
    #: producer id -> epoch of the producers whose last record is a marker (kept: it holds
    #: the epoch a log replay needs)
    producer_marker_epochs: Mapping[int, int] = field(default_factory=dict)
    #: the aborted transactions begun below the first uncleanable offset
    aborted: Sequence[AbortedTxn] = ()
    cancelled: threading.Event = field(default_factory=threading.Event)
    # Cleaned segments waiting for their swap, (cleaned, group), when the pass runs on the
    # cleaner thread.
    swaps: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)
    result: CleanResult | None = None

    @property
    def topic_partition(self) -> TopicPartition:
        return self.log.topic, self.log.partition


def plan_clean(log_: Log, first_dirty_offset: int | None, now_ms: int, *,
               max_map_entries: int | None = None) -> CleanJob:
    """The pass `clean_log` makes, as a job (run it with `run_clean`)."""
    config = log_.config
    if not config.compact:
        raise ValueError(f"{log_}: cleanup.policy {config.cleanup_policy!r} does not compact")
    stats = cleanable_stats(log_, first_dirty_offset, now_ms)
    state = log_.producer_state
    return CleanJob(log_, log_.segments, config, stats.first_dirty_offset, stats.first_uncleanable_offset,
                    now_ms, state.last_data_offsets(), max_map_entries, state.last_marker_epochs(),
                    _aborted_before(log_, stats.first_uncleanable_offset))


def clean_log(log_: Log, first_dirty_offset: int | None, now_ms: int, *,
              max_map_entries: int | None = None) -> CleanResult:
    """Compact `log_` from its start to the end of its dirty range (no dirty-ratio check:
    that is the caller's, see `cleanable_stats`). Returns the new first dirty offset."""
    job = plan_clean(log_, first_dirty_offset, now_ms, max_map_entries=max_map_entries)
    return run_clean(job, functools.partial(apply_swap, job))


def run_clean(job: CleanJob, swap: Callable[[LogSegment, tuple[LogSegment, ...]], object]) -> CleanResult:
    """The heavy part of a pass: read the job's segments, build the offset map and write
    each group's cleaned segment (durably, still `.cleaned`), handing it to `swap`:
    `apply_swap` at once when the caller owns the log, or a hand-back to its owner.

    Raises CleanAborted soon after `job.cancelled` is set; its unswapped files go with it.
    """
    started = time.monotonic()
    start = job.first_dirty_offset
    upper = max(job.first_uncleanable_offset, start)
    log.info("%s: cleaning from offset %d", job.log, start)
    segments = job.segments
    # A stored batch inflates no further than Produce lets one inflate (a bomb written before
    # Produce checked records makes the log uncleanable, as damage does).
    offset_map, end, full = _build_offset_map(segments, start, upper, job.max_map_entries,
                                              job.cancelled,
                                              inflate_limit(job.config.max_message_bytes),
                                              job.aborted)
    result = job.result = CleanResult(job.log.topic, job.log.partition, start, end,
                                      job.first_uncleanable_offset, map_entries=len(offset_map),
                                      map_full=full)
    nexts = _next_bases(segments)
    count = 0  # segments below `end`, never the active one
    while count < len(segments) - 1 and segments[count].base_offset < end:
        count += 1
    groups = group_segments(segments[:count], nexts[:count], job.config.segment_bytes,
                            job.config.segment_index_bytes)
    txns = CleanedTransactions(job.aborted)  # one for the pass: transactions span groups
    for group in groups:
        if job.cancelled.is_set():  # before creating the next file
            raise CleanAborted()
        cleaned = _clean_group(job, group, offset_map, end, result, txns)
        if cleaned is not None:
            swap(cleaned, tuple(group))
    log.info("%s: cleaned up to offset %d: %d records kept, %d removed, %d -> %d bytes in %d ms",
             job.log, end, result.records_kept, result.records_removed, result.bytes_read,
             result.bytes_written, (time.monotonic() - started) * 1000)
    return result


def apply_swap(job: CleanJob, cleaned: LogSegment, group: tuple[LogSegment, ...]) -> bool:
    """Swap a cleaned segment into the job's log; run by the thread that owns the log.

    False, and the cleaned files are dropped, when `group` is no longer exactly a run of
    the log's segments (retention deleted some meanwhile): the next pass cleans again.
    """
    swapped = not job.cancelled.is_set() and job.log.holds_segments(group)
    try:
        if swapped:
            job.log.replace_segments(cleaned, group)
    except BaseException:
        if cleaned.suffix == CLEANED_SUFFIX:  # not yet part of the swap: nothing refers to it
            cleaned.delete_files()
        else:  # mid-swap: leave the files for the swap completion on the next load
            cleaned.close_without_index()
        raise
    result = job.result
    if not swapped:
        cleaned.delete_files()
        result.swaps_aborted += 1
        log.info("%s: segments %d..%d changed while they were cleaned; dropping the cleaned copy",
                 job.log, group[0].base_offset, group[-1].base_offset)
        return False
    result.segments_replaced += len(group)
    result.groups_cleaned += 1
    return True


def _batches_with_last(group: Sequence[LogSegment]) -> Iterator[tuple[int, bytes, bool]]:
    """(index of the segment in the group, raw batch, is it the group's last batch)."""
    pending: tuple[int, bytes] | None = None
    for i, seg in enumerate(group):
        for _, raw in seg.batches():
            if pending is not None:
                yield pending[0], pending[1], False
            pending = (i, raw)
    if pending is not None:
        yield pending[0], pending[1], True


def _clean_group(job: CleanJob, group: list[LogSegment], offset_map: dict[bytes, int], end: int,
                 result: CleanResult, txns: CleanedTransactions | None = None) -> LogSegment | None:
    """Write the cleaned copy of `group` as a flushed `.cleaned` segment (with the `.txnindex`
    entries of the ABORT markers it keeps); None if nothing in it changes."""
    config = job.config
    now_ms = job.now_ms
    producer_last_offsets = job.producer_last_offsets
    marker_epochs = job.producer_marker_epochs
    if txns is None:
        txns = CleanedTransactions(job.aborted)
    kept_aborts: list[AbortedTxn] = []
    cleaned = LogSegment.create(job.log.directory, group[0].base_offset, config, now_ms, suffix=CLEANED_SUFFIX)
    changed = len(group) > 1
    try:
        out = bytearray()
        entries: list[BatchEntry] = []
        current = 0

        def write_out() -> None:
            if entries:
                cleaned.append(out, entries)
                result.bytes_written += len(out)
            out.clear()
            entries.clear()

        for seg_index, raw, is_last in _batches_with_last(group):
            if job.cancelled.is_set():
                raise CleanAborted()
            if seg_index != current:  # one append per source segment, as Kafka does
                write_out()
                current = seg_index
            h = read_header(raw)
            verify_crc(raw, 0, h)
            result.bytes_read += h.size
            pid = h.producer_id
            keep_empty = ((is_last and len(group) > 1)  # see the module docstring
                          or (pid >= 0 and producer_last_offsets.get(pid) == h.last_offset)
                          or (h.is_control and pid >= 0
                              and marker_epochs.get(pid) == h.producer_epoch))
            if h.is_control:
                may_go, entry = txns.on_marker(h, raw)
                new = _filter_marker(raw, h, may_go, now_ms, config.delete_retention_ms,
                                     keep_empty, result)
                if entry is not None and new is not None \
                        and (new is raw or read_header(new).record_count):
                    kept_aborts.append(entry)  # (an emptied marker ends nothing: its entry goes)
            elif txns.on_batch(h):
                result.records_read += h.record_count
                result.records_removed += h.record_count
                result.aborted_batches_removed += 1
                new = _empty_like(h) if keep_empty else None
            else:
                new = _filter_batch(raw, h, offset_map, end, now_ms, config.delete_retention_ms,
                                    keep_empty, result, inflate_limit(config.max_message_bytes))
            if new is not raw:
                changed = True
            if new is None:
                continue
            nh = read_header(new) if new is not raw else h
            entries.append(BatchEntry(len(out), nh.base_offset, nh.last_offset, nh.max_timestamp, nh.size))
            out += new
        write_out()
        if not changed:  # a lone segment with nothing to remove: leave it be
            cleaned.delete_files()
            return None
        for entry in kept_aborts:
            cleaned.txn_index.append(entry)
        cleaned.on_become_inactive()
        # Keep the old modification time: retention of a segment without timestamps uses it.
        mtime_ns = group[-1].stat().st_mtime_ns
        os.utime(cleaned.log_path, ns=(mtime_ns, mtime_ns))
        if job.cancelled.is_set():  # before the flush, the slowest step of a large group
            raise CleanAborted()
        cleaned.flush()  # here, so that the swap's own flush finds nothing left to write
    except BaseException:
        cleaned.delete_files()  # still .cleaned: nothing refers to it
        raise
    return cleaned


def _filter_batch(raw: bytes, h: BatchHeader, offset_map: dict[bytes, int], end: int, now_ms: int,
                  delete_retention_ms: int, keep_empty: bool, result: CleanResult,
                  limit: int = DEFAULT_LIMIT) -> bytes | None:
    """The batch to write for `raw` (a data batch): `raw` itself if nothing changes, a
    re-encoded batch, or None to drop it."""
    batch = decode_batch(raw, verify=False, limit=limit)
    horizon = h.base_timestamp if h.has_delete_horizon else None
    kept: list[Record] = []
    tombstones = False
    for rec in batch.records:
        key = rec.key
        # Only keyed records below the end of the map are candidates; the rest are kept.
        if rec.offset < end and key is not None:
            if rec.offset < offset_map.get(key, -1):
                continue  # a later record has this key
            if rec.value is None and horizon is not None and horizon <= now_ms:
                result.tombstones_removed += 1
                continue  # tombstone whose delete horizon has passed
        if key is not None and rec.value is None:
            tombstones = True
        kept.append(rec)
    n = len(batch.records)
    result.records_read += n
    result.records_kept += len(kept)
    result.records_removed += n - len(kept)
    set_horizon = tombstones and horizon is None
    if len(kept) == n and not set_horizon and (n or keep_empty):
        return raw
    if not kept and not keep_empty:
        return None
    result.batches_rewritten += 1
    if not kept:
        return _empty_like(h)
    if set_horizon:
        horizon = now_ms + delete_retention_ms
    # LogAppendTime batches keep their stamped max timestamp; CreateTime ones take the
    # max of what is left.
    max_ts = h.max_timestamp if h.timestamp_type == LOG_APPEND_TIME else None
    return encode_batch(
        kept, base_offset=h.base_offset, last_offset_delta=h.last_offset_delta, codec=h.compression,
        timestamp_type=batch.timestamp_type, partition_leader_epoch=h.partition_leader_epoch,
        producer_id=h.producer_id, producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
        transactional=h.is_transactional, max_timestamp=max_ts, delete_horizon_ms=horizon,
    )


def _empty_like(h: BatchHeader) -> bytes:
    """An empty batch that only keeps a batch's offset range and producer fields, as Kafka's
    "retain empty" does."""
    return encode_batch(
        [], base_offset=h.base_offset, last_offset_delta=h.last_offset_delta, codec=Codec.NONE,
        timestamp_type=h.timestamp_type, partition_leader_epoch=h.partition_leader_epoch,
        producer_id=h.producer_id, producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
        transactional=h.is_transactional, control=h.is_control, base_timestamp=h.max_timestamp,
        max_timestamp=h.max_timestamp,
    )


def _filter_marker(raw: bytes, h: BatchHeader, may_go: bool, now_ms: int, delete_retention_ms: int,
                   keep_empty: bool, result: CleanResult) -> bytes | None:
    """The batch to write for a control batch: kept as it is while its transaction had batches
    in the pass; else given a delete horizon, and past it removed (emptied if it must stay)."""
    n = h.record_count
    result.records_read += n
    if n == 0:  # emptied before: only a producer's last record keeps it
        return raw if keep_empty else None
    horizon = h.base_timestamp if h.has_delete_horizon else None
    if may_go and horizon is not None and horizon <= now_ms:
        result.records_removed += n
        result.markers_removed += 1
        if keep_empty:
            result.batches_rewritten += 1
            return _empty_like(h)
        return None
    result.records_kept += n
    if not may_go or horizon is not None:
        return raw
    result.batches_rewritten += 1
    batch = decode_batch(raw, verify=False)
    return encode_batch(
        batch.records, base_offset=h.base_offset, last_offset_delta=h.last_offset_delta,
        codec=h.compression, timestamp_type=h.timestamp_type,
        partition_leader_epoch=h.partition_leader_epoch, producer_id=h.producer_id,
        producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
        transactional=h.is_transactional, control=True, max_timestamp=h.max_timestamp,
        delete_horizon_ms=now_ms + delete_retention_ms,
    )


# ---------------------------------------------------------------- the cleaner


class LogCleaner:
    """Cleans the dirtiest compacted log at each call, remembering first dirty offsets.

    `checkpoints` maps (topic, partition) to the first dirty offset; the log manager loads
    it from and saves it to `cleaner-offset-checkpoint`.
    """

    def __init__(self, checkpoints: Mapping[TopicPartition, int] | None = None, *,
                 max_map_entries: int | None = None) -> None:
        self.checkpoints: dict[TopicPartition, int] = dict(checkpoints or {})
        self.max_map_entries = max_map_entries
        self.uncleanable: set[TopicPartition] = set()  # logs whose data could not be read

    def clean_once(self, logs: Iterable[Log] | Mapping[TopicPartition, Log],
                   now_ms: int) -> CleanResult | None:
        """Clean the dirtiest eligible log (of a list of logs or a dict of them by
        (topic, partition)) on the calling thread; None if no log is due."""
        job = self.next_job(logs, now_ms)
        if job is None:
            return None
        try:
            result = run_clean(job, functools.partial(apply_swap, job))
        except RecordsError as exc:
            return self.finish(job, error=exc)
        return self.finish(job, result)

    def next_job(self, logs: Iterable[Log] | Mapping[TopicPartition, Log], now_ms: int) -> CleanJob | None:
        """The pass over the dirtiest eligible log, or None if no log is due."""
        if isinstance(logs, Mapping):
            logs = logs.values()
        candidates = [lg for lg in logs if (lg.topic, lg.partition) not in self.uncleanable]
        stats = _all_stats(candidates, self.checkpoints, now_ms)
        for st in stats:
            if st.checkpoint_reset:  # the checkpoint fell out of the log: start over
                self.checkpoints[st.topic_partition] = st.first_dirty_offset
        best = _dirtiest(stats)
        if best is None:
            return None
        return plan_clean(best.log, best.first_dirty_offset, now_ms, max_map_entries=self.max_map_entries)

    def finish(self, job: CleanJob, result: CleanResult | None = None, *,
               error: RecordsError | None = None) -> CleanResult | None:
        """Record a finished pass: checkpoint its end, unless a swap was dropped (the next
        pass cleans the range again), or set aside a log whose records cannot be read."""
        tp = job.topic_partition
        if error is not None:
            log.error("%s: cannot clean a log with invalid records; leaving it uncompacted", job.log,
                      exc_info=error)
            self.uncleanable.add(tp)
            return None
        if result.swaps_aborted == 0:
            self.checkpoints[tp] = result.new_first_dirty_offset
        return result

    def update_checkpoint(self, tp: TopicPartition, offset: int) -> None:
        self.checkpoints[tp] = offset

    def truncate_checkpoint(self, tp: TopicPartition, offset: int) -> None:
        """The log was truncated to `offset`: the dirty range cannot start beyond it."""
        if self.checkpoints.get(tp, -1) > offset:
            self.checkpoints[tp] = offset

    def remove(self, tp: TopicPartition) -> None:
        """The log is gone (topic deleted, replica moved)."""
        self.checkpoints.pop(tp, None)
        self.uncleanable.discard(tp)


class CleanerThread:
    """Runs passes on one background thread (Kafka's `log.cleaner.threads`, 1), so that the
    thread owning the logs (the broker's event loop) never waits for a clean.

    The owner plans a job (`LogCleaner.next_job`), `submit`s it, and calls `drain` from its
    periodic work: it swaps in the cleaned segments the pass handed back (`apply_swap`
    re-checks that their old segments are still the log's) and, once the pass is over,
    returns it. One pass at a time.
    """

    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="log-cleaner")
        self.job: CleanJob | None = None
        self._future: Future | None = None

    @property
    def busy(self) -> bool:
        return self.job is not None

    def submit(self, job: CleanJob) -> None:
        if self.job is not None:
            raise RuntimeError(f"the cleaner is still cleaning {self.job.log}")
        self.job = job
        self._future = self._executor.submit(run_clean, job, lambda cleaned, group: job.swaps.put((cleaned, group)))

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the current pass has done its part (its swaps may still be queued)."""
        if self._future is None:
            return True
        return not wait_futures([self._future], timeout).not_done

    def drain(self) -> tuple[CleanJob, CleanResult | BaseException] | None:
        """Apply the queued swaps; once the pass is over, (job, its result or exception)."""
        job, future = self.job, self._future
        if job is None:
            return None
        done = future.done()  # before draining: every swap of a finished pass is queued
        while True:
            try:
                cleaned, group = job.swaps.get_nowait()
            except queue.Empty:
                break
            try:
                apply_swap(job, cleaned, group)
            except Exception:
                log.exception("%s: swapping in a cleaned segment failed; abandoning the pass", job.log)
                job.cancelled.set()  # the remaining cleaned segments are dropped
                if job.result is not None:
                    job.result.swaps_aborted += 1
        if not done:
            return None
        self.job = self._future = None
        error = future.exception()
        return job, (error if error is not None else future.result())

    def abort(self, timeout: float = 30.0) -> Future | None:
        """Abandon the current pass: wait (briefly: the pass checks between batches) for the
        thread to stop reading the log, and drop whatever it cleaned. None once the thread
        has stopped; the pass's future when it did not stop within ``timeout`` (it still
        holds the log's files: it ends at its next check)."""
        job = self.job
        if job is None:
            return None
        job.cancelled.set()
        future = self._future
        stopped = self.wait(timeout)
        if not stopped:
            log.warning("%s: the cleaner did not stop within %.0f s", job.log, timeout)
        while True:
            try:
                cleaned, _ = job.swaps.get_nowait()
            except queue.Empty:
                break
            cleaned.delete_files()
        self.job = self._future = None
        log.info("%s: cleaning abandoned", job.log)
        return None if stopped else future

    def stop(self) -> None:
        """Abandon any pass and end the thread."""
        self.abort()
        self._executor.shutdown(wait=True)
