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

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError
from confluent_kafka import TopicPartition as KafkaTopicPartition
from pyspark.sql.datasource import InputPartition

from .schema import arrow_schema

log = logging.getLogger("brook.spark")

MAX_BATCH_ROWS = 10_000
POLL_S = 0.5
DATA_LOSS_ERRORS = {KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE,
                    KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION,
                    KafkaError._UNKNOWN_TOPIC}


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
        **r.client,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error" if r.fail_on_data_loss else "earliest",
        "logger": log,
    })
    try:
        consumer.assign([KafkaTopicPartition(r.topic, r.partition, r.start)])
        position = r.start
        deadline = clock() + r.poll_timeout_ms / 1000
        while position < r.end:
            messages = consumer.consume(num_messages=min(MAX_BATCH_ROWS, r.end - position),
                                        timeout=POLL_S)
            rows = []
            done = False
            for m in messages:
                error = m.error()
                if error is None:
                    offset = m.offset()
                    if offset >= r.end:
                        done = True
                        break
                    if offset >= position:
                        rows.append(m)
                        position = offset + 1
                elif error.code() == KafkaError._PARTITION_EOF:
                    if m.offset() < r.end:
                        _data_loss(r, f"the log of {r.topic}-{r.partition} ends at offset "
                                      f"{m.offset()}, before the end {r.end} of the range "
                                      f"[{r.start}, {r.end}) being read")
                    done = True
                    break
                elif error.code() in DATA_LOSS_ERRORS:
                    _data_loss(r, f"cannot read {r.topic}-{r.partition} from offset {position} "
                                  f"(range [{r.start}, {r.end})): {error.str()}")
                    done = True
                    break
                elif error.fatal():
                    raise RuntimeError(f"reading {r.topic}-{r.partition}: {error.str()}")
                else:
                    log.info("reading %s-%d: %s", r.topic, r.partition, error.str())
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
        consumer.close()


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
    stamps = [m.timestamp() for m in messages]
    millis = pa.array([s[1] for s in stamps], pa.int64())
    columns = [
        pa.array([m.key() for m in messages], pa.binary()),
        pa.array([m.value() for m in messages], pa.binary()),
        pa.nulls(n, pa.string()).fill_null(topic),
        pa.nulls(n, pa.int32()).fill_null(partition),
        pa.array([m.offset() for m in messages], pa.int64()),
        pc.multiply(millis, 1000).cast(schema.field("timestamp").type),
        # confluent-kafka: 1 create time, 2 log append time; Kafka (and Spark): 0 and 1
        pa.array([s[0] - 1 for s in stamps], pa.int32()),
    ]
    if include_headers:
        headers = [m.headers() for m in messages]
        columns.append(pa.array(
            [[{"key": k, "value": v} for k, v in h] if h else None for h in headers],
            schema.field("headers").type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)
