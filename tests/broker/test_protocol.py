"""The broker's answers at the protocol level, with exact requests and error codes
(a real broker process; requests built with kio over a plain socket)."""

from __future__ import annotations

import socket
import struct
import threading
import time
import uuid
from datetime import timedelta

import pytest
from kio.schema.errors import ErrorCode

from brook.protocol.messages import make
from brook.records import Codec
from brook.records.legacy import LegacyMessage, encode_message_set
from tests.support.kafka_wire import WireClient, request_class
from tests.support.wire_requests import batch, create_topic, delete_topic, fetch_request, produce, req_mod

T0 = timedelta(0)


@pytest.fixture
def client(broker):
    with WireClient(broker.bootstrap) as c:
        yield c


def test_api_versions_at_an_unknown_version_is_answered_in_v0(client):
    client.send_raw(struct.pack(">ihhi", 10, 18, 99, 77) + b"\x00\x00")
    resp = client.recv(18, 0, 77)
    assert resp.error_code == ErrorCode.unsupported_version
    keys = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert keys[0] == (0, 11) and keys[1][0] == 0 and 18 in keys


def test_api_versions_lists_every_api(client):
    m = req_mod(18, 3)
    resp = client.request(make(m.ApiVersionsRequest, client_software_name="t", client_software_version="1"))
    assert resp.error_code == ErrorCode.none
    assert {0, 1, 2, 3, 18, 19, 20, 22, 32, 33, 37, 44, 60} <= {k.api_key for k in resp.api_keys}


def test_oversized_frame_closes_only_that_connection(broker, client):
    with WireClient(broker.bootstrap) as bad:
        bad.send_raw(struct.pack(">i", 200 * 1024 * 1024))  # over socket.request.max.bytes, no body
        assert bad.closed_by_peer()
    m = req_mod(3, 12)
    assert client.request(make(m.MetadataRequest, topics=(), allow_auto_topic_creation=False,
                               include_topic_authorized_operations=False)).brokers


@pytest.mark.parametrize("frame", [
    struct.pack(">hhi", 12345, 0, 1) + b"\x00\x00",  # unknown api key
    struct.pack(">hhi", 3, 99, 1) + b"\x00\x00",  # unsupported Metadata version
    struct.pack(">hhi", 0, 9, 1) + b"\xff" * 30,  # produce body that does not parse
    b"\x00\x01",  # shorter than a header
])
def test_bad_requests_close_the_connection_and_the_broker_keeps_serving(broker, client, frame):
    with WireClient(broker.bootstrap) as bad:
        bad.send_raw(struct.pack(">i", len(frame)) + frame)
        assert bad.closed_by_peer()
    assert "closing connection" in broker.stderr_tail()
    m = req_mod(18, 3)
    assert client.request(make(m.ApiVersionsRequest, client_software_name="t",
                               client_software_version="1")).error_code == ErrorCode.none


def test_pipelined_requests_are_answered_in_order(client):
    m = req_mod(18, 3)
    body = make(m.ApiVersionsRequest, client_software_name="t", client_software_version="1")
    ids = [client.send(body) for _ in range(50)]
    got = []
    for _ in ids:
        frame = client.recv_frame()
        got.append(struct.unpack_from(">i", frame)[0])
    assert got == ids


def test_produce_errors_are_per_partition_and_the_rest_is_applied(client):
    assert create_topic(client, "mixed", 3).error_code == ErrorCode.none
    good = batch(2)
    corrupt = bytearray(batch(2))
    corrupt[-1] ^= 0xFF  # the CRC no longer matches
    resp = produce(client, "mixed", {0: good, 1: bytes(corrupt), 7: batch(1)})
    assert resp[0].error_code == ErrorCode.none and resp[0].base_offset == 0
    assert resp[1].error_code == ErrorCode.corrupt_message
    assert resp[7].error_code == ErrorCode.unknown_topic_or_partition
    again = produce(client, "mixed", {0: batch(1)})
    assert again[0].base_offset == 2


def test_produce_takes_exactly_one_v2_batch_per_partition(client):
    """As Kafka: two batches, no batch, or a legacy message set are INVALID_RECORD, and
    nothing of them is written."""
    assert create_topic(client, "one-batch", 1).error_code == ErrorCode.none
    legacy = encode_message_set([LegacyMessage(0, 1, timestamp=1000, key=b"k", value=b"v")], magic=1)
    for records in (batch(1) + batch(1), b"", legacy):
        resp = produce(client, "one-batch", {0: records})
        assert resp[0].error_code == ErrorCode.invalid_record, records[:20]
    resp = produce(client, "one-batch", {0: batch(2)})
    assert resp[0].error_code == ErrorCode.none and resp[0].base_offset == 0


def test_zstd_needs_produce_v7(client):
    assert create_topic(client, "zstd-versions", 1).error_code == ErrorCode.none
    zstd = batch(2, codec=Codec.ZSTD)
    assert produce(client, "zstd-versions", {0: zstd}, version=6)[0].error_code == \
        ErrorCode.unsupported_compression_type
    ok = produce(client, "zstd-versions", {0: zstd}, version=7)[0]
    assert ok.error_code == ErrorCode.none and ok.base_offset == 0
    assert produce(client, "zstd-versions", {0: batch(1, codec=Codec.LZ4)}, version=3)[0].base_offset == 2


def test_large_produce_requests_round_trip(client):
    """Frames larger than the connection's shared receive buffer take another path."""
    create_topic(client, "large", 1, configs=[("max.message.bytes", str(4 << 20))])
    big = batch(4, value=bytes(range(256)) * 1024)  # ~1 MiB
    resp = produce(client, "large", {0: big})
    assert resp[0].error_code == ErrorCode.none and resp[0].base_offset == 0
    got = client.request(fetch_request("large", {0: 0}, partition_max_bytes=8 << 20))
    records = got.responses[0].partitions[0].records
    assert records[8:12] == big[8:12] and records[16:] == big[16:]  # as produced, but offset and epoch


def test_produce_size_limits(client):
    assert create_topic(client, "small", 1, configs=[("max.message.bytes", "200")]).error_code == ErrorCode.none
    resp = produce(client, "small", {0: batch(1, value=b"x" * 300)})
    assert resp[0].error_code == ErrorCode.message_too_large


def test_produce_with_log_append_time(client):
    create_topic(client, "lat", 1, configs=[("message.timestamp.type", "LogAppendTime")])
    before = time.time()
    resp = produce(client, "lat", {0: batch(1, ts=1000)})
    assert resp[0].error_code == ErrorCode.none
    assert resp[0].log_append_time is not None
    assert abs(resp[0].log_append_time.timestamp() - before) < 5


def test_acks_zero_gets_no_response_and_an_error_closes(broker, client):
    create_topic(client, "fire", 1)
    produce(client, "fire", {0: batch(1)}, acks=0)
    # the next response on the connection is for the next request: nothing was sent for acks=0
    resp = produce(client, "fire", {0: batch(1)})
    assert resp[0].base_offset == 1
    produce(client, "fire", {5: batch(1)}, acks=0)  # unknown partition
    assert client.closed_by_peer()


def test_invalid_required_acks(client):
    create_topic(client, "acks", 1)
    assert produce(client, "acks", {0: batch(1)}, acks=2)[0].error_code == ErrorCode.invalid_required_acks


def test_create_topics_errors(client):
    assert create_topic(client, "bad name!").error_code == ErrorCode.invalid_topic_exception
    assert create_topic(client, "rf", replication_factor=3).error_code == ErrorCode.invalid_replication_factor
    assert create_topic(client, "cfg", configs=[("no.such", "1")]).error_code == ErrorCode.invalid_config
    assert create_topic(client, "zero", partitions=0).error_code == ErrorCode.invalid_partitions
    assert create_topic(client, "dup").error_code == ErrorCode.none
    assert create_topic(client, "dup").error_code == ErrorCode.topic_already_exists


def test_metadata_without_auto_creation(client):
    m = req_mod(3, 12)
    resp = client.request(make(m.MetadataRequest, topics=(make(m.MetadataRequestTopic, name="nope", topic_id=None),),
                               allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    assert resp.topics[0].error_code == ErrorCode.unknown_topic_or_partition
    resp = client.request(make(m.MetadataRequest, topics=(make(m.MetadataRequestTopic, name="auto", topic_id=None),),
                               allow_auto_topic_creation=True, include_topic_authorized_operations=False))
    t = resp.topics[0]
    assert t.error_code == ErrorCode.none and len(t.partitions) == 4 and t.topic_id != uuid.UUID(int=0)
    assert resp.cluster_id and len(resp.cluster_id) == 22


def test_fetch_out_of_range_and_by_topic_id(client):
    create_topic(client, "fr", 1)
    produce(client, "fr", {0: batch(3)})
    resp = client.request(fetch_request("fr", {0: 10}))
    p = resp.responses[0].partitions[0]
    assert p.error_code == ErrorCode.offset_out_of_range and p.high_watermark == 3
    m = req_mod(3, 12)
    md = client.request(make(m.MetadataRequest, topics=(make(m.MetadataRequestTopic, name="fr", topic_id=None),),
                             allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    tid = md.topics[0].topic_id
    fm = req_mod(1, 16)
    body = make(fm.FetchRequest, max_wait=T0, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
                session_epoch=-1, topics=(make(fm.FetchTopic, topic_id=tid, partitions=(make(
                    fm.FetchPartition, partition=0, fetch_offset=1, partition_max_bytes=1 << 20,
                    current_leader_epoch=-1, last_fetched_epoch=-1, log_start_offset=-1),)),),
                forgotten_topics_data=(), rack_id="")
    resp = client.request(body)
    p = resp.responses[0].partitions[0]
    assert resp.responses[0].topic_id == tid and p.error_code == ErrorCode.none
    assert p.records  # the batch holding offset 1


def test_fetch_with_an_unknown_session_id(client):
    m = req_mod(1, 12)
    body = fetch_request("fr", {0: 0})
    from dataclasses import replace
    resp = client.request(replace(body, session_id=1234, session_epoch=1))
    assert resp.error_code == ErrorCode.fetch_session_id_not_found


def test_fetch_long_poll_wakes_on_append(broker, client):
    create_topic(client, "poll", 1)
    start = time.monotonic()

    def later():
        time.sleep(0.3)
        with WireClient(broker.bootstrap) as other:
            produce(other, "poll", {0: batch(1)})

    threading.Thread(target=later).start()
    resp = client.request(fetch_request("poll", {0: 0}, max_wait_ms=10_000))
    elapsed = time.monotonic() - start
    assert resp.responses[0].partitions[0].records
    assert 0.25 < elapsed < 3  # woken by the append, long before max_wait


def test_fetch_long_poll_times_out_empty(client):
    create_topic(client, "quiet", 1)
    start = time.monotonic()
    resp = client.request(fetch_request("quiet", {0: 0}, max_wait_ms=300))
    assert 0.25 < time.monotonic() - start < 3
    assert not resp.responses[0].partitions[0].records


def test_list_offsets(client):
    create_topic(client, "lo", 1)
    produce(client, "lo", {0: batch(2, ts=1000)})
    produce(client, "lo", {0: batch(2, ts=5000)})
    m = req_mod(2, 7)

    def lookup(ts):
        body = make(m.ListOffsetsRequest, replica_id=-1, isolation_level=0, topics=(make(
            m.ListOffsetsTopic, name="lo", partitions=(make(m.ListOffsetsPartition, partition_index=0,
                                                            current_leader_epoch=-1, timestamp=ts),)),))
        p = client.request(body).topics[0].partitions[0]
        return p.error_code, p.offset, p.timestamp

    assert lookup(-2) == (ErrorCode.none, 0, -1)
    assert lookup(-1) == (ErrorCode.none, 4, -1)
    assert lookup(3000)[:2] == (ErrorCode.none, 2)
    assert lookup(9999)[:2] == (ErrorCode.none, -1)


def test_init_producer_id_hands_out_new_ids(client):
    m = req_mod(22, 4)
    body = make(m.InitProducerIdRequest, transactional_id=None, transaction_timeout=timedelta(seconds=60),
                producer_id=-1, producer_epoch=-1)
    a, b = client.request(body), client.request(body)
    assert a.error_code == ErrorCode.none and b.producer_id > a.producer_id >= 0 and a.producer_epoch == 0


def test_describe_cluster(client):
    m = req_mod(60, 1)
    resp = client.request(make(m.DescribeClusterRequest, include_cluster_authorized_operations=False,
                               endpoint_type=1))
    assert resp.error_code == ErrorCode.none and len(resp.cluster_id) == 22
    assert [b.broker_id for b in resp.brokers] == [resp.controller_id]


def test_a_client_that_stops_reading_blocks_only_itself(broker, client):
    """A consumer whose socket buffers are full holds up its own connection, nobody else's."""
    create_topic(client, "slow", 1, configs=[("max.message.bytes", str(2 << 20))])
    chunk = batch(8, value=b"s" * (200 * 1024))  # ~1.6 MiB per batch
    for _ in range(10):
        assert produce(client, "slow", {0: chunk})[0].error_code == ErrorCode.none
    with WireClient(broker.bootstrap) as slow:
        slow.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        for _ in range(5):  # ~80 MiB of responses that are never read
            slow.send(fetch_request("slow", {0: 0}, partition_max_bytes=16 << 20))
        time.sleep(0.5)
        start = time.monotonic()
        for i in range(20):
            assert produce(client, "slow", {0: batch(1)})[0].error_code == ErrorCode.none
            got = client.request(fetch_request("slow", {0: 0}, partition_max_bytes=1024))
            assert got.responses[0].partitions[0].error_code == ErrorCode.none
        assert time.monotonic() - start < 5


def test_a_topic_deleted_while_its_records_are_being_sent(broker, client):
    """The response carries the deleted topic's bytes, never those of a file that reuses
    the descriptor number of a closed segment."""
    create_topic(client, "old", 1, configs=[("max.message.bytes", str(2 << 20))])
    chunk = batch(8, value=b"A" * (128 * 1024))
    for _ in range(24):  # 24 MiB: more than the socket buffers on both sides hold
        produce(client, "old", {0: chunk})
    with WireClient(broker.bootstrap) as slow:
        slow.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        corr = slow.send(fetch_request("old", {0: 0}, partition_max_bytes=64 << 20))
        time.sleep(0.3)  # the broker is now blocked writing this response
        assert delete_topic(client, "old") == ErrorCode.none
        for i in range(5):
            create_topic(client, f"secret{i}", 1, configs=[("max.message.bytes", str(2 << 20))])
            produce(client, f"secret{i}", {0: batch(8, value=b"S" * (128 * 1024))})
        resp = slow.recv(1, 12, corr)
    records = resp.responses[0].partitions[0].records
    assert len(records) > 16 << 20 and b"SSSS" not in records
    assert records.count(b"A" * 1024) >= 16 * 1024


def test_a_client_that_never_reads_its_response_is_closed_as_idle(broker_factory):
    broker = broker_factory({"connections.max.idle.ms": 800})
    with WireClient(broker.bootstrap) as c:
        create_topic(c, "big", 1, configs=[("max.message.bytes", str(2 << 20))])
        for _ in range(24):
            produce(c, "big", {0: batch(8, value=b"B" * (128 * 1024))})
    with WireClient(broker.bootstrap) as slow:
        slow.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        slow.send(fetch_request("big", {0: 0}, partition_max_bytes=64 << 20))
        time.sleep(3)
        slow.sock.settimeout(5)
        received = 0
        with pytest.raises((ConnectionError, OSError)):
            while True:
                chunk = slow.sock.recv(1 << 20)
                if not chunk:
                    raise ConnectionError("closed")
                received += len(chunk)
        assert received < 24 * 8 * 128 * 1024  # the response was cut off: the broker gave up on it


def test_null_config_values_are_refused(client):
    r = create_topic(client, "nullcfg", 1, configs=[("compression.type", None)])
    assert r.error_code == ErrorCode.invalid_config


def test_too_many_partitions_in_one_request(client):
    assert create_topic(client, "huge", 10_001).error_code == ErrorCode.policy_violation


def test_metadata_naming_the_offsets_topic_creates_it_as_the_coordinator_does(client):
    m = req_mod(3, 12)
    resp = client.request(make(m.MetadataRequest, topics=(make(m.MetadataRequestTopic, name="__consumer_offsets",
                                                                   topic_id=None),),
                               allow_auto_topic_creation=True, include_topic_authorized_operations=False))
    t = resp.topics[0]
    assert t.error_code == ErrorCode.none and t.is_internal and len(t.partitions) == 50
