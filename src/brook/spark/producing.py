"""Sending DataFrame rows with a confluent-kafka producer, and checking that every one was
acknowledged: what both of the sink's write modes (``sink``, ``exactly_once``) share.

A row's columns are those of Spark's Kafka sink (``sink``'s docstring); keys go to
partitions with Kafka's Java partitioner (murmur2), as Spark's Kafka sink puts them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pyarrow as pa
from confluent_kafka import Producer

from .options import SinkOptions

log = logging.getLogger("brook.spark")

SHOWN_ERRORS = 5


class DeliveryError(RuntimeError):
    """Records the broker did not acknowledge."""


class Deliveries:
    """A producer's rows sent and their delivery reports."""

    def __init__(self, producer: Producer) -> None:
        self.producer = producer
        self.sent = 0
        self.acked = 0
        self.failed = 0
        self.errors: list[str] = []

    def __call__(self, error, message) -> None:
        if error is None:
            self.acked += 1
            return
        self.failed += 1
        if len(self.errors) < SHOWN_ERRORS:
            self.errors.append(f"{message.topic()}[{message.partition()}]: {error.str()}")

    def add(self, batch: pa.RecordBatch, topic_option: str | None) -> None:
        self.sent += _produce_batch(self.producer, batch, topic_option, self)
        self.producer.poll(0)


def check_deliveries(deliveries: Deliveries) -> None:
    """Fail unless every record sent was acknowledged (call after a flush)."""
    sent = deliveries.sent
    if deliveries.failed or deliveries.acked != sent:
        unanswered = sent - deliveries.acked - deliveries.failed
        raise DeliveryError(f"{deliveries.failed} of {sent} records were not delivered"
                            f"{f', {unanswered} never answered' if unanswered else ''}; first "
                            f"errors: {'; '.join(deliveries.errors)}")


def new_producer(options: SinkOptions, settings: dict[str, str] | None = None) -> Producer:
    """The sink's producer: Kafka's Java partitioner, the options' client settings."""
    return Producer({"partitioner": "murmur2_random", **options.client, **(settings or {}),
                     "logger": log})


def non_empty(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    return (batch for batch in batches if batch.num_rows > 0)


def _produce_batch(producer: Producer, batch: pa.RecordBatch, topic_option: str | None,
                   deliveries: Deliveries) -> int:
    n = batch.num_rows
    names = {name.lower(): i for i, name in enumerate(batch.schema.names)}

    def column(name: str) -> list:
        i = names.get(name)
        return batch.column(i).to_pylist() if i is not None else [None] * n

    values, keys = column("value"), column("key")
    topics = [topic_option] * n if topic_option else column("topic")
    partitions = column("partition")
    headers = column("headers")
    for i in range(n):
        topic = topics[i]
        if topic is None:
            raise ValueError("a row has a null topic: set the option topic, or give every "
                             "row a topic")
        p = partitions[i]
        h = headers[i]
        kwargs = {"headers": [(x["key"], x["value"]) for x in h]} if h else {}
        while True:
            try:
                producer.produce(topic, values[i], keys[i], -1 if p is None else p,
                                 on_delivery=deliveries, **kwargs)
                break
            except BufferError:  # the producer's queue is full: let it send
                producer.poll(0.1)
    return n
