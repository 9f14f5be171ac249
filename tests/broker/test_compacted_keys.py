"""A compacted topic refuses records without a key, as Kafka does (INVALID_RECORD, the whole
batch, the keyless records named in record_errors: tests/broker/test_record_validation.py),
whatever the codec; topics that only delete take them (real broker, real clients)."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from kio.schema.errors import ErrorCode

from brook.protocol.messages import make
from brook.records import Codec, Record, encode_batch
from tests.support.broker_harness import create_topic_confluent
from tests.support.kafka_wire import WireClient, request_class


def _produce(w: WireClient, topic: str, batch: bytes):
    cls = request_class(0, 9)
    mod = __import__(cls.__module__, fromlist=["x"])
    answer = w.request(make(cls, transactional_id=None, acks=1, timeout=timedelta(seconds=5), topic_data=(
        mod.TopicProduceData(name=topic, partition_data=(mod.PartitionProduceData(index=0, records=batch),)),)))
    return answer.responses[0].partition_responses[0]


def _records(keys: list[bytes | None]) -> list[Record]:
    now = int(time.time() * 1000)
    return [Record(i, now, k, b"value %d" % i) for i, k in enumerate(keys)]


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP, Codec.ZSTD])
def test_a_batch_with_a_keyless_record_is_refused_by_a_compacted_topic(broker, codec):
    topic = f"compacted-{codec.name.lower()}"
    create_topic_confluent(broker.bootstrap, topic, 1, {"cleanup.policy": "compact"})
    create_topic_confluent(broker.bootstrap, topic + "-both", 1, {"cleanup.policy": "compact,delete"})
    with WireClient(broker.bootstrap) as w:
        keyed = encode_batch(_records([b"a", b"b"]), codec=codec)
        assert _produce(w, topic, keyed).error_code == ErrorCode.none
        for name in (topic, topic + "-both"):
            part = _produce(w, name, encode_batch(_records([b"a", None, b"c"]), codec=codec))
            assert part.error_code == ErrorCode.invalid_record, name
            assert "Compacted topic cannot accept message without key" in part.error_message
        again = _produce(w, topic, keyed)  # nothing of the refused batch was written
        assert (again.error_code, again.base_offset) == (ErrorCode.none, 2)


def test_a_delete_topic_takes_keyless_records(broker):
    create_topic_confluent(broker.bootstrap, "plain", 1)
    with WireClient(broker.bootstrap) as w:
        part = _produce(w, "plain", encode_batch(_records([None, None])))
        assert part.error_code == ErrorCode.none


def test_confluent_producer_gets_invalid_record_for_a_keyless_message(broker):
    from confluent_kafka import KafkaError, Producer

    create_topic_confluent(broker.bootstrap, "table", 1, {"cleanup.policy": "compact"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    reports = []
    producer.produce("table", value=b"no key", on_delivery=lambda err, msg: reports.append(err))
    assert producer.flush(15) == 0  # a batch of its own: the whole batch is refused
    producer.produce("table", key=b"k", value=b"keyed", on_delivery=lambda err, msg: reports.append(err))
    assert producer.flush(15) == 0
    assert reports[0] is not None and reports[0].code() == KafkaError.INVALID_RECORD
    assert reports[1] is None
