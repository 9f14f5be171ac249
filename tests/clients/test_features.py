"""Real clients against a brook broker process: offsets by time, auto-creation, errors for
partitions that do not exist, topic administration and configs, and Fetch long-polling."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from tests.support.broker_harness import (
    Record,
    check_round_trip,
    confluent_config,
    confluent_consume,
    confluent_produce,
    create_topic_confluent,
    partition_counts,
)

PARTITIONS = 4


# --- ListOffsets: earliest, latest, by timestamp ---------------------------------------------

N_TIMED = 1_000
STEP_MS = 10


@pytest.fixture(scope="module")
def timed_topic(broker):
    """1,000 records on partition 1 in batches of about 100 (lz4), timestamps base + 10*i,
    so that a timestamp lookup has to find records inside compressed batches."""
    topic = "offsets-by-time"
    create_topic_confluent(broker.bootstrap, topic, PARTITIONS)
    base = int(time.time() * 1000) - 3_600_000
    records = [Record(b"k%d" % i, b"v%d" % i, (), base + STEP_MS * i) for i in range(N_TIMED)]
    delivery = confluent_produce(broker.bootstrap, topic, records, "lz4", partition=1,
                                 **{"batch.num.messages": 100, "linger.ms": 50})
    assert not delivery.errors, delivery.errors[:3]
    assert [o for _, o in delivery.positions] == list(range(N_TIMED))
    return topic, base


def _lookups(base):
    """(target timestamp, expected offset or None for 'no such record')."""
    last = base + STEP_MS * (N_TIMED - 1)
    return [
        (base - 5_000, 0),  # before the first record: the first record
        (base, 0),
        (base + STEP_MS * 437, 437),  # exactly a record's timestamp, inside a batch
        (base + STEP_MS * 437 - 3, 437),  # between two records: the later one
        (base + STEP_MS * 100 + 1, 101),
        (last, N_TIMED - 1),
        (last + 1, None),  # after the last record: none
    ]


def test_list_offsets_confluent(broker, timed_topic):
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    topic, base = timed_topic
    consumer = Consumer(confluent_config(broker.bootstrap, **{"group.id": "brook-tests-lo"}))
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 1), timeout=10) == (0, N_TIMED)
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 0)
        for ts, want in _lookups(base):
            (tp,) = consumer.offsets_for_times([TopicPartition(topic, 1, ts)], timeout=10)
            assert tp.error is None, tp.error
            assert tp.offset == (want if want is not None else -1), (ts - base, tp.offset, want)
    finally:
        consumer.close()

    admin = AdminClient(confluent_config(broker.bootstrap))
    tp = TopicPartition(topic, 1)
    specs = {
        "earliest": (OffsetSpec.earliest(), 0),
        "latest": (OffsetSpec.latest(), N_TIMED),
        "max_timestamp": (OffsetSpec.max_timestamp(), N_TIMED - 1),
        "for_timestamp": (OffsetSpec.for_timestamp(base + STEP_MS * 250), 250),
    }
    for name, (spec, want) in specs.items():
        result = admin.list_offsets({tp: spec}, request_timeout=10)[tp].result(10)
        assert result.offset == want, (name, result.offset, want)
        if name == "max_timestamp":
            assert result.timestamp == base + STEP_MS * (N_TIMED - 1)


def test_list_offsets_kafka_python(broker, timed_topic):
    from kafka import KafkaConsumer, TopicPartition

    topic, base = timed_topic
    tp = TopicPartition(topic, 1)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None,
                             enable_auto_commit=False)
    try:
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: N_TIMED}
        for ts, want in _lookups(base):
            found = consumer.offsets_for_times({tp: ts})[tp]
            if want is None:
                assert found is None, (ts - base, found)
            else:
                assert found is not None and found.offset == want, (ts - base, found, want)
                assert found.timestamp == base + STEP_MS * want
    finally:
        consumer.close()


def test_list_offsets_aiokafka(broker, timed_topic):
    from aiokafka import AIOKafkaConsumer, TopicPartition

    topic, base = timed_topic
    tp = TopicPartition(topic, 1)

    async def run():
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None,
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            assert await consumer.beginning_offsets([tp]) == {tp: 0}
            assert await consumer.end_offsets([tp]) == {tp: N_TIMED}
            for ts, want in _lookups(base):
                found = (await consumer.offsets_for_times({tp: ts}))[tp]
                if want is None:
                    assert found is None, (ts - base, found)
                else:
                    assert found is not None and found.offset == want, (ts - base, found, want)
                    assert found.timestamp == base + STEP_MS * want
        finally:
            await consumer.stop()

    asyncio.run(run())


# --- auto-creation -------------------------------------------------------------------------

def _records(n: int, tag: bytes) -> list[Record]:
    base = int(time.time() * 1000) - 60_000
    return [Record(b"%s-%d" % (tag, i), b"v%d" % i, (("h", tag),), base + i) for i in range(n)]


def test_produce_auto_creates_topic_confluent(broker):
    from confluent_kafka.admin import AdminClient

    topic = "auto-created-confluent"
    admin = AdminClient(confluent_config(broker.bootstrap))
    assert topic not in admin.list_topics(timeout=10).topics
    records = _records(200, b"cf")
    delivery = confluent_produce(broker.bootstrap, topic, records)
    meta = admin.list_topics(topic, timeout=10).topics[topic]
    assert meta.error is None and sorted(meta.partitions) == list(range(PARTITIONS))
    counts = partition_counts(delivery, PARTITIONS)
    check_round_trip(records, delivery, confluent_consume(broker.bootstrap, topic, counts))


def test_produce_auto_creates_topic_kafka_python(broker):
    from kafka import KafkaProducer

    topic = "auto-created-kafka-python"
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    try:
        md = producer.send(topic, key=b"k", value=b"v").get(timeout=30)
        assert md.offset == 0
        assert producer.partitions_for(topic) == set(range(PARTITIONS))
    finally:
        producer.close()


def test_produce_auto_creates_topic_aiokafka(broker):
    from aiokafka import AIOKafkaProducer

    topic = "auto-created-aiokafka"

    async def run():
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
        await producer.start()
        try:
            md = await producer.send_and_wait(topic, key=b"k", value=b"v")
            assert md.offset == 0
            assert await producer.partitions_for(topic) == set(range(PARTITIONS))
        finally:
            await producer.stop()

    asyncio.run(run())


# --- partitions and topics that do not exist -------------------------------------------------

def test_unknown_partition_confluent(broker):
    from confluent_kafka import KafkaError, KafkaException, Producer

    topic = "four-partitions"
    create_topic_confluent(broker.bootstrap, topic, PARTITIONS)
    producer = Producer(confluent_config(broker.bootstrap, **{"message.timeout.ms": 10_000}))
    errors = []
    try:
        producer.list_topics(topic, timeout=10)  # the client knows the topic has 4 partitions
        producer.produce(topic, value=b"x", partition=PARTITIONS + 3,
                         on_delivery=lambda err, msg: errors.append(err))
    except KafkaException as e:
        errors.append(e.args[0])
    producer.flush(15)
    # librdkafka refuses it locally from the broker's Metadata answer (4 partitions).
    assert len(errors) == 1 and errors[0] is not None, errors
    assert errors[0].code() == KafkaError._UNKNOWN_PARTITION, errors[0]


def test_unknown_topic_without_auto_creation(broker_factory):
    """With auto-creation off the broker answers UNKNOWN_TOPIC_OR_PARTITION for the topic:
    librdkafka's delivery report and metadata say so, and aiokafka raises it."""
    from confluent_kafka import KafkaError, Producer

    broker = broker_factory({"auto.create.topics.enable": "false"})
    producer = Producer(confluent_config(broker.bootstrap, **{
        "message.timeout.ms": 5_000, "topic.metadata.propagation.max.ms": 1_000}))
    errors = []
    producer.produce("no-such-topic", value=b"x", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(15)
    assert len(errors) == 1 and errors[0] is not None, errors
    assert errors[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART, errors[0]
    meta = producer.list_topics("no-such-topic", timeout=10).topics["no-such-topic"]
    assert meta.error is not None and meta.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART, meta

    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import UnknownTopicOrPartitionError

    async def run():
        aio = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, request_timeout_ms=3_000)
        await aio.start()
        try:
            with pytest.raises(UnknownTopicOrPartitionError):
                await aio.send_and_wait("no-such-topic", b"x")
        finally:
            await aio.stop()

    asyncio.run(run())


# --- topic administration and configs (confluent-kafka's AdminClient) -----------------------

def test_admin_create_describe_delete_topics(broker):
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

    admin = AdminClient(confluent_config(broker.bootstrap))
    name = "admin-topic"

    futures = admin.create_topics([
        NewTopic(name, num_partitions=3, replication_factor=1,
                 config={"retention.ms": "3600000", "cleanup.policy": "compact"}),
    ], operation_timeout=10)
    futures[name].result(15)
    meta = admin.list_topics(timeout=10).topics[name]
    assert sorted(meta.partitions) == [0, 1, 2]

    # Creating it again fails with TOPIC_ALREADY_EXISTS; a bad partition count is refused.
    with pytest.raises(KafkaException) as exc:
        admin.create_topics([NewTopic(name, 1, 1)])[name].result(15)
    assert exc.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    with pytest.raises(KafkaException) as exc:
        admin.create_topics([NewTopic("admin-bad", num_partitions=0,
                                      replication_factor=1)])["admin-bad"].result(15)
    assert exc.value.args[0].code() == KafkaError.INVALID_PARTITIONS
    # validate_only creates nothing.
    admin.create_topics([NewTopic("admin-dry", 2, 1)], validate_only=True)["admin-dry"].result(15)
    assert "admin-dry" not in admin.list_topics(timeout=10).topics

    # DescribeConfigs: set values are dynamic topic configs, the rest are Kafka's defaults.
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    configs = admin.describe_configs([resource])[resource].result(15)
    assert configs["retention.ms"].value == "3600000"
    assert not configs["retention.ms"].is_default
    assert configs["cleanup.policy"].value == "compact"
    assert configs["segment.bytes"].value == "1073741824"
    assert configs["segment.bytes"].is_default

    # IncrementalAlterConfigs changes one key and leaves the others.
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    resource = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=[
        ConfigEntry("retention.ms", "7200000",
                    incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(15)
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    configs = admin.describe_configs([resource])[resource].result(15)
    assert configs["retention.ms"].value == "7200000"
    assert configs["cleanup.policy"].value == "compact"

    # CreatePartitions grows the topic.
    admin.create_partitions([NewPartitions(name, 5)])[name].result(15)
    deadline = time.monotonic() + 10
    while len(admin.list_topics(name, timeout=10).topics[name].partitions) != 5:
        assert time.monotonic() < deadline, "the topic did not grow to 5 partitions"
        time.sleep(0.1)

    # DeleteTopics: gone from the metadata; deleting it again is UNKNOWN_TOPIC_OR_PARTITION.
    admin.delete_topics([name], operation_timeout=10)[name].result(15)
    deadline = time.monotonic() + 10
    while name in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, "the deleted topic is still in the metadata"
        time.sleep(0.1)
    with pytest.raises(KafkaException) as exc:
        admin.delete_topics([name], operation_timeout=10)[name].result(15)
    assert exc.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_admin_describe_broker_configs(broker):
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient(confluent_config(broker.bootstrap))
    broker_id = next(iter(admin.list_topics(timeout=10).brokers))
    resource = ConfigResource(ConfigResource.Type.BROKER, str(broker_id))
    configs = admin.describe_configs([resource])[resource].result(15)
    assert configs["num.partitions"].value == str(PARTITIONS)
    assert not configs["num.partitions"].is_default  # set by --override


# --- Fetch long-poll -----------------------------------------------------------------------

MAX_WAIT_MS = 10_000


def _produce_later(bootstrap, topic, partition, delay):
    """After ``delay`` seconds, produce one record; returns a dict filled with its ack time."""
    from confluent_kafka import Producer

    acked: dict = {}

    def run():
        time.sleep(delay)
        producer = Producer(confluent_config(bootstrap, **{"linger.ms": 0}))
        producer.produce(topic, key=b"late", value=b"arrived", partition=partition,
                         on_delivery=lambda err, msg: acked.update(err=err, at=time.monotonic()))
        producer.flush(10)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    acked["thread"] = thread
    return acked


def _assert_woken(acked, received_at, client):
    acked["thread"].join(15)
    assert acked.get("err") is None and "at" in acked, f"the late record was not acked: {acked}"
    latency = received_at - acked["at"]
    assert latency < 1.5, (
        f"{client} received the record {latency:.2f}s after it was acknowledged; a waiting "
        f"Fetch (max wait {MAX_WAIT_MS} ms) should be answered as soon as data arrives"
    )


def test_fetch_long_poll_confluent(broker):
    from confluent_kafka import OFFSET_END, Consumer, TopicPartition

    topic = "long-poll-confluent"
    create_topic_confluent(broker.bootstrap, topic, PARTITIONS)
    consumer = Consumer(confluent_config(broker.bootstrap, **{
        "group.id": "brook-tests-long-poll", "enable.auto.commit": False,
        "fetch.wait.max.ms": MAX_WAIT_MS, "fetch.min.bytes": 1}))
    try:
        consumer.assign([TopicPartition(topic, 2, OFFSET_END)])
        assert consumer.poll(2.0) is None  # the consumer now waits in a Fetch on the broker
        acked = _produce_later(broker.bootstrap, topic, 2, 0.5)
        msg = None
        deadline = time.monotonic() + MAX_WAIT_MS / 1000 + 5
        while msg is None and time.monotonic() < deadline:
            msg = consumer.poll(0.05)
        received_at = time.monotonic()
        assert msg is not None and msg.error() is None, msg and msg.error()
        assert (msg.key(), msg.value()) == (b"late", b"arrived")
        _assert_woken(acked, received_at, "confluent-kafka")
    finally:
        consumer.close()


def test_fetch_long_poll_kafka_python(broker):
    from kafka import KafkaConsumer, TopicPartition

    topic = "long-poll-kafka-python"
    create_topic_confluent(broker.bootstrap, topic, PARTITIONS)
    tp = TopicPartition(topic, 3)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None,
                             enable_auto_commit=False, fetch_max_wait_ms=MAX_WAIT_MS,
                             fetch_min_bytes=1, request_timeout_ms=MAX_WAIT_MS + 20_000)
    try:
        consumer.assign([tp])
        consumer.seek_to_end(tp)
        assert consumer.poll(timeout_ms=2000) == {}
        acked = _produce_later(broker.bootstrap, topic, 3, 0.5)
        got = []
        deadline = time.monotonic() + MAX_WAIT_MS / 1000 + 5
        while not got and time.monotonic() < deadline:
            got = consumer.poll(timeout_ms=50).get(tp, [])
        received_at = time.monotonic()
        assert [(m.key, m.value) for m in got] == [(b"late", b"arrived")]
        _assert_woken(acked, received_at, "kafka-python")
    finally:
        consumer.close()


def test_fetch_long_poll_aiokafka(broker):
    from aiokafka import AIOKafkaConsumer, TopicPartition

    topic = "long-poll-aiokafka"
    create_topic_confluent(broker.bootstrap, topic, PARTITIONS)
    tp = TopicPartition(topic, 0)

    async def run():
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None,
                                    enable_auto_commit=False, fetch_max_wait_ms=MAX_WAIT_MS,
                                    fetch_min_bytes=1, request_timeout_ms=MAX_WAIT_MS + 20_000)
        await consumer.start()
        try:
            consumer.assign([tp])
            await consumer.seek_to_end(tp)
            assert await consumer.getmany(tp, timeout_ms=2000) == {}
            acked = _produce_later(broker.bootstrap, topic, 0, 0.5)
            got = []
            deadline = time.monotonic() + MAX_WAIT_MS / 1000 + 5
            while not got and time.monotonic() < deadline:
                got = (await consumer.getmany(tp, timeout_ms=50)).get(tp, [])
            received_at = time.monotonic()
            assert [(m.key, m.value) for m in got] == [(b"late", b"arrived")]
            return acked, received_at
        finally:
            await consumer.stop()

    acked, received_at = asyncio.run(run())
    _assert_woken(acked, received_at, "aiokafka")
