"""DescribeProducers on two real brokers on a real ZooKeeper: a follower answers from the producer
state it built from what it replicated (as Kafka's replicas do, which `kafka-transactions.sh
describe-producers --broker-id` asks), a broker that holds no replica of an existing partition
answers NOT_LEADER_OR_FOLLOWER; `brook transactions describe-producers` asks the leader, or the
broker named."""

from __future__ import annotations

import json

import pytest
from kio.schema.errors import ErrorCode as E
from typer.testing import CliRunner

from brook.cli import app
from tests.clients.test_describe_producers import T0, describe
from tests.support.cluster_harness import brokers, wait_for, zk, zookeeper  # noqa: F401

pytestmark = pytest.mark.broker

FAST = {"replica.lag.time.max.ms": 10_000, "replica.fetch.wait.max.ms": 100,
        "replica.fetch.backoff.ms": 200}


def _leader(zk, topic: str) -> int:
    state = zk.json(f"/brokers/topics/{topic}/partitions/0/state")
    return state["leader"] if state else -1


def test_followers_answer_and_other_brokers_do_not(zk, brokers):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    for i in (1, 2):
        brokers(i, FAST)
    bootstrap = brokers.wait_ready(zk, [1, 2])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic("dp-rep", 1, replica_assignment=[[1, 2]]),
                                  NewTopic("dp-one", 2, replica_assignment=[[1], [2]])],
                                 operation_timeout=20).values():
        f.result(timeout=40)
    wait_for(lambda: zk.in_sync(["dp-rep", "dp-one"]) and _leader(zk, "dp-rep") > 0, 30,
             "the topics in sync", brokers)
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    for i in range(3):
        p.produce("dp-rep", b"v%d" % i, partition=0, timestamp=T0 + i)
    assert p.flush(30) == 0

    leader = _leader(zk, "dp-rep")
    follower = 3 - leader
    (code, on_leader), = describe(brokers[leader].bootstrap, "dp-rep", 0).values()
    assert code == E.none and len(on_leader) == 1
    wait_for(lambda: describe(brokers[follower].bootstrap, "dp-rep", 0) == {0: (E.none, on_leader)},
             20, "the follower's producer state", brokers)

    # dp-one: partition 0 on broker 1 only, partition 1 on broker 2 only
    assert {p: code for p, (code, _) in describe(brokers[1].bootstrap, "dp-one", 0, 1, 2).items()} \
        == {0: E.none, 1: E.not_leader_or_follower, 2: E.unknown_topic_or_partition}

    runner = CliRunner()
    (pid,) = on_leader
    for extra in ([], ["--broker-id", str(follower)]):
        result = runner.invoke(app, ["transactions", "describe-producers", "--topic", "dp-rep",
                                     "--partition", "0", "-b", brokers[1].bootstrap,
                                     "--output", "json", *extra])
        assert result.exit_code == 0, result.output
        [state] = json.loads(result.stdout)["producers"]
        assert (state["producer_id"], state["last_sequence"], state["last_timestamp"]) == \
            (pid, 2, T0 + 2)
    result = runner.invoke(app, ["transactions", "describe-producers", "--topic", "dp-one",
                                 "--partition", "1", "--broker-id", "1",
                                 "-b", brokers[1].bootstrap])
    assert result.exit_code == 1
    assert "cannot describe the producers of dp-one-1 on broker 1: NOT_LEADER_OR_FOLLOWER" \
        in result.output
