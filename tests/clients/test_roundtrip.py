"""Real Kafka clients against a brook broker process: every record comes back byte-identical.

For each client (confluent-kafka, kafka-python, aiokafka) and each compression codec, 5,000
keyed records with headers and explicit timestamps (every kind ``make_records`` makes: null and
empty values, repeated and non-ASCII header keys; ROUNDTRIP_RECORDS=100000 for a volume run) go
to a 4-partition topic created with that client's admin API, and are read back with
``assign()`` from the beginning: each acknowledged record exactly once, at the acknowledged
offset, in produce order within its partition, with the same key, value, headers and CreateTime
timestamp. The same topics are then read by another client, so that what one client's codec
wrote, another client's codec reads.
"""

from __future__ import annotations

import os
import time

import pytest

from tests.support.broker_harness import (
    CLIENTS,
    CODECS,
    CONSUMERS,
    PRODUCERS,
    TOPIC_CREATORS,
    check_round_trip,
    make_records,
    partition_counts,
)

N_RECORDS = int(os.environ.get("ROUNDTRIP_RECORDS", "5000"))
PARTITIONS = 4


class Produced:
    """The module's topics, produced once per (client, codec) and read by every client."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.records = make_records(N_RECORDS, seed=7)
        self.done: dict[tuple[str, str], tuple[str, object]] = {}
        self.failed: dict[tuple[str, str], str] = {}

    def get(self, client: str, codec: str):
        key = (client, codec)
        if key in self.failed:
            pytest.fail(f"producing with {client}/{codec} failed earlier: {self.failed[key]}")
        if key not in self.done:
            topic = f"roundtrip-{client}-{codec}"
            try:
                TOPIC_CREATORS[client](self.bootstrap, topic, PARTITIONS)
                delivery = PRODUCERS[client](self.bootstrap, topic, self.records, codec)
            except Exception as e:
                self.failed[key] = repr(e)
                raise
            print(f"{client} produced {N_RECORDS} records with {codec} in "
                  f"{delivery.seconds:.1f}s")
            self.done[key] = (topic, delivery)
        return self.done[key]


@pytest.fixture(scope="module")
def produced(broker):
    return Produced(broker.bootstrap)


def _consume_and_check(produced: Produced, producer: str, codec: str, consumer: str) -> None:
    topic, delivery = produced.get(producer, codec)
    counts = partition_counts(delivery, PARTITIONS)
    t0 = time.monotonic()
    consumed = CONSUMERS[consumer](produced.bootstrap, topic, counts)
    print(f"{consumer} consumed {len(consumed)} records in {time.monotonic() - t0:.1f}s")
    check_round_trip(produced.records, delivery, consumed)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("client", CLIENTS)
def test_round_trip(produced, client, codec):
    _consume_and_check(produced, client, codec, client)


def _cross_cases():
    """Each (producer, codec) topic is read by one other client, alternating between the two,
    so that every (consumer, codec) pair also reads another client's output exactly once."""
    cases = []
    for i, producer in enumerate(CLIENTS):
        for j, codec in enumerate(CODECS):
            consumer = CLIENTS[(i + 1 + j % 2) % len(CLIENTS)]
            cases.append((producer, consumer, codec))
    return cases


@pytest.mark.parametrize("producer,consumer,codec", _cross_cases())
def test_cross_client(produced, producer, consumer, codec):
    _consume_and_check(produced, producer, codec, consumer)
