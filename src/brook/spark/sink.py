"""Writing DataFrames to brook topics: the batch and the streaming writer of format "brook".

The DataFrame's columns are those of Spark's Kafka sink: ``value`` (string or binary,
required), ``key`` (string or binary), ``topic`` (string; the option ``topic`` overrides it,
as in Spark), ``partition`` (int; null or absent lets the producer's partitioner choose) and
``headers`` (array of key/value structs). Other columns are ignored. Strings are written as
UTF-8.

Each task produces its rows with a confluent-kafka producer, flushes, and checks every
delivery report: a record that was not acknowledged fails the task, so Spark retries it or
fails the job (delivery is at least once, as with Spark's Kafka sink). A streaming query's
micro-batch commits once all of its tasks have flushed. Keys go to partitions with Kafka's
Java partitioner (murmur2), so a key lands where Spark's Kafka sink would put it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from confluent_kafka import Producer
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructType,
)

from .exactly_once import produce_exactly_once, task_identity
from .options import OptionError, SinkOptions
from .producing import Deliveries, DeliveryError, check_deliveries, new_producer, non_empty

__all__ = ["BrookStreamWriter", "BrookWriter", "DeliveryError", "SinkCommit", "check_schema",
           "produce"]

log = logging.getLogger("brook.spark")


@dataclass
class SinkCommit(WriterCommitMessage):
    rows: int
    replayed: bool = False  # exactlyOnce: the task found its part of the batch committed


def check_schema(schema: StructType, options: SinkOptions) -> None:
    """Refuse a DataFrame the sink cannot write, with Spark's Kafka sink's rules."""
    types = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in types:
        raise OptionError("the DataFrame has no value column: the brook sink needs a value "
                          "(string or binary), and takes key, topic, partition and headers")
    for name in ("key", "value"):
        if name in types and not isinstance(types[name], (StringType, BinaryType)):
            raise OptionError(f"the {name} column must be a string or binary, "
                              f"not {types[name].simpleString()}")
    if options.topic is None:
        if "topic" not in types:
            raise OptionError("there is no topic column and no topic option: set the option "
                              "topic, or give the DataFrame a topic column")
    if "topic" in types and not isinstance(types["topic"], StringType):
        raise OptionError(f"the topic column must be a string, not {types['topic'].simpleString()}")
    if "partition" in types and not isinstance(types["partition"], IntegerType):
        raise OptionError(f"the partition column must be an int, "
                          f"not {types['partition'].simpleString()}")
    if "headers" in types:
        t = types["headers"]
        fields = ({f.name: f.dataType for f in t.elementType.fields}
                  if isinstance(t, ArrayType) and isinstance(t.elementType, StructType) else {})
        if set(fields) != {"key", "value"} or not isinstance(fields["key"], StringType) \
                or not isinstance(fields["value"], BinaryType):
            raise OptionError(f"the headers column must be array<struct<key: string, value: "
                              f"binary>>, not {t.simpleString()}")


def produce(batches: Iterator[pa.RecordBatch], options: SinkOptions) -> SinkCommit:
    """Produce every row, flush, and fail unless every record was acknowledged."""
    producer: Producer | None = None  # created for the first row: many tasks have none
    try:
        for batch in non_empty(batches):
            if producer is None:
                producer = new_producer(options)
                deliveries = Deliveries(producer)
            deliveries.add(batch, options.topic)
        while producer is not None and producer.flush(1.0) > 0:
            pass
    except BaseException:
        if producer is not None:
            producer.purge()  # the task fails: do not wait for what is still queued
        raise
    finally:
        if producer is not None:
            producer.close()  # Spark reuses Python workers: leave no client running in them
    if producer is None:
        return SinkCommit(rows=0)
    check_deliveries(deliveries)
    return SinkCommit(rows=deliveries.sent)


class BrookWriter(DataSourceArrowWriter):
    """``df.write.format("brook")``."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        return produce(iterator, self.options)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info("wrote %d rows", sum(m.rows for m in messages if isinstance(m, SinkCommit)))


class BrookStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("brook")``: each micro-batch's tasks flush before it commits;
    with ``exactlyOnce`` each task writes in a transaction (exactly_once.py)."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        if not self.options.exactly_once:
            return produce(iterator, self.options)
        rows, replayed = produce_exactly_once(iterator, self.options, *task_identity())
        return SinkCommit(rows=rows, replayed=replayed)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        done = [m for m in messages if isinstance(m, SinkCommit)]
        replayed = sum(m.replayed for m in done)
        log.info("micro-batch %d: wrote %d rows%s", batchId, sum(m.rows for m in done),
                 f" ({replayed} tasks found it committed already)" if replayed else "")
