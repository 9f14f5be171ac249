"""kafka-python told to speak to an older broker (``api_version``) against a real broker: the
versions Kafka 4.0 dropped that it then sends (ListOffsets v0, OffsetCommit v0-v2, OffsetFetch
v0-v1, Metadata v0-v1, FindCoordinator v0) are answered, and below api_version 0.11 it produces
legacy message sets (Produce v0-v2) and consumes them (Fetch v0-v3), which brook converts to
and from its v2 log: what it produces with each codec is read back whole, in a group with
commits, and across formats with a current confluent-kafka client both ways."""

from __future__ import annotations

import io
import logging
import re
import time
import uuid
from contextlib import contextmanager

import pytest

kafka = pytest.importorskip("kafka")
from kafka import KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402
from kafka.structs import OffsetAndMetadata  # noqa: E402

SENT = re.compile(r"Sending request \d+ (\w+)Request\(version=(\d+)")


@contextmanager
def requests_sent():
    """The (API name, version) pairs kafka-python sends meanwhile, from its debug log."""
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setLevel(logging.DEBUG)
    logger = logging.getLogger("kafka")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    sent: set[tuple[str, int]] = set()
    try:
        yield sent
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        sent.update((name, int(v)) for name, v in SENT.findall(buf.getvalue()))


def produce(bootstrap, topic, n, **kw):
    producer = KafkaProducer(bootstrap_servers=bootstrap, **kw)
    for i in range(n):
        producer.send(topic, b"v%d" % i, partition=0)
    producer.flush()
    producer.close()


@pytest.mark.parametrize("api_version", [(0, 11), None], ids=["0.11", "detected"])
def test_produce_consume_in_a_group_and_commit(broker, api_version):
    topic, group = f"kp-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    kw = {} if api_version is None else {"api_version": api_version}
    produce(broker.bootstrap, topic, 20, **kw)
    consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=15_000, **kw)
    values = []
    for message in consumer:
        values.append(message.value)
        if len(values) == 20:
            break
    consumer.commit()
    tp = TopicPartition(topic, 0)
    assert values == [b"v%d" % i for i in range(20)]
    assert consumer.committed(tp) == 20
    consumer.close()
    again = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group, **kw)
    assert again.committed(tp) == 20
    again.close()


# (api_version, what it sends for commit / committed / end_offsets that Kafka 4.0 dropped)
OLD = [
    ((0, 10, 0), {("OffsetCommit", 2), ("OffsetFetch", 1), ("ListOffsets", 0)}),
    ((0, 9), {("OffsetCommit", 2), ("Metadata", 0), ("ListOffsets", 0), ("FindCoordinator", 0)}),
    ((0, 8, 2), {("OffsetCommit", 1), ("OffsetFetch", 1), ("ListOffsets", 0)}),
    ((0, 8, 1), {("OffsetCommit", 0), ("OffsetFetch", 0), ("ListOffsets", 0)}),
]


@pytest.mark.parametrize("api_version, expected", OLD, ids=[".".join(map(str, v)) for v, _ in OLD])
def test_offsets_and_commits_at_old_versions(broker, api_version, expected):
    topic, group = f"ko-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    produce(broker.bootstrap, topic, 10)
    tp = TopicPartition(topic, 0)
    with requests_sent() as sent:
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group,
                                 enable_auto_commit=False, api_version=api_version)
        consumer.assign([tp])
        assert consumer.end_offsets([tp]) == {tp: 10}
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        consumer.commit({tp: OffsetAndMetadata(7, "meta", -1)})
        assert consumer.committed(tp) == 7
        consumer.close()
    assert expected <= sent, sent
    # one store of committed offsets: a current client reads what the old one committed
    current = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group)
    assert current.committed(tp) == 7
    current.close()


# --- message format conversion (api_version below 0.11) --------------------------------------

# (api_version, the Produce and Fetch versions kafka-python then sends)
LEGACY_FORMATS = [((0, 9), 1, 1), ((0, 10, 0), 2, 2), ((0, 10, 1), 2, 3)]
LEGACY_CODECS = [None, "gzip", "snappy", "lz4"]  # zstd needs api_version 2.1


@pytest.mark.parametrize("api_version, produce_version, fetch_version", LEGACY_FORMATS,
                         ids=[".".join(map(str, v)) for v, _, _ in LEGACY_FORMATS])
def test_legacy_formats_produce_each_codec_and_consume_in_a_group(broker, api_version,
                                                                  produce_version, fetch_version):
    topic, group = f"kl-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    sent = []
    with requests_sent() as requests:
        for codec in LEGACY_CODECS:
            producer = KafkaProducer(bootstrap_servers=broker.bootstrap, api_version=api_version,
                                     compression_type=codec, linger_ms=20)
            for i in range(15):
                key, value = b"%s-%d" % (str(codec).encode(), i), b"value %d " % i * (i + 1)
                producer.send(topic, value, key=key, partition=0)
                sent.append((key, value))
            producer.flush()
            producer.close()
        consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                                 api_version=api_version, auto_offset_reset="earliest",
                                 enable_auto_commit=False, consumer_timeout_ms=15_000)
        got = []
        for message in consumer:
            got.append(message)
            if len(got) == len(sent):
                break
        consumer.commit()
        consumer.close()
    assert [(m.key, m.value) for m in got] == sent
    assert [m.offset for m in got] == list(range(len(sent)))
    if api_version >= (0, 10):  # magic 1 carries the producer's timestamps
        assert all(m.timestamp > 0 for m in got)
    assert {("Produce", produce_version), ("Fetch", fetch_version)} <= requests, requests
    again = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group, api_version=api_version)
    assert again.committed(TopicPartition(topic, 0)) == len(sent)
    again.close()


def test_produced_as_v0_read_by_a_current_client_and_the_reverse(broker):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    old_topic, new_topic = f"kx-{uuid.uuid4().hex[:6]}", f"kx-{uuid.uuid4().hex[:6]}"
    sent = [(b"k%d" % i, b"v%d" % i) for i in range(30)]
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, api_version=(0, 9),
                             compression_type="gzip")
    for key, value in sent:
        producer.send(old_topic, value, key=key, partition=0)
    producer.flush()
    producer.close()
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "cx",
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition(old_topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < len(sent) and time.monotonic() < deadline:
        m = consumer.poll(1.0)
        if m is not None and m.error() is None:
            got.append((m.key(), m.value()))
    consumer.close()
    assert got == sent

    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap,
                                         "compression.type": "snappy", "linger.ms": 20})
    for key, value in sent:
        producer.produce(new_topic, value, key=key, partition=0)
    assert producer.flush(30) == 0
    old = KafkaConsumer(bootstrap_servers=broker.bootstrap, api_version=(0, 9),
                        auto_offset_reset="earliest", consumer_timeout_ms=15_000)
    old.assign([TopicPartition(new_topic, 0)])
    got = []
    for message in old:
        got.append((message.key, message.value))
        if len(got) == len(sent):
            break
    old.close()
    assert got == sent


def test_zstd_written_by_a_current_client_is_refused_to_a_legacy_consumer(broker):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic = f"kz-{uuid.uuid4().hex[:6]}"
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap,
                                         "compression.type": "zstd", "linger.ms": 50})
    for _ in range(20):  # (librdkafka sends a batch plain when compression would not shrink it)
        producer.produce(topic, b"x" * 1000, partition=0)
    assert producer.flush(30) == 0
    old = KafkaConsumer(bootstrap_servers=broker.bootstrap, api_version=(0, 10, 1),
                        auto_offset_reset="earliest")
    old.assign([TopicPartition(topic, 0)])
    with pytest.raises(kafka.errors.UnsupportedCompressionTypeError):
        for _ in range(20):
            old.poll(500)
    old.close()


def test_api_version_0_8_2_produces_v0_and_fetches_v0(broker):
    """Before consumer groups: Produce v0 and Fetch v0, each codec kafka-python has for magic 0."""
    topic = f"k8-{uuid.uuid4().hex[:6]}"
    sent = []
    with requests_sent() as requests:
        for codec in LEGACY_CODECS:
            producer = KafkaProducer(bootstrap_servers=broker.bootstrap, api_version=(0, 8, 2),
                                     compression_type=codec, linger_ms=20)
            for i in range(10):
                sent.append((b"%s-%d" % (str(codec).encode(), i), b"value %d" % i))
                producer.send(topic, sent[-1][1], key=sent[-1][0], partition=0)
            producer.flush()
            producer.close()
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, api_version=(0, 8, 2),
                                 auto_offset_reset="earliest", consumer_timeout_ms=15_000)
        consumer.assign([TopicPartition(topic, 0)])
        got = []
        for message in consumer:
            got.append((message.offset, message.key, message.value))
            if len(got) == len(sent):
                break
        consumer.close()
    assert got == [(i, k, v) for i, (k, v) in enumerate(sent)]
    assert {("Produce", 0), ("Fetch", 0)} <= requests, requests
