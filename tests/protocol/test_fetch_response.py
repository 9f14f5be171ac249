"""The hand-written Fetch response encoder against kio's generated one, every version (v0-v3
against the entities vendored from kio 0.6.1, `brook.protocol.legacy`)."""

from __future__ import annotations

import io
import uuid
from datetime import timedelta

from hypothesis import given, strategies as st

from kio.schema.errors import ErrorCode
from kio.serial import entity_writer

from brook.protocol.fetch_response import (
    MAX_VERSION,
    MIN_VERSION,
    PartitionResult,
    TopicResult,
    encode_fetch_response,
)
from brook.protocol.messages import make, response_module
from brook.storage.segment import FileRegion


def kio_encoding(version: int, correlation_id: int, topics: list[TopicResult], session_id: int,
                 error_code: int) -> bytes:
    mod = response_module(1, version)
    responses = []
    for t in topics:
        parts = []
        for p in t.partitions:
            aborted = None if p.aborted_transactions is None or version < 4 else tuple(
                make(mod.AbortedTransaction, producer_id=pid, first_offset=fo)
                for pid, fo in p.aborted_transactions)
            parts.append(make(mod.PartitionData, partition_index=p.partition, error_code=ErrorCode(p.error_code),
                              high_watermark=p.high_watermark, last_stable_offset=p.last_stable_offset,
                              log_start_offset=p.log_start_offset, aborted_transactions=aborted,
                              preferred_read_replica=p.preferred_read_replica,
                              records=b"".join(r if isinstance(r, bytes) else r.read() for r in p.records)))
        responses.append(make(mod.FetchableTopicResponse, topic=t.name, topic_id=t.topic_id,
                              partitions=tuple(parts)))
    body = make(mod.FetchResponse, throttle_time=timedelta(0), error_code=ErrorCode(error_code),
                session_id=session_id, responses=tuple(responses))
    header_cls = type(body).__header_schema__
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, header_cls(correlation_id=correlation_id))
    entity_writer(type(body))(buf, body)
    data = buf.getvalue()
    return len(data).to_bytes(4, "big") + data


def flatten(pieces) -> bytes:
    return b"".join(p if isinstance(p, bytes) else p.read() for p in pieces)


partitions = st.builds(
    PartitionResult,
    partition=st.integers(0, 2**31 - 1),
    error_code=st.sampled_from([0, 1, 3, 6]),
    high_watermark=st.integers(-1, 2**40),
    last_stable_offset=st.integers(-1, 2**40),
    log_start_offset=st.integers(-1, 2**40),
    aborted_transactions=st.none() | st.lists(st.tuples(st.integers(0, 2**40), st.integers(0, 2**40)),
                                              max_size=3),
    preferred_read_replica=st.integers(-1, 5),
    records=st.lists(st.binary(max_size=300), max_size=3),
)
topics = st.lists(st.builds(TopicResult, name=st.text("abc._-", min_size=1, max_size=20),
                            topic_id=st.uuids(), partitions=st.lists(partitions, max_size=4)),
                  max_size=4)


@given(version=st.integers(MIN_VERSION, MAX_VERSION), correlation_id=st.integers(0, 2**31 - 1),
       topics=topics, session_id=st.integers(0, 2**31 - 1), error_code=st.sampled_from([0, 70]))
def test_matches_kio_for_every_version(version, correlation_id, topics, session_id, error_code):
    pieces, size = encode_fetch_response(version, correlation_id, topics, session_id=session_id,
                                         error_code=error_code)
    data = flatten(pieces)
    assert len(data) == size
    assert data == kio_encoding(version, correlation_id, topics, session_id, error_code)


def test_file_regions_stay_regions_between_framing_bytes(tmp_path):
    path = tmp_path / "seg"
    path.write_bytes(b"0123456789" * 10)
    import os
    fd = os.open(path, os.O_RDONLY)
    try:
        region = FileRegion(fd, 10, 50)
        topic = TopicResult("t", uuid.uuid4(), [PartitionResult(0, high_watermark=5, records=[region]),
                                                PartitionResult(1, records=[b"abc"])])
        pieces, size = encode_fetch_response(12, 7, [topic])
        assert [type(p) for p in pieces] == [bytes, FileRegion, bytes]
        assert pieces[1] is region
        assert flatten(pieces) == kio_encoding(12, 7, [TopicResult("t", topic.topic_id, [
            PartitionResult(0, high_watermark=5, records=[region.read()]),
            PartitionResult(1, records=[b"abc"])])], 0, 0)
    finally:
        os.close(fd)
