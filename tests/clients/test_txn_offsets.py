"""Transactional offset commits against a brook broker process (issue 29, the group
coordinator's part): confluent-kafka's consume-transform-produce with
``send_offsets_to_transaction``, committed and aborted; UNSTABLE_OFFSET_COMMIT to a
read_committed consumer (KIP-447's ``require_stable``) until the transaction's marker lands;
pending offsets loaded after a restart and committed by a marker that comes after it; the
group's fencing of a zombie's TxnOffsetCommit; kafka-python's and aiokafka's transactional
producers."""

from __future__ import annotations

import signal
import time
import uuid
from datetime import timedelta

import pytest
from kio.schema.errors import ErrorCode as E

from tests.support.broker_harness import confluent_config
from tests.support.kafka_wire import WireClient
from tests.support.wire_build import request
from tests.support.wire_requests import create_topic


def _producer(bootstrap: str, tid: str):
    from confluent_kafka import Producer

    return Producer(confluent_config(bootstrap, **{"transactional.id": tid,
                                                   "transaction.timeout.ms": 60_000}))


def _consumer(bootstrap: str, group: str, **extra):
    from confluent_kafka import Consumer

    return Consumer(confluent_config(bootstrap, **{
        "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "isolation.level": "read_committed", **extra}))


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """What OffsetFetch answers for the group (confluent-kafka's ``committed``)."""
    from confluent_kafka import TopicPartition

    c = _consumer(bootstrap, group)
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=20)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in got}


def _fill(bootstrap: str, topic: str, n: int, partitions: int = 2) -> None:
    from confluent_kafka import Producer

    failed = []
    p = Producer(confluent_config(bootstrap))
    for i in range(n):
        p.produce(topic, f"in-{i}".encode(), partition=i % partitions,
                  on_delivery=lambda err, _: err is not None and failed.append(err))
    assert p.flush(30) == 0 and not failed


def _consume(c, n: int, timeout_s: float = 30) -> list:
    seen = []
    deadline = time.monotonic() + timeout_s
    while len(seen) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            seen.append(m)
    return seen


def test_consume_transform_produce_commits_the_offsets_with_the_transaction(broker):
    """send_offsets_to_transaction then commit_transaction: the group's offsets are the
    consumer's positions; the outputs are read by a read_committed reader. Then a second batch
    whose transaction is aborted: the offsets stay where the first left them."""
    from confluent_kafka import TopicPartition

    source, sink, group = "ctp-in", "ctp-out", "ctp-group"
    with WireClient(broker.bootstrap) as w:
        create_topic(w, source, partitions=2)
        create_topic(w, sink, partitions=1)
    _fill(broker.bootstrap, source, 20)
    producer = _producer(broker.bootstrap, "ctp-txn")
    producer.init_transactions(30)
    consumer = _consumer(broker.bootstrap, group)
    try:
        consumer.subscribe([source])
        first = _consume(consumer, 10)
        assert len(first) == 10
        producer.begin_transaction()
        for m in first:
            producer.produce(sink, m.value().upper(), partition=0)
        positions = consumer.position(consumer.assignment())
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        committed = {tp.partition: tp.offset for tp in positions}
        assert _committed(broker.bootstrap, group, source, 2) == committed

        rest = _consume(consumer, 10)
        assert len(rest) == 10
        producer.begin_transaction()
        for m in rest:
            producer.produce(sink, b"never", partition=0)
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 30)
        producer.abort_transaction(30)
        assert _committed(broker.bootstrap, group, source, 2) == committed
    finally:
        consumer.close()

    reader = _consumer(broker.bootstrap, "ctp-reader")
    try:
        reader.assign([TopicPartition(sink, 0, 0)])
        out = [m.value() for m in _consume(reader, 11, 5)]  # nothing of the aborted one
        assert sorted(out) == sorted(m.value().upper() for m in first)
    finally:
        reader.close()


# --- over the wire --------------------------------------------------------------------------------


def _ready(w, key: str, key_type: int) -> None:
    for _ in range(100):
        r = w.request(request(10, 4, key_type=key_type, coordinator_keys=[key]))
        if r.coordinators[0].error_code == E.none:
            return
        time.sleep(0.1)
    raise AssertionError(f"no coordinator for {key}: {r}")


class Txn:
    """A transactional producer spoken by hand: InitProducerId, AddOffsetsToTxn,
    TxnOffsetCommit, EndTxn."""

    def __init__(self, w: WireClient, tid: str) -> None:
        self.w, self.tid = w, tid
        _ready(w, tid, 1)
        for _ in range(100):  # (CONCURRENT_TRANSACTIONS while an open transaction is aborted)
            r = w.request(request(22, 4, transactional_id=tid,
                                  transaction_timeout=timedelta(seconds=60),
                                  producer_id=-1, producer_epoch=-1))
            if r.error_code != E.concurrent_transactions:
                break
            time.sleep(0.1)
        assert r.error_code == E.none, r
        self.pid, self.epoch = r.producer_id, r.producer_epoch

    def add_offsets(self, group: str) -> E:
        """AddOffsetsToTxn (CONCURRENT_TRANSACTIONS while the last one's markers are written)."""
        return self.w.request(request(25, 3, transactional_id=self.tid, producer_id=self.pid,
                                      producer_epoch=self.epoch, group_id=group)).error_code

    def commit_offsets(self, group: str, topic: str, offsets: dict[int, int], version: int = 3,
                       **member) -> dict[int, E]:
        r = self.w.request(request(28, version, transactional_id=self.tid, group_id=group,
                                   producer_id=self.pid, producer_epoch=self.epoch,
                                   generation_id=member.get("generation", -1),
                                   member_id=member.get("member_id", ""),
                                   group_instance_id=member.get("instance_id"),
                                   topics=[{"name": topic, "partitions": [
                                       {"partition_index": p, "committed_offset": o,
                                        "committed_leader_epoch": -1,
                                        "committed_metadata": member.get("metadata", "")}
                                       for p, o in offsets.items()]}]))
        return {p.partition_index: p.error_code for t in r.topics for p in t.partitions}

    def end(self, commit: bool) -> E:
        return self.w.request(request(26, 3, transactional_id=self.tid, producer_id=self.pid,
                                      producer_epoch=self.epoch, committed=commit)).error_code


def _fetch(w, group: str, topic: str, partitions, stable: bool, version: int = 7) -> dict:
    """{partition: (offset, error)} of OffsetFetch."""
    if version >= 8:
        r = w.request(request(9, version, groups=[{"group_id": group, "topics": [
            {"name": topic, "partition_indexes": list(partitions)}]}], require_stable=stable))
        assert r.groups[0].error_code == E.none
        topics = r.groups[0].topics
    else:
        r = w.request(request(9, version, group_id=group, topics=[
            {"name": topic, "partition_indexes": list(partitions)}], require_stable=stable))
        assert r.error_code == E.none
        topics = r.topics
    return {p.partition_index: (p.committed_offset, p.error_code)
            for t in topics for p in t.partitions}


def _eventually(check, timeout_s: float = 20):
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def test_require_stable_answers_unstable_offset_commit_until_the_marker(broker):
    topic, group = "stable-in", "stable-group"
    with WireClient(broker.bootstrap) as w:
        create_topic(w, topic, partitions=2)
        _ready(w, group, 0)
        txn = Txn(w, "stable-txn")
        assert txn.add_offsets(group) == E.none
        assert txn.commit_offsets(group, topic, {0: 7}) == {0: E.none}
        for version in (7, 8, 9):
            assert _fetch(w, group, topic, [0, 1], stable=True, version=version) == {
                0: (-1, E.unstable_offset_commit), 1: (-1, E.none)}
            assert _fetch(w, group, topic, [0, 1], stable=False, version=version) == {
                0: (-1, E.none), 1: (-1, E.none)}
        assert txn.end(commit=True) == E.none
        assert _eventually(lambda: _fetch(w, group, topic, [0], stable=True) == {0: (7, E.none)})
        # an aborted one: UNSTABLE while open, the committed offset after
        assert _eventually(lambda: txn.add_offsets(group) == E.none)  # once the markers are in
        assert txn.commit_offsets(group, topic, {0: 9}) == {0: E.none}
        assert _fetch(w, group, topic, [0], stable=True) == {0: (-1, E.unstable_offset_commit)}
        assert _fetch(w, group, topic, [0], stable=False) == {0: (7, E.none)}
        assert txn.end(commit=False) == E.none
        assert _eventually(lambda: _fetch(w, group, topic, [0], stable=True) == {0: (7, E.none)})


def test_a_read_committed_consumer_waits_for_the_transaction_to_end(broker):
    """librdkafka asks with require_stable under isolation.level=read_committed: while the
    transaction is open it gets UNSTABLE_OFFSET_COMMIT and asks again; once the marker lands it
    starts at the transaction's offset."""
    import threading

    topic, group = "stable-consumer-in", "stable-consumer-group"
    with WireClient(broker.bootstrap) as w:
        create_topic(w, topic, partitions=1)
    _fill(broker.bootstrap, topic, 10, partitions=1)
    with WireClient(broker.bootstrap) as w:
        _ready(w, group, 0)
        txn = Txn(w, "stable-consumer-txn")
        assert txn.add_offsets(group) == E.none
        assert txn.commit_offsets(group, topic, {0: 6}) == {0: E.none}
        first: list = []
        consumer = _consumer(broker.bootstrap, group)
        try:
            consumer.subscribe([topic])
            reading = threading.Thread(target=lambda: first.extend(_consume(consumer, 1, 30)))
            reading.start()
            time.sleep(3)  # the consumer has joined and keeps asking for its offset meanwhile
            assert not first
            assert txn.end(commit=True) == E.none
            reading.join(40)
            assert first and first[0].offset() == 6
        finally:
            consumer.close()


def test_pending_offsets_survive_a_restart_and_are_committed_by_a_later_marker(broker_factory):
    """The transaction's offsets are written, the broker is killed before its marker, and the
    transaction ends after the restart: the pending offsets were loaded with the partition and
    the marker, which comes after the load, commits them (and an abort's drops them)."""
    broker = broker_factory()
    topic, group = "restart-in", "restart-group"
    with WireClient(broker.bootstrap) as w:
        create_topic(w, topic, partitions=2)
        _ready(w, group, 0)
        committing, aborting = Txn(w, "restart-commit"), Txn(w, "restart-abort")
        assert committing.add_offsets(group) == E.none
        assert committing.commit_offsets(group, topic, {0: 11}) == {0: E.none}
        assert aborting.add_offsets(group) == E.none
        assert aborting.commit_offsets(group, topic, {1: 22}) == {1: E.none}
    broker.restart(signal.SIGKILL)
    with WireClient(broker.bootstrap) as w:
        _ready(w, group, 0)
        _ready(w, "restart-commit", 1)
        assert _eventually(lambda: _fetch(w, group, topic, [0, 1], stable=True) == {
            0: (-1, E.unstable_offset_commit), 1: (-1, E.unstable_offset_commit)})
        committing.w = aborting.w = w
        assert committing.end(commit=True) == E.none
        assert aborting.end(commit=False) == E.none
        assert _eventually(lambda: _fetch(w, group, topic, [0, 1], stable=True) == {
            0: (11, E.none), 1: (-1, E.none)})
    broker.restart()  # and loaded again, markers included, it says the same
    with WireClient(broker.bootstrap) as w:
        _ready(w, group, 0)
        assert _eventually(lambda: _fetch(w, group, topic, [0, 1], stable=True) == {
            0: (11, E.none), 1: (-1, E.none)})


def _join(w, group: str, instance_id: str | None = None):
    """A member of a consumer group by hand: (member id, generation), synced."""
    from datetime import timedelta

    member = ""
    for _ in range(3):
        r = w.request(request(11, 5, group_id=group, session_timeout=timedelta(seconds=30),
                              rebalance_timeout=timedelta(seconds=30), member_id=member,
                              group_instance_id=instance_id, protocol_type="consumer",
                              protocols=[{"name": "range", "metadata": bytes(10)}]))
        if r.error_code == E.member_id_required:
            member = r.member_id
            continue
        assert r.error_code == E.none, r
        member = r.member_id
        break
    s = w.request(request(14, 3, group_id=group, generation_id=r.generation_id,
                          member_id=member, group_instance_id=instance_id,
                          assignments=[{"member_id": member, "assignment": b""}]))
    assert s.error_code == E.none, s
    return member, r.generation_id


def test_a_zombie_is_fenced_by_the_group_generation_and_member(broker):
    """KIP-447: TxnOffsetCommit v3 carries the consumer's generation, member id and instance id;
    a stale generation is ILLEGAL_GENERATION, an unknown member UNKNOWN_MEMBER_ID, a static
    member replaced by another FENCED_INSTANCE_ID; without them (generation -1, no member id,
    what clients before KIP-447 send) the commit is taken, as Kafka takes it."""
    topic, group = "zombie-in", f"zombie-group-{uuid.uuid4().hex[:6]}"
    with WireClient(broker.bootstrap) as w:
        create_topic(w, topic, partitions=1)
        _ready(w, group, 0)
        member, generation = _join(w, group, instance_id="static-1")
        txn = Txn(w, "zombie-txn")
        assert txn.add_offsets(group) == E.none
        ok = txn.commit_offsets(group, topic, {0: 1}, generation=generation, member_id=member,
                                instance_id="static-1")
        assert ok == {0: E.none}
        assert txn.commit_offsets(group, topic, {0: 2}, generation=generation + 1,
                                  member_id=member, instance_id="static-1") == \
            {0: E.illegal_generation}
        assert txn.commit_offsets(group, topic, {0: 2}, generation=generation,
                                  member_id="no-such-member") == {0: E.unknown_member_id}
        assert txn.commit_offsets(group, topic, {0: 2}, generation=generation,
                                  member_id="someone-else", instance_id="static-1") == \
            {0: E.fenced_instance_id}
        assert txn.commit_offsets(group, topic, {0: 3}) == {0: E.none}  # no group fencing
        assert txn.commit_offsets(group, topic, {0: 3}, version=2) == {0: E.none}
        assert txn.commit_offsets(group, topic, {0: 4}, metadata="x" * 5000) == \
            {0: E.offset_metadata_too_large}
        assert txn.commit_offsets(group, "no-such-topic", {0: 4}) == \
            {0: E.unknown_topic_or_partition}
        assert txn.commit_offsets("", topic, {0: 4}) == {0: E.invalid_group_id}
        assert txn.end(commit=True) == E.none
        assert _eventually(lambda: _fetch(w, group, topic, [0], stable=True) == {0: (3, E.none)})
        # KIP-890: a commit that comes after its transaction ended (no AddOffsetsToTxn since) is
        # refused, where it would begin a transaction on the group's partition nobody ends
        assert _eventually(lambda: txn.commit_offsets(group, topic, {0: 4}) == {
            0: E.invalid_txn_state})  # (CONCURRENT_TRANSACTIONS while the markers are written)
        assert txn.commit_offsets(group, topic, {0: 4}, version=4) == {0: E.transaction_abortable}
        assert _fetch(w, group, topic, [0], stable=True) == {0: (3, E.none)}
        # A producer fenced by a newer one of its transactional id in the middle of its
        # transaction: the fence aborts it with a bumped epoch, whose marker on the group's
        # partition makes the partition refuse the zombie's next commit.
        assert _eventually(lambda: txn.add_offsets(group) == E.none)
        assert txn.commit_offsets(group, topic, {0: 5}) == {0: E.none}
        newer = Txn(w, "zombie-txn")
        assert newer.epoch > txn.epoch
        assert txn.commit_offsets(group, topic, {0: 6}) == {0: E.invalid_producer_epoch}
        assert _eventually(lambda: _fetch(w, group, topic, [0], stable=True) == {0: (3, E.none)})
        assert txn.commit_offsets(group, topic, {0: 6}) == {0: E.invalid_producer_epoch}


def test_confluent_kafka_producer_of_a_rebalanced_consumer_is_fenced(broker):
    """The consumer group metadata of a generation the group has left behind: its
    send_offsets_to_transaction fails and the transaction is aborted."""
    from confluent_kafka import KafkaException, TopicPartition

    topic, group = "zombie-ck-in", "zombie-ck-group"
    with WireClient(broker.bootstrap) as w:
        create_topic(w, topic, partitions=2)
    _fill(broker.bootstrap, topic, 4)
    consumer = _consumer(broker.bootstrap, group)
    second = _consumer(broker.bootstrap, group)
    try:
        consumer.subscribe([topic])
        assert _consume(consumer, 1)
        stale = consumer.consumer_group_metadata()
        second.subscribe([topic])  # a second member: the group's next generation has both
        deadline = time.monotonic() + 30
        while not (len(consumer.assignment()) == 1 and len(second.assignment()) == 1):
            assert time.monotonic() < deadline, "the group did not rebalance"
            consumer.poll(0.1)
            second.poll(0.1)
        producer = _producer(broker.bootstrap, "zombie-ck-txn")
        producer.init_transactions(30)
        producer.begin_transaction()
        with pytest.raises(KafkaException) as raised:
            producer.send_offsets_to_transaction([TopicPartition(topic, 0, 1)], stale, 30)
        assert "generation" in str(raised.value).lower() or "member" in str(raised.value).lower()
        producer.abort_transaction(30)
    finally:
        consumer.close()
        second.close()


def test_kafka_python_sends_offsets_to_its_transaction(broker):
    from kafka import KafkaProducer
    from kafka.structs import OffsetAndMetadata, TopicPartition

    topic, group = "kp-txn-in", "kp-txn-group"
    with WireClient(broker.bootstrap) as w:
        create_topic(w, topic, partitions=1)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="kp-txn")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"out", partition=0)
        producer.send_offsets_to_transaction(
            {TopicPartition(topic, 0): OffsetAndMetadata(5, "", -1)}, group)
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send_offsets_to_transaction(
            {TopicPartition(topic, 0): OffsetAndMetadata(8, "", -1)}, group)
        producer.abort_transaction()
    finally:
        producer.close()
    assert _committed(broker.bootstrap, group, topic, 1) == {0: 5}


def test_aiokafka_sends_offsets_to_its_transaction(broker):
    """aiokafka's transactional producer (TxnOffsetCommit v0, without the group's generation)."""
    import asyncio

    from aiokafka import AIOKafkaProducer
    from aiokafka.structs import OffsetAndMetadata, TopicPartition

    topic, group = "aio-txn-in", "aio-txn-group"
    with WireClient(broker.bootstrap) as w:
        create_topic(w, topic, partitions=1)

    async def main():
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap,
                                    transactional_id="aio-txn")
        await asyncio.wait_for(producer.start(), 30)
        try:
            async with producer.transaction():
                await producer.send_and_wait(topic, b"out", partition=0)
                await producer.send_offsets_to_transaction(
                    {TopicPartition(topic, 0): OffsetAndMetadata(3, "")}, group)
            await producer.begin_transaction()
            await producer.send_offsets_to_transaction(
                {TopicPartition(topic, 0): OffsetAndMetadata(9, "")}, group)
            await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(main())
    assert _committed(broker.bootstrap, group, topic, 1) == {0: 3}
