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

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from ..client import DataLossError, FetchSettings, RangeReader

__all__ = ["DataLossError", "OffsetRange", "read_range", "read_ranges"]


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
