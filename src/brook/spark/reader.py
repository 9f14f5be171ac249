"""Reading one offset range on an executor, into Arrow record batches.

An ``OffsetRange`` carries everything the read needs (Spark pickles it to the executor): the
partition, offsets ``[start, end)`` and the client settings. The read assigns a
confluent-kafka consumer to the partition at ``start`` (no group membership, no commits) and
stops exactly at ``end``: records at or past ``end`` are not returned, even when the consumer
has fetched them. Offsets inside the range may be missing (compaction, transaction markers);
the range is done at the first record or end-of-partition event at or past ``end``.

Data loss, the range no longer being in the log, fails the read when ``fail_on_data_loss``;
otherwise the consumer moves to the earliest offset and the read returns what is left.
"""

from __future__ import annotations

import gc
import logging
import time
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError, Message
from confluent_kafka import TopicPartition as KafkaTopicPartition
from pyspark.sql.datasource import InputPartition

from .schema import arrow_schema

log = logging.getLogger("brook.spark")

MAX_BATCH_ROWS = 10_000
POLL_S = 0.5
DATA_LOSS_ERRORS = {KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE,
                    KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION,
                    KafkaError._UNKNOWN_TOPIC}


_STAMP = pa.struct([("type", pa.int32()), ("millis", pa.int64())])


class DataLossError(RuntimeError):
    """Records the query was to read are not in the log any more (failOnDataLoss=true)."""


@dataclass
class OffsetRange(InputPartition):
    """Offsets ``[start, end)`` of one topic partition, and how to read them."""

    topic: str
    partition: int
    start: int
    end: int
    client: dict[str, str] = field(default_factory=dict)  # consumer settings
    include_headers: bool = False
    fail_on_data_loss: bool = True
    poll_timeout_ms: int = 120_000


def read_range(r: OffsetRange, clock=time.monotonic) -> Iterator[pa.RecordBatch]:
    if r.end <= r.start:
        return
    schema = arrow_schema(r.include_headers)
    consumer = Consumer({
        # Large fetches: a range is read start to end, and each fetch costs the broker a request.
        "max.partition.fetch.bytes": 10_485_760,
        # librdkafka stops fetching while 100,000 messages wait in its queue and looks again
        # only after fetch.queue.backoff.ms (1 s by default): from a broker that answers at once,
        # a range of a few hundred thousand records then spends most of its time waiting.
        "fetch.queue.backoff.ms": 10,
        **r.client,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error" if r.fail_on_data_loss else "earliest",
        "logger": log,
    })
    # The read allocates millions of small acyclic objects (messages, tuples): the cyclic
    # garbage collector, triggered by the allocations, would walk every live message again and
    # again for nothing (it doubles the cost of building a batch).
    collecting = gc.isenabled()
    gc.disable()
    try:
        consumer.assign([KafkaTopicPartition(r.topic, r.partition, r.start)])
        position = r.start
        deadline = clock() + r.poll_timeout_ms / 1000
        while position < r.end:
            messages = consumer.consume(num_messages=min(MAX_BATCH_ROWS, r.end - position),
                                        timeout=POLL_S)
            rows, position, done = _take(messages, position, r)
            if rows:
                yield to_batch(rows, r.topic, r.partition, schema, r.include_headers)
                deadline = clock() + r.poll_timeout_ms / 1000
            if done:
                return
            if clock() > deadline:
                raise TimeoutError(f"no records from {r.topic}-{r.partition} at offset {position} "
                                   f"for kafkaConsumer.pollTimeoutMs={r.poll_timeout_ms} "
                                   f"(range [{r.start}, {r.end}))")
    finally:
        if collecting:
            gc.enable()
        consumer.close()


def _take(messages: list, position: int, r: OffsetRange) -> tuple[list, int, bool]:
    """The messages of ``messages`` inside the range from ``position``, the position after
    them, and whether the range is done (its end reached, or the log ending before it)."""
    if messages and not any(map(Message.error, messages)):
        # The common case: records only, in offset order. Compaction may leave gaps.
        offsets = list(map(Message.offset, messages))
        lo = bisect_left(offsets, position)
        hi = bisect_left(offsets, r.end, lo)
        rows = messages[lo:hi] if lo or hi < len(messages) else messages
        return rows, (offsets[hi - 1] + 1 if hi > lo else position), hi < len(messages)
    rows = []
    for m in messages:
        error = m.error()
        if error is None:
            offset = m.offset()
            if offset >= r.end:
                return rows, position, True
            if offset >= position:
                rows.append(m)
                position = offset + 1
        elif error.code() == KafkaError._PARTITION_EOF:
            if m.offset() < r.end:
                _data_loss(r, f"the log of {r.topic}-{r.partition} ends at offset "
                              f"{m.offset()}, before the end {r.end} of the range "
                              f"[{r.start}, {r.end}) being read")
            return rows, position, True
        elif error.code() in DATA_LOSS_ERRORS:
            _data_loss(r, f"cannot read {r.topic}-{r.partition} from offset {position} "
                          f"(range [{r.start}, {r.end})): {error.str()}")
            return rows, position, True
        elif error.fatal():
            raise RuntimeError(f"reading {r.topic}-{r.partition}: {error.str()}")
        else:
            log.info("reading %s-%d: %s", r.topic, r.partition, error.str())
    return rows, position, False


def _data_loss(r: OffsetRange, message: str) -> None:
    if r.fail_on_data_loss:
        raise DataLossError(message + ". Some data may have been lost (deleted by retention, "
                            "or the topic was deleted). If you want the query to go on, set "
                            "the option failOnDataLoss to false.")
    log.warning("%s; skipped (failOnDataLoss=false)", message)


def to_batch(messages: list, topic: str, partition: int, schema: pa.Schema,
             include_headers: bool) -> pa.RecordBatch:
    """One Arrow record batch of consumed messages, in the source's column order."""
    n = len(messages)
    # One C-level pass per column (map over the unbound methods); the timestamp tuples go to
    # Arrow as a struct and come back as its two fields.
    stamps = pa.array(list(map(Message.timestamp, messages)), _STAMP)
    columns = [
        pa.array(list(map(Message.key, messages)), pa.binary()),
        pa.array(list(map(Message.value, messages)), pa.binary()),
        pa.nulls(n, pa.string()).fill_null(topic),
        pa.nulls(n, pa.int32()).fill_null(partition),
        pa.array(list(map(Message.offset, messages)), pa.int64()),
        pc.multiply(stamps.field(1), 1000).cast(schema.field("timestamp").type),
        # confluent-kafka: 1 create time, 2 log append time; Kafka (and Spark): 0 and 1
        pc.subtract(stamps.field(0), 1),
    ]
    if include_headers:
        headers = [m.headers() for m in messages]
        columns.append(pa.array(
            [[{"key": k, "value": v} for k, v in h] if h else None for h in headers],
            schema.field("headers").type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)
