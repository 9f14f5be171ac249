"""The hand-written OffsetCommit, OffsetFetch and Heartbeat response encoders against kio's
generated writer: the same bytes for every version brook serves and any contents."""

from __future__ import annotations

import io
import sys
from datetime import timedelta

import pytest
from hypothesis import given, strategies as st

from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from brook.protocol import group_responses as gr
from brook.protocol.messages import make, request_class, response_class, response_module
from tests.support.broker_harness import create_topic_confluent
from tests.support.kafka_wire import WireClient

OFFSET_COMMIT, OFFSET_FETCH, HEARTBEAT = 8, 9, 12


def kio_frame(correlation_id: int, body) -> bytes:
    header_cls = type(body).__header_schema__
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, header_cls(correlation_id=correlation_id))
    entity_writer(type(body))(buf, body)
    data = buf.getvalue()
    return len(data).to_bytes(4, "big") + data


int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
throttles = st.integers(0, 2**31 - 1)
codes = st.sampled_from(list(ErrorCode))
names = st.text(max_size=40)  # any unicode: multi-byte characters make byte and char lengths differ
metadata = st.none() | st.text(max_size=200)  # over 127 bytes: a compact length of two bytes


def commit_topics():
    return st.lists(st.tuples(names, st.lists(st.tuples(int32, codes), max_size=20)), max_size=6)


def fetch_topics():
    partition = st.tuples(int32, int64, int32, metadata, codes)
    return st.lists(st.tuples(names, st.lists(partition, max_size=8)), max_size=4)


# --- OffsetCommit ---------------------------------------------------------------------------


def kio_offset_commit(version, correlation_id, topics, throttle_ms):
    mod = response_module(OFFSET_COMMIT, version)
    body = make(response_class(OFFSET_COMMIT, version), throttle_time=timedelta(milliseconds=throttle_ms),
                topics=tuple(make(mod.OffsetCommitResponseTopic, name=name, partitions=tuple(
                    make(mod.OffsetCommitResponsePartition, partition_index=p, error_code=code)
                    for p, code in partitions)) for name, partitions in topics))
    return kio_frame(correlation_id, body)


@pytest.mark.parametrize("version", gr.OFFSET_COMMIT_VERSIONS)
@given(correlation_id=int32, topics=commit_topics(), throttle_ms=throttles)
def test_offset_commit_response_is_kios(version, correlation_id, topics, throttle_ms):
    assert gr.offset_commit_response(version, correlation_id, topics, throttle_ms) == \
        kio_offset_commit(version, correlation_id, topics, throttle_ms)


def test_offset_commit_of_a_hundred_partitions():
    topics = [("orders", [(p, ErrorCode.none) for p in range(100)]),
              ("payments", [(p, ErrorCode.unknown_topic_or_partition) for p in range(3)])]
    for version in gr.OFFSET_COMMIT_VERSIONS:
        assert gr.offset_commit_response(version, 7, topics) == kio_offset_commit(version, 7, topics, 0)


def test_offset_commit_of_more_partitions_and_topics_than_a_byte_counts():
    topics = [(f"topic-{t}" * 20, [(p, ErrorCode.none) for p in range(200)]) for t in range(130)]
    for version in gr.OFFSET_COMMIT_VERSIONS:
        assert gr.offset_commit_response(version, 7, topics) == kio_offset_commit(version, 7, topics, 0)


# --- OffsetFetch ----------------------------------------------------------------------------


def _kio_fetch_topics(topic_cls, partition_cls, topics):
    return tuple(make(topic_cls, name=name, partitions=tuple(
        make(partition_cls, partition_index=p, committed_offset=offset, committed_leader_epoch=epoch,
             metadata=meta, error_code=code)
        for p, offset, epoch, meta, code in partitions)) for name, partitions in topics)


def kio_offset_fetch(version, correlation_id, topics, error_code, throttle_ms):
    mod = response_module(OFFSET_FETCH, version)
    body = make(response_class(OFFSET_FETCH, version), throttle_time=timedelta(milliseconds=throttle_ms),
                error_code=error_code, topics=_kio_fetch_topics(
                    mod.OffsetFetchResponseTopic, mod.OffsetFetchResponsePartition, topics))
    return kio_frame(correlation_id, body)


def kio_offset_fetch_groups(version, correlation_id, groups, throttle_ms):
    mod = response_module(OFFSET_FETCH, version)
    body = make(response_class(OFFSET_FETCH, version), throttle_time=timedelta(milliseconds=throttle_ms),
                groups=tuple(make(mod.OffsetFetchResponseGroup, group_id=group_id, error_code=code,
                                  topics=_kio_fetch_topics(mod.OffsetFetchResponseTopics,
                                                           mod.OffsetFetchResponsePartitions, topics))
                             for group_id, topics, code in groups))
    return kio_frame(correlation_id, body)


@pytest.mark.parametrize("version", [v for v in gr.OFFSET_FETCH_VERSIONS if v < 8])
@given(correlation_id=int32, topics=fetch_topics(), error_code=codes, throttle_ms=throttles)
def test_offset_fetch_response_is_kios(version, correlation_id, topics, error_code, throttle_ms):
    assert gr.offset_fetch_response(version, correlation_id, topics, error_code, throttle_ms) == \
        kio_offset_fetch(version, correlation_id, topics, error_code, throttle_ms)


@pytest.mark.parametrize("version", [v for v in gr.OFFSET_FETCH_VERSIONS if v >= 8])
@given(correlation_id=int32, groups=st.lists(st.tuples(names, fetch_topics(), codes), max_size=4),
       throttle_ms=throttles)
def test_offset_fetch_groups_response_is_kios(version, correlation_id, groups, throttle_ms):
    assert gr.offset_fetch_groups_response(version, correlation_id, groups, throttle_ms) == \
        kio_offset_fetch_groups(version, correlation_id, groups, throttle_ms)


@pytest.mark.parametrize("version", gr.OFFSET_FETCH_VERSIONS)
def test_offset_fetch_lengths_around_varint_boundaries(version):
    # Compact lengths take a second byte from 127 bytes and a third from 16383.
    lengths = (0, 126, 127, 128, 255, 16382, 16383, 16384)
    topics = [("t" * n, [(i, i, -1, "é" * (n // 2) if i % 2 else "m" * n, ErrorCode.none)
                         for i in range(3)]) for n in lengths]
    if version < 8:
        assert gr.offset_fetch_response(version, 1, topics) == \
            kio_offset_fetch(version, 1, topics, ErrorCode.none, 0)
    else:
        groups = [("g" * n, topics, ErrorCode.none) for n in lengths]
        assert gr.offset_fetch_groups_response(version, 1, groups) == \
            kio_offset_fetch_groups(version, 1, groups, 0)


def test_offset_fetch_forms_are_not_mixed():
    with pytest.raises(ValueError):
        gr.offset_fetch_response(8, 1, [])
    with pytest.raises(ValueError):
        gr.offset_fetch_groups_response(7, 1, [])


# --- Heartbeat ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", gr.HEARTBEAT_VERSIONS)
@given(correlation_id=int32, error_code=codes, throttle_ms=throttles)
def test_heartbeat_response_is_kios(version, correlation_id, error_code, throttle_ms):
    body = make(response_class(HEARTBEAT, version), throttle_time=timedelta(milliseconds=throttle_ms),
                error_code=error_code)
    assert gr.heartbeat_response(version, correlation_id, error_code, throttle_ms) == \
        kio_frame(correlation_id, body)


@pytest.mark.parametrize("encode, version", [
    (lambda v: gr.offset_commit_response(v, 1, []), -1),
    (lambda v: gr.offset_commit_response(v, 1, []), 10),
    (lambda v: gr.offset_fetch_response(v, 1, []), -1),
    (lambda v: gr.offset_fetch_groups_response(v, 1, []), 10),
    (lambda v: gr.heartbeat_response(v, 1, 0), 5),
])
def test_versions_brook_does_not_serve_are_refused(encode, version):
    with pytest.raises(ValueError):
        encode(version)


# --- a real broker's answers ----------------------------------------------------------------


def _answer(client: WireClient, body) -> tuple[bytes, object]:
    """The answer's frame (with its size prefix) and kio's reading of it."""
    corr = client.send(body)
    frame = client.recv_frame()
    cls = response_class(type(body).__api_key__, type(body).__version__)
    header, offset = entity_reader(cls.__header_schema__)(frame, 0)
    assert header.correlation_id == corr
    answer, end = entity_reader(cls)(frame, offset)
    assert offset + end == len(frame)  # kio gives the size it read: nothing is left over
    return len(frame).to_bytes(4, "big") + frame, answer


def _commit_request(version: int, group: str, offsets: dict):
    cls = request_class(OFFSET_COMMIT, version)
    mod = sys.modules[cls.__module__]
    by_topic: dict[str, list] = {}
    for (topic, partition), (offset, meta) in offsets.items():
        by_topic.setdefault(topic, []).append(make(
            mod.OffsetCommitRequestPartition, partition_index=partition, committed_offset=offset,
            committed_leader_epoch=-1, committed_metadata=meta, commit_timestamp=-1))
    return make(cls, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                group_instance_id=None, retention_time=timedelta(milliseconds=-1),
                topics=tuple(make(mod.OffsetCommitRequestTopic, name=t, partitions=tuple(ps))
                             for t, ps in by_topic.items()))


def _fetch_request(version: int, groups: list[str], topics: dict[str, list[int]]):
    cls = request_class(OFFSET_FETCH, version)
    mod = sys.modules[cls.__module__]
    if version < 8:
        return make(cls, group_id=groups[0], require_stable=False, topics=tuple(
            make(mod.OffsetFetchRequestTopic, name=t, partition_indexes=tuple(ps))
            for t, ps in topics.items()))
    return make(cls, require_stable=False, groups=tuple(
        make(mod.OffsetFetchRequestGroup, group_id=g, member_id=None, member_epoch=-1, topics=tuple(
            make(mod.OffsetFetchRequestTopics, name=t, partition_indexes=tuple(ps))
            for t, ps in topics.items()))
        for g in groups))


def test_a_brokers_commit_fetch_and_heartbeat_answers_are_kios_bytes(broker):
    """Every version through a real broker: the answer reads back to what was committed, and
    kio writes the answer it read to the very bytes the broker sent."""
    create_topic_confluent(broker.bootstrap, "answers", partitions=3)
    with WireClient(broker.bootstrap) as client:
        for version in gr.OFFSET_COMMIT_VERSIONS:
            group = f"answers-{version}"
            offsets = {("answers", 0): (10 * version, "plain"), ("answers", 2): (5, "ünïcødé ✓"),
                       ("answers", 1): (7, None), ("no-such-topic", 0): (1, "")}
            frame, answer = _answer(client, _commit_request(version, group, offsets))
            assert frame == kio_frame(client.correlation_id, answer)
            assert {(t.name, p.partition_index) for t in answer.topics for p in t.partitions} == \
                set(offsets)
            assert all(p.error_code == ErrorCode.none for t in answer.topics if t.name == "answers"
                       for p in t.partitions)
        for version in gr.OFFSET_FETCH_VERSIONS:
            groups = ["answers-9", "answers-8", "never-committed"]
            frame, answer = _answer(client, _fetch_request(version, groups,
                                                           {"answers": [0, 1, 2], "other": [0]}))
            assert frame == kio_frame(client.correlation_id, answer)
            groups_topics = [g.topics for g in answer.groups] if version >= 8 else [answer.topics]
            got = {(t.name, p.partition_index): (p.committed_offset, p.metadata)
                   for t in groups_topics[0] for p in t.partitions}
            assert got == {("answers", 0): (90, "plain"), ("answers", 1): (7, ""),
                           ("answers", 2): (5, "ünïcødé ✓"), ("other", 0): (-1, "")}
            if version >= 8:
                assert [g.group_id for g in answer.groups] == groups
                assert answer.groups[1].topics[0].partitions[0].committed_offset == 80
        for version in gr.HEARTBEAT_VERSIONS:
            cls = request_class(HEARTBEAT, version)
            frame, answer = _answer(client, make(cls, group_id="answers-9", generation_id=1,
                                                 member_id="nobody", group_instance_id=None))
            assert frame == kio_frame(client.correlation_id, answer)
            assert answer.error_code == ErrorCode.unknown_member_id
