"""Transactional offset commits on three real brokers and a real ZooKeeper: confluent-kafka's
consume-transform-produce, the transaction's markers sent to the group's coordinator over the
wire and written by it (answered once replicated), then the group's coordinator killed between
send_offsets_to_transaction and commit_transaction: the next leader of the group's partition
loads the pending offsets, and the marker the transaction coordinator sends it afterwards
commits them."""

from __future__ import annotations

import time

import pytest

from tests.support.cluster_harness import brokers, wait_for, zk, zookeeper  # noqa: F401

pytestmark = pytest.mark.broker

SETTINGS = {"replica.fetch.wait.max.ms": 100, "replica.fetch.backoff.ms": 200,
            "controlled.shutdown.retry.backoff.ms": 200, "transaction.state.log.num.partitions": 5,
            "offsets.topic.num.partitions": 3, "zookeeper.session.timeout.ms": 6000}


def _group_coordinator(bootstrap: str, group: str) -> int:
    from tests.support.kafka_wire import WireClient
    from tests.support.wire_build import request

    with WireClient(bootstrap.split(",")[0], 10) as w:
        c = w.request(request(10, 4, key_type=0, coordinator_keys=[group])).coordinators[0]
    return c.node_id if c.error_code == 0 else -1


def test_offsets_committed_in_a_transaction_survive_their_coordinator(zk, brokers):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    for i in (1, 2, 3):
        brokers(i, SETTINGS)
    bootstrap = brokers.wait_ready(zk, [1, 2, 3])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic("cin", 1, 3), NewTopic("cout", 1, 3)],
                                  operation_timeout=20)
    for f in futures.values():
        f.result(30)
    source = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(20):
        source.produce("cin", f"in-{i}".encode(), partition=0)
    assert source.flush(30) == 0

    group = "cluster-txn-group"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "cluster-txn",
                         "transaction.timeout.ms": 60_000})
    producer.init_transactions(60)

    def consume(n: int) -> list:
        got = []
        deadline = time.monotonic() + 60
        while len(got) < n:
            assert time.monotonic() < deadline, f"{len(got)} of {n} records\n{brokers.tails()}"
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m)
        return got

    def committed() -> int:
        [tp] = consumer.committed([TopicPartition("cin", 0)], timeout=20)
        return tp.offset

    def transaction(records, before_commit=lambda: None) -> None:
        producer.begin_transaction()
        for m in records:
            producer.produce("cout", m.value().upper(), partition=0)
        producer.send_offsets_to_transaction([TopicPartition("cin", 0, records[-1].offset() + 1)],
                                             consumer.consumer_group_metadata(), 60)
        before_commit()
        producer.commit_transaction(120)

    try:
        consumer.subscribe(["cin"])
        transaction(consume(5))
        assert committed() == 5

        coordinator = wait_for(lambda: (n := _group_coordinator(bootstrap, group)) > 0 and n, 30,
                               "the group's coordinator", brokers)
        rest = ",".join(brokers[i].bootstrap for i in (1, 2, 3) if i != coordinator)
        transaction(consume(5), before_commit=lambda: brokers[coordinator].kill())
        wait_for(lambda: _group_coordinator(rest, group) not in (-1, coordinator), 60,
                 "a new coordinator of the group", brokers)
        wait_for(lambda: committed() == 10, 60, "the offsets committed by the marker", brokers)
    finally:
        consumer.close()
