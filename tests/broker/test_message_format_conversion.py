"""Produce v0-v2 and Fetch v0-v3 at the protocol level against a real broker process: legacy
message sets (magic 0 and 1, plain and compressed) up-converted into the v2 log, stored v2
batches down-converted for old consumers, with Kafka 3.9's validation, errors and byte limits."""

from __future__ import annotations

import time

import pytest
from kio.schema.errors import ErrorCode

from brook.protocol.messages import make
from brook.records import Record, decode_message_set, encode_batch, encode_message_set, iter_batches
from brook.records.batch import LOG_APPEND_TIME
from brook.records.compression import Codec
from brook.records.legacy import NO_TIMESTAMP_TYPE, LegacyMessage
from tests.support.kafka_wire import WireClient
from tests.support.wire_requests import create_topic, fetch_request, produce, req_mod

LEGACY_CODECS = [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4]
MAGIC_OF_PRODUCE = {0: 0, 1: 0, 2: 1}  # what clients of each Produce version send
MAGIC_OF_FETCH = {0: 0, 1: 0, 2: 1, 3: 1}


@pytest.fixture
def client(broker):
    with WireClient(broker.bootstrap) as c:
        yield c


def now_ms() -> int:
    return int(time.time() * 1000)


def messages(n: int, magic: int, ts: int | None = None, start: int = 0) -> list[LegacyMessage]:
    ts = now_ms() if ts is None else ts
    return [LegacyMessage(start + i, magic, timestamp=ts + i if magic else -1, key=b"k%d" % i,
                          value=b"value-%d" % i) for i in range(n)]


def fetch_current(client, topic, offset=0, partition=0) -> list[Record]:
    """The records stored, read as a current consumer reads them (Fetch v12)."""
    resp = client.request(fetch_request(topic, {partition: offset}))
    p = resp.responses[0].partitions[0]
    assert p.error_code == ErrorCode.none
    return [r for b in iter_batches(p.records or b"") for r in b.records]


def fetch_old(client, topic, version, offsets: dict[int, int], partition_max_bytes=1 << 20,
              max_bytes=50 << 20):
    resp = client.request(fetch_request(topic, offsets, version=version,
                                        partition_max_bytes=partition_max_bytes, max_bytes=max_bytes))
    return {p.partition_index: p for p in resp.responses[0].partitions}


def produce_old(client, topic, records: bytes, version: int, partition=0):
    return produce(client, topic, {partition: records}, version=version)[partition]


# --- ApiVersions ----------------------------------------------------------------------------


def test_api_versions_advertise_produce_and_fetch_from_v0(client):
    m = req_mod(18, 3)
    resp = client.request(make(m.ApiVersionsRequest, client_software_name="t", client_software_version="1"))
    versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert versions[0][0] == 0 and versions[1][0] == 0


# --- Produce v0-v2 ----------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2])
@pytest.mark.parametrize("codec", LEGACY_CODECS, ids=lambda c: c.name.lower())
def test_produce_legacy_messages_are_stored_as_v2_batches(client, version, codec):
    topic = f"p{version}-{codec.name.lower()}"
    assert create_topic(client, topic).error_code == 0
    magic = MAGIC_OF_PRODUCE[version]
    sent = messages(5, magic, start=100)  # the producer's offsets are ignored
    first = produce_old(client, topic, encode_message_set(sent, magic, codec), version)
    assert (first.error_code, first.base_offset) == (ErrorCode.none, 0)
    second = produce_old(client, topic, encode_message_set(sent[:2], magic, codec), version)
    assert (second.error_code, second.base_offset) == (ErrorCode.none, 5)
    stored = fetch_current(client, topic)
    assert [(r.offset, r.key, r.value) for r in stored] == \
        [(i, m.key, m.value) for i, m in enumerate(sent + sent[:2])]
    assert [r.timestamp for r in stored] == [m.timestamp for m in sent + sent[:2]]
    resp = client.request(fetch_request(topic, {0: 0}))
    codecs = {b.compression for b in iter_batches(resp.responses[0].partitions[0].records)}
    assert codecs == {codec}  # a wrapper's codec is kept; plain messages stay plain


def test_produce_v2_answers_log_append_time(client):
    assert create_topic(client, "lat", configs=[("message.timestamp.type", "LogAppendTime")]).error_code == 0
    before = now_ms()
    p = produce_old(client, "lat", encode_message_set(messages(2, 1, ts=5), 1, Codec.GZIP), 2)
    assert p.error_code == ErrorCode.none
    assert before <= p.log_append_time.timestamp() * 1000 <= now_ms() + 1
    stored = fetch_current(client, "lat")
    resp = client.request(fetch_request("lat", {0: 0}))
    [b] = iter_batches(resp.responses[0].partitions[0].records)
    assert b.timestamp_type == LOG_APPEND_TIME and b.max_timestamp >= before
    assert [r.value for r in stored] == [b"value-0", b"value-1"]
    create_topic(client, "ct")
    assert produce_old(client, "ct", encode_message_set(messages(1, 1), 1), 2).log_append_time is None


def test_produce_v0_and_v1_answer_without_log_append_time(client):
    create_topic(client, "noappend")
    for version in (0, 1):
        p = produce_old(client, "noappend", encode_message_set(messages(1, 0), 0), version)
        assert p.error_code == ErrorCode.none and not hasattr(p, "log_append_time")


def corrupt(data: bytes, at: int) -> bytes:
    return data[:at] + bytes((data[at] ^ 0xFF,)) + data[at + 1:]


def test_produce_legacy_refusals(client):
    create_topic(client, "bad")
    plain = encode_message_set(messages(2, 1), 1)
    gz = encode_message_set(messages(2, 1), 1, Codec.GZIP)
    cases = {
        "bad crc": (corrupt(plain, len(plain) - 1), ErrorCode.corrupt_message),
        "cut short": (plain[:-3], ErrorCode.corrupt_message),
        "two wrappers": (gz + gz, ErrorCode.invalid_record),
        "wrapper and plain": (gz + plain, ErrorCode.invalid_record),
        "mixed magic": (encode_message_set(messages(1, 0), 0) + plain, ErrorCode.invalid_record),
        "zstd": (_legacy_zstd_wrapper(), ErrorCode.invalid_record),  # as Kafka: no such wrapper
        "in the future": (encode_message_set(messages(1, 1, ts=now_ms() + 7_200_000), 1),
                          ErrorCode.invalid_timestamp),
    }
    for name, (records, code) in cases.items():
        assert produce_old(client, "bad", records, 2).error_code == code, name
    assert fetch_current(client, "bad") == []  # nothing of it was stored
    # a compacted topic refuses a message without a key, as it refuses such a record
    create_topic(client, "bad-compacted", configs=[("cleanup.policy", "compact")])
    keyless = encode_message_set([LegacyMessage(0, 0, value=b"v")], 0)
    assert produce_old(client, "bad-compacted", keyless, 0).error_code == ErrorCode.invalid_record


def _legacy_zstd_wrapper() -> bytes:
    """A magic-1 wrapper whose attributes name zstd (codec 4), which no legacy magic has."""
    import struct
    import zlib
    body = struct.pack(">bBq", 1, 4, now_ms()) + struct.pack(">i", -1) + struct.pack(">i", 3) + b"abc"
    return struct.pack(">qiI", 0, 4 + len(body), zlib.crc32(body)) + body


def test_produce_v2_still_takes_a_v2_batch(client):
    """Kafka does not hold Produce v0-v2 to legacy messages: a v2 batch is stored as it is."""
    create_topic(client, "v2in")
    p = produce(client, "v2in", {0: encode_batch([Record(0, now_ms(), b"k", b"v")])}, version=2)[0]
    assert p.error_code == ErrorCode.none
    assert [r.value for r in fetch_current(client, "v2in")] == [b"v"]


# --- Fetch v0-v3 ------------------------------------------------------------------------------


def stored_batch(codec: Codec, n: int = 4, ts: int | None = None, start: int = 0, **kw) -> bytes:
    ts = now_ms() if ts is None else ts
    return encode_batch([Record(start + i, ts + i, b"k%d" % i, b"value-%d" % i, (("h", b"x"),))
                         for i in range(n)], codec=codec, **kw)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
@pytest.mark.parametrize("codec", LEGACY_CODECS, ids=lambda c: c.name.lower())
def test_fetch_down_converts_what_current_clients_wrote(client, version, codec):
    topic = f"f{version}-{codec.name.lower()}"
    create_topic(client, topic)
    ts = now_ms()
    for _ in range(2):
        assert produce(client, topic, {0: stored_batch(codec, ts=ts)})[0].error_code == 0
    p = fetch_old(client, topic, version, {0: 0})[0]
    assert (p.error_code, p.high_watermark) == (ErrorCode.none, 8)
    got = decode_message_set(p.records)
    magic = MAGIC_OF_FETCH[version]
    assert {m.magic for m in got} == {magic}
    assert [(m.offset, m.key, m.value) for m in got] == \
        [(i, b"k%d" % (i % 4), b"value-%d" % (i % 4)) for i in range(8)]
    if magic == 0:
        assert {(m.timestamp, m.timestamp_type) for m in got} == {(-1, NO_TIMESTAMP_TYPE)}
    else:
        assert [m.timestamp for m in got] == [ts + i % 4 for i in range(8)]


def test_fetch_v3_of_a_log_append_time_topic_gives_the_append_time(client):
    create_topic(client, "flat", configs=[("message.timestamp.type", "LogAppendTime")])
    before = now_ms()
    produce(client, "flat", {0: stored_batch(Codec.NONE, ts=5)})
    produce(client, "flat", {0: stored_batch(Codec.LZ4, ts=5)})
    got = decode_message_set(fetch_old(client, "flat", 3, {0: 0})[0].records)
    assert len(got) == 8
    assert all(m.timestamp_type == LOG_APPEND_TIME and before <= m.timestamp <= now_ms() for m in got)


def test_fetch_from_inside_a_batch(client):
    """Kafka's offsets: a plain batch is sent from the fetch offset, a compressed one whole (the
    consumer skips what comes before the offset, as in a v2 batch)."""
    create_topic(client, "mid")
    produce(client, "mid", {0: stored_batch(Codec.NONE)})
    produce(client, "mid", {0: stored_batch(Codec.GZIP)})
    got = decode_message_set(fetch_old(client, "mid", 2, {0: 2})[0].records)
    assert [m.offset for m in got] == [2, 3, 4, 5, 6, 7]
    got = decode_message_set(fetch_old(client, "mid", 2, {0: 6})[0].records)
    assert [m.offset for m in got] == [4, 5, 6, 7]


def test_fetch_of_zstd_is_unsupported_compression_type(client):
    create_topic(client, "zs")
    produce(client, "zs", {0: stored_batch(Codec.ZSTD)})
    for version in range(4):
        p = fetch_old(client, "zs", version, {0: 0})[0]
        assert (p.error_code, p.records or b"") == (ErrorCode.unsupported_compression_type, b"")
    assert len(fetch_current(client, "zs")) == 4  # a current consumer reads it


def test_fetch_old_versions_honour_byte_limits(client):
    create_topic(client, "lim", 2)
    for part in (0, 1):
        for _ in range(5):
            produce(client, "lim", {part: stored_batch(Codec.NONE, n=10)})
    for version in range(4):
        magic = MAGIC_OF_FETCH[version]
        one = len(encode_message_set(messages(1, magic), magic))  # every message here is this long
        p = fetch_old(client, "lim", version, {0: 0}, partition_max_bytes=5 * one + one // 2)[0]
        assert len(p.records) <= 5 * one + one // 2
        assert [m.offset for m in decode_message_set(p.records)] == [0, 1, 2, 3, 4]
        # a limit below one message still sends the first one, so the consumer makes progress
        p = fetch_old(client, "lim", version, {0: 7}, partition_max_bytes=1)[0]
        assert [m.offset for m in decode_message_set(p.records)] == [7]
    one = len(encode_message_set(messages(1, 1), 1))
    # v3's limit on the whole response: the first partition takes it, the second gets nothing
    parts = fetch_old(client, "lim", 3, {0: 0, 1: 0}, partition_max_bytes=1 << 20, max_bytes=3 * one)
    assert [m.offset for m in decode_message_set(parts[0].records)] == [0, 1, 2]
    assert (parts[1].error_code, parts[1].records or b"") == (ErrorCode.none, b"")
    assert len(decode_message_set(fetch_old(client, "lim", 3, {0: 0, 1: 0})[1].records)) == 50


def test_fetch_v0_long_polls_until_data_arrives(broker, client):
    create_topic(client, "poll")
    body = fetch_request("poll", {0: 0}, version=0, max_wait_ms=5000)
    corr = client.send(body)
    time.sleep(0.2)
    with WireClient(broker.bootstrap) as other:
        produce_old(other, "poll", encode_message_set(messages(1, 0), 0), 0)
    resp = client.recv(1, 0, corr)
    got = decode_message_set(resp.responses[0].partitions[0].records)
    assert [m.value for m in got] == [b"value-0"]


def test_produce_v0_read_by_fetch_v3_and_v2_batches_by_fetch_v0(client):
    create_topic(client, "across")
    produce_old(client, "across", encode_message_set(messages(3, 0), 0, Codec.SNAPPY), 0)
    got = decode_message_set(fetch_old(client, "across", 3, {0: 0})[0].records)
    assert [(m.offset, m.magic, m.timestamp, m.value) for m in got] == \
        [(i, 1, -1, b"value-%d" % i) for i in range(3)]
    produce(client, "across", {0: stored_batch(Codec.GZIP, n=2)})
    got = decode_message_set(fetch_old(client, "across", 0, {0: 0})[0].records)
    assert [(m.offset, m.magic) for m in got] == [(i, 0) for i in range(5)]


def test_old_fetch_of_unknown_partition_and_bad_offset(client):
    create_topic(client, "errs")
    produce(client, "errs", {0: stored_batch(Codec.NONE)})
    assert fetch_old(client, "errs", 0, {0: 99})[0].error_code == ErrorCode.offset_out_of_range
    assert fetch_old(client, "errs", 1, {3: 0})[3].error_code == ErrorCode.unknown_topic_or_partition



def test_fetch_old_versions_refused_where_down_conversion_is_off(client):
    create_topic(client, "noconv", configs=[("message.downconversion.enable", "false")])
    produce(client, "noconv", {0: stored_batch(Codec.NONE)})
    for version in range(4):
        assert fetch_old(client, "noconv", version, {0: 0})[0].error_code == ErrorCode.unsupported_version
    assert len(fetch_current(client, "noconv")) == 4


def test_a_large_down_conversion_does_not_hold_up_other_connections(broker, client):
    """Conversion runs off the event loop: another connection is answered meanwhile."""
    create_topic(client, "big")
    batch = stored_batch(Codec.NONE, n=5000)
    for _ in range(40):  # 200,000 records: seconds of conversion
        assert produce(client, "big", {0: batch})[0].error_code == ErrorCode.none
    m = req_mod(18, 3)
    ping = make(m.ApiVersionsRequest, client_software_name="t", client_software_version="1")
    with WireClient(broker.bootstrap) as other:
        other.request(ping)
        started = time.monotonic()
        corr = client.send(fetch_request("big", {0: 0}, version=1, partition_max_bytes=64 << 20))
        time.sleep(0.1)  # the conversion is under way
        t0 = time.monotonic()
        other.request(ping)
        waited = time.monotonic() - t0
        resp = client.recv(1, 1, corr)
        took = time.monotonic() - started
    assert len(decode_message_set(resp.responses[0].partitions[0].records)) == 200_000
    assert waited < took / 2, (waited, took)  # blocked, it would wait about took - 0.1 s


@pytest.mark.parametrize("version,expected", [
    (1, ErrorCode.not_leader_or_follower), (5, ErrorCode.not_leader_or_follower),
    (6, ErrorCode.kafka_storage_error), (12, ErrorCode.kafka_storage_error)])
def test_a_storage_error_is_not_leader_or_follower_to_fetch_v5_and_older(tmp_path, version, expected):
    """Consumers of Fetch v0-v5 may not know KAFKA_STORAGE_ERROR (Kafka tells them
    NOT_LEADER_OR_FOLLOWER, so that they refresh their metadata and retry)."""
    from tests.broker.test_durable_acks import roundtrip
    from tests.support.socketpair_broker import run_broker
    from tests.support.wire_requests import fetch_request

    async def test(broker, conn, ours, theirs):
        broker.create_topic("t", 1)
        log = broker.partition("t", 0).log

        def read(*args, **kwargs):
            raise OSError(5, "Input/output error")

        log.read = read  # the disk under this partition fails
        answer = await roundtrip(theirs, fetch_request("t", {0: 0}, version=version), 1, version)
        assert answer.responses[0].partitions[0].error_code == expected

    run_broker(tmp_path, {}, test)
