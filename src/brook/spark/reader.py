"""Reading one offset range on an executor, into Arrow record batches.

An ``OffsetRange`` carries everything the read needs (Spark pickles it to the executor): the
partition, offsets ``[start, end)`` and the client settings. The read fetches the range's raw
record batches over the Kafka protocol and decodes them into Arrow in bulk
(``brook.client.RangeReader``, ``brook.records.arrow``): no consumer group, no commits, no
Python object per record. Records at or past ``end`` are never returned; offsets inside the
range may be missing (compaction, transaction markers).

Data loss, the range no longer being in the log, fails the read when ``fail_on_data_loss``;
otherwise the read goes on from the log start and returns what is left.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from ..client import DataLossError, FetchSettings, RangeReader

__all__ = ["DataLossError", "OffsetRange", "freeze_worker_heap", "read_range", "read_ranges"]

_frozen = False


def freeze_worker_heap() -> None:
    """In a Spark Python worker, take what the worker holds now out of the cyclic garbage
    collector's sight (``gc.freeze()``), once per worker process.

    Spark's Python daemon runs ``gc.collect()`` after every task of a reused worker: a full
    collection over everything the worker has imported (pyspark, pandas, pyarrow, numpy:
    about 100,000 objects), 40-90 ms each time on the benchmark machine, twice per task of
    ``read_stream`` (the descriptor read, then the reading), which is 0.35-0.7 µs per row in
    a query of a million rows. Those objects live as long as the process anyway; frozen,
    they are not scanned again, and the collections after tasks see only what tasks left.
    Reference counting still frees everything as before. Outside a Spark task (no
    TaskContext: the driver, tests) nothing is done."""
    global _frozen
    if _frozen:
        return
    from pyspark import TaskContext

    if TaskContext.get() is None:
        return
    _frozen = True
    gc.collect()  # what is garbage now is freed, not frozen
    gc.freeze()


@dataclass
class OffsetRange(InputPartition):
    """Offsets ``[start, end)`` of one topic partition, and how to read them."""

    topic: str
    partition: int
    start: int
    end: int
    client: dict[str, str] = field(default_factory=dict)  # librdkafka-style settings
    include_headers: bool = False
    fail_on_data_loss: bool = True
    poll_timeout_ms: int = 120_000


def read_range(r: OffsetRange, clock=time.monotonic) -> Iterator[pa.RecordBatch]:
    """The rows of one range, as Arrow batches of the source's schema."""
    return read_ranges([r], clock)


def read_ranges(ranges: Iterable[OffsetRange], clock=time.monotonic) -> Iterator[pa.RecordBatch]:
    """The rows of several ranges (of the same client settings), one connection per broker."""
    freeze_worker_heap()
    reader = None
    try:
        for r in ranges:
            if r.end <= r.start:
                continue
            if reader is None:
                reader = RangeReader(FetchSettings.from_client(r.client), clock=clock)
            yield from reader.read(r.topic, r.partition, r.start, r.end,
                                   include_headers=r.include_headers,
                                   fail_on_data_loss=r.fail_on_data_loss,
                                   poll_timeout_ms=r.poll_timeout_ms)
    finally:
        if reader is not None:
            reader.close()
