"""brook.client.RangeReader against a real broker process: the rows it decodes equal what
confluent-kafka returns for the same data, and bad data, lost data and a broker that goes
away end in a clear error or a retry, never in wrong rows."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Consumer, Producer, TopicPartition
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.broker_harness import BrokerProcess, confluent_produce, create_topic_confluent, make_records
from brook.client import DataLossError, FetchSettings, RangeReader
from brook.records import CorruptRecordError

pytestmark = pytest.mark.timeout(600)
FEW = settings(max_examples=12, deadline=None,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
_names = itertools.count()


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("broker-range-reader"), overrides={
            "num.partitions": 1, "log.retention.check.interval.ms": 100}) as proc:
        yield proc


@pytest.fixture(scope="module")
def consumer(kafka):
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "range-reader-tests",
                  "enable.auto.commit": False, "enable.partition.eof": True,
                  "fetch.wait.max.ms": 50})
    yield c
    c.close()


def reader(kafka, **client) -> RangeReader:
    return RangeReader(FetchSettings.from_client({"bootstrap.servers": kafka.bootstrap, **client}))


def confluent_rows(consumer, topic: str, n: int) -> list[dict]:
    consumer.assign([TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.monotonic() + 60
    while len(out) < n and time.monotonic() < deadline:
        for m in consumer.consume(1000, timeout=0.5):
            if m.error():
                continue
            ts_type, ts = m.timestamp()
            out.append({"key": m.key(), "value": m.value(), "offset": m.offset(),
                        "timestamp": ts, "timestampType": 0 if ts_type == TIMESTAMP_CREATE_TIME else 1,
                        "headers": [{"key": k, "value": v} for k, v in m.headers()]
                        if m.headers() else None})
    return out


def brook_rows(batches) -> list[dict]:
    out = []
    for b in batches:
        millis = b.column("timestamp").cast("int64").to_pylist()
        for row, us in zip(b.to_pylist(), millis):
            assert (row["topic"], row["partition"]) == (row["topic"], 0)
            out.append({"key": row["key"], "value": row["value"], "offset": row["offset"],
                        "timestamp": us // 1000, "timestampType": row["timestampType"],
                        "headers": row["headers"]})
    return out


records = st.lists(st.tuples(
    st.one_of(st.none(), st.binary(max_size=30)),
    st.one_of(st.none(), st.just(b""), st.binary(max_size=300)),
    st.lists(st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=10))),
             max_size=2),
), min_size=1, max_size=60)


@FEW
@given(rows=records, codec=st.sampled_from(["none", "gzip", "snappy", "lz4", "zstd"]),
       linger=st.sampled_from([0, 20]))
def test_equals_confluent_kafka_on_the_same_data(kafka, consumer, rows, codec, linger):
    topic = f"same-{next(_names)}"
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "compression.type": codec,
                         "linger.ms": linger})
    for key, value, headers in rows:
        producer.produce(topic, key=key, value=value, headers=headers or None, partition=0)
    assert producer.flush(30) == 0
    expected = confluent_rows(consumer, topic, len(rows))
    assert len(expected) == len(rows)
    with reader(kafka) as r:
        got = brook_rows(r.read(topic, 0, 0, len(rows), include_headers=True))
    assert got == expected


def test_large_read_in_many_fetches_equals_confluent_kafka(kafka, consumer):
    create_topic_confluent(kafka.bootstrap, "large", partitions=1)
    confluent_produce(kafka.bootstrap, "large", make_records(30_000, seed=3), codec="lz4",
                      batch_size=20_000)
    expected = confluent_rows(consumer, "large", 30_000)
    with reader(kafka, **{"max.partition.fetch.bytes": "65536"}) as r:
        batches = list(r.read("large", 0, 0, 30_000, include_headers=True))
    assert len(batches) > 10
    assert brook_rows(batches) == expected
    with reader(kafka) as r:
        assert [o for b in r.read("large", 0, 1234, 5678) for o in b.column("offset").to_pylist()] \
            == list(range(1234, 5678))


def test_log_append_time_topics_equal_confluent_kafka(kafka, consumer):
    create_topic_confluent(kafka.bootstrap, "appended", partitions=1,
                           config={"message.timestamp.type": "LogAppendTime"})
    confluent_produce(kafka.bootstrap, "appended", make_records(2000, seed=4), codec="snappy")
    expected = confluent_rows(consumer, "appended", 2000)
    assert {r["timestampType"] for r in expected} == {1}
    with reader(kafka) as r:
        assert brook_rows(r.read("appended", 0, 0, 2000, include_headers=True)) == expected


def _segment(kafka, topic: str) -> Path:
    return sorted((kafka.log_dir / f"{topic}-0").glob("*.log"))[0]


def test_a_flipped_byte_on_disk_fails_the_read(kafka):
    create_topic_confluent(kafka.bootstrap, "flipped", partitions=1)
    confluent_produce(kafka.bootstrap, "flipped", make_records(500, seed=5))
    path = _segment(kafka, "flipped")
    with open(path, "r+b") as f:
        f.seek(200)
        byte = f.read(1)
        f.seek(200)
        f.write(bytes([byte[0] ^ 0x40]))
    with reader(kafka) as r, pytest.raises(CorruptRecordError, match="CRC"):
        list(r.read("flipped", 0, 0, 500))


def test_a_deleted_topic_is_data_loss(kafka):
    from confluent_kafka.admin import AdminClient

    create_topic_confluent(kafka.bootstrap, "deleted", partitions=1)
    confluent_produce(kafka.bootstrap, "deleted", make_records(100, seed=6))
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.delete_topics(["deleted"])["deleted"].result(30)
    with reader(kafka, **{"retry.backoff.ms": "10"}) as r:
        with pytest.raises(DataLossError, match="deleted-0 does not exist"):
            list(r.read("deleted", 0, 0, 100))
        assert list(r.read("deleted", 0, 0, 100, fail_on_data_loss=False)) == []


def test_a_broker_restarted_mid_read_is_retried(tmp_path):
    proc = BrokerProcess(tmp_path / "restarted", overrides={"num.partitions": 1})
    proc.start()
    try:
        create_topic_confluent(proc.bootstrap, "moving", partitions=1)
        confluent_produce(proc.bootstrap, "moving", make_records(20_000, seed=7))
        with reader(proc, **{"max.partition.fetch.bytes": "65536"}) as r:
            batches = r.read("moving", 0, 0, 20_000)
            first = next(batches)
            proc.restart()
            rest = list(batches)
        offsets = [o for b in [first, *rest] for o in b.column("offset").to_pylist()]
        assert offsets == list(range(20_000))
    finally:
        proc.close()


def test_settings_from_the_connector_options():
    s = FetchSettings.from_client({"bootstrap.servers": "a:1,b:2", "isolation.level":
                                   "read_uncommitted", "fetch.max.bytes": "1000", "linger.ms": "5"})
    assert s.bootstrap == (("a", 1), ("b", 2)) and not s.read_committed and s.fetch_max_bytes == 1000
    assert s.security.protocol == "PLAINTEXT"
    s = FetchSettings.from_client({"bootstrap.servers": "a:1", "security.protocol": "sasl_ssl",
                                   "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u",
                                   "sasl.password": "p", "ssl.ca.location": "/ca.pem"})
    assert (s.security.protocol, s.security.mechanism, s.security.username, s.security.ca_location) == (
        "SASL_SSL", "SCRAM-SHA-512", "u", "/ca.pem")
    with pytest.raises(ValueError, match="security.protocol=KERBEROS"):
        FetchSettings.from_client({"bootstrap.servers": "a:1", "security.protocol": "KERBEROS"})
    with pytest.raises(ValueError, match="sasl.mechanism=GSSAPI"):
        FetchSettings.from_client({"bootstrap.servers": "a:1", "security.protocol": "SASL_SSL"})


def test_fetch_answers_are_read_in_place_as_kio_writes_them():
    import io
    from datetime import timedelta
    import struct as st_

    from kio.index import load_payload_module
    from kio.schema.errors import ErrorCode
    from kio.serial import entity_writer
    from kio.static.constants import EntityType

    from brook.client.fetcher import parse_fetch_v11
    from brook.protocol.messages import response_class

    mod = load_payload_module(1, 11, EntityType.response)
    cls = response_class(1, 11)
    body = cls(throttle_time=timedelta(0), error_code=ErrorCode.none, session_id=0, responses=(
        mod.FetchableTopicResponse(topic="a", partitions=(
            mod.PartitionData(partition_index=0, error_code=ErrorCode.none, high_watermark=10,
                              last_stable_offset=8, log_start_offset=2,
                              aborted_transactions=(mod.AbortedTransaction(producer_id=7,
                                                                           first_offset=3),),
                              preferred_read_replica=-1, records=b"batches"),
            mod.PartitionData(partition_index=1, error_code=ErrorCode.offset_out_of_range,
                              high_watermark=-1, aborted_transactions=None,
                              preferred_read_replica=-1, records=None))),
        mod.FetchableTopicResponse(topic="b\u00e9", partitions=())))
    buf = io.BytesIO()
    buf.write(st_.pack(">i", 5))  # the response header: correlation id
    entity_writer(cls)(buf, body)
    error, partitions = parse_fetch_v11(memoryview(buf.getvalue()))
    assert error == ErrorCode.none
    (name0, p0), (name1, p1) = partitions
    assert (name0, p0.partition, p0.high_watermark, p0.last_stable_offset,
            p0.log_start_offset, p0.aborted_transactions, bytes(p0.records)) == (
        "a", 0, 10, 8, 2, [(7, 3)], b"batches")
    assert (name1, p1.error_code, p1.aborted_transactions, p1.records) == (
        "a", ErrorCode.offset_out_of_range, None, None)


# ------------------------------------------------------------------------ a leader that moves


def _fetch_answer(records: bytes | None, error=None, high: int = 10) -> memoryview:
    import io
    import struct as st_
    from datetime import timedelta

    from kio.index import load_payload_module
    from kio.schema.errors import ErrorCode
    from kio.serial import entity_writer
    from kio.static.constants import EntityType

    from brook.protocol.messages import response_class

    mod = load_payload_module(1, 11, EntityType.response)
    cls = response_class(1, 11)
    body = cls(throttle_time=timedelta(0), error_code=ErrorCode.none, session_id=0, responses=(
        mod.FetchableTopicResponse(topic="t", partitions=(mod.PartitionData(
            partition_index=0, error_code=error or ErrorCode.none, high_watermark=high,
            last_stable_offset=high, log_start_offset=0, aborted_transactions=(),
            preferred_read_replica=-1, records=records),)),))
    buf = io.BytesIO()
    buf.write(st_.pack(">i", 1))
    entity_writer(cls)(buf, body)
    return memoryview(buf.getvalue())


class _FakeBroker:
    """A connection whose Fetch answers come from a script."""

    def __init__(self, answers: list) -> None:
        self.answers = answers
        self.fetches = 0

    def send(self, body) -> None:
        self.fetches += 1

    def receive_raw(self, cls, timeout=None):
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    def close(self) -> None:
        pass


def test_a_leader_that_moves_is_found_again():
    from kio.schema.errors import ErrorCode

    from brook.records import Record, encode_batch

    data = encode_batch([Record(o, 1000 + o, None, b"v%d" % o) for o in range(10)])
    old = _FakeBroker([_fetch_answer(None, ErrorCode.not_leader_or_follower)])
    new = _FakeBroker([_fetch_answer(data)])
    leaders = iter([("old", 1), ("new", 2)])
    sleeps = []
    r = RangeReader(FetchSettings.from_client({"bootstrap.servers": "old:1"}),
                    sleep=sleeps.append)
    r._connections.update({("old", 1): old, ("new", 2): new})

    def find_leader(topic, partition):
        r._leaders[(topic, partition)] = leader = next(leaders)
        return leader

    r._find_leader = find_leader
    offsets = [o for b in r.read("t", 0, 0, 10) for o in b.column("offset").to_pylist()]
    assert offsets == list(range(10))
    assert (old.fetches, new.fetches, len(sleeps)) == (1, 1, 1)


def test_a_leader_that_never_answers_times_out_clearly():
    from kio.schema.errors import ErrorCode

    now = [0.0]
    broker = _FakeBroker([_fetch_answer(None, ErrorCode.leader_not_available)])
    r = RangeReader(FetchSettings.from_client({"bootstrap.servers": "a:1"}),
                    clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    r._connections[("a", 1)] = broker
    r._find_leader = lambda topic, partition: r._leaders.setdefault((topic, partition), ("a", 1))
    with pytest.raises(TimeoutError, match="t-0 at offset 0.*leader_not_available"):
        list(r.read("t", 0, 0, 10, poll_timeout_ms=1000))
