"""Internal topics belong to the broker: no client writes, deletes, grows, reconfigures or
creates `__consumer_offsets` (real broker processes, hand-built requests)."""

from __future__ import annotations

import time
from datetime import timedelta

from kio.schema.errors import ErrorCode

from brook.protocol.messages import make
from brook.records import Record, encode_batch
from kafka_wire import WireClient, frame, request_class

OFFSETS = "__consumer_offsets"
BROKER = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 4}


def _with_offsets_topic(w: WireClient) -> None:
    """FindCoordinator creates __consumer_offsets, as the first group request does."""
    found = w.request(make(request_class(10, 4), key_type=0, coordinator_keys=("g",)))
    assert found.coordinators[0].error_code == ErrorCode.none


def _produce(w: WireClient, topic: str, batch: bytes, client_id: str = "wire-test"):
    cls = request_class(0, 9)
    mod = __import__(cls.__module__, fromlist=["x"])
    body = make(cls, transactional_id=None, acks=1, timeout=timedelta(seconds=5), topic_data=(
        mod.TopicProduceData(name=topic, partition_data=(mod.PartitionProduceData(index=0, records=batch),)),))
    w.correlation_id += 1
    w.send_raw(frame(body, w.correlation_id, client_id=client_id))
    return w.recv(0, 9, w.correlation_id).responses[0].partition_responses[0]


def test_no_client_id_may_write_an_internal_topic(broker_factory):
    broker = broker_factory(BROKER)
    batch = encode_batch([Record(0, int(time.time() * 1000), b"k", b"v")])
    with WireClient(broker.bootstrap) as w:
        _with_offsets_topic(w)
        for client_id in ("wire-test", "__admin_client"):  # Kafka's admin exemption is gone
            part = _produce(w, OFFSETS, batch, client_id)
            assert part.error_code == ErrorCode.invalid_topic_exception, client_id
            assert part.error_message == f"Cannot append to internal topic {OFFSETS}"
