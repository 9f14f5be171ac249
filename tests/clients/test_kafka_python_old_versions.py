"""kafka-python told to speak to an older broker (``api_version``) against a real broker: the
versions Kafka 4.0 dropped that it then sends (ListOffsets v0, OffsetCommit v0-v2, OffsetFetch
v0-v1, Metadata v0-v1, FindCoordinator v0) are answered. Its Produce below v3 and Fetch below v4
(message-format conversion, for api_version below 0.11) are not served yet: records are
produced and consumed here at current versions or with api_version (0, 11)."""

from __future__ import annotations

import io
import logging
import re
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
