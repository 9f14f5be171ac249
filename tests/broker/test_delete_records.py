"""DeleteRecords from the three Python clients against a real broker: the log start offset
moves, records below it are gone for consumers and ListOffsets, Kafka's per-partition errors,
the new start survives a restart, and retention then deletes the segments below it."""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.support.broker_harness import (
    BrokerProcess,
    confluent_config,
    confluent_consume,
    confluent_produce,
    create_topic_confluent,
    make_records,
)

N = 100


def produce(bootstrap: str, topic: str, n: int = N) -> None:
    delivery = confluent_produce(bootstrap, topic, make_records(n, seed=7), partition=0,
                                 **{"batch.num.messages": 10})
    assert not delivery.errors, delivery.errors[:3]


def delete_confluent(bootstrap: str, topic: str, offset: int, partition: int = 0):
    admin = AdminClient(confluent_config(bootstrap))
    fut = admin.delete_records([TopicPartition(topic, partition, offset)], operation_timeout=10)
    return next(iter(fut.values())).result(15)


def watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    c = Consumer(confluent_config(bootstrap, **{"group.id": "wm"}))
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        c.close()


def offsets_read(bootstrap: str, topic: str, expect: int) -> list[int]:
    return [c.offset for c in confluent_consume(bootstrap, topic, {0: expect})]


@pytest.fixture
def broker(tmp_path):
    with BrokerProcess(tmp_path, overrides={"num.partitions": 1}) as b:
        yield b


def test_confluent_delete_records_moves_the_log_start(broker):
    create_topic_confluent(broker.bootstrap, "purge", 1)
    produce(broker.bootstrap, "purge")
    assert delete_confluent(broker.bootstrap, "purge", 40).low_watermark == 40
    assert watermarks(broker.bootstrap, "purge") == (40, N)
    assert offsets_read(broker.bootstrap, "purge", N - 40) == list(range(40, N))
    # Never backwards: a lower offset answers the current start.
    assert delete_confluent(broker.bootstrap, "purge", 10).low_watermark == 40
    # -1: up to the high watermark, everything.
    assert delete_confluent(broker.bootstrap, "purge", -1).low_watermark == N
    assert watermarks(broker.bootstrap, "purge") == (N, N)


def test_kafka_python_and_aiokafka_delete_records(broker):
    from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
    from aiokafka.structs import TopicPartition as AioTP
    from kafka import TopicPartition as KpTP
    from kafka.admin import KafkaAdminClient

    create_topic_confluent(broker.bootstrap, "purge-kp", 1)
    produce(broker.bootstrap, "purge-kp")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        result = admin.delete_records({KpTP("purge-kp", 0): 25})
    finally:
        admin.close()
    assert watermarks(broker.bootstrap, "purge-kp") == (25, N)
    assert result

    async def aio() -> dict:
        client = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await client.start()
        try:
            return await client.delete_records({AioTP("purge-kp", 0): RecordsToDelete(before_offset=60)})
        finally:
            await client.close()

    assert asyncio.run(aio()) == {AioTP("purge-kp", 0): 60}
    assert watermarks(broker.bootstrap, "purge-kp") == (60, N)


def test_errors_are_kafkas(broker):
    create_topic_confluent(broker.bootstrap, "purge-err", 1)
    create_topic_confluent(broker.bootstrap, "compacted", 1, {"cleanup.policy": "compact"})
    produce(broker.bootstrap, "purge-err")
    cases = [
        ("purge-err", 0, N + 1, KafkaError.OFFSET_OUT_OF_RANGE),
        ("compacted", 0, 0, KafkaError.POLICY_VIOLATION),
    ]
    for topic, partition, offset, code in cases:
        with pytest.raises(KafkaException) as err:
            delete_confluent(broker.bootstrap, topic, offset, partition)
        assert err.value.args[0].code() == code, (topic, err.value)
    assert watermarks(broker.bootstrap, "purge-err") == (0, N)  # nothing moved


def test_internal_topics_and_unknown_partitions_are_refused(broker):
    from kafka import TopicPartition as KpTP
    from kafka.admin import KafkaAdminClient
    from kafka.errors import InvalidTopicError, UnknownTopicOrPartitionError

    # A group commit creates __consumer_offsets.
    c = Consumer(confluent_config(broker.bootstrap, **{"group.id": "g", "enable.auto.commit": False}))
    create_topic_confluent(broker.bootstrap, "t", 1)
    c.commit(offsets=[TopicPartition("t", 0, 0)], asynchronous=False)
    c.close()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        with pytest.raises(InvalidTopicError):
            admin.delete_records({KpTP("__consumer_offsets", 0): 0}, partition_leader_id=1)
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.delete_records({KpTP("t", 5): 0}, partition_leader_id=1)
    finally:
        admin.close()


def test_the_new_start_survives_a_restart_and_retention_deletes_the_segments_below(tmp_path):
    overrides = {"num.partitions": 1, "log.retention.check.interval.ms": 200}
    with BrokerProcess(tmp_path, overrides=overrides) as b:
        create_topic_confluent(b.bootstrap, "purge-seg", 1, {"segment.bytes": "4096"})
        produce(b.bootstrap, "purge-seg")
        log_dir = b.log_dir / "purge-seg-0"
        segments_before = sorted(p.name for p in log_dir.glob("*.log"))
        assert len(segments_before) > 3
        delete_confluent(b.bootstrap, "purge-seg", 70)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            bases = sorted(int(p.name[:20]) for p in log_dir.glob("*.log"))
            if bases[0] > 0:
                break
            time.sleep(0.1)
        assert 0 < bases[0] <= 70, bases  # only segments wholly below the start went
        b.restart()
        assert watermarks(b.bootstrap, "purge-seg") == (70, N)
        assert offsets_read(b.bootstrap, "purge-seg", N - 70) == list(range(70, N))
