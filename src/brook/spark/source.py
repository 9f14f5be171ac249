"""Planning reads on the driver: the batch reader and the streaming reader of format "brook".

Both turn options into offset ranges (``brook.spark.offsets.Range``), split them into input
partitions (``brook.spark.reader.OffsetRange``) and leave the reading to executors.

The streaming reader follows Spark's Kafka source: an offset is a position per partition;
``latestOffset(start, limit)`` finds the partitions the subscription covers now (new
partitions and new topics matching a pattern join between micro-batches, from their earliest
offset) and caps the end at ``maxOffsetsPerTrigger`` through Spark's read limits, and
``prepareForTriggerAvailableNow`` fixes the end of a ``trigger(availableNow=True)`` run.

With ``group.id`` the streaming reader also commits its progress to that consumer group.
Spark calls ``commit(end)`` for a micro-batch only when it plans the one after it, so the
last batch before the query goes idle or stops would never be committed. But Spark calls
``latestOffset(start, ...)`` with ``start`` = the end of the last batch it has finished
(processed and written to the checkpoint's commit log) every time it looks for new data:
right after each batch, on every idle poll, and once more before a ``trigger(availableNow=True)``
query ends. So the reader commits ``start`` there (and whatever ``commit`` brings), and the
group reaches the end of every finished batch as soon as Spark looks for the next one.
The initial offsets of a new query are not committed: nothing has been processed there yet.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from . import offsets as om
from .admin import Admin, BrokerRequestError
from .group import GroupCommitter
from .offsets import Offsets, TopicPartition
from .options import SourceOptions
from .reader import DataLossError, OffsetRange, read_range

log = logging.getLogger("brook.spark")

# Ranges larger than this are read by several tasks (Spark's maxRecordsPerPartition).
DEFAULT_MAX_RECORDS_PER_PARTITION = 250_000


class _Planner:
    """What the batch and the streaming reader share: the admin client, starting offsets,
    data-loss checks and splitting ranges into input partitions."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.admin = Admin(options.client, retries=options.fetch_retries,
                           retry_interval_ms=options.fetch_retry_interval_ms)
        self.consumer_settings = {**options.client,
                                  "group.id": f"{options.group_id_prefix}-{uuid.uuid4()}-executor"}
        for warning in options.warnings:
            log.warning("%s", warning)

    def starting_offsets(self, partitions: Sequence[TopicPartition]) -> Offsets:
        """Resolve startingOffsets for these partitions (earliest, latest, group or JSON)."""
        o = self.options
        if o.starting == "earliest":
            return self.admin.earliest(partitions)
        if o.starting == "latest":
            return self.admin.latest(partitions)
        if o.starting == "group":
            committed = self.admin.committed(o.group_id, partitions)
            missing = [tp for tp in partitions if tp not in committed]
            if missing and o.starting_fallback == "none":
                raise BrokerRequestError(
                    f"group {o.group_id!r} has no committed offset for "
                    f"{', '.join(f'{t}-{p}' for t, p in missing)} and startingOffsetsFallback "
                    f"is none")
            if missing:
                fill = (self.admin.earliest if o.starting_fallback == "earliest"
                        else self.admin.latest)(missing)
                committed.update(fill)
                log.info("group %r has no committed offset for %d partitions; they start at "
                         "%s", o.group_id, len(missing), o.starting_fallback)
            return {tp: committed[tp] for tp in partitions}
        return self.specific(o.starting, partitions, "startingOffsets")

    def specific(self, wanted: Offsets, partitions: Sequence[TopicPartition], name: str) -> Offsets:
        """JSON offsets: they must name exactly the partitions read; -2 and -1 are resolved."""
        if set(wanted) != set(partitions):
            raise BrokerRequestError(
                f"{name} must name every partition the query reads, no more (-2 for earliest, "
                f"-1 for latest): given {om.dumps(wanted)}, the query reads "
                f"{', '.join(f'{t}-{p}' for t, p in partitions) or 'no partition'}")
        earliest = [tp for tp, o in wanted.items() if o == om.EARLIEST]
        latest = [tp for tp, o in wanted.items() if o == om.LATEST]
        resolved = dict(wanted)
        resolved.update(self.admin.earliest(earliest))
        resolved.update(self.admin.latest(latest))
        return resolved

    def data_loss(self, message: str) -> None:
        if self.options.fail_on_data_loss:
            raise DataLossError(message + ". Some data may have been lost (deleted by retention, "
                                "or the topic was deleted). If you want the query to go on, "
                                "set the option failOnDataLoss to false.")
        log.warning("%s; skipped (failOnDataLoss=false)", message)

    def ranges(self, start: Mapping[TopicPartition, int],
               end: Mapping[TopicPartition, int]) -> list[OffsetRange]:
        """Input partitions reading ``[start, end)`` of every partition in ``end``.

        A partition without a start (new since the start) is read from its earliest offset;
        data below a partition's earliest offset is data loss.
        """
        earliest = self.admin.earliest([tp for tp in end if end[tp] > start.get(tp, -1)])
        ranges = []
        for tp, stop in sorted(end.items()):
            topic, partition = tp
            begin = start.get(tp)
            if begin is None:
                begin = earliest.get(tp, 0)
                if begin != 0:
                    self.data_loss(f"partition {topic}-{partition} is new to the query and starts "
                                   f"at offset {begin}, not 0")
            if stop < begin:
                self.data_loss(f"the offsets of {topic}-{partition} went back from {begin} to "
                               f"{stop} (was the topic deleted and created again?)")
                continue
            low = earliest.get(tp)
            if low is not None and begin < low:
                self.data_loss(f"offsets [{begin}, {min(low, stop)}) of {topic}-{partition} are "
                               f"not in the log any more (it starts at {low})")
                begin = min(low, stop)
            ranges.append(om.Range(topic, partition, begin, stop))
        o = self.options
        max_records = o.max_records_per_partition or DEFAULT_MAX_RECORDS_PER_PARTITION
        return [OffsetRange(r.topic, r.partition, r.start, r.end, self.consumer_settings,
                            o.include_headers, o.fail_on_data_loss, o.poll_timeout_ms)
                for r in om.split(ranges, max_records, o.min_partitions)]


def _read(partition: InputPartition):
    if not isinstance(partition, OffsetRange):  # Spark reads InputPartition(None) for no splits
        return iter(())
    return read_range(partition)


class BrookBatchReader(DataSourceReader):
    """``spark.read.format("brook")``: the offsets between startingOffsets and endingOffsets,
    resolved once when the query is planned."""

    def __init__(self, options: SourceOptions) -> None:
        self.planner = _Planner(options)

    def partitions(self) -> list[InputPartition]:
        p = self.planner
        try:
            partitions = p.admin.partitions(p.options.subscription)
            start = p.starting_offsets(partitions)
            ending = p.options.ending
            end = (p.admin.latest(partitions) if ending == "latest"
                   else p.specific(ending, partitions, "endingOffsets"))
            return list(p.ranges(start, end))
        finally:
            p.admin.close()

    def read(self, partition: InputPartition):
        return _read(partition)


class BrookStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("brook")``. One instance lives in the driver's Python worker
    for the whole query run; Spark pickles a fresh one to executors for ``read``."""

    def __init__(self, options: SourceOptions) -> None:
        self.planner = _Planner(options)
        group = options.group_id
        self.committer = GroupCommitter(self.planner.admin, group) if group else None
        self._initial: Offsets | None = None
        self._target: Offsets | None = None  # the end of a trigger(availableNow=True) run
        self._latest: Offsets | None = None

    def __getstate__(self) -> dict:
        # Only read() runs on executors; it needs nothing but the partition.
        state = self.__dict__.copy()
        state.update(committer=None, _initial=None, _target=None, _latest=None)
        return state

    # ------------------------------------------------------------------ offsets

    def initialOffset(self) -> dict:
        # Spark may ask more than once (planning batch 0, then running it): same answer.
        if self._initial is None:
            p = self.planner
            self._initial = p.starting_offsets(p.admin.partitions(p.options.subscription))
        return om.to_json(self._initial)

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.planner.options.max_offsets_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        p = self.planner
        self._target = p.admin.latest(p.admin.partitions(p.options.subscription))

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = om.from_json(start, "the start offset")
        if self.committer is not None and begin != self._initial:
            self.committer.commit(begin)  # Spark has finished every batch up to ``start``
        p = self.planner
        if self._target is not None:
            latest = dict(self._target)
        else:
            latest = p.admin.latest(p.admin.partitions(p.options.subscription))
        self._latest = latest
        gone = sorted(set(begin) - set(latest))
        if gone:
            p.data_loss(f"partitions {', '.join(f'{t}-{n}' for t, n in gone)} are not in the "
                        f"subscription's topics any more (deleted?)")
        counted = dict(begin)
        new = [tp for tp in latest if tp not in begin]
        counted.update(p.admin.earliest(new))
        if isinstance(limit, ReadMaxRows):
            end = om.limit(counted, latest, limit.max_rows)
        else:  # ReadAllAvailable, and any limit this source does not offer
            end = latest
        # An end below its start (the topic was created again) is data loss, which planning
        # the batch reports.
        return om.to_json(end)

    def reportLatestOffset(self) -> dict | None:
        return om.to_json(self._latest) if self._latest is not None else None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return self.planner.ranges(om.from_json(start, "the start offset"),
                                   om.from_json(end, "the end offset"))

    def read(self, partition: InputPartition):
        return _read(partition)

    def commit(self, end: dict) -> None:
        if self.committer is not None:
            self.committer.commit(om.from_json(end, "the committed offset"))

    def stop(self) -> None:
        self.planner.admin.close()
