"""Transactions on a replicated partition, three real brokers on a real ZooKeeper: markers sent
over the wire as a broker (the transaction coordinator's way; a client is refused in a
cluster without an authorizer), answered once every in-sync replica has them (acks=all, a
follower paused: the answer waits); then the leader killed, and its successor, which built
its transactions from the batches it replicated, answers the same last stable offset and
aborted transactions, and takes the next marker."""

from __future__ import annotations

import signal
import time
from datetime import timedelta

import pytest
from kio.schema.errors import ErrorCode as E

from brook.records import Record, encode_batch

from tests.clients.test_transactions import fetch, init_producer_id, list_latest
from tests.support.broker_login import as_broker
from tests.support.cluster_harness import (ClusterBrokers, ZkView, brokers, own_zookeeper,  # noqa: F401
                                           wait_for, zk, zookeeper)
from tests.support.kafka_wire import WireClient
from tests.support.wire_build import request

pytestmark = pytest.mark.broker

TOPIC = "txn-rep"
# Transactions driven by hand, without a coordinator: no KIP-890 verification (it would ask one)
FAST = {"replica.lag.time.max.ms": 10_000, "replica.fetch.wait.max.ms": 100,
        "replica.fetch.backoff.ms": 200, "controlled.shutdown.retry.backoff.ms": 200,
        "transaction.partition.verification.enable": "false"}


def _produce(c: WireClient, value: bytes, pid: int, seq: int) -> int:
    records = encode_batch([Record(0, int(time.time() * 1000), None, value)], producer_id=pid,
                           producer_epoch=0, base_sequence=seq, transactional=True)
    r = c.request(request(0, 9, transactional_id="app", acks=-1, timeout=timedelta(seconds=20),
                          topic_data=[{"name": TOPIC, "partition_data": [
                              {"index": 0, "records": records}]}]))
    p = r.responses[0].partition_responses[0]
    assert p.error_code == E.none, p
    return p.base_offset


def _marker(c: WireClient, pid: int, committed: bool, coordinator_epoch: int = 0):
    r = c.request(request(27, 1, markers=[{
        "producer_id": pid, "producer_epoch": 0, "transaction_result": committed,
        "coordinator_epoch": coordinator_epoch,
        "topics": [{"name": TOPIC, "partition_indexes": [0]}]}]))
    return r.markers[0].topics[0].partitions[0].error_code


def _leader(zk) -> int:
    state = zk.json(f"/brokers/topics/{TOPIC}/partitions/0/state")
    return state["leader"] if state else -1


def test_markers_are_replicated_and_the_new_leader_answers_the_same(zk, brokers):
    from confluent_kafka.admin import AdminClient, NewTopic

    for i in (1, 2, 3):
        brokers(i, FAST)
    bootstrap = brokers.wait_ready(zk, [1, 2, 3])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 3, config={"min.insync.replicas": "2"})],
                        operation_timeout=20)[TOPIC].result(timeout=40)
    wait_for(lambda: zk.in_sync([TOPIC]) and _leader(zk) > 0, 30, "the topic in sync", brokers)
    leader = _leader(zk)
    followers = [i for i in (1, 2, 3) if i != leader]
    with WireClient(brokers[leader].bootstrap) as c:
        a, b = init_producer_id(c), init_producer_id(c)
        assert _produce(c, b"a0", a, 0) == 0
        assert _produce(c, b"b0", b, 0) == 1
        assert _marker(c, a, committed=False) == E.cluster_authorization_failed  # a client
        with as_broker(zk, brokers[leader].bootstrap, followers[0]) as coordinator:
            # One follower paused: the ISR (3) still holds it, so the answer waits for it.
            brokers[followers[1]].proc.send_signal(signal.SIGSTOP)
            try:
                sent = coordinator.send(request(27, 1, markers=[{
                    "producer_id": a, "producer_epoch": 0, "transaction_result": False,
                    "coordinator_epoch": 0, "topics": [{"name": TOPIC, "partition_indexes": [0]}]}]))
                coordinator.sock.settimeout(1.0)
                with pytest.raises(OSError):  # (socket.timeout) not answered yet
                    coordinator.recv_frame()
            finally:
                brokers[followers[1]].proc.send_signal(signal.SIGCONT)
            coordinator.sock.settimeout(30)
            answer = coordinator.recv(27, 1, sent)
            assert answer.markers[0].topics[0].partitions[0].error_code == E.none
        p = fetch(c, isolation=1, topic=TOPIC).responses[0].partitions[0]
        assert p.error_code == E.none, p
        assert (p.last_stable_offset, p.high_watermark) == (1, 3)  # B's transaction is open
        assert [(t.producer_id, t.first_offset) for t in p.aborted_transactions] == [(a, 0)]
    brokers[leader].proc.send_signal(signal.SIGKILL)
    brokers[leader].proc.wait()
    new = wait_for(lambda: _leader(zk) not in (leader, -1) and _leader(zk), 30, "a new leader", brokers)
    with WireClient(brokers[new].bootstrap) as c:
        def caught_up():
            p = fetch(c, isolation=1, topic=TOPIC).responses[0].partitions[0]
            return p.error_code == E.none and p.high_watermark == 3 and p

        p = wait_for(caught_up, 30, "the new leader's high watermark", brokers)
        assert p.last_stable_offset == 1
        assert [(t.producer_id, t.first_offset) for t in p.aborted_transactions] == [(a, 0)]
        with as_broker(zk, brokers[new].bootstrap, new) as coordinator:
            assert _marker(coordinator, b, committed=True, coordinator_epoch=1) == E.none
        assert list_latest(c, 1, TOPIC) == list_latest(c, 0, TOPIC) == 4
