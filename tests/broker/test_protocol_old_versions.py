"""The versions Kafka 3.9 serves and Kafka 4.0 removed (KIP-896), at the protocol level against a
real broker process: ListOffsets v0, OffsetCommit v0-1, OffsetFetch v0, JoinGroup v0-1,
CreateTopics v0-1, DeleteTopics v0, DescribeConfigs v0, DescribeLogDirs v0 and
OffsetForLeaderEpoch v0-1 (requests built from brook.protocol.legacy's entities)."""

from __future__ import annotations

import os
import threading
import time
from datetime import timedelta

import pytest
from kio.schema.errors import ErrorCode

from brook.protocol.messages import make
from tests.support.kafka_wire import WireClient
from tests.support.wire_requests import batch, create_topic, produce, req_mod

T5 = timedelta(seconds=5)

#: Kafka 3.9's lowest version of each API brook serves (its JSON schemas' validVersions);
#: Produce and Fetch v0 are tested in test_message_format_conversion.py.
KAFKA_39_MINIMUM = {0: 0, 1: 0, 2: 0, 3: 0, 8: 0, 9: 0, 10: 0, 11: 0, 12: 0, 13: 0, 14: 0, 15: 0, 16: 0,
                    18: 0, 19: 0, 20: 0, 21: 0, 22: 0, 23: 0, 32: 0, 33: 0, 35: 0, 37: 0, 42: 0,
                    43: 0, 44: 0, 47: 0, 60: 0}


@pytest.fixture
def client(broker):
    with WireClient(broker.bootstrap) as c:
        yield c


def _versions(client):
    m = req_mod(18, 3)
    resp = client.request(make(m.ApiVersionsRequest, client_software_name="t", client_software_version="1"))
    return {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}


def test_api_versions_advertise_kafka_39_minimums(client):
    versions = _versions(client)
    assert {key: versions[key][0] for key in KAFKA_39_MINIMUM} == KAFKA_39_MINIMUM


# --- ListOffsets v0 -------------------------------------------------------------------------


def list_offsets_v0(client, topic, partition, timestamp, max_num=10, replica_id=-1):
    m = req_mod(2, 0)
    body = m.ListOffsetsRequest(replica_id=replica_id, topics=(m.ListOffsetsTopic(
        name=topic, partitions=(m.ListOffsetsPartition(
            partition_index=partition, timestamp=timestamp, max_num_offsets=max_num),)),))
    p = client.request(body).topics[0].partitions[0]
    return p.error_code, list(p.old_style_offsets)


def list_offsets_v1(client, topic, timestamp):
    m = req_mod(2, 1)
    body = m.ListOffsetsRequest(replica_id=-1, topics=(m.ListOffsetsTopic(
        name=topic, partitions=(m.ListOffsetsPartition(partition_index=0, timestamp=timestamp),)),))
    p = client.request(body).topics[0].partitions[0]
    return p.error_code, p.offset


def test_list_offsets_v0_answers_segment_offsets(broker, client):
    assert create_topic(client, "lo0", 1, configs=[("segment.bytes", "150")]).error_code == 0
    for i in range(3):  # one batch of 2 records per segment: segments at 0, 2 and 4
        produce(client, "lo0", {0: batch(2, ts=1000 * (i + 1))})
    assert list_offsets_v0(client, "lo0", 0, -1) == (ErrorCode.none, [6, 4, 2, 0])
    assert list_offsets_v0(client, "lo0", 0, -1, max_num=1) == (ErrorCode.none, [6])
    assert list_offsets_v0(client, "lo0", 0, -2) == (ErrorCode.none, [0])
    assert list_offsets_v0(client, "lo0", 0, -1, replica_id=-2) == (ErrorCode.none, [6, 4, 2, 0])
    # v0's timestamps are the segments' modification times, v1's the records' (KIP-79)
    segment = broker.log_dir / "lo0-0" / "00000000000000000002.log"
    os.utime(segment, (1_000_000, 1_000_000))  # seconds: 1_000_000_000 ms
    os.utime(broker.log_dir / "lo0-0" / "00000000000000000000.log", (500_000, 500_000))
    assert list_offsets_v0(client, "lo0", 0, 2000) == (ErrorCode.none, [])
    assert list_offsets_v1(client, "lo0", 2000) == (ErrorCode.none, 2)
    assert list_offsets_v0(client, "lo0", 0, 1_000_000_000) == (ErrorCode.none, [2, 0])
    assert list_offsets_v0(client, "lo0", 0, 999_999_999) == (ErrorCode.none, [0])
    now = int(time.time() * 1000) + 60_000
    assert list_offsets_v0(client, "lo0", 0, now) == (ErrorCode.none, [6, 4, 2, 0])


def test_list_offsets_v0_errors(client):
    create_topic(client, "lo0err", 1)
    # among negative timestamps v0 knows only latest and earliest: max timestamp (-3) is not v0's
    assert list_offsets_v0(client, "lo0err", 0, -3) == (ErrorCode.unsupported_version, [])
    assert list_offsets_v0(client, "lo0err", 5, -1) == (ErrorCode.unknown_topic_or_partition, [])
    assert list_offsets_v0(client, "nope", 0, -1) == (ErrorCode.unknown_topic_or_partition, [])
    assert list_offsets_v0(client, "lo0err", 0, -1) == (ErrorCode.none, [0])  # an empty log
    assert list_offsets_v0(client, "lo0err", 0, -1, max_num=-1)[0] == ErrorCode.unknown_server_error


# --- OffsetCommit v0-1, OffsetFetch v0 ------------------------------------------------------


def commit_v0(client, group, topic, offsets, metadata=""):
    m = req_mod(8, 0)
    body = m.OffsetCommitRequest(group_id=group, topics=(m.OffsetCommitRequestTopic(
        name=topic, partitions=tuple(m.OffsetCommitRequestPartition(
            partition_index=p, committed_offset=o, committed_metadata=metadata)
            for p, o in offsets.items())),))
    resp = client.request(body)
    return {p.partition_index: p.error_code for p in resp.topics[0].partitions}


def commit_v1(client, group, topic, offsets, generation=-1, member_id="", commit_timestamp=-1):
    m = req_mod(8, 1)
    body = m.OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=generation, member_id=member_id,
        topics=(m.OffsetCommitRequestTopic(name=topic, partitions=tuple(
            m.OffsetCommitRequestPartition(partition_index=p, committed_offset=o,
                                           commit_timestamp=commit_timestamp, committed_metadata="m1")
            for p, o in offsets.items())),))
    resp = client.request(body)
    return {p.partition_index: p.error_code for p in resp.topics[0].partitions}


def fetch_offsets(client, group, topic, partitions, version=0):
    m = req_mod(9, version)
    body = make(m.OffsetFetchRequest, group_id=group, require_stable=False, topics=(
        make(m.OffsetFetchRequestTopic, name=topic, partition_indexes=tuple(partitions)),))
    resp = client.request(body)
    return {p.partition_index: (p.committed_offset, p.metadata, p.error_code)
            for p in resp.topics[0].partitions}


def wait_for_coordinator(client, group):
    m = req_mod(10, 0)
    deadline = time.monotonic() + 30
    while True:
        resp = client.request(m.FindCoordinatorRequest(key=group))
        if resp.error_code == ErrorCode.none:
            return resp
        assert time.monotonic() < deadline, resp
        time.sleep(0.1)


def test_offset_commit_v0_and_offset_fetch_v0(client):
    create_topic(client, "oc0", 2)
    wait_for_coordinator(client, "g-v0")
    assert commit_v0(client, "g-v0", "oc0", {0: 5, 1: 7}, metadata="meta") == {0: 0, 1: 0}
    assert fetch_offsets(client, "g-v0", "oc0", [0, 1]) == {0: (5, "meta", 0), 1: (7, "meta", 0)}
    # one store of offsets: the later versions read them too
    assert fetch_offsets(client, "g-v0", "oc0", [0, 1], version=1) == \
        {0: (5, "meta", 0), 1: (7, "meta", 0)}
    assert fetch_offsets(client, "g-v0", "oc0", [1, 3], version=0) == {1: (7, "meta", 0), 3: (-1, "", 0)}
    assert commit_v0(client, "g-v0", "nope", {0: 1}) == {0: ErrorCode.unknown_topic_or_partition}
    assert commit_v0(client, "g-v0", "oc0", {0: 6}, metadata="x" * 5000) == \
        {0: ErrorCode.offset_metadata_too_large}


def test_offset_commit_v1_with_a_generation_of_a_group_that_does_not_exist(client):
    create_topic(client, "oc1", 1)
    wait_for_coordinator(client, "g-v1-none")
    # before v9 such a commit gets ILLEGAL_GENERATION (GROUP_ID_NOT_FOUND came with v9)
    assert commit_v1(client, "g-v1-none", "oc1", {0: 3}, generation=4, member_id="m") == \
        {0: ErrorCode.illegal_generation}
    assert commit_v1(client, "g-v1-none", "oc1", {0: 3}) == {0: ErrorCode.none}
    assert fetch_offsets(client, "g-v1-none", "oc1", [0]) == {0: (3, "m1", 0)}


def _wait_until(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.2)


def test_offset_commit_v1_commit_timestamp_sets_when_the_offset_expires(broker_factory):
    """v1's explicit commit timestamp is the offset's commit time: with a retention of one
    minute, an offset committed as of ten minutes ago expires at the next check, one committed
    now (-1) stays."""
    broker = broker_factory({"offsets.retention.minutes": 1,
                             "offsets.retention.check.interval.ms": 200})
    with WireClient(broker.bootstrap) as client:
        create_topic(client, "ts1", 2)
        wait_for_coordinator(client, "g-ts")
        old = int(time.time() * 1000) - 600_000
        assert commit_v1(client, "g-ts", "ts1", {0: 11}, commit_timestamp=old) == {0: 0}
        assert commit_v1(client, "g-ts", "ts1", {1: 12}) == {1: 0}
        _wait_until(lambda: fetch_offsets(client, "g-ts", "ts1", [0])[0][0] == -1)
        assert fetch_offsets(client, "g-ts", "ts1", [1]) == {1: (12, "m1", 0)}


def test_offset_commit_v2_retention_time_sets_the_expire_timestamp(broker_factory):
    broker = broker_factory({"offsets.retention.check.interval.ms": 200})
    with WireClient(broker.bootstrap) as client:
        create_topic(client, "rt2", 2)
        wait_for_coordinator(client, "g-rt")
        m = req_mod(8, 2)

        def commit(partition, retention_ms):
            body = m.OffsetCommitRequest(
                group_id="g-rt", generation_id_or_member_epoch=-1, member_id="",
                retention_time=timedelta(milliseconds=retention_ms),
                topics=(m.OffsetCommitRequestTopic(name="rt2", partitions=(
                    m.OffsetCommitRequestPartition(partition_index=partition, committed_offset=9,
                                                   committed_metadata=""),)),))
            return client.request(body).topics[0].partitions[0].error_code

        assert commit(0, 300) == 0
        assert commit(1, -1) == 0  # the broker's retention (7 days)
        _wait_until(lambda: fetch_offsets(client, "g-rt", "rt2", [0], version=1)[0][0] == -1)
        assert fetch_offsets(client, "g-rt", "rt2", [1], version=1)[1][0] == 9


# --- JoinGroup v0-1 -------------------------------------------------------------------------


def join(client, group, version, member_id="", session_ms=10_000, rebalance_ms=None):
    m = req_mod(11, version)
    body = make(m.JoinGroupRequest, group_id=group, session_timeout=timedelta(milliseconds=session_ms),
                rebalance_timeout=timedelta(milliseconds=rebalance_ms or session_ms),
                member_id=member_id, protocol_type="consumer",
                protocols=(m.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01"),))
    return client.request(body)


def sync(client, group, generation, member_id, assignments=()):
    m = req_mod(14, 0)
    body = m.SyncGroupRequest(group_id=group, generation_id=generation, member_id=member_id,
                              assignments=tuple(m.SyncGroupRequestAssignment(member_id=mid, assignment=a)
                                                for mid, a in assignments))
    return client.request(body)


@pytest.mark.parametrize("version", [0, 1])
def test_join_group_old_versions_need_no_member_id_round(client, version):
    """Before v4 (KIP-394) a new member gets its id and joins in one round."""
    group = f"g-join{version}"
    create_topic(client, f"jt{version}", 1)
    wait_for_coordinator(client, group)
    resp = join(client, group, version)
    assert resp.error_code == ErrorCode.none
    assert resp.generation_id == 1 and resp.leader == resp.member_id and resp.member_id
    assert resp.protocol_name == "range"
    assert [(mb.member_id, bytes(mb.metadata)) for mb in resp.members] == [(resp.member_id, b"\x00\x01")]
    synced = sync(client, group, 1, resp.member_id, [(resp.member_id, b"assigned")])
    assert synced.error_code == ErrorCode.none and bytes(synced.assignment) == b"assigned"
    assert commit_v1(client, group, f"jt{version}", {0: 4}, generation=1, member_id=resp.member_id) == {0: 0}
    assert commit_v1(client, group, f"jt{version}", {0: 4}, generation=2, member_id=resp.member_id) == \
        {0: ErrorCode.illegal_generation}
    # v0 commits carry no member: refused while the group has members
    assert commit_v0(client, group, f"jt{version}", {0: 5}) == {0: ErrorCode.unknown_member_id}


def heartbeat_v0(client, group, generation, member_id):
    m = req_mod(12, 0)
    return client.request(m.HeartbeatRequest(group_id=group, generation_id=generation,
                                             member_id=member_id)).error_code


def test_join_group_v0_rebalance_timeout_is_the_session_timeout(broker_factory):
    """A member that joined with v0 (session timeout 1.5 s) and keeps heartbeating but does not
    rejoin holds a rebalance up for its session timeout, which stands in for the rebalance
    timeout v0 does not have: longer than the new member's (0.3 s), and then it is dropped."""
    broker = broker_factory({"group.min.session.timeout.ms": 200, "group.initial.rebalance.delay.ms": 0})
    group = "g-join0-rebalance"
    with WireClient(broker.bootstrap, timeout=30) as a, WireClient(broker.bootstrap, timeout=30) as b:
        wait_for_coordinator(a, group)
        first = join(a, group, 0, session_ms=1500)
        assert first.error_code == ErrorCode.none
        assert sync(a, group, 1, first.member_id, [(first.member_id, b"")]).error_code == 0
        answer = {}

        def second():
            start = time.monotonic()
            answer["resp"] = join(b, group, 1, session_ms=30_000, rebalance_ms=300)
            answer["waited"] = time.monotonic() - start

        t = threading.Thread(target=second)
        t.start()
        beats = []
        while t.is_alive():  # the first member stays alive but never rejoins
            beats.append(heartbeat_v0(a, group, 1, first.member_id))
            time.sleep(0.2)
        t.join()
        assert ErrorCode.rebalance_in_progress in beats
        resp = answer["resp"]
        assert resp.error_code == ErrorCode.none and resp.generation_id == 2
        assert [mb.member_id for mb in resp.members] == [resp.member_id]  # the first one is gone
        assert 1.2 <= answer["waited"] < 5


# --- admin APIs -----------------------------------------------------------------------------


def create_topics(client, version, name, partitions=1, validate_only=False):
    m = req_mod(19, version)
    body = make(m.CreateTopicsRequest, topics=(m.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1, assignments=(), configs=()),),
        timeout=T5, validate_only=validate_only)
    return client.request(body).topics[0]


def topic_exists(client, name):
    m = req_mod(3, 4)  # v0-v3 would create the topic (auto.create.topics.enable)
    resp = client.request(m.MetadataRequest(topics=(m.MetadataRequestTopic(name=name),),
                                            allow_auto_topic_creation=False))
    return resp.topics[0].error_code == ErrorCode.none


def test_create_topics_v0_v1_and_delete_topics_v0(client):
    assert create_topics(client, 0, "ct0", 2).error_code == ErrorCode.none
    assert topic_exists(client, "ct0")
    assert create_topics(client, 0, "ct0", 2).error_code == ErrorCode.topic_already_exists
    result = create_topics(client, 1, "ct1", 2, validate_only=True)
    assert result.error_code == ErrorCode.none and result.error_message is None
    assert not topic_exists(client, "ct1")
    assert create_topics(client, 1, "ct1", 0).error_code == ErrorCode.invalid_partitions
    m = req_mod(20, 0)
    resp = client.request(m.DeleteTopicsRequest(topic_names=("ct0", "nope"), timeout=T5))
    assert {r.name: r.error_code for r in resp.responses} == {
        "ct0": ErrorCode.none, "nope": ErrorCode.unknown_topic_or_partition}


def test_describe_configs_v0(client):
    create_topic(client, "dc0", 1, configs=[("retention.ms", "1234")])
    m = req_mod(32, 0)
    resp = client.request(m.DescribeConfigsRequest(resources=(m.DescribeConfigsResource(
        resource_type=2, resource_name="dc0", configuration_keys=("retention.ms", "segment.bytes")),)))
    result = resp.results[0]
    assert result.error_code == ErrorCode.none
    configs = {c.name: (c.value, c.is_default) for c in result.configs}
    assert configs["retention.ms"] == ("1234", False)
    assert configs["segment.bytes"][1] is True


def test_describe_log_dirs_v0(client):
    create_topic(client, "ld0", 2)
    m = req_mod(35, 0)
    resp = client.request(m.DescribeLogDirsRequest(topics=(m.DescribableLogDirTopic(topic="ld0", partitions=(1,)),)))
    assert resp.results and resp.results[0].error_code == ErrorCode.none
    parts = [(t.name, p.partition_index) for r in resp.results for t in r.topics for p in t.partitions]
    assert parts == [("ld0", 1)]


@pytest.mark.parametrize("version", [0, 1])
def test_offset_for_leader_epoch_v0_v1(client, version):
    create_topic(client, f"ole{version}", 1)
    produce(client, f"ole{version}", {0: batch(3)})
    m = req_mod(23, version)
    resp = client.request(m.OffsetForLeaderEpochRequest(topics=(m.OffsetForLeaderTopic(
        topic=f"ole{version}", partitions=(m.OffsetForLeaderPartition(partition=0, leader_epoch=0),
                                           m.OffsetForLeaderPartition(partition=9, leader_epoch=0))),)))
    ok, unknown = resp.topics[0].partitions
    assert (ok.error_code, ok.end_offset) == (ErrorCode.none, 3)
    assert unknown.error_code == ErrorCode.unknown_topic_or_partition
    if version == 1:
        assert ok.leader_epoch == 0


def test_list_offsets_special_timestamps_need_the_version_that_knows_them(client):
    """As Kafka 3.9: max timestamp (-3) needs v7; an unknown negative timestamp is refused at
    every version; a partition asked for twice gets INVALID_REQUEST."""
    create_topic(client, "lots", 1)
    produce(client, "lots", {0: batch(2, ts=5000)})

    def lookup(version, *timestamps):
        m = req_mod(2, version)
        body = make(m.ListOffsetsRequest, replica_id=-1, isolation_level=0, topics=(make(
            m.ListOffsetsTopic, name="lots", partitions=tuple(make(
                m.ListOffsetsPartition, partition_index=0, current_leader_epoch=-1, timestamp=ts)
                for ts in timestamps)),))
        return [(p.error_code, p.offset) for p in client.request(body).topics[0].partitions]

    for version in range(1, 7):
        assert lookup(version, -3) == [(ErrorCode.unsupported_version, -1)]
        assert lookup(version, -1) == [(ErrorCode.none, 2)]
    assert lookup(7, -3) == [(ErrorCode.none, 0)]  # both records carry the largest timestamp
    assert lookup(7, -4) == [(ErrorCode.unsupported_version, -1)]
    assert lookup(7, -9) == [(ErrorCode.unsupported_version, -1)]
    assert lookup(1, -1, -2) == [(ErrorCode.invalid_request, -1)] * 2


def test_delete_topics_before_v3_answer_invalid_request_when_deletion_is_disabled(broker_factory):
    broker = broker_factory({"delete.topic.enable": "false"})
    with WireClient(broker.bootstrap) as client:
        create_topic(client, "keep", 1)
        for version, expected in [(0, ErrorCode.invalid_request), (2, ErrorCode.invalid_request),
                                  (3, ErrorCode.topic_deletion_disabled)]:
            m = req_mod(20, version)
            resp = client.request(make(m.DeleteTopicsRequest, topic_names=("keep",), timeout=T5))
            assert resp.responses[0].error_code == expected, version


# --- the old versions Kafka 4.0 kept, as Kafka 3.9 answers them ----------------------------


def test_metadata_v0_to_v3(client):
    create_topic(client, "md-a", 2)
    m0 = req_mod(3, 0)
    everything = client.request(m0.MetadataRequest(topics=()))  # v0: an empty list is every topic
    assert "md-a" in {t.name for t in everything.topics}
    assert [(b.node_id, b.port) for b in everything.brokers] == [(1, int(client.sock.getpeername()[1]))]
    m1 = req_mod(3, 1)
    assert client.request(m1.MetadataRequest(topics=())).topics == ()  # v1+: an empty list is none
    assert "md-a" in {t.name for t in client.request(m1.MetadataRequest(topics=None)).topics}
    m3 = req_mod(3, 3)
    one = client.request(m3.MetadataRequest(topics=(m3.MetadataRequestTopic(name="md-a"),)))
    assert one.cluster_id and one.controller_id == 1
    assert [(t.name, t.is_internal, len(t.partitions)) for t in one.topics] == [("md-a", False, 2)]
    # v0-v3 have no allow_auto_topic_creation: a topic asked for is created (auto.create.topics.enable)
    created = client.request(m0.MetadataRequest(topics=(m0.MetadataRequestTopic(name="md-auto"),)))
    assert created.topics[0].error_code in (ErrorCode.none, ErrorCode.leader_not_available)


def test_group_apis_at_v0(client):
    group = "g-v0-apis"
    create_topic(client, "gv0", 1)
    coordinator = wait_for_coordinator(client, group)
    assert coordinator.node_id == 1 and coordinator.host == "127.0.0.1"
    joined = join(client, group, 0)
    assert sync(client, group, 1, joined.member_id, [(joined.member_id, b"a")]).error_code == 0
    assert heartbeat_v0(client, group, 1, joined.member_id) == ErrorCode.none
    assert heartbeat_v0(client, group, 2, joined.member_id) == ErrorCode.illegal_generation
    md = req_mod(15, 0)
    described = client.request(md.DescribeGroupsRequest(groups=(group,))).groups[0]
    assert (described.error_code, described.group_id, described.group_state,
            described.protocol_type, described.protocol_data) == (0, group, "Stable", "consumer", "range")
    member = described.members[0]
    assert (member.member_id, bytes(member.member_metadata), bytes(member.member_assignment)) == \
        (joined.member_id, b"\x00\x01", b"a")
    ml = req_mod(16, 0)
    listed = client.request(ml.ListGroupsRequest())
    assert listed.error_code == 0 and (group, "consumer") in {(g.group_id, g.protocol_type) for g in listed.groups}
    mv = req_mod(13, 0)
    assert client.request(mv.LeaveGroupRequest(group_id=group, member_id=joined.member_id)).error_code == 0
    assert client.request(mv.LeaveGroupRequest(group_id=group, member_id="gone")).error_code == \
        ErrorCode.unknown_member_id
    described = client.request(md.DescribeGroupsRequest(groups=(group,))).groups[0]
    assert (described.group_state, described.members) == ("Empty", ())
    # now empty, the group takes v0 commits again
    assert commit_v0(client, group, "gv0", {0: 5}) == {0: ErrorCode.none}
