"""Hostile input against a real broker process: random, truncated, oversized and mutated
frames, and structurally valid requests of every API and version with random field values.

The broker must answer or close the offending connection, never die, never hold more than
``socket.request.max.bytes`` for one request, and keep serving a client that behaves while
the fuzzing goes on.
"""

from __future__ import annotations

import socket
import struct
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.examples import examples
from kio.static.primitive import Records

from brook.broker.handlers import registry
from brook.protocol import legacy
from brook.protocol.messages import make
from tests.support.broker_harness import BrokerProcess, peak_rss_bytes
from tests.support.kafka_wire import WireClient, request_class
from brook.records import Codec, LegacyMessage, Record, encode_batch, encode_message_set
from tests.support.wire_requests import create_topic, fetch_request, req_mod

MAX_REQUEST = 1 << 20
# Requests that create things are fuzzed too, but with sizes that keep the test quick.
st.register_type_strategy(Records, st.binary(max_size=2048))

APIS = sorted((key, version) for key, api in registry().items()
              for version in range(api.min_version, api.max_version + 1))
# The versions below Kafka 4's minimums (brook.protocol.legacy) and JoinGroup v0-1, served
# since brook went down to Kafka 3.9's minimums: fuzzed on their own as well, so that a
# hundred examples spread over every API still reach each of them.
OLD_APIS = [(key, version) for key, version in APIS
            if legacy.has(key, version) or (key == 11 and version < 2)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("fuzz"), overrides={
        "socket.request.max.bytes": MAX_REQUEST,
        "auto.create.topics.enable": "false",
        "offsets.topic.num.partitions": 2,
    }) as b:
        yield b


@pytest.fixture(scope="module")
def bystander(broker):
    """A well-behaved client on its own connection for the whole module."""
    with WireClient(broker.bootstrap) as c:
        create_topic(c, "steady", partitions=1)
        create_topic(c, "conv", partitions=1)  # message format conversion's own
        yield c


def still_serving(broker, bystander) -> None:
    assert broker.running, broker.stderr_tail()
    resp = bystander.request(fetch_request("steady", {0: 0}))
    assert resp.responses[0].partitions[0].error_code == 0


def exchange(broker, data: bytes, read_timeout: float = 0.15) -> None:
    """Send ``data`` on a fresh connection and read whatever comes back until the broker
    answers everything, closes, or goes quiet."""
    with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as sock:
        try:
            sock.sendall(data)
            sock.settimeout(read_timeout)
            while sock.recv(65536):
                pass
        except (socket.timeout, ConnectionResetError, BrokenPipeError):
            pass


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def valid_frame(key: int, version: int, body) -> bytes:
    encoder = WireClient.__new__(WireClient)
    encoder.correlation_id = 0
    return encoder.encode(body)


@st.composite
def structured_requests(draw, apis=APIS):
    key, version = draw(st.sampled_from(apis))
    body = draw(st.from_type(request_class(key, version)))
    return valid_frame(key, version, body)


@st.composite
def mutated_requests(draw, apis=APIS):
    data = bytearray(draw(structured_requests(apis))[4:])
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["flip", "cut", "insert", "count"]))
        pos = draw(st.integers(0, max(0, len(data) - 1)))
        if kind == "flip" and data:
            data[pos] ^= draw(st.integers(1, 255))
        elif kind == "cut":
            del data[pos:pos + draw(st.integers(1, 64))]
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        else:  # a huge or negative array/string length where one may be
            data[pos:pos + 4] = struct.pack(">i", draw(st.sampled_from(
                [-2, -1, 0x7FFFFFFF, 0x10000000, MAX_REQUEST])))
    return frame(bytes(data))


FUZZ = settings(max_examples=examples(100), deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow, HealthCheck.data_too_large])


@FUZZ
@given(request=structured_requests())
def test_valid_requests_with_random_values_are_answered(broker, bystander, request):
    exchange(broker, request)
    still_serving(broker, bystander)


@FUZZ
@given(request=mutated_requests())
def test_mutated_requests_are_answered_or_closed(broker, bystander, request):
    exchange(broker, request)
    still_serving(broker, bystander)


@FUZZ
@given(request=structured_requests(OLD_APIS))
def test_old_versions_with_random_values_are_answered(broker, bystander, request):
    exchange(broker, request)
    still_serving(broker, bystander)


@FUZZ
@given(request=mutated_requests(OLD_APIS))
def test_old_versions_mutated_are_answered_or_closed(broker, bystander, request):
    exchange(broker, request)
    still_serving(broker, bystander)


@FUZZ
@given(data=st.binary(max_size=512), length=st.one_of(
    st.none(), st.integers(-(1 << 31), (1 << 31) - 1)))
def test_random_bytes_and_wrong_lengths(broker, bystander, data, length):
    prefix = struct.pack(">i", len(data) if length is None else length)
    exchange(broker, prefix + data, read_timeout=0.2)
    still_serving(broker, bystander)


# --- message format conversion: legacy message sets produced, stored batches fetched old ------

payloads = st.one_of(st.none(), st.binary(max_size=40))


@st.composite
def legacy_produce_requests(draw):
    """Produce v0-v2 to "conv": legacy message sets, well formed or damaged, or v2 batches of
    any codec (zstd too, which Fetch v0-v3 then cannot convert)."""
    version = draw(st.integers(0, 2))
    n = draw(st.integers(1, 5))
    if draw(st.integers(0, 4)) == 0:
        records = encode_batch([Record(i, draw(st.integers(-1, 2**41)), draw(payloads), draw(payloads))
                                for i in range(n)], codec=draw(st.sampled_from(list(Codec))))
        version = 9
    else:
        magic = draw(st.integers(0, 1))
        msgs = [LegacyMessage(draw(st.integers(0, 9)), magic, timestamp=draw(st.integers(-1, 2**41)),
                              key=draw(payloads), value=draw(payloads)) for _ in range(n)]
        codec = draw(st.sampled_from([Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4]))
        data = bytearray(b"".join(encode_message_set([m], magic, codec) for m in msgs)
                         if draw(st.booleans()) else encode_message_set(msgs, magic, codec))
        for _ in range(draw(st.integers(0, 2))):  # damage, now and then
            pos = draw(st.integers(0, len(data) - 1))
            if draw(st.booleans()):
                data[pos] ^= draw(st.integers(1, 255))
            else:
                del data[pos:]
                data += draw(st.binary(max_size=8))
        records = bytes(data) or b"\0"
    m = req_mod(0, version)
    body = make(m.ProduceRequest, transactional_id=None, acks=1, timeout=timedelta(seconds=5),
                topic_data=(make(m.TopicProduceData, name="conv", partition_data=(
                    make(m.PartitionProduceData, index=0, records=records),)),))
    return valid_frame(0, version, body)


@st.composite
def legacy_fetch_requests(draw):
    version = draw(st.integers(0, 3))
    body = fetch_request("conv", {0: draw(st.integers(-1, 40))}, version=version,
                         partition_max_bytes=draw(st.integers(-1, 3000)),
                         max_bytes=draw(st.integers(-1, 5000)))
    return valid_frame(1, version, body)


@FUZZ
@given(requests=st.lists(st.one_of(legacy_produce_requests(), legacy_fetch_requests()),
                         min_size=1, max_size=4))
def test_legacy_message_sets_produced_and_fetched_are_answered(broker, bystander, requests):
    exchange(broker, b"".join(requests))
    still_serving(broker, bystander)


def test_the_fuzzing_left_the_broker_healthy_and_its_memory_bounded(broker, bystander):
    # Runs after the fuzz tests of this module (pytest keeps file order).
    before = peak_rss_bytes(broker.proc.pid)
    for size in (MAX_REQUEST + 1, 1 << 30, 0x7FFFFFFF):  # announced, never sent
        exchange(broker, struct.pack(">i", size) + b"\x00" * 64, read_timeout=0.2)
    for _ in range(20):  # at the limit: the broker holds at most one such frame per connection
        exchange(broker, frame(b"\x00\x12\x00\x00" + b"\x00" * (MAX_REQUEST - 4)),
                 read_timeout=0.2)
    still_serving(broker, bystander)
    grown = peak_rss_bytes(broker.proc.pid) - before
    assert grown < 16 * MAX_REQUEST, f"peak RSS grew by {grown} bytes"
    log = broker.stderr_path.read_text()
    assert "Traceback" not in log, log[log.index("Traceback") - 500:][:3000]
