"""The entities of the versions Kafka 4.0 removed (``brook.protocol.legacy``): every one
round-trips through kio's reader and writer and through brook's request parser, and a few are
held byte for byte to encodings written by hand in the field order of Kafka 3.9's schemas."""

from __future__ import annotations

import io
import struct
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records, i32, i64

from brook.protocol import legacy
from brook.protocol.messages import encode_response, parse_request, request_class, response_class
from tests.support import kafka_wire
from tests.support.examples import examples

st.register_type_strategy(Records, st.binary(max_size=256))  # Produce and Fetch carry record bytes

LEGACY = sorted((key, v) for key, (_, versions) in legacy.VERSIONS.items() for v in versions)
SUPPORTED = {key: (0, 9) for key, _ in LEGACY}


def write(entity) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def read(cls, data: bytes):
    entity, end = entity_reader(cls)(data, 0)
    assert end == len(data)
    return entity


def s16(text: str) -> bytes:
    b = text.encode()
    return struct.pack(">h", len(b)) + b


def arr(n: int) -> bytes:
    return struct.pack(">i", n)


def test_every_legacy_version_is_below_kafka_4s_minimum_and_in_kafka_39s_range():
    from kio.index import UnknownEntity, load_request_schema
    for key, version in LEGACY:
        assert legacy.KAFKA_39_VERSIONS[key][0] <= version
        with pytest.raises(UnknownEntity):
            load_request_schema(key, version)
        cls = request_class(key, version)
        assert (cls.__api_key__, cls.__version__, cls.__flexible__) == (key, version, False)
        assert response_class(key, version).__version__ == version


ROUND_TRIP = settings(max_examples=examples(30), deadline=None,
                      suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("key, version", LEGACY)
@ROUND_TRIP
@given(data=st.data())
def test_round_trip(key, version, data):
    for cls in (request_class(key, version), response_class(key, version)):
        entity = data.draw(st.from_type(cls))
        assert read(cls, write(entity)) == entity


@pytest.mark.parametrize("key, version", LEGACY)
@ROUND_TRIP
@given(data=st.data())
def test_requests_parse_as_brook_receives_them(key, version, data):
    body = data.draw(st.from_type(request_class(key, version)))
    frame = kafka_wire.frame(body, 5, "legacy")[4:]
    try:
        req = parse_request(frame, SUPPORTED)
    except Exception as exc:  # a null where the schema allows none is refused, nothing else
        assert "null" in str(exc), exc
        return
    assert (req.api_key, req.api_version, req.correlation_id, req.body) == (key, version, 5, body)


# --- byte-level checks, in the field order of Kafka 3.9's JSON schemas ----------------------


def test_list_offsets_v0_request_bytes():
    m = legacy.module(2, 0, "request")
    body = m.ListOffsetsRequest(replica_id=i32(-1), topics=(m.ListOffsetsTopic(
        name="t", partitions=(m.ListOffsetsPartition(partition_index=i32(3), timestamp=i64(-1),
                                                     max_num_offsets=i32(10)),)),))
    # ReplicaId, Topics[Name, Partitions[PartitionIndex, Timestamp, MaxNumOffsets]]
    expected = (struct.pack(">i", -1) + arr(1) + s16("t") + arr(1)
                + struct.pack(">iqi", 3, -1, 10))
    assert write(body) == expected
    header = struct.pack(">hhi", 2, 0, 42) + s16("c")  # request header v1
    req = parse_request(header + expected, {2: (0, 7)})
    assert req.body == body and req.client_id == "c"


def test_list_offsets_v0_response_frame():
    m = legacy.module(2, 0, "response")
    body = m.ListOffsetsResponse(topics=(m.ListOffsetsTopicResponse(name="t", partitions=(
        m.ListOffsetsPartitionResponse(partition_index=i32(0), error_code=ErrorCode.none,
                                       old_style_offsets=(i64(6), i64(0))),)),))
    # Topics[Name, Partitions[PartitionIndex, ErrorCode, OldStyleOffsets[int64]]]; no throttle
    payload = (struct.pack(">i", 42) + arr(1) + s16("t") + arr(1) + struct.pack(">ih", 0, 0)
               + arr(2) + struct.pack(">qq", 6, 0))
    assert encode_response(2, 0, 42, body) == struct.pack(">i", len(payload)) + payload


def test_offset_commit_v0_and_v1_request_bytes():
    m0 = legacy.module(8, 0, "request")
    v0 = m0.OffsetCommitRequest(group_id="g", topics=(m0.OffsetCommitRequestTopic(
        name="t", partitions=(m0.OffsetCommitRequestPartition(
            partition_index=i32(1), committed_offset=i64(5), committed_metadata=None),)),))
    # GroupId, Topics[Name, Partitions[PartitionIndex, CommittedOffset, CommittedMetadata]]
    assert write(v0) == (s16("g") + arr(1) + s16("t") + arr(1) + struct.pack(">iq", 1, 5)
                         + b"\xff\xff")
    m1 = legacy.module(8, 1, "request")
    v1 = m1.OffsetCommitRequest(
        group_id="g", generation_id_or_member_epoch=i32(3), member_id="m",
        topics=(m1.OffsetCommitRequestTopic(name="t", partitions=(m1.OffsetCommitRequestPartition(
            partition_index=i32(1), committed_offset=i64(5), commit_timestamp=i64(77),
            committed_metadata="x"),)),))
    # GroupId, GenerationId, MemberId, Topics[Name, Partitions[PartitionIndex, CommittedOffset,
    # CommitTimestamp (v1 only), CommittedMetadata]]
    assert write(v1) == (s16("g") + struct.pack(">i", 3) + s16("m") + arr(1) + s16("t") + arr(1)
                         + struct.pack(">iqq", 1, 5, 77) + s16("x"))


def test_offset_fetch_v0_response_bytes():
    m = legacy.module(9, 0, "response")
    body = m.OffsetFetchResponse(topics=(m.OffsetFetchResponseTopic(name="t", partitions=(
        m.OffsetFetchResponsePartition(partition_index=i32(2), committed_offset=i64(9),
                                       metadata="", error_code=ErrorCode.none),)),))
    # Topics[Name, Partitions[PartitionIndex, CommittedOffset, Metadata, ErrorCode]]
    assert write(body) == (arr(1) + s16("t") + arr(1) + struct.pack(">iq", 2, 9) + s16("")
                           + struct.pack(">h", 0))


def test_create_topics_v0_request_bytes():
    m = legacy.module(19, 0, "request")
    body = m.CreateTopicsRequest(topics=(m.CreatableTopic(
        name="t", num_partitions=i32(2), replication_factor=1, assignments=(),
        configs=(m.CreatableTopicConfig(name="k", value=None),)),),
        timeout=timedelta(milliseconds=500))
    # Topics[Name, NumPartitions, ReplicationFactor, Assignments[...], Configs[Name, Value]],
    # TimeoutMs; no ValidateOnly (v1+)
    assert write(body) == (arr(1) + s16("t") + struct.pack(">ih", 2, 1) + arr(0) + arr(1)
                           + s16("k") + b"\xff\xff" + struct.pack(">i", 500))


def test_describe_configs_v0_response_bytes():
    m = legacy.module(32, 0, "response")
    body = m.DescribeConfigsResponse(throttle_time=timedelta(0), results=(m.DescribeConfigsResult(
        error_code=ErrorCode.none, error_message=None, resource_type=2, resource_name="t",
        configs=(m.DescribeConfigsResourceResult(name="k", value="v", read_only=False,
                                                 is_default=True, is_sensitive=False),)),))
    # ThrottleTimeMs, Results[ErrorCode, ErrorMessage, ResourceType, ResourceName,
    # Configs[Name, Value, ReadOnly, IsDefault (v0 only), IsSensitive]]
    assert write(body) == (struct.pack(">i", 0) + arr(1) + struct.pack(">h", 0) + b"\xff\xff"
                           + b"\x02" + s16("t") + arr(1) + s16("k") + s16("v") + b"\x00\x01\x00")


def test_the_vendored_entities_match_kafka_39s_schemas():
    """Field names, order and versions, nested structures included (the check that
    scripts/vendor_legacy_schemas.py --check runs), against the schemas kept beside this test."""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("vendor", root / "scripts" / "vendor_legacy_schemas.py")
    vendor = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vendor)
    assert set(vendor.LEGACY) == {name for name, _ in legacy.VERSIONS.values()}
    assert vendor.check(str(Path(__file__).parent / "kafka_3_9_schemas")) == []
