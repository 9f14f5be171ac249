"""Request parsing: every request brook serves parses at every advertised version, and
bytes that are not a valid request raise only the protocol's two errors."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings, strategies as st
from tests.support.examples import examples

from kio.index import load_payload_module
from kio.static.constants import EntityType

from tests.support import kafka_wire
from brook.broker.handlers import registry
from brook.protocol.messages import (
    MalformedRequestError,
    UnsupportedVersionError,
    encode_response,
    make,
    parse_request,
    request_class,
    response_module,
)

APIS = registry()
SUPPORTED = {k: (a.min_version, a.max_version) for k, a in APIS.items()}


def encode_request(body, correlation_id=7, client_id="test") -> bytes:
    """A request's header and body, without the size prefix a frame has."""
    return kafka_wire.frame(body, correlation_id, client_id)[4:]


def test_advertised_versions_exist_in_kio():
    for key, (lo, hi) in SUPPORTED.items():
        for v in range(lo, hi + 1):
            assert request_class(key, v) is not None
            # kio's, or brook's own for the ZooKeeper-era inter-broker APIs Kafka 4 dropped
            assert response_module(key, v) is not None


@pytest.mark.parametrize("version", range(0, 5))
def test_api_versions_request_round_trip(version):
    cls = request_class(18, version)
    body = make(cls, client_software_name="brook-test", client_software_version="1.0")
    req = parse_request(encode_request(body, correlation_id=99), SUPPORTED)
    assert (req.api_key, req.api_version, req.correlation_id, req.client_id) == (18, version, 99, "test")
    assert req.body == body


def test_unsupported_version_carries_the_correlation_id():
    frame = struct.pack(">hhi", 18, 99, 1234) + b"\x00\x00"
    with pytest.raises(UnsupportedVersionError) as exc:
        parse_request(frame, SUPPORTED)
    assert (exc.value.api_key, exc.value.api_version, exc.value.correlation_id) == (18, 99, 1234)


def test_unknown_api_key_is_malformed():
    with pytest.raises(MalformedRequestError):
        parse_request(struct.pack(">hhi", 9999, 0, 1) + b"\xff\xff", SUPPORTED)


def test_short_frame_is_malformed():
    with pytest.raises(MalformedRequestError):
        parse_request(b"\x00\x03\x00", SUPPORTED)


@settings(max_examples=examples(400))
@given(key=st.sampled_from(sorted(SUPPORTED)), version=st.integers(0, 17), rest=st.binary(max_size=120))
def test_garbage_raises_only_protocol_errors(key, version, rest):
    frame = struct.pack(">hhi", key, version, 5) + rest
    try:
        parse_request(frame, SUPPORTED)
    except (MalformedRequestError, UnsupportedVersionError):
        pass


@settings(max_examples=examples(200))
@given(data=st.data())
def test_truncated_valid_requests_raise_only_protocol_errors(data):
    cls = request_class(3, data.draw(st.integers(1, 12)))
    mod = load_payload_module(3, cls.__version__, EntityType.request)
    topics = tuple(make(mod.MetadataRequestTopic, name=n, topic_id=None)
                   for n in data.draw(st.lists(st.text("ab", min_size=1, max_size=5), max_size=3)))
    body = make(cls, topics=topics, allow_auto_topic_creation=True,
                include_cluster_authorized_operations=False, include_topic_authorized_operations=False)
    frame = encode_request(body)
    cut = data.draw(st.integers(0, len(frame) - 1))
    try:
        parse_request(frame[:cut], SUPPORTED)
    except (MalformedRequestError, UnsupportedVersionError):
        pass


def test_response_frame_has_size_and_correlation_id():
    from datetime import timedelta
    from kio.schema.errors import ErrorCode
    cls = load_payload_module(18, 3, EntityType.response).ApiVersionsResponse
    data = encode_response(18, 3, 42, make(cls, error_code=ErrorCode.none, api_keys=(),
                                            throttle_time=timedelta(0)))
    (size, corr) = struct.unpack_from(">ii", data)
    assert size == len(data) - 4 and corr == 42
