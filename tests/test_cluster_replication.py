"""Replication on real brokers and a real ZooKeeper: a topic with three replicas on three
brokers, acks=all produce through confluent-kafka, and leadership moving when a leader dies."""

from __future__ import annotations

import signal
import time

import pytest

from cluster_harness import (ClusterBrokers, ZkView, brokers, wait_for, zk,  # noqa: F401
                             zookeeper)

pytestmark = pytest.mark.broker

FAST = {"replica.lag.time.max.ms": 3000, "replica.fetch.wait.max.ms": 100,
        "replica.fetch.backoff.ms": 200, "controlled.shutdown.retry.backoff.ms": 200}


def _three(brokers, zk, extra=None):
    procs = [brokers(i, {**FAST, **(extra or {})}) for i in (1, 2, 3)]
    wait_for(lambda: zk.broker_ids() == [1, 2, 3], 30, "three brokers registered", brokers)
    return procs


def _bootstrap(procs) -> str:
    return ",".join(p.bootstrap for p in procs if p.proc is not None and p.proc.poll() is None)


def _create(bootstrap: str, name: str, partitions: int = 1, rf: int = 3, configs=None):
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fs = admin.create_topics([NewTopic(name, partitions, rf, config=configs or {})],
                             operation_timeout=20, request_timeout=30)
    fs[name].result(timeout=40)


def _state(zk, topic, p=0):
    return zk.json(f"/brokers/topics/{topic}/partitions/{p}/state")


def _metadata(bootstrap, topic):
    from confluent_kafka.admin import AdminClient
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return md.topics[topic].partitions


def _produce(bootstrap, topic, values, **conf):
    from confluent_kafka import Producer
    acked, failed = [], []

    def report(err, msg):
        (failed if err else acked).append(msg.value() if not err else (msg.value(), err))

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                  "message.timeout.ms": 60000, **conf})
    for v in values:
        p.produce(topic, v, on_delivery=report)
        p.poll(0)
    p.flush(90)
    return acked, failed


def _consume_all(bootstrap, topic, expected: int, timeout=60):
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < expected and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            out.append(m.value())
    c.close()
    return out


def test_a_replicated_topic_is_led_by_one_and_followed_by_all(zk, brokers):
    procs = _three(brokers, zk)
    bootstrap = _bootstrap(procs)
    _create(bootstrap, "rep", rf=3)
    assignment = zk.json("/brokers/topics/rep")
    assert sorted(assignment["partitions"]["0"]) == [1, 2, 3]
    state = wait_for(lambda: _state(zk, "rep"), 20, "the partition state written", brokers)
    assert state["leader"] == assignment["partitions"]["0"][0]
    assert sorted(state["isr"]) == [1, 2, 3] and state["leader_epoch"] == 0
    parts = wait_for(lambda: _metadata(bootstrap, "rep"), 20, "metadata of rep", brokers)
    assert parts[0].leader == state["leader"] and sorted(parts[0].replicas) == [1, 2, 3]
    values = [f"v{i}".encode() for i in range(500)]
    acked, failed = _produce(bootstrap, "rep", values)
    assert failed == [] and acked == values
    assert _consume_all(bootstrap, "rep", 500) == values


def test_leader_killed_a_follower_takes_over_without_losing_acknowledged_records(zk, brokers):
    procs = _three(brokers, zk)
    bootstrap = _bootstrap(procs)
    _create(bootstrap, "failover", rf=3, configs={"min.insync.replicas": "2"})
    first = [f"a{i}".encode() for i in range(300)]
    acked, failed = _produce(bootstrap, "failover", first)
    assert failed == [] and acked == first
    state = _state(zk, "failover")
    leader = state["leader"]
    brokers[leader].proc.send_signal(signal.SIGKILL)
    brokers[leader].proc.wait()
    new = wait_for(lambda: (s := _state(zk, "failover")) and s["leader"] not in (leader, -1) and s,
                   30, "a new leader elected", brokers)
    assert new["leader_epoch"] > state["leader_epoch"]
    assert leader not in new["isr"]
    rest = [p for i, p in brokers.brokers.items() if i != leader]
    bootstrap = _bootstrap(rest)
    second = [f"b{i}".encode() for i in range(300)]
    acked2, failed2 = _produce(bootstrap, "failover", second)
    assert failed2 == [] and acked2 == second
    assert _consume_all(bootstrap, "failover", 600) == first + second
