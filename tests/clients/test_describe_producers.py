"""DescribeProducers (API 61) against a broker process: the producers of a partition as its
producer state holds them, written by confluent-kafka's idempotent and transactional producers
(an open transaction's first offset, none once committed), and Kafka's errors for topics and
partitions. Topic Read is checked in tests/clients/test_acl_checks.py."""

from __future__ import annotations

import time

import pytest
from kio.schema.errors import ErrorCode as E

from tests.support.broker_harness import confluent_config
from tests.support.kafka_wire import WireClient
from tests.support.wire_build import request
from tests.support.wire_requests import create_topic

pytestmark = pytest.mark.broker

T0 = 1_700_000_000_000


def describe(bootstrap: str, topic: str, *partitions: int):
    """{partition: (error code, {producer id: ProducerState})}."""
    with WireClient(bootstrap) as c:
        r = c.request(request(61, 0, topics=[{"name": topic, "partition_indexes": list(partitions)}]))
    [t] = r.topics
    assert t.name == topic
    return {p.partition_index: (p.error_code, {s.producer_id: s for s in p.active_producers})
            for p in t.partitions}


def _topic(bootstrap: str, name: str, partitions: int = 1) -> str:
    with WireClient(bootstrap) as c:
        assert create_topic(c, name, partitions=partitions).error_code == E.none
    return name


def test_api_versions_advertises_it(broker):
    with WireClient(broker.bootstrap) as c:
        r = c.request(request(18, 3, client_software_name="t", client_software_version="1"))
    assert {(k.api_key, k.min_version, k.max_version) for k in r.api_keys} >= {(61, 0, 0)}


def test_an_idempotent_producer(broker):
    from confluent_kafka import Producer

    topic = _topic(broker.bootstrap, "dp-idempotent", partitions=2)
    assert describe(broker.bootstrap, topic, 0) == {0: (E.none, {})}
    p = Producer(confluent_config(broker.bootstrap, **{"enable.idempotence": True,
                                                       "linger.ms": 50}))
    for i in range(3):
        p.produce(topic, b"v%d" % i, partition=0, timestamp=T0 + i)
    assert p.flush(30) == 0
    (code, producers), = describe(broker.bootstrap, topic, 0).values()
    assert code == E.none and len(producers) == 1
    (state,) = producers.values()
    assert state.producer_id >= 0 and state.producer_epoch == 0
    assert (state.last_sequence, state.last_timestamp) == (2, T0 + 2)
    assert (state.coordinator_epoch, state.current_txn_start_offset) == (-1, -1)
    assert describe(broker.bootstrap, topic, 1) == {1: (E.none, {})}  # nothing written there


def test_a_transactional_producer_open_then_committed(broker):
    from confluent_kafka import Producer

    topic = _topic(broker.bootstrap, "dp-txn")
    plain = Producer(confluent_config(broker.bootstrap))
    for i in range(2):
        plain.produce(topic, b"before-%d" % i, partition=0)
    assert plain.flush(30) == 0  # offsets 0 and 1, no producer id
    p = Producer(confluent_config(broker.bootstrap, **{"transactional.id": "dp-txn",
                                                       "transaction.timeout.ms": 60_000}))
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"in-txn", partition=0)
    assert p.flush(30) == 0
    _, producers = describe(broker.bootstrap, topic, 0)[0]
    (pid, state), = producers.items()
    assert (state.current_txn_start_offset, state.last_sequence) == (2, 0)
    assert state.coordinator_epoch == -1  # no marker yet
    p.commit_transaction(30)
    deadline = time.monotonic() + 10  # the answer comes once the marker is written (acks=all)
    while time.monotonic() < deadline:
        state = describe(broker.bootstrap, topic, 0)[0][1][pid]
        if state.current_txn_start_offset == -1:
            break
        time.sleep(0.1)
    assert state.current_txn_start_offset == -1
    assert state.coordinator_epoch == 0  # a single node coordinates at epoch 0
    assert (state.producer_epoch, state.last_sequence) == (0, 0)


def test_errors_for_topics_and_partitions(broker):
    topic = _topic(broker.bootstrap, "dp-errors", partitions=2)
    answer = describe(broker.bootstrap, topic, 0, 1, 2)
    assert {p: code for p, (code, _) in answer.items()} == {
        0: E.none, 1: E.none, 2: E.unknown_topic_or_partition}
    assert describe(broker.bootstrap, "dp-absent", 0) == {0: (E.unknown_topic_or_partition, {})}
    assert describe(broker.bootstrap, "not a name!", 0) == {0: (E.invalid_topic_exception, {})}
