"""The transaction coordinator in a cluster: __transaction_state replicated three times with
min.insync.replicas 2, each transactional id coordinated by the leader of its partition, producer
ids unique across brokers (ZooKeeper's /latest_producer_id_block), and a coordinator killed after
PrepareCommit replaced by the partition's next leader, which loads the transaction as
prepared."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from kio.schema.errors import ErrorCode as E

from tests.support.cluster_harness import brokers, wait_for, zk, zookeeper  # noqa: F401

pytestmark = pytest.mark.broker

SETTINGS = {"replica.fetch.wait.max.ms": 100, "replica.fetch.backoff.ms": 200,
            "controlled.shutdown.retry.backoff.ms": 200, "transaction.state.log.num.partitions": 5}


def _request(bootstrap, body):
    from tests.support.kafka_wire import WireClient
    with WireClient(bootstrap.split(",")[0], 10) as w:
        return w.request(body)


def _coordinator(bootstrap, tid):
    from tests.support.wire_build import request
    c = _request(bootstrap, request(10, 4, key_type=1, coordinator_keys=[tid])).coordinators[0]
    return c.error_code, c.node_id


def _init(bootstrap, tid):
    from datetime import timedelta

    from tests.support.wire_build import request
    return _request(bootstrap, request(22, 4, transactional_id=tid,
                                       transaction_timeout=timedelta(seconds=60),
                                       producer_id=-1, producer_epoch=-1))


def _add(bootstrap, tid, pid, epoch, topic):
    from tests.support.wire_build import request
    r = _request(bootstrap, request(24, 3, v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
                                    v3_and_below_producer_epoch=epoch,
                                    v3_and_below_topics=[{"name": topic, "partitions": [0]}]))
    return {p.partition_error_code for t in r.results_by_topic_v3_and_below
            for p in t.results_by_partition}


def _end(bootstrap, tid, pid, epoch):
    from tests.support.wire_build import request
    return _request(bootstrap, request(26, 3, transactional_id=tid, producer_id=pid,
                                       producer_epoch=epoch, committed=True)).error_code


def test_transactions_are_coordinated_by_their_partitions_leader_and_survive_its_death(zk, brokers):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from brook.coordinator.transaction.partitioner import partition_for

    for i in (1, 2, 3):
        brokers(i, SETTINGS)
    bootstrap = brokers.wait_ready(zk, [1, 2, 3])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("out", 1, 3)], operation_timeout=20)["out"].result(30)

    tid = "txn-cluster"
    code, node = wait_for(lambda: (r := _coordinator(bootstrap, tid))[0] == 0 and r, 30,
                          "a transaction coordinator", brokers)
    state = wait_for(lambda: zk.json(f"/brokers/topics/__transaction_state/partitions/"
                                     f"{partition_for(tid, 5)}/state"), 10, "its partition", brokers)
    assert node == state["leader"] and sorted(state["isr"]) == [1, 2, 3]
    assert len(zk.json("/brokers/topics/__transaction_state")["partitions"]) == 5
    configs = zk.json("/config/topics/__transaction_state")["config"]
    assert configs["min.insync.replicas"] == "2" and configs["cleanup.policy"] == "compact"
    for i in (1, 2, 3):  # each broker names it once its metadata has the partition's leader
        wait_for(lambda: _coordinator(brokers[i].bootstrap, tid) == (0, node), 30,
                 f"broker {i} naming the coordinator", brokers)

    # Real clients: init_transactions on the coordinator, fencing on the second producer.
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "txn-client"})
    p.init_transactions(30)

    # Producer ids from every broker's block: no two ids alike.
    ids, coordinators = set(), set()
    for other in "abcdefgh":
        t = f"txn-ids-{other}"
        c = wait_for(lambda: (x := _coordinator(bootstrap, t))[0] == 0 and x, 30, "its coordinator",
                     brokers)
        r = wait_for(lambda: (a := _init(brokers[c[1]].bootstrap, t)).error_code == E.none and a, 30,
                     "InitProducerId", brokers)
        ids.add(r.producer_id)
        coordinators.add(c[1])
    assert len(coordinators) > 1, coordinators
    assert len(ids) == 8
    block = zk.json("/latest_producer_id_block")
    assert int(block["block_end"]) >= max(ids)

    # A transaction prepared to commit, then its coordinator dies, before or after its markers
    # are written: the next coordinator loads it prepared (and sends them) or complete.
    leader = brokers[node].bootstrap
    init = _init(leader, tid)
    assert init.error_code == E.none
    pid, epoch = init.producer_id, init.producer_epoch
    assert _add(leader, tid, pid, epoch, "out") == {E.none}
    assert _end(leader, tid, pid, epoch) == E.none
    brokers[node].kill()
    rest = ",".join(brokers[i].bootstrap for i in (1, 2, 3) if i != node)
    code, new = wait_for(lambda: (r := _coordinator(rest, tid))[0] == 0 and r[1] != node and r, 30,
                         "a new coordinator", brokers)
    # the new coordinator loaded the PrepareCommit: the next transaction waits for its markers
    deadline = time.monotonic() + 30
    while True:
        codes = _add(brokers[new].bootstrap, tid, pid, epoch, "out")
        if codes not in ({E.coordinator_load_in_progress}, {E.not_coordinator}) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert codes in ({E.concurrent_transactions}, {E.none}), codes


def test_leaders_verify_with_the_coordinator_on_another_broker(zk, brokers):
    """KIP-890 over the wire: the leader of a partition asks the transactional id's
    coordinator, on another broker, with AddPartitionsToTxn v4 verify_only, before a
    transactional batch begins a transaction there; a real transactional producer writing to
    partitions led by every broker is not held up by it."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.clients.test_transaction_coordinator import _wire_produce
    from tests.support.kafka_wire import WireClient

    for i in (1, 2, 3):
        brokers(i, SETTINGS)
    bootstrap = brokers.wait_ready(zk, [1, 2, 3])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("spread", 3, 3)], operation_timeout=20)["spread"].result(30)
    wait_for(lambda: zk.in_sync(["spread"]), 30, "the topic in sync", brokers)
    leader = zk.json("/brokers/topics/spread/partitions/0/state")["leader"]
    for n in range(50):  # an id coordinated elsewhere than partition 0's leader
        tid = f"verify-{n}"
        _, node = wait_for(lambda: (r := _coordinator(bootstrap, tid))[0] == 0 and r, 30,
                           "a transaction coordinator", brokers)
        if node != leader:
            break
    for i in (1, 2, 3):
        wait_for(lambda: _coordinator(brokers[i].bootstrap, tid) == (0, node), 30,
                 f"broker {i} naming the coordinator", brokers)
    init = wait_for(lambda: (a := _init(brokers[node].bootstrap, tid)).error_code == E.none and a,
                    30, "InitProducerId", brokers)
    pid, epoch = init.producer_id, init.producer_epoch
    with WireClient(brokers[leader].bootstrap) as w:
        assert _wire_produce(w, tid, pid, epoch, 0, "spread") == E.invalid_txn_state
        assert _add(brokers[node].bootstrap, tid, pid, epoch, "spread") == {E.none}
        assert _wire_produce(w, tid, pid, epoch, 0, "spread") == E.none
    assert _end(brokers[node].bootstrap, tid, pid, epoch) == E.none

    # KIP-951 (Produce v10+): a broker that does not lead the partition names its leader
    from brook.records import Record, encode_batch
    from tests.support.wire_build import request

    state = zk.json("/brokers/topics/spread/partitions/0/state")
    other = next(i for i in (1, 2, 3) if i != state["leader"])
    with WireClient(brokers[other].bootstrap) as w:
        r = w.request(request(0, 10, acks=1, timeout=timedelta(seconds=10), topic_data=[
            {"name": "spread", "partition_data": [
                {"index": 0, "records": encode_batch([Record(0, 0, None, b"x")])}]}]))
    part = r.responses[0].partition_responses[0]
    assert part.error_code == E.not_leader_or_follower
    assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (
        state["leader"], state["leader_epoch"])
    [endpoint] = r.node_endpoints
    assert (endpoint.node_id, f"{endpoint.host}:{endpoint.port}") == (
        state["leader"], brokers[state["leader"]].bootstrap)

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "verify-client"})
    p.init_transactions(30)
    p.begin_transaction()
    for partition in range(3):
        p.produce("spread", b"committed-%d" % partition, partition=partition)
    p.commit_transaction(30)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "verify-reader",
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    c.subscribe(["spread"])
    got, deadline = set(), time.monotonic() + 30
    while len(got) < 4 and time.monotonic() < deadline:
        for m in c.consume(10, timeout=1.0):
            if not m.error():
                got.add(m.value())
    c.close()
    assert got == {b"late", b"committed-0", b"committed-1", b"committed-2"}
