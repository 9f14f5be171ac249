"""Transactions on a real broker, the partition side: transactional batches produced over the
wire (producer ids from InitProducerId without a transactional id, the idempotent way: brook
has no transaction coordinator yet), markers written with WriteTxnMarkers, then read by
confluent-kafka's and kafka-python's consumers with isolation.level read_committed (aborted
records dropped, reading stops at the open transaction) and read_uncommitted (everything but
the markers), by raw Fetch and ListOffsets requests (the last stable offset and the aborted
transactions), by an old consumer (Fetch v3: no markers) and in a fetch session; after a
restart too. The module's broker does not verify transactions (KIP-890 is off, as a Kafka
broker must be for transactions driven without a coordinator); the last test shows a verifying
broker refusing them."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from kio.schema.errors import ErrorCode as E

from brook.records import Record, encode_batch
from brook.records.legacy import decode_message_set
from tests.support.broker_harness import BROKER_DEFAULTS, BrokerProcess, confluent_config
from tests.support.kafka_wire import WireClient
from tests.support.wire_build import request
from tests.support.wire_requests import create_topic

TOPIC = "txn-e2e"
SEC = timedelta(seconds=5)


def init_producer_id(c: WireClient) -> int:
    r = c.request(request(22, 4, transactional_id=None, transaction_timeout=timedelta(seconds=60),
                          producer_id=-1, producer_epoch=-1))
    assert r.error_code == E.none
    return r.producer_id


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("broker-txn-by-hand"), overrides={
            **BROKER_DEFAULTS, "transaction.partition.verification.enable": "false"}) as proc:
        yield proc


def produce_answer(c: WireClient, values: list[bytes], *, pid: int = -1, seq: int = -1,
                   transactional_id: str | None = None):
    ts = int(time.time() * 1000)
    records = encode_batch([Record(i, ts, None, v) for i, v in enumerate(values)], producer_id=pid,
                           producer_epoch=0 if pid >= 0 else -1, base_sequence=seq,
                           transactional=transactional_id is not None)
    r = c.request(request(0, 9, transactional_id=transactional_id, acks=-1, timeout=SEC, topic_data=[
        {"name": TOPIC, "partition_data": [{"index": 0, "records": records}]}]))
    return r.responses[0].partition_responses[0]


def produce(c: WireClient, values: list[bytes], *, pid: int = -1, seq: int = -1,
            transactional_id: str | None = None) -> int:
    p = produce_answer(c, values, pid=pid, seq=seq, transactional_id=transactional_id)
    assert p.error_code == E.none, p
    return p.base_offset


def end_txn(c: WireClient, pid: int, committed: bool, version: int = 1) -> set:
    r = c.request(request(27, version, markers=[{
        "producer_id": pid, "producer_epoch": 0, "transaction_result": committed,
        "coordinator_epoch": 0, "topics": [{"name": TOPIC, "partition_indexes": [0]}]}]))
    return {p.error_code for m in r.markers for t in m.topics for p in t.partitions}


def fetch(c: WireClient, isolation: int, version: int = 12, offset: int = 0, session_id: int = 0,
          epoch: int = -1, topic: str = TOPIC):
    r = c.request(request(1, version, replica_id=-1, max_wait=timedelta(0), min_bytes=0,
                          max_bytes=1 << 20, isolation_level=isolation, session_id=session_id,
                          session_epoch=epoch, rack_id="", topics=[{"topic": topic, "partitions": [
                              {"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
                               "last_fetched_epoch": -1, "log_start_offset": -1,
                               "partition_max_bytes": 1 << 20}]}]))
    return r


def list_latest(c: WireClient, isolation: int, topic: str = TOPIC) -> int:
    r = c.request(request(2, 7, replica_id=-1, isolation_level=isolation, topics=[
        {"name": topic, "partitions": [
            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]))
    return r.topics[0].partitions[0].offset


def read_until_quiet(poll, want: int, quiet: float) -> list[bytes]:
    """`poll()`'s values until there are `want`, then for `quiet` seconds more (none may come)."""
    out: list[bytes] = []
    deadline = time.monotonic() + 60
    quiet_until = None
    while time.monotonic() < deadline:
        out.extend(poll())
        if len(out) >= want:
            quiet_until = quiet_until or time.monotonic() + quiet
            if time.monotonic() >= quiet_until:
                break
    return out


def confluent_values(bootstrap: str, isolation: str, want: int, quiet: float = 2.0) -> list[bytes]:
    """What a confluent-kafka consumer reads from the beginning: `want` values, then nothing
    more for `quiet` seconds."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(confluent_config(bootstrap, **{
        "group.id": "txn-e2e", "enable.auto.commit": False, "isolation.level": isolation,
        "fetch.wait.max.ms": 100}))

    def poll():
        messages = consumer.consume(num_messages=100, timeout=0.3)
        for m in messages:
            assert not m.error(), m.error()
        return [m.value() for m in messages]

    try:
        consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
        return read_until_quiet(poll, want, quiet)
    finally:
        consumer.close()


def kafka_python_values(bootstrap: str, isolation: str, want: int, quiet: float = 2.0) -> list[bytes]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", isolation_level=isolation,
                             fetch_max_wait_ms=100)
    try:
        tp = TopicPartition(TOPIC, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        return read_until_quiet(
            lambda: [r.value for records in consumer.poll(timeout_ms=300).values() for r in records],
            want, quiet)
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def log_of_transactions(broker):
    """p0 | A: a0 a1 (aborted) | B: b0 (committed) | A: a2 (open) | p1"""
    with WireClient(broker.bootstrap) as c:
        create_topic(c, TOPIC, partitions=1)
        a, b = init_producer_id(c), init_producer_id(c)
        assert produce(c, [b"p0"]) == 0
        assert produce(c, [b"a0", b"a1"], pid=a, seq=0, transactional_id="app-a") == 1
        assert produce(c, [b"b0"], pid=b, seq=0, transactional_id="app-b") == 3
        assert end_txn(c, a, committed=False) == {E.none}  # offset 4
        assert end_txn(c, b, committed=True, version=0) == {E.none}  # offset 5
        assert produce(c, [b"a2"], pid=a, seq=2, transactional_id="app-a") == 6
        assert produce(c, [b"p1"]) == 7
    return a, b


def test_the_fetch_answers_the_lso_and_the_aborted_transactions(broker, log_of_transactions):
    a, _ = log_of_transactions
    with WireClient(broker.bootstrap) as c:
        committed = fetch(c, isolation=1).responses[0].partitions[0]
        assert (committed.high_watermark, committed.last_stable_offset) == (8, 6)
        assert [(t.producer_id, t.first_offset) for t in committed.aborted_transactions] == [(a, 1)]
        uncommitted = fetch(c, isolation=0).responses[0].partitions[0]
        assert (uncommitted.high_watermark, uncommitted.last_stable_offset) == (8, 6)
        assert uncommitted.aborted_transactions is None
        assert len(uncommitted.records) > len(committed.records)  # it reads past the LSO
        assert (list_latest(c, 1), list_latest(c, 0)) == (6, 8)


def test_read_committed_consumers_drop_aborted_records_and_stop_at_the_open_transaction(
        broker, log_of_transactions):
    assert confluent_values(broker.bootstrap, "read_committed", 2) == [b"p0", b"b0"]
    assert kafka_python_values(broker.bootstrap, "read_committed", 2) == [b"p0", b"b0"]
    everything = [b"p0", b"a0", b"a1", b"b0", b"a2", b"p1"]
    assert confluent_values(broker.bootstrap, "read_uncommitted", 6) == everything
    assert kafka_python_values(broker.bootstrap, "read_uncommitted", 6) == everything


def test_an_old_consumer_gets_no_markers(broker, log_of_transactions):
    """Fetch v3 (magic 1, no isolation level: read_uncommitted): the markers are left out."""
    with WireClient(broker.bootstrap) as c:
        p = fetch(c, isolation=0, version=3).responses[0].partitions[0]
        offsets = [m.offset for m in decode_message_set(bytes(p.records))]
        assert offsets == [0, 1, 2, 3, 6, 7]


def test_the_commit_moves_the_lso_for_consumers_and_fetch_sessions_and_survives_a_restart(
        broker, log_of_transactions):
    a, _ = log_of_transactions
    with WireClient(broker.bootstrap) as c:
        full = fetch(c, isolation=1, offset=6, epoch=0)  # opens a session
        assert full.session_id != 0 and full.responses[0].partitions[0].last_stable_offset == 6
        assert end_txn(c, a, committed=True) == {E.none}  # offset 8
        r = fetch(c, isolation=1, offset=6, session_id=full.session_id, epoch=1)
        assert [(p.last_stable_offset, p.high_watermark) for p in r.responses[0].partitions] == [(9, 9)]
        assert list_latest(c, 1) == 9
    values = [b"p0", b"b0", b"a2", b"p1"]
    assert confluent_values(broker.bootstrap, "read_committed", 4) == values
    assert kafka_python_values(broker.bootstrap, "read_committed", 4) == values
    broker.restart()
    with WireClient(broker.bootstrap) as c:
        p = fetch(c, isolation=1).responses[0].partitions[0]
        assert p.last_stable_offset == 9
        assert [(t.producer_id, t.first_offset) for t in p.aborted_transactions] == [(a, 1)]
    assert confluent_values(broker.bootstrap, "read_committed", 4) == values


def test_markers_are_checked_and_answered_per_partition(broker, log_of_transactions):
    a, _ = log_of_transactions
    with WireClient(broker.bootstrap) as c:
        r = c.request(request(27, 1, markers=[{
            "producer_id": a, "producer_epoch": 0, "transaction_result": False, "coordinator_epoch": 0,
            "topics": [{"name": TOPIC, "partition_indexes": [0, 7]},
                       {"name": "no-such-topic", "partition_indexes": [0]}]}]))
        codes = {(t.name, p.partition_index): p.error_code for m in r.markers for t in m.topics
                 for p in t.partitions}
        assert codes == {(TOPIC, 0): E.none, (TOPIC, 7): E.unknown_topic_or_partition,
                         ("no-such-topic", 0): E.unknown_topic_or_partition}
        # a coordinator of an older epoch than the last marker's is fenced
        r = c.request(request(27, 1, markers=[{
            "producer_id": a, "producer_epoch": 0, "transaction_result": True, "coordinator_epoch": -5,
            "topics": [{"name": TOPIC, "partition_indexes": [0]}]}]))
        assert r.markers[0].topics[0].partitions[0].error_code == E.transaction_coordinator_fenced


def test_a_verifying_broker_refuses_a_transaction_its_coordinator_does_not_know(broker_factory):
    """KIP-890: with verification on (the default) a transactional batch of a producer the
    coordinator knows nothing of begins no transaction, and nothing is written."""
    proc = broker_factory()
    with WireClient(proc.bootstrap) as c:
        create_topic(c, TOPIC, partitions=1)
        pid = init_producer_id(c)
        p = produce_answer(c, [b"x"], pid=pid, seq=0, transactional_id="unknown-to-the-coordinator")
        assert p.error_code == E.invalid_producer_id_mapping, p
        assert list_latest(c, 0) == 0
