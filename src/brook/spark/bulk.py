"""Reads whose rows reach the JVM as Arrow batches: ``brook.spark.read`` and ``read_stream``.

Spark's Python data sources are row-based: every row a source returns is copied out of its
Arrow batch, then copied again by the projection Spark puts over a row-based scan. Here the
source only plans: format ``brook-ranges`` (the planning of format ``brook``, its offsets,
read limits, ``availableNow``, group commits and checkpoints unchanged) returns one descriptor
row per input partition (topic, partition, start, end), and ``mapInArrow`` reads each range
with brook's bulk reader in the same Spark task: the JVM receives Arrow batches, copied once.
In a streaming read each descriptor is followed by rows of nulls up to the offsets of its range
(dropped right after the scan), because Spark counts a source's input rows at its scan.

The ranges of a batch are packed into as many tasks as the session has cores (option
``maxTasks``, by default Spark's default parallelism), balanced by their numbers of offsets,
unless ``minPartitions`` or ``maxRecordsPerPartition`` asks for splits: each is then a task. A task costs two Python worker calls (the
descriptor, then the reading), and reading is CPU-bound: more tasks than cores only add those
calls (measured on 2 cores: 4 partitions in 2 tasks took about a quarter less of the workers'
CPU than in 4).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql.datasource import DataSource, InputPartition
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from . import offsets as om
from .options import SourceOptions
from .reader import OffsetRange, freeze_worker_heap, read_ranges
from .schema import spark_schema
from .source import BrookBatchReader, BrookStreamReader

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

RANGES_FORMAT = "brook-ranges"
# Nullable: a streaming read pads its descriptors with rows of nulls (see _padded).
RANGES = StructType([
    StructField("topic", StringType(), True),
    StructField("partition", IntegerType(), True),
    StructField("start", LongType(), True),
    StructField("end", LongType(), True),
])
#: Padding rows are handed to Spark in Arrow batches of at most this many rows.
PAD_BATCH_ROWS = 1 << 16


@dataclass
class RangeGroup(InputPartition):
    """The ranges one task reads, one after the other."""

    ranges: tuple[OffsetRange, ...]


def packed(partitions: Sequence[InputPartition], options: SourceOptions) -> list[InputPartition]:
    """The planned ranges in at most ``maxTasks`` tasks, unless splits were asked for."""
    ranges = [p for p in partitions if isinstance(p, OffsetRange)]
    if (not ranges or options.max_tasks is None or options.min_partitions
            or options.max_records_per_partition):
        return list(partitions)
    return [RangeGroup(tuple(group)) for group in om.pack(ranges, options.max_tasks,
                                                         lambda r: r.end - r.start)]


def _ranges_of(partition: InputPartition) -> list[OffsetRange]:
    # Spark reads InputPartition(None) for no splits; an empty range has nothing to read.
    group = partition.ranges if isinstance(partition, RangeGroup) else (partition,)
    return [r for r in group if isinstance(r, OffsetRange) and r.end > r.start]


def _descriptors(partition: InputPartition) -> Iterator[tuple]:
    freeze_worker_heap()
    for r in _ranges_of(partition):
        yield r.topic, r.partition, r.start, r.end


_arrow_ranges: pa.Schema | None = None
_null_rows: pa.RecordBatch | None = None


def _padded(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """A streaming task's descriptors, each followed by rows of nulls up to the number of
    offsets its range holds, that ``_load`` filters out again right after the scan.

    Spark's progress reports count a streaming source's input rows as the rows its scan
    returns (the scan node's ``numOutputRows``; Python sources cannot report it otherwise),
    and the records are read later, by mapInArrow, in the same task: without the padding a
    micro-batch of a million records would count as a few rows. A range of n offsets is
    n rows, which are its records unless some offsets hold none (transaction markers,
    aborted or compacted records): see docs/spark.md."""
    global _arrow_ranges, _null_rows
    freeze_worker_heap()
    if _null_rows is None:
        from pyspark.sql.pandas.types import to_arrow_schema

        _arrow_ranges = to_arrow_schema(RANGES, timezone="UTC")
        _null_rows = pa.RecordBatch.from_arrays(
            [pa.nulls(PAD_BATCH_ROWS, f.type) for f in _arrow_ranges], schema=_arrow_ranges)
    for r in _ranges_of(partition):
        yield pa.RecordBatch.from_arrays(
            [pa.array([v], f.type) for v, f in zip((r.topic, r.partition, r.start, r.end),
                                                    _arrow_ranges)], schema=_arrow_ranges)
        pad = r.end - r.start - 1
        while pad > 0:
            yield _null_rows if pad >= PAD_BATCH_ROWS else _null_rows.slice(0, pad)
            pad -= PAD_BATCH_ROWS


class _RangesBatchReader(BrookBatchReader):
    def partitions(self) -> list[InputPartition]:
        return packed(super().partitions(), self.planner.options)

    def read(self, partition: InputPartition):
        return _descriptors(partition)


class _RangesStreamReader(BrookStreamReader):
    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return packed(super().partitions(start, end), self.planner.options)

    def read(self, partition: InputPartition):
        return _padded(partition)


class BrookRangesDataSource(DataSource):
    """Format ``brook-ranges``: format brook's planning, one row per range to read."""

    @classmethod
    def name(cls) -> str:
        return RANGES_FORMAT

    def schema(self) -> StructType:
        SourceOptions.parse(self.options, streaming=None)
        return RANGES

    def reader(self, schema: StructType) -> _RangesBatchReader:
        return _RangesBatchReader(SourceOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> _RangesStreamReader:
        return _RangesStreamReader(SourceOptions.parse(self.options, streaming=True))


class _ReadRanges:
    """The function mapInArrow runs on each task: descriptor rows in, the ranges' rows out.
    It holds the options every range of the query shares (pickled to the executors once)."""

    def __init__(self, options: SourceOptions) -> None:
        self.client = dict(options.client)
        self.include_headers = options.include_headers
        self.fail_on_data_loss = options.fail_on_data_loss
        self.poll_timeout_ms = options.poll_timeout_ms

    def __call__(self, descriptors: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        def ranges():
            for batch in descriptors:
                for topic, partition, start, end in zip(*(c.to_pylist() for c in batch.columns)):
                    yield OffsetRange(topic, partition, start, end, self.client,
                                      self.include_headers, self.fail_on_data_loss,
                                      self.poll_timeout_ms)

        yield from read_ranges(ranges())


def _options(options: Mapping[str, str] | None, more: Mapping[str, str]) -> dict[str, str]:
    merged = {str(k): str(v) for k, v in (options or {}).items()}
    merged.update({str(k): str(v) for k, v in more.items()})
    return merged


def _load(spark: "SparkSession", options: dict[str, str], streaming: bool) -> "DataFrame":
    if not any(k.lower() == "maxtasks" for k in options):
        try:
            options["maxTasks"] = str(spark.sparkContext.defaultParallelism)
        except Exception:  # noqa: BLE001 - no SparkContext here (Spark Connect): a task a range
            pass
    parsed = SourceOptions.parse(options, streaming=streaming)
    spark.dataSource.register(BrookRangesDataSource)
    source = spark.readStream if streaming else spark.read
    descriptors = (source.format(RANGES_FORMAT).options(**options).load()
                   .where("topic IS NOT NULL"))  # the padding of streaming reads
    return descriptors.mapInArrow(_ReadRanges(parsed), spark_schema(parsed.include_headers))


def read(spark: "SparkSession", options: Mapping[str, str] | None = None,
         **more: str) -> "DataFrame":
    """A batch read of brook topics: the options, rows and results of
    ``spark.read.format("brook")``, with the rows reaching Spark as Arrow batches.

        brook.spark.read(spark, {"kafka.bootstrap.servers": "127.0.0.1:9092",
                                 "subscribe": "page-views"})
    """
    return _load(spark, _options(options, more), streaming=False)


def read_stream(spark: "SparkSession", options: Mapping[str, str] | None = None,
                **more: str) -> "DataFrame":
    """A streaming read: ``spark.readStream.format("brook")``'s options (``group.id`` commits
    included), rows and checkpoints, with the rows reaching Spark as Arrow batches."""
    return _load(spark, _options(options, more), streaming=True)
