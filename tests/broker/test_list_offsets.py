"""ListOffsets MAX_TIMESTAMP (-3) through the broker with a real client: the offset of the
record with the largest timestamp itself (Kafka 3.8, KAFKA-16310), not the last offset of the
batch that holds it."""

from __future__ import annotations

import time

from tests.support.broker_harness import confluent_config


def test_max_timestamp_answers_the_record_inside_its_batch(broker):
    from confluent_kafka import Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

    admin = AdminClient(confluent_config(broker.bootstrap))
    topic = "max-timestamp"
    admin.create_topics([NewTopic(topic, 1, 1)], request_timeout=10)[topic].result(10)
    base = int(time.time() * 1000) - 60_000
    # One batch (one flush, a long linger, lz4): the largest timestamp is the second record's
    # and again the fourth's; the batch's last record is older.
    offsets = [5_000, 9_000, 7_000, 9_000, 8_000]
    producer = Producer(confluent_config(broker.bootstrap, **{
        "linger.ms": 1_000, "compression.type": "lz4", "acks": "all"}))
    for i, delta in enumerate(offsets):
        producer.produce(topic, value=b"v%d" % i, partition=0, timestamp=base + delta)
    assert producer.flush(30) == 0
    tp = TopicPartition(topic, 0)
    result = admin.list_offsets({tp: OffsetSpec.max_timestamp()}, request_timeout=10)[tp].result(10)
    assert (result.offset, result.timestamp) == (1, base + 9_000)
    # A later batch with an older timestamp changes nothing.
    producer.produce(topic, value=b"late", partition=0, timestamp=base + 1_000)
    assert producer.flush(30) == 0
    result = admin.list_offsets({tp: OffsetSpec.max_timestamp()}, request_timeout=10)[tp].result(10)
    assert (result.offset, result.timestamp) == (1, base + 9_000)
