"""The streaming sink's exactly-once mode (option ``exactlyOnce=true``): one Kafka transaction
per task and micro-batch, and a record of the batch inside it so that a replay writes nothing.

A task of micro-batch B, partition p, of query Q (Spark's query id, kept in the checkpoint):

1. ``init_transactions`` with ``transactional.id = brook-sink-Q-p``: fences any earlier attempt
   of the same task still running (a zombie) and finishes its open transaction.
2. Reads, with read_committed semantics (``require_stable``), the offset that the group
   ``brook-sink-Q-p`` committed on partition 0 of the output topic: B+1 or more means batch B
   (or a later one) already committed, so the task is a replay and writes nothing.
3. Otherwise: begin, produce the rows, ``send_offsets_to_transaction`` of offset B+1 (metadata
   ``batch B``) for that group, commit. The rows and the record of B commit together.

A failing task aborts its transaction; Spark's retry fences it anyway (step 1).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pyarrow as pa
from confluent_kafka import Consumer, Producer, TopicPartition
from pyspark import TaskContext

from .options import SinkOptions
from .producing import Deliveries, check_deliveries, new_producer, non_empty

log = logging.getLogger("brook.spark")

TIMEOUT_S = 60.0


def task_identity() -> tuple[str, int, int]:
    """(query id, batch id, partition id) of the running streaming write task, from the local
    properties Spark's micro-batch execution sets on its jobs."""
    context = TaskContext.get()
    query_id = context.getLocalProperty("sql.streaming.queryId") if context else None
    batch_id = context.getLocalProperty("streaming.sql.batchId") if context else None
    if query_id is None or batch_id is None:
        raise RuntimeError("exactlyOnce needs a streaming query's task (no query or batch id)")
    return query_id, int(batch_id), context.partitionId()


def transactional_id(query_id: str, partition: int) -> str:
    """The transactional id, and the group recording the batches written, of one task."""
    return f"brook-sink-{query_id}-{partition}"


def produce_exactly_once(batches: Iterator[pa.RecordBatch], options: SinkOptions,
                         query_id: str, batch_id: int, partition: int) -> tuple[int, bool]:
    """Write the task's rows in one transaction; returns (rows written, whether the batch was
    found committed already and skipped)."""
    name = transactional_id(query_id, partition)
    marker = TopicPartition(options.topic, 0)
    producer: Producer | None = None  # created for the first row: many tasks have none
    consumer: Consumer | None = None
    began = False
    try:
        for batch in non_empty(batches):
            if producer is None:
                producer = new_producer(options, {"transactional.id": name})
                producer.init_transactions(TIMEOUT_S)
                consumer = Consumer({**_connection(options.client), "group.id": name,
                                     "isolation.level": "read_committed",
                                     "enable.auto.commit": False, "logger": log})
                if _committed_batch(consumer, marker) >= batch_id:
                    log.info("%s: batch %d is committed already, a replay writes nothing",
                             name, batch_id)
                    for _ in batches:  # Spark sends the whole input: take it
                        pass
                    return 0, True
                producer.begin_transaction()
                began = True
                deliveries = Deliveries(producer)
            deliveries.add(batch, options.topic)
        if producer is None:
            return 0, False
        while producer.flush(1.0) > 0:
            pass
        check_deliveries(deliveries)
        producer.send_offsets_to_transaction(
            [TopicPartition(options.topic, 0, batch_id + 1, metadata=f"batch {batch_id}")],
            consumer.consumer_group_metadata(), TIMEOUT_S)
        producer.commit_transaction(TIMEOUT_S)
        return deliveries.sent, False
    except BaseException:
        if began:
            try:
                producer.abort_transaction(TIMEOUT_S)
            except Exception as exc:  # the retry's init_transactions aborts it anyway
                log.warning("%s: abort failed: %s", name, exc)
        raise
    finally:
        if consumer is not None:
            consumer.close()
        if producer is not None:
            producer.close()  # Spark reuses Python workers: leave no client running in them


def _committed_batch(consumer: Consumer, marker: TopicPartition) -> int:
    """The last batch the task's group recorded (-1 for none). librdkafka's committed() asks
    with require_stable under read_committed, so a pending commit is waited for."""
    (tp,) = consumer.committed([marker], TIMEOUT_S)
    if tp.error is not None:
        raise RuntimeError(f"cannot read the committed batch of {marker.topic}: {tp.error}")
    return tp.offset - 1 if tp.offset >= 0 else -1


# Producer-only settings a consumer would warn about; everything else (security) is shared.
_PRODUCER_ONLY = ("linger.ms", "acks", "compression.type", "batch.size", "batch.num.messages",
                  "queue.buffering.max.messages", "queue.buffering.max.kbytes",
                  "enable.idempotence", "message.timeout.ms", "delivery.timeout.ms",
                  "retries", "partitioner", "transaction.timeout.ms", "request.required.acks")


def _connection(client: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in client.items() if k not in _PRODUCER_ONLY}
