"""Produce checks records, not only batch headers (a real broker, real clients).

A batch whose header and CRC are sound but whose records are garbage, or whose record count
lies, is refused INVALID_RECORD and nothing of it is stored: consumers of the partition go on
reading the good records after it. A compacted topic names each keyless record in
record_errors (KIP-467), and librdkafka fails only those. A compression bomb is refused
MESSAGE_TOO_LARGE without being inflated, while other clients are served."""

from __future__ import annotations

import struct
import threading
import time

import pytest
from kio.schema.errors import ErrorCode

from brook.records import Codec, Record, encode_batch
from brook.records.batch import ATTRIBUTES_OFFSET, CRC_OFFSET, HEADER_SIZE
from brook.records.compression import compress
from brook.records.crc import crc32c
from tests.records.test_compression import zstd_rle_bomb
from tests.support.broker_harness import create_topic_confluent, peak_rss_bytes
from tests.support.kafka_wire import WireClient
from tests.support.wire_requests import produce, req_mod
from brook.protocol.messages import make


def _records(n: int, key=b"k") -> list[Record]:
    now = int(time.time() * 1000)
    return [Record(i, now, key, b"value %d" % i) for i in range(n)]


def _with_body(batch: bytes, body: bytes) -> bytes:
    out = bytearray(batch[:HEADER_SIZE] + body)
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">I", out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def _consume_all(bootstrap: str, topic: str, expected: int, timeout: float = 20.0) -> list[bytes]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(values) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
    finally:
        consumer.close()
    return values


def _latest_offset(w: WireClient, topic: str) -> int:
    m = req_mod(2, 7)
    body = make(m.ListOffsetsRequest, replica_id=-1, isolation_level=0, topics=(make(
        m.ListOffsetsTopic, name=topic, partitions=(make(
            m.ListOffsetsPartition, partition_index=0, current_leader_epoch=-1, timestamp=-1),)),))
    return w.request(body).topics[0].partitions[0].offset


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP, Codec.ZSTD])
def test_garbage_records_are_refused_and_consumers_read_the_good_ones_after(broker, codec):
    topic = f"garbage-{codec.name.lower()}"
    create_topic_confluent(broker.bootstrap, topic, 1)
    good = encode_batch(_records(10), codec=codec)
    garbage = b"\x85\x01" * 1000
    bad = _with_body(good, compress(codec, garbage) if codec else garbage)
    with WireClient(broker.bootstrap) as w:
        assert produce(w, topic, {0: good})[0].error_code == ErrorCode.none
        refused = produce(w, topic, {0: bad})[0]
        assert refused.error_code == ErrorCode.invalid_record
        assert "do not decode" in refused.error_message
        after = produce(w, topic, {0: encode_batch(_records(5), codec=codec)})[0]
        assert (after.error_code, after.base_offset) == (ErrorCode.none, 10)
    assert len(_consume_all(broker.bootstrap, topic, 15)) == 15  # librdkafka reads on past it


def test_a_record_count_that_lies_leaves_the_high_watermark(broker):
    create_topic_confluent(broker.bootstrap, "count-lies", 1)
    data = bytearray(encode_batch(_records(5)))
    struct.pack_into(">i", data, 23, 2**31 - 2)  # last offset delta
    struct.pack_into(">i", data, 57, 2**31 - 1)  # record count
    struct.pack_into(">I", data, CRC_OFFSET, crc32c(memoryview(data)[ATTRIBUTES_OFFSET:]))
    with WireClient(broker.bootstrap) as w:
        assert produce(w, "count-lies", {0: encode_batch(_records(3))})[0].error_code == ErrorCode.none
        assert produce(w, "count-lies", {0: bytes(data)})[0].error_code == ErrorCode.invalid_record
        assert _latest_offset(w, "count-lies") == 3


def test_record_errors_name_the_keyless_records_of_a_compacted_topic(broker):
    create_topic_confluent(broker.bootstrap, "named", 1, {"cleanup.policy": "compact"})
    records = _records(100)
    for r in records[::10]:
        r.key = None
    with WireClient(broker.bootstrap) as w:
        refused = produce(w, "named", {0: encode_batch(records)})[0]
        assert refused.error_code == ErrorCode.invalid_record
        assert [e.batch_index for e in refused.record_errors] == list(range(0, 100, 10))
        assert all("Compacted topic cannot accept message without key" in e.batch_index_error_message
                   for e in refused.record_errors)
        old = produce(w, "named", {0: encode_batch(records)}, version=7)[0]  # before v8: none
        assert old.error_code == ErrorCode.invalid_record and not getattr(old, "record_errors", ())


@pytest.mark.parametrize("one_per_batch", [False, True])
def test_librdkafka_fails_only_the_named_records(broker, one_per_batch):
    """librdkafka's 0011 test: of 100 messages to a compacted topic, the 10 without a key
    fail INVALID_RECORD. In one batch, the other 90 fail _INVALID_DIFFERENT_RECORD (not
    refused themselves: sent again, they are stored); one message a batch, they are stored."""
    from confluent_kafka import KafkaError, Producer

    topic = f"partial-{one_per_batch}"
    create_topic_confluent(broker.bootstrap, topic, 1, {"cleanup.policy": "compact"})
    config = {"bootstrap.servers": broker.bootstrap, "linger.ms": 500, "batch.num.messages": 1000}
    if one_per_batch:
        config["batch.size"] = 1
    producer = Producer(config)
    reports: dict[int, object] = {}

    def send(i: int) -> None:
        producer.produce(topic, key=None if i % 10 == 0 else b"k%d" % i, value=b"%d" % i,
                         partition=0, on_delivery=lambda err, msg: reports.__setitem__(i, err))

    for i in range(100):
        send(i)
    assert producer.flush(30) == 0
    codes = {i: None if err is None else err.code() for i, err in reports.items()}
    assert [i for i, c in codes.items() if c == KafkaError.INVALID_RECORD] == list(range(0, 100, 10))
    others = [i for i in range(100) if i % 10]
    if one_per_batch:
        assert all(codes[i] is None for i in others)
    else:
        assert all(codes[i] == KafkaError._INVALID_DIFFERENT_RECORD for i in others)
        for i in others:  # what an application does with them
            send(i)
        assert producer.flush(30) == 0
        assert all(reports[i] is None for i in others)
    assert sorted(_consume_all(broker.bootstrap, topic, 90), key=int) == [b"%d" % i for i in others]


def test_a_zstd_bomb_is_refused_without_inflating_and_others_are_served(broker):
    create_topic_confluent(broker.bootstrap, "bombs", 1, {"cleanup.policy": "compact"})
    bomb = _with_body(encode_batch(_records(1), codec=Codec.ZSTD), zstd_rle_bomb(8192))
    assert len(bomb) < 33_000  # 1 GiB inflated
    rss_before = peak_rss_bytes(broker.proc.pid)
    waits: list[float] = []
    stop = threading.Event()

    def bystander():
        m = req_mod(18, 3)
        with WireClient(broker.bootstrap) as w:
            while not stop.is_set():
                started = time.perf_counter()
                w.request(make(m.ApiVersionsRequest, client_software_name="b",
                               client_software_version="1"))
                waits.append(time.perf_counter() - started)

    thread = threading.Thread(target=bystander)
    thread.start()
    try:
        with WireClient(broker.bootstrap) as w:
            for _ in range(5):
                refused = produce(w, "bombs", {0: bomb})[0]
                assert refused.error_code == ErrorCode.message_too_large
                assert "1073741824 bytes" in refused.error_message
    finally:
        stop.set()
        thread.join()
    assert max(waits) < 0.5
    assert peak_rss_bytes(broker.proc.pid) - rss_before < 64 << 20


# What librdkafka sends, as applications use it: each case a producer setting, a topic
# config, or a kind of record. Records are (key, long value, short value, headers): each
# batch is a run of records of one size followed by records one byte shorter, the shape
# whose columnar walk read past an unpadded body and was refused.
_PLAIN = (b"k", b"v" * 11, b"v" * 10, None)
_CASES = {
    "plain": ({}, {}, _PLAIN),
    "gzip": ({"compression.type": "gzip"}, {}, _PLAIN),
    "snappy": ({"compression.type": "snappy"}, {}, _PLAIN),
    "lz4": ({"compression.type": "lz4"}, {}, _PLAIN),
    "zstd": ({"compression.type": "zstd"}, {}, _PLAIN),
    "idempotent": ({"enable.idempotence": True, "acks": "all"}, {}, _PLAIN),
    "log-append-time": ({}, {"message.timestamp.type": "LogAppendTime"}, _PLAIN),
    "compacted": ({"compression.type": "lz4"}, {"cleanup.policy": "compact"}, _PLAIN),
    "null-keys": ({}, {}, (None, b"v" * 11, b"v" * 10, None)),
    "zero-length-values": ({}, {}, (b"k", b"x", b"", None)),
    "null-values": ({}, {}, (b"k", b"x", None, None)),
    "headers": ({"compression.type": "zstd"}, {},
                (b"k", b"v" * 3, b"v" * 2, [("h", b"1"), ("e", b"")])),
}


@pytest.mark.parametrize("case", list(_CASES))
def test_librdkafka_batches_of_every_shape_are_taken(broker, case):
    """Every batch confluent-kafka makes is stored, whatever its settings and records: a run
    and shorter records after it (each batch flushed alone), then a stream of numbered records
    (keys modulo 97, as the crash tests send), then one large batch."""
    from confluent_kafka import Producer

    settings, topic_config, (key, long, short, headers) = _CASES[case]
    topic = f"shapes-{case}"
    create_topic_confluent(broker.bootstrap, topic, 1, topic_config)
    errors: list = []

    def report(err, msg):
        if err is not None:
            errors.append(err)

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50, **settings})
    sent = 0
    for shorter in range(1, 41):  # a run of 20, then 1..40 records a byte shorter, one batch
        for i in range(20 + shorter):
            producer.produce(topic, key=key, value=long if i < 20 else short, headers=headers,
                             partition=0, on_delivery=report)
        sent += 20 + shorter
        assert producer.flush(30) == 0
    stamp = int(time.time() * 1000) - 60_000
    for n in range(5000):  # and timestamps far apart: multi-byte timestamp deltas
        producer.produce(topic, key=str(n % 97).encode(), value=str(n).encode(), partition=0,
                         headers=headers, timestamp=stamp + 7 * n, on_delivery=report)
        if n % 500 == 0:
            producer.poll(0)
    sent += 5000
    assert producer.flush(30) == 0
    for n in range(20_000):  # one large batch (librdkafka's batch.num.messages is 10,000)
        producer.produce(topic, key=str(n % 97).encode(), value=b"%d" % n, partition=0,
                         on_delivery=report)
    sent += 20_000
    assert producer.flush(60) == 0
    assert errors == []
    assert len(_consume_all(broker.bootstrap, topic, sent, timeout=60)) == sent
    with open(broker.stderr_path, errors="replace") as err:
        assert f"produce to {topic}-0" not in err.read()
