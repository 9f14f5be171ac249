"""The checks a request frame passes before kio parses it: lengths and counts within the frame
(`brook.protocol.bounds`), and no null where the schema allows none (`brook.protocol.nulls`)."""

from __future__ import annotations

import datetime
import io
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.examples import examples
from kio.serial import entity_writer
from kio.static.primitive import Records, i64Timedelta

from brook.broker.handlers import registry
from brook.protocol import bounds
from brook.protocol.messages import MalformedRequestError, make, parse_request, request_class
from brook.protocol.nulls import first_null

st.register_type_strategy(Records, st.binary(max_size=256))
# kio's strategy draws durations up to timedelta's limit, its native reader reads them back only
# within 64 bits of microseconds (docs/protocol.md, "Malformed requests")
_READABLE_MS = 2**63 // 1000
st.register_type_strategy(i64Timedelta, st.integers(-_READABLE_MS, _READABLE_MS).map(
    lambda ms: i64Timedelta.parse(datetime.timedelta(milliseconds=ms))))

APIS = sorted((key, version) for key, api in registry().items()
              for version in range(api.min_version, api.max_version + 1))
SUPPORTED = {key: (api.min_version, api.max_version) for key, api in registry().items()}
SETTINGS = settings(max_examples=examples(300), deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))


def encode(body) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(body))(buf, body)
    return buf.getvalue()


def request_frame(body) -> bytes:
    """A whole request without its size prefix, as the connection hands it to the parser."""
    cls = type(body)
    header_cls = cls.__header_schema__
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, make(header_cls, request_api_key=cls.__api_key__,
                                        request_api_version=cls.__version__, correlation_id=3,
                                        client_id="c"))
    return buf.getvalue() + encode(body)


@st.composite
def requests(draw):
    key, version = draw(st.sampled_from(APIS))
    return draw(st.from_type(request_class(key, version)))


@SETTINGS
@given(body=requests())
def test_every_valid_request_of_every_api_and_version_passes(body):
    frame = request_frame(body)
    offset = bounds.check_header(type(body).__header_schema__.__flexible__, frame)
    bounds.check(type(body), frame, offset)
    assert first_null(body) is None
    assert parse_request(frame, SUPPORTED).body == body


@SETTINGS
@given(body=requests(), data=st.data())
def test_a_cut_frame_never_passes(body, data):
    frame = request_frame(body)
    cut = data.draw(st.integers(0, len(frame) - 1))
    with pytest.raises(MalformedRequestError):
        parse_request(frame[:cut] if cut >= 8 else frame[:8], SUPPORTED)


@SETTINGS
@given(body=requests(), data=st.data())
def test_bytes_after_the_request_are_ignored_as_kafka_ignores_them(body, data):
    # librdkafka's Metadata v12 requests carry three such bytes.
    frame = request_frame(body) + data.draw(st.binary(min_size=1, max_size=8))
    assert parse_request(frame, SUPPORTED).body == body


def topics_request(version: int, count: bytes) -> bytes:
    """A Metadata request of ``version`` whose topics array announces ``count``."""
    empty = encode(make(request_class(3, version), topics=(), allow_auto_topic_creation=False,
                        include_cluster_authorized_operations=False,
                        include_topic_authorized_operations=False))
    head = b"\x01" if version >= 9 else b"\x00\x00\x00\x00"  # no topics
    assert empty.startswith(head)
    return count + empty[len(head):]


@pytest.mark.parametrize("version,count", [
    (9, b"\xff\xff\xff\xff\x0f"),  # 2^32 - 2 topics in a compact array
    (9, b"\x80\x80\x80\x80\x01"),  # 2^28 - 1
    (9, b"\x03"),  # 2, with no room for them
    (0, b"\x7f\xff\xff\xff"),  # 2^31 - 1 in a classic array
    (0, b"\x00\x00\x00\x02"),
    (0, b"\xff\xff\xff\xfe"),  # -2
])
def test_a_count_larger_than_the_bytes_left_is_refused(version, count):
    with pytest.raises(bounds.BoundsError):
        bounds.check(request_class(3, version), topics_request(version, count), 0)


def test_varints_longer_than_five_bytes_and_negative_lengths_are_refused():
    cls = request_class(3, 9)
    with pytest.raises(bounds.BoundsError, match="five bytes"):
        bounds.check(cls, b"\x80\x80\x80\x80\x80\x01", 0)
    v1 = request_class(3, 1)
    with pytest.raises(bounds.BoundsError, match="length of -2"):
        bounds.check(v1, b"\x00\x00\x00\x01\xff\xfe", 0)  # one topic, name of length -2


def test_nulls_are_found_where_the_schema_allows_none():
    cls = request_class(8, 2)
    mod = __import__(cls.__module__, fromlist=["x"])
    topic = mod.OffsetCommitRequestTopic(name="t", partitions=None)
    body = make(cls, group_id="g", generation_id_or_member_epoch=1, member_id="m",
                topics=(mod.OffsetCommitRequestTopic(name="a", partitions=()), topic))
    assert first_null(body) == "topics[1].partitions"
    assert first_null(make(cls, group_id="g", generation_id_or_member_epoch=1, member_id=None,
                           topics=())) == "member_id"
    # Nullable fields may be null: Metadata's topics (all topics), a commit's metadata.
    assert first_null(make(request_class(3, 9), topics=None, allow_auto_topic_creation=False,
                                  include_cluster_authorized_operations=False,
                                  include_topic_authorized_operations=False)) is None
    partition = mod.OffsetCommitRequestPartition(partition_index=0, committed_offset=1,
                                                  committed_metadata=None)
    assert first_null(make(cls, group_id="g", generation_id_or_member_epoch=1, member_id="m",
                           topics=(mod.OffsetCommitRequestTopic(name="a",
                                                                partitions=(partition,)),))) is None


def test_parse_refuses_a_null_the_schema_does_not_allow():
    body = (struct.pack(">h", 1) + b"g" + struct.pack(">i", -1) + struct.pack(">h", 0)
            + struct.pack(">q", -1) + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t"
            + struct.pack(">i", -1))
    frame = struct.pack(">hhih", 8, 2, 7, 1) + b"c" + body
    with pytest.raises(MalformedRequestError, match=r"null topics\[0\]\.partitions"):
        parse_request(frame, SUPPORTED)
