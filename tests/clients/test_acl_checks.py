"""docs/security.md's table, row by row: for every API, alice without the ACL she needs gets
Kafka's refusal, and with it (granted by admin, a super user) she does not; plus real clients
(confluent-kafka) producing, consuming in a group and committing with exactly the ACLs
Kafka's documentation asks for. One broker for the module; every test starts with no ACLs."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Callable

import pytest
from kio.schema.errors import ErrorCode as E

from brook.security.acls import SUPPORTED_OPERATIONS, Operation, ResourceType, bitfield
from tests.support.acl_broker import AclBroker, acl
from tests.support.wire_build import request
from tests.support.wire_requests import batch

pytestmark = pytest.mark.broker

T = "acl-topic"  # exists, with a record, made by admin
G = "acl-group"  # has a committed offset of T, made by admin
ZERO = uuid.UUID(int=0)
SEC = timedelta(seconds=5)
TAF, GAF, CAF = E.topic_authorization_failed, E.group_authorization_failed, E.cluster_authorization_failed
TXAF = E.transactional_id_authorization_failed


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = AclBroker(tmp_path_factory.mktemp("acl-checks"))
    b.proc.start()
    try:
        with b.wire("admin") as c:
            c.request(request(19, 7, topics=[{"name": T, "num_partitions": 2, "replication_factor": -1}],
                              timeout=SEC))
            r = c.request(request(0, 9, acks=1, timeout=SEC, topic_data=[
                {"name": T, "partition_data": [{"index": 0, "records": batch(2)}]}]))
            assert r.responses[0].partition_responses[0].error_code == E.none
            _commit(c, G, T)
        yield b
    finally:
        b.proc.close()


@pytest.fixture(autouse=True)
def no_acls(broker):
    broker.revoke_all()


def _commit(c, group, topic):
    return c.request(request(8, 8, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                             topics=[{"name": topic, "partitions": [
                                 {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                                  "committed_metadata": ""}]}]))


def _txn_commit(c):
    return _codes(c.request(request(28, 3, transactional_id="tx-toc", group_id=G, producer_id=1,
                                    producer_epoch=0, generation_id=-1, member_id="",
                                    topics=[{"name": T, "partitions": [
                                        {"partition_index": 5, "committed_offset": 1,
                                         "committed_leader_epoch": -1,
                                         "committed_metadata": ""}]}])),
                  "topics", "partitions", "error_code")


def _codes(resp, *path):
    """Every error code found along `path` (attribute names; tuples are walked)."""
    items = [resp]
    for name in path:
        nxt = []
        for it in items:
            v = getattr(it, name)
            nxt.extend(v if isinstance(v, tuple) else [v])
        items = nxt
    return set(items)


@dataclass
class Row:
    api: str
    needs: list  # acl() bindings for alice
    call: Callable  # (wire client) -> set of error codes
    refusal: E
    # the codes that mean "allowed" (what the broker answers past the check)
    allowed: frozenset = frozenset({E.none})
    given: tuple = ()  # ACLs alice holds already: not enough without `needs`


def _fetch(c, topic=T, replica_id=-1):
    return _codes(c.request(request(1, 12, replica_id=replica_id, max_wait=timedelta(0), min_bytes=1,
                                    max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                                    topics=[{"topic": topic, "partitions": [
                                        {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                                         "last_fetched_epoch": -1, "log_start_offset": -1,
                                         "partition_max_bytes": 1 << 20}]}], rack_id="")),
                  "responses", "partitions", "error_code")


def _metadata(c, topic, create=False, version=12, **flags):
    return c.request(request(3, version, topics=[{"name": topic, "topic_id": ZERO}],
                             allow_auto_topic_creation=create, **flags))


def _list_offsets(c):
    return _codes(c.request(request(2, 7, replica_id=-1, isolation_level=0, topics=[
        {"name": T, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}])),
        "topics", "partitions", "error_code")


def _offset_delete(c, *path):
    r = c.request(request(47, 0, group_id=G, topics=[{"name": T, "partitions": [{"partition_index": 1}]}]))
    return _codes(r, *path)


def _alter_configs(c, rtype, name, key, incremental=False):
    """AlterConfigs (or IncrementalAlterConfigs, a SET) of one key, validate only."""
    config = {"name": key, "value": "100000"}
    if incremental:
        config["config_operation"] = 0
    key, version = (44, 1) if incremental else (33, 2)
    resource = {"resource_type": rtype, "resource_name": name, "configs": [config]}
    r = c.request(request(key, version, resources=[resource], validate_only=True))
    return _codes(r, "responses", "error_code")


def _add_partitions(c, tid):
    r = c.request(request(24, 3, v3_and_below_transactional_id=tid, v3_and_below_producer_id=1,
                          v3_and_below_producer_epoch=0,
                          v3_and_below_topics=[{"name": T, "partitions": [0]}]))
    return _codes(r, "results_by_topic_v3_and_below", "results_by_partition", "partition_error_code")


def _epochs(c, replica_id=-1):
    r = c.request(request(23, 4, replica_id=replica_id, topics=[{"topic": T, "partitions": [
        {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]))
    return _codes(r, "topics", "partitions", "error_code")


def _describe_producers(c, topic):
    r = c.request(request(61, 0, topics=[{"name": topic, "partition_indexes": [0]}]))
    return _codes(r, "topics", "partitions", "error_code")


def _txn_markers(c, producer_id=9001):
    """An ABORT marker of a producer with no transaction open: written, and changes nothing."""
    r = c.request(request(27, 1, markers=[{
        "producer_id": producer_id, "producer_epoch": 0, "transaction_result": False,
        "coordinator_epoch": 0, "topics": [{"name": T, "partition_indexes": [1]}]}]))
    return _codes(r, "markers", "topics", "partitions", "error_code")


ROWS = [
    Row("WriteTxnMarkers", [acl("CLUSTER", "kafka-cluster", "CLUSTER_ACTION")], _txn_markers, CAF),
    Row("Produce", [acl("TOPIC", T, "WRITE")],
        lambda c: _codes(c.request(request(0, 9, acks=1, timeout=SEC, topic_data=[
            {"name": T, "partition_data": [{"index": 1, "records": batch(1)}]}])),
            "responses", "partition_responses", "error_code"), TAF),
    Row("Fetch", [acl("TOPIC", T, "READ")], _fetch, TAF),
    Row("Fetch (follower)", [acl("CLUSTER", "kafka-cluster", "CLUSTER_ACTION")],
        lambda c: _fetch(c, replica_id=2), TAF),
    Row("ListOffsets", [acl("TOPIC", T, "DESCRIBE")],
        _list_offsets, TAF),
    Row("Metadata (named topic)", [acl("TOPIC", T, "DESCRIBE")],
        lambda c: _codes(_metadata(c, T), "topics", "error_code"), TAF),
    Row("Metadata (auto-creation)",
        [acl("TOPIC", "auto-made", "CREATE"), acl("TOPIC", "auto-made", "DESCRIBE")],
        lambda c: _codes(_metadata(c, "auto-made", create=True), "topics", "error_code"), TAF),
    Row("OffsetCommit (group)", [acl("GROUP", G, "READ")], 
        lambda c: _codes(_commit(c, G, T), "topics", "partitions", "error_code"), GAF,
        given=(acl("TOPIC", T, "READ"),)),
    Row("OffsetCommit (topic)", [acl("TOPIC", T, "READ")], 
        lambda c: _codes(_commit(c, G, T), "topics", "partitions", "error_code"), TAF,
        given=(acl("GROUP", G, "READ"),)),
    Row("OffsetFetch (group)", [acl("GROUP", G, "DESCRIBE")], 
        lambda c: _codes(c.request(request(9, 8, groups=[{"group_id": G, "topics": None}])),
                         "groups", "error_code"), GAF, given=(acl("TOPIC", T, "DESCRIBE"),)),
    Row("OffsetFetch (topic)", [acl("TOPIC", T, "DESCRIBE")], 
        lambda c: _codes(c.request(request(9, 7, group_id=G, topics=[{"name": T, "partition_indexes": [0]}])),
                         "topics", "partitions", "error_code"), TAF, given=(acl("GROUP", G, "DESCRIBE"),)),
    Row("FindCoordinator", [acl("GROUP", G, "DESCRIBE")],
        lambda c: _codes(c.request(request(10, 4, key_type=0, coordinator_keys=[G])),
                         "coordinators", "error_code"),
        GAF),
    Row("JoinGroup", [acl("GROUP", "joining", "READ")],
        lambda c: _codes(c.request(request(11, 5, group_id="joining", session_timeout=timedelta(seconds=10),
                                           rebalance_timeout=timedelta(seconds=10), member_id="",
                                           protocol_type="consumer",
                                           protocols=[{"name": "range", "metadata": b""}])), "error_code"),
        GAF, frozenset({E.member_id_required})),
    Row("SyncGroup", [acl("GROUP", G, "READ")],
        lambda c: _codes(c.request(request(14, 5, group_id=G, generation_id=1, member_id="m",
                                           protocol_type="consumer", protocol_name="range")), "error_code"),
        GAF, frozenset({E.unknown_member_id})),
    Row("Heartbeat", [acl("GROUP", G, "READ")],
        lambda c: _codes(c.request(request(12, 4, group_id=G, generation_id=1, member_id="m")), "error_code"),
        GAF, frozenset({E.unknown_member_id})),
    Row("LeaveGroup", [acl("GROUP", G, "READ")],
        lambda c: _codes(c.request(request(13, 4, group_id=G, members=[{"member_id": "m"}])), "error_code"),
        GAF, frozenset({E.none, E.unknown_member_id})),
    Row("DescribeGroups", [acl("GROUP", G, "DESCRIBE")],
        lambda c: _codes(c.request(request(15, 5, groups=[G])), "groups", "error_code"), GAF),
    Row("DeleteGroups", [acl("GROUP", "to-delete", "DELETE")],
        lambda c: _codes(c.request(request(42, 2, groups_names=["to-delete"])), "results", "error_code"),
        GAF, frozenset({E.group_id_not_found})),
    Row("OffsetDelete (group)", [acl("GROUP", G, "DELETE")], lambda c: _offset_delete(c, "error_code"), GAF,
        given=(acl("TOPIC", T, "READ"),)),
    Row("OffsetDelete (topic)", [acl("TOPIC", T, "READ")],
        lambda c: _offset_delete(c, "topics", "partitions", "error_code"), TAF,
        given=(acl("GROUP", G, "DELETE"),)),
    Row("CreateTopics (topic)", [acl("TOPIC", "made-", "CREATE", pattern="PREFIXED")],
        lambda c: _codes(c.request(request(19, 7, topics=[{"name": "made-1", "num_partitions": 1,
                                                            "replication_factor": -1}], timeout=SEC,
                                           validate_only=True)), "topics", "error_code"), TAF),
    Row("CreateTopics (cluster)", [acl("CLUSTER", "kafka-cluster", "CREATE")],
        lambda c: _codes(c.request(request(19, 7, topics=[{"name": "made-2", "num_partitions": 1,
                                                            "replication_factor": -1}], timeout=SEC,
                                           validate_only=True)), "topics", "error_code"), TAF),
    Row("DeleteTopics", [acl("TOPIC", "absent", "DELETE")],
        lambda c: _codes(c.request(request(20, 5, topic_names=["absent"], timeout=SEC)),
                         "responses", "error_code"),
        TAF, frozenset({E.unknown_topic_or_partition})),
    Row("CreatePartitions", [acl("TOPIC", T, "ALTER")],
        lambda c: _codes(c.request(request(37, 3, topics=[{"name": T, "count": 3, "assignments": None}],
                                           timeout=SEC, validate_only=True)), "results", "error_code"), TAF),
    Row("DeleteRecords", [acl("TOPIC", T, "DELETE")],
        lambda c: _codes(c.request(request(21, 2, topics=[{"name": T, "partitions": [
            {"partition_index": 1, "offset": 0}]}], timeout=SEC)), "topics", "partitions", "error_code"), TAF),
    Row("DescribeConfigs (topic)", [acl("TOPIC", T, "DESCRIBE_CONFIGS")],
        lambda c: _codes(c.request(request(32, 4, resources=[{"resource_type": 2, "resource_name": T,
                                                               "configuration_keys": None}])),
                         "results", "error_code"), TAF),
    Row("DescribeConfigs (broker)", [acl("CLUSTER", "kafka-cluster", "ALTER_CONFIGS")],  # implies Describe..
        lambda c: _codes(c.request(request(32, 4, resources=[{"resource_type": 4, "resource_name": "1",
                                                               "configuration_keys": None}])),
                         "results", "error_code"), CAF),
    Row("AlterConfigs (topic)", [acl("TOPIC", T, "ALTER_CONFIGS")],
        lambda c: _alter_configs(c, 2, T, "retention.ms"), TAF),
    Row("AlterConfigs (broker)", [acl("CLUSTER", "kafka-cluster", "ALTER_CONFIGS")],
        lambda c: _alter_configs(c, 4, "", "log.retention.ms"), CAF),
    Row("IncrementalAlterConfigs (topic)", [acl("TOPIC", T, "ALTER_CONFIGS")],
        lambda c: _alter_configs(c, 2, T, "retention.ms", incremental=True), TAF),
    Row("IncrementalAlterConfigs (broker)", [acl("CLUSTER", "kafka-cluster", "ALTER_CONFIGS")],
        lambda c: _alter_configs(c, 4, "", "log.retention.ms", incremental=True), CAF),
    Row("InitProducerId (cluster)", [acl("CLUSTER", "kafka-cluster", "IDEMPOTENT_WRITE")],
        lambda c: _codes(c.request(request(22, 4, transactional_id=None, transaction_timeout=SEC,
                                           producer_id=-1, producer_epoch=-1)), "error_code"), CAF),
    Row("InitProducerId (a topic's Write)", [acl("TOPIC", "some-", "WRITE", pattern="PREFIXED")],
        lambda c: _codes(c.request(request(22, 4, transactional_id=None, transaction_timeout=SEC,
                                           producer_id=-1, producer_epoch=-1)), "error_code"), CAF),
    Row("DescribeProducers", [acl("TOPIC", T, "READ")], lambda c: _describe_producers(c, T), TAF),
    Row("DescribeProducers (a topic that does not exist)", [acl("TOPIC", "absent", "READ")],
        lambda c: _describe_producers(c, "absent"), TAF, frozenset({E.unknown_topic_or_partition})),
    Row("DescribeUserScramCredentials", [acl("CLUSTER", "kafka-cluster", "DESCRIBE")],
        lambda c: _codes(c.request(request(50, 0, users=None)), "error_code"), CAF),
    Row("AlterUserScramCredentials", [acl("CLUSTER", "kafka-cluster", "ALTER")],
        lambda c: _codes(c.request(request(51, 0, deletions=[{"name": "nobody", "mechanism": 1}])),
                         "results", "error_code"), CAF, frozenset({E.resource_not_found})),
    Row("DescribeClientQuotas", [acl("CLUSTER", "kafka-cluster", "DESCRIBE_CONFIGS")],
        lambda c: _codes(c.request(request(48, 1, components=[], strict=False)), "error_code"), CAF),
    Row("AlterClientQuotas", [acl("CLUSTER", "kafka-cluster", "ALTER_CONFIGS")],
        lambda c: _codes(c.request(request(49, 1, validate_only=True, entries=[{
            "entity": [{"entity_type": "user", "entity_name": "q"}],
            "ops": [{"key": "producer_byte_rate", "value": 1.0, "remove": False}]}])),
            "entries", "error_code"), CAF),
    Row("DescribeLogDirs", [acl("CLUSTER", "kafka-cluster", "DESCRIBE")],
        lambda c: _codes(c.request(request(35, 4, topics=None)), "error_code"), CAF),
    Row("OffsetForLeaderEpoch", [acl("TOPIC", T, "DESCRIBE")], _epochs, TAF),
    Row("OffsetForLeaderEpoch (follower)", [acl("CLUSTER", "kafka-cluster", "CLUSTER_ACTION")],
        lambda c: _epochs(c, replica_id=2), TAF),
    Row("ElectLeaders", [acl("CLUSTER", "kafka-cluster", "ALTER")],
        lambda c: _codes(c.request(request(43, 2, election_type=0, topic_partitions=None, timeout=SEC)),
                         "error_code"), CAF, frozenset({E.invalid_request})),
    Row("AlterPartitionReassignments", [acl("CLUSTER", "kafka-cluster", "ALTER")],
        lambda c: _codes(c.request(request(45, 0, timeout=SEC, topics=[])), "error_code"),
        CAF, frozenset({E.invalid_request})),
    Row("ListPartitionReassignments", [acl("CLUSTER", "kafka-cluster", "DESCRIBE")],
        lambda c: _codes(c.request(request(46, 0, timeout=SEC, topics=None)), "error_code"),
        CAF, frozenset({E.invalid_request})),
    Row("FindCoordinator (transaction)", [acl("TRANSACTIONAL_ID", "tx", "DESCRIBE")],
        lambda c: _codes(c.request(request(10, 4, key_type=1, coordinator_keys=["tx"])),
                         "coordinators", "error_code"), TXAF),
    Row("InitProducerId (transactional)", [acl("TRANSACTIONAL_ID", "tx-init", "WRITE")],
        lambda c: _codes(c.request(request(22, 4, transactional_id="tx-init",
                                           transaction_timeout=timedelta(seconds=60),
                                           producer_id=-1, producer_epoch=-1)), "error_code"),
        TXAF),
    Row("AddPartitionsToTxn (transactional id)", [acl("TRANSACTIONAL_ID", "tx-add", "WRITE")],
        lambda c: _add_partitions(c, "tx-add"), TXAF,
        frozenset({E.invalid_producer_id_mapping}), given=(acl("TOPIC", T, "WRITE"),)),
    Row("AddPartitionsToTxn (topic)", [acl("TOPIC", T, "WRITE")],
        lambda c: _add_partitions(c, "tx-add"), TAF,
        frozenset({E.invalid_producer_id_mapping}), given=(acl("TRANSACTIONAL_ID", "tx-add", "WRITE"),)),
    Row("AddOffsetsToTxn (transactional id)", [acl("TRANSACTIONAL_ID", "tx-off", "WRITE")],
        lambda c: _codes(c.request(request(25, 3, transactional_id="tx-off", producer_id=1,
                                           producer_epoch=0, group_id=G)), "error_code"),
        TXAF, frozenset({E.invalid_producer_id_mapping}), given=(acl("GROUP", G, "READ"),)),
    Row("AddOffsetsToTxn (group)", [acl("GROUP", G, "READ")],
        lambda c: _codes(c.request(request(25, 3, transactional_id="tx-off", producer_id=1,
                                           producer_epoch=0, group_id=G)), "error_code"),
        GAF, frozenset({E.invalid_producer_id_mapping}),
        given=(acl("TRANSACTIONAL_ID", "tx-off", "WRITE"),)),
    # (partition 5 of T does not exist: past the checks, nothing is written)
    Row("TxnOffsetCommit (transactional id)", [acl("TRANSACTIONAL_ID", "tx-toc", "WRITE")],
        lambda c: _txn_commit(c), TXAF, frozenset({E.unknown_topic_or_partition}),
        given=(acl("GROUP", G, "READ"), acl("TOPIC", T, "READ"))),
    Row("TxnOffsetCommit (group)", [acl("GROUP", G, "READ")],
        lambda c: _txn_commit(c), GAF, frozenset({E.unknown_topic_or_partition}),
        given=(acl("TRANSACTIONAL_ID", "tx-toc", "WRITE"), acl("TOPIC", T, "READ"))),
    Row("TxnOffsetCommit (topic)", [acl("TOPIC", T, "READ")],
        lambda c: _txn_commit(c), TAF, frozenset({E.unknown_topic_or_partition}),
        given=(acl("TRANSACTIONAL_ID", "tx-toc", "WRITE"), acl("GROUP", G, "READ"))),
    Row("EndTxn", [acl("TRANSACTIONAL_ID", "tx-end", "WRITE")],
        lambda c: _codes(c.request(request(26, 3, transactional_id="tx-end", producer_id=1,
                                           producer_epoch=0, committed=True)), "error_code"),
        TXAF, frozenset({E.invalid_producer_id_mapping})),
]

# The inter-broker APIs need Cluster ClusterAction; granted, a single node answers as it does
# to anyone (it is not in a cluster).
INTER_BROKER = [
    ("LeaderAndIsr", 4, 5, dict(controller_id=1, is_k_raft_controller=False, controller_epoch=1,
                                broker_epoch=-1, type_=0, topic_states=[], live_leaders=[]),
     {E.invalid_request}),
    ("UpdateMetadata", 6, 7, dict(controller_id=1, is_k_raft_controller=False, controller_epoch=1,
                                  broker_epoch=-1, topic_states=[], live_brokers=[]), {E.invalid_request}),
    ("StopReplica", 5, 3, dict(controller_id=1, is_k_raft_controller=False, controller_epoch=1,
                               broker_epoch=-1,
                               delete_partitions=False, ungrouped_partitions=[], topics=[], topic_states=[]),
     {E.invalid_request}),
    ("ControlledShutdown", 7, 3, dict(broker_id=1, broker_epoch=-1), {E.not_controller}),
    ("AlterPartition", 56, 2, dict(broker_id=1, broker_epoch=-1, topics=[]), {E.not_controller}),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.api for r in ROWS])
def test_each_api_refuses_without_its_acl_and_serves_with_it(broker, row):
    if row.given:
        broker.grant(*row.given)
    with broker.wire("alice") as c:
        assert row.call(c) == {row.refusal}, f"{row.api} without {row.needs}"
    broker.grant(*row.needs)
    with broker.wire("alice") as c:
        got = row.call(c)
        assert got <= row.allowed, f"{row.api} with {row.needs}: {got}"
    with broker.wire("bob") as c:  # the ACLs are alice's
        assert not row.call(c) & row.allowed


@pytest.mark.parametrize("api,key,version,fields,answer", INTER_BROKER, ids=[r[0] for r in INTER_BROKER])
def test_inter_broker_apis_need_cluster_action(broker, api, key, version, fields, answer):
    from brook.protocol.messages import request_class
    from tests.support.wire_build import build

    def call(c):
        body = build(request_class(key, version), fields)
        return {c.request(body).error_code}

    with broker.wire("alice") as c:
        assert call(c) == {CAF}
    broker.grant(acl("CLUSTER", "kafka-cluster", "CLUSTER_ACTION"))
    with broker.wire("alice") as c:
        assert call(c) == answer


def test_produce_never_auto_creates_without_create(broker):
    broker.grant(acl("TOPIC", "produced-", "WRITE", pattern="PREFIXED"))
    with broker.wire("alice") as c:
        def produce(topic):
            r = c.request(request(0, 9, acks=1, timeout=SEC, topic_data=[
                {"name": topic, "partition_data": [{"index": 0, "records": batch(1)}]}]))
            return r.responses[0].partition_responses[0].error_code

        assert produce("produced-1") == E.unknown_topic_or_partition
        broker.grant(acl("TOPIC", "produced-", "CREATE", pattern="PREFIXED"))
        assert produce("produced-2") == E.none


def test_a_transactional_produce_is_refused_for_its_transactional_id_first(broker):
    """Kafka's first check of a Produce: transactional records need the request's
    transactional id, which the principal may Write; else every partition is refused,
    before the topic's own check. A transactional id on plain records is not looked at."""
    txn = batch(1, producer_id=9000, producer_epoch=0, base_sequence=0, transactional=True)

    def produce(c, transactional_id, records):
        r = c.request(request(0, 9, transactional_id=transactional_id, acks=1, timeout=SEC, topic_data=[
            {"name": T, "partition_data": [{"index": 1, "records": records}]}]))
        return _codes(r, "responses", "partition_responses", "error_code")

    with broker.wire("alice") as c:
        assert produce(c, "tx", txn) == {E.transactional_id_authorization_failed}
        assert produce(c, None, txn) == {E.transactional_id_authorization_failed}
        assert produce(c, "tx", batch(1)) == {TAF}  # plain records: the topic's check
        broker.grant(acl("TRANSACTIONAL_ID", "tx", "WRITE"))
        assert produce(c, "tx", txn) == {TAF}
        assert produce(c, None, txn) == {E.transactional_id_authorization_failed}
        broker.grant(acl("TOPIC", T, "WRITE"))
        # past the checks, the leader verifies the transaction with its coordinator (KIP-890),
        # which knows no producer 9000 for "tx"
        assert produce(c, "tx", txn) == {E.invalid_producer_id_mapping}

    # WriteTxnMarkers: Cluster ClusterAction (a broker) or Alter (KIP-664's abort), as Kafka
    with broker.wire("alice") as c:
        assert _txn_markers(c, 9000) == {CAF}
        broker.grant(acl("CLUSTER", "kafka-cluster", "ALTER"))
        assert _txn_markers(c, 9000) == {E.none}  # (a marker without a transaction open)


def test_fetch_sessions_are_checked_too(broker):
    """A fetch opening a session (epoch 0), then an incremental one reading it."""
    def fetch(c, session_id, epoch, topics):
        r = c.request(request(1, 12, replica_id=-1, max_wait=timedelta(0), min_bytes=1, max_bytes=1 << 20,
                              isolation_level=0, session_id=session_id, session_epoch=epoch, rack_id="",
                              topics=[{"topic": t, "partitions": [
                                  {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                                   "last_fetched_epoch": -1, "log_start_offset": -1,
                                   "partition_max_bytes": 1 << 20}]} for t in topics]))
        return r.session_id, {(t.topic, p.error_code) for t in r.responses for p in t.partitions}

    with broker.wire("alice") as c:
        session, got = fetch(c, 0, 0, [T])
        assert got == {(T, TAF)}
        broker.grant(acl("TOPIC", T, "READ"))
        _, got = fetch(c, session, 1, [])  # the session's partition, read again: now allowed
        assert got == {(T, E.none)}


def test_delete_topics_by_id_does_not_name_a_topic_it_may_not_describe(broker):
    with broker.wire("admin") as c:
        topic_id = c.request(request(3, 12, topics=[{"name": T, "topic_id": ZERO}])).topics[0].topic_id
    with broker.wire("alice") as c:
        r = c.request(request(20, 6, topics=[{"name": None, "topic_id": topic_id}], timeout=SEC))
        assert [(t.name, t.error_code) for t in r.responses] == [(None, TAF)]
    broker.grant(acl("TOPIC", T, "DESCRIBE"))
    with broker.wire("alice") as c:
        r = c.request(request(20, 6, topics=[{"name": None, "topic_id": topic_id}], timeout=SEC))
        assert [(t.name, t.error_code) for t in r.responses] == [(T, TAF)]


def test_create_topics_shows_configs_only_with_describe_configs(broker):
    broker.grant(acl("TOPIC", "shown-", "CREATE", pattern="PREFIXED"))

    def create(name):
        with broker.wire("alice") as c:
            t = c.request(request(19, 7, timeout=SEC, validate_only=False, topics=[
                {"name": name, "num_partitions": 1, "replication_factor": -1}])).topics[0]
            return t.error_code, t.topic_config_error_code, len(t.configs)

    assert create("shown-1") == (E.none, TAF, 0)
    broker.grant(acl("TOPIC", "shown-", "DESCRIBE_CONFIGS", pattern="PREFIXED"))
    code, config_code, configs = create("shown-2")
    assert (code, config_code) == (E.none, E.none) and configs > 10


def test_deny_wins_and_super_users_pass(broker):
    broker.grant(acl("TOPIC", "*", "ALL"), acl("TOPIC", T, "READ", permission="DENY"))
    with broker.wire("alice") as c:
        assert _fetch(c) == {TAF}
    with broker.wire("admin") as c:
        assert _fetch(c) == {E.none}
    line = ("Principal = User:alice is Denied operation = READ from host = 127.0.0.1 on resource = "
            f"TOPIC:LITERAL:{T}")
    deadline = time.monotonic() + 10
    while line not in broker.proc.stderr_path.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert line in broker.proc.stderr_path.read_text()


def test_metadata_of_every_topic_lists_only_describable_ones(broker):
    broker.grant(acl("TOPIC", T, "READ"))
    with broker.wire("alice") as c:
        names = {t.name for t in c.request(request(3, 12, topics=None)).topics}
        assert names == {T}
    with broker.wire("bob") as c:
        assert c.request(request(3, 12, topics=None)).topics == ()
        # named, it is refused the same whether it exists or not
        r = c.request(request(3, 12, allow_auto_topic_creation=False,
                              topics=[{"name": T, "topic_id": ZERO}, {"name": "never", "topic_id": ZERO}]))
        assert [(t.name, t.error_code, t.topic_id or ZERO, t.partitions) for t in r.topics] == \
            [(T, TAF, ZERO, ()), ("never", TAF, ZERO, ())]


def test_metadata_never_auto_creates_without_create(broker):
    broker.grant(acl("TOPIC", "*", "DESCRIBE"))
    with broker.wire("alice") as c:
        r = _metadata(c, "not-made", create=True)
        assert [t.error_code for t in r.topics] == [TAF]
    with broker.wire("admin") as c:
        r = _metadata(c, "not-made")
        assert [t.error_code for t in r.topics] == [E.unknown_topic_or_partition]


def test_offset_fetch_of_all_topics_leaves_out_those_it_may_not_describe(broker):
    with broker.wire("admin") as c:
        _commit(c, G, "other-topic")
    broker.grant(acl("GROUP", G, "DESCRIBE"), acl("TOPIC", T, "DESCRIBE"))
    with broker.wire("alice") as c:
        r = c.request(request(9, 8, groups=[{"group_id": G, "topics": None}]))
        assert [t.name for g in r.groups for t in g.topics] == [T]


def test_list_groups_filters_by_group_describe_unless_cluster_describe(broker):
    def listed(user):
        with broker.wire(user) as c:
            return {g.group_id for g in c.request(request(16, 4, states_filter=[])).groups}

    assert G in listed("admin")
    assert listed("alice") == set()
    broker.grant(acl("GROUP", G, "DESCRIBE"))
    assert listed("alice") == {G}
    broker.grant(acl("CLUSTER", "kafka-cluster", "DESCRIBE", "User:bob"))
    assert listed("bob") == listed("admin")


def test_authorized_operations(broker):
    broker.grant(acl("TOPIC", T, "READ"), acl("TOPIC", T, "ALTER_CONFIGS"), acl("GROUP", G, "READ"),
                 acl("CLUSTER", "kafka-cluster", "DESCRIBE"))
    with broker.wire("alice") as c:
        r = _metadata(c, T, version=10, include_cluster_authorized_operations=True,
                      include_topic_authorized_operations=True)
        assert r.topics[0].topic_authorized_operations == bitfield(
            [Operation.READ, Operation.DESCRIBE, Operation.ALTER_CONFIGS, Operation.DESCRIBE_CONFIGS])
        assert r.cluster_authorized_operations == bitfield([Operation.DESCRIBE])
        r = c.request(request(60, 1, include_cluster_authorized_operations=True, endpoint_type=1))
        assert r.cluster_authorized_operations == bitfield([Operation.DESCRIBE])
        r = c.request(request(15, 5, groups=[G], include_authorized_operations=True))
        assert r.groups[0].authorized_operations == bitfield([Operation.READ, Operation.DESCRIBE])
        # not asked for: Kafka's "not requested"
        r = c.request(request(15, 5, groups=[G], include_authorized_operations=False))
        assert r.groups[0].authorized_operations == -(2**31)
    with broker.wire("bob") as c:  # no Cluster Describe: 0
        r = c.request(request(60, 1, include_cluster_authorized_operations=True, endpoint_type=1))
        assert r.cluster_authorized_operations == 0
    with broker.wire("admin") as c:
        r = c.request(request(60, 1, include_cluster_authorized_operations=True, endpoint_type=1))
        assert r.cluster_authorized_operations == bitfield(SUPPORTED_OPERATIONS[ResourceType.CLUSTER])


def test_sasl_and_api_versions_need_nothing(broker):
    with broker.wire("bob") as c:  # (wire() went through SaslHandshake and SaslAuthenticate)
        r = c.request(request(18, 3, client_software_name="t", client_software_version="1"))
        assert r.error_code == E.none


def test_real_clients_with_the_acls_kafka_documents(broker):
    """A producer needs Topic Write (and Describe, implied) plus, being idempotent, Write on a
    topic; a consumer in a group Topic Read and Group Read."""
    from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

    topic, group = "real-clients", "real-group"
    with broker.wire("admin") as c:
        c.request(request(19, 7, topics=[{"name": topic, "num_partitions": 1, "replication_factor": -1}],
                          timeout=SEC))
    refused = []
    p = Producer(broker.conf("alice", **{"enable.idempotence": True, "message.timeout.ms": 5000}))
    p.produce(topic, b"refused", on_delivery=lambda err, msg: refused.append(err))
    p.flush(10)
    assert [e.code() for e in refused] == [KafkaError.TOPIC_AUTHORIZATION_FAILED], refused
    broker.grant(acl("TOPIC", topic, "WRITE"), acl("TOPIC", topic, "READ"), acl("GROUP", group, "READ"))
    delivered = []
    p = Producer(broker.conf("alice", **{"enable.idempotence": True}))
    for i in range(3):
        p.produce(topic, b"m%d" % i, on_delivery=lambda err, msg: delivered.append(err))
    assert p.flush(30) == 0 and delivered == [None] * 3
    consumer = Consumer(broker.conf("alice", **{"group.id": group, "auto.offset.reset": "earliest",
                                                "enable.auto.commit": False}))
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 3 and time.monotonic() < deadline:
        m = consumer.poll(1)
        if m is not None and m.error() is None:
            got.append(m.value())
    assert sorted(got) == [b"m0", b"m1", b"m2"]
    consumer.commit(asynchronous=False)
    assert consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 3
    consumer.close()
    # bob may not join the group
    c2 = Consumer(broker.conf("bob", **{"group.id": group, "auto.offset.reset": "earliest"}))
    c2.subscribe([topic])
    err = None
    deadline = time.monotonic() + 20
    while err is None and time.monotonic() < deadline:
        m = c2.poll(0.5)
        if m is not None and m.error() is not None:
            err = m.error()
    c2.close()
    assert err is not None and err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, err


def test_transactions_are_described_and_listed_with_transactional_id_describe(broker):
    from datetime import timedelta as td

    with broker.wire("admin") as c:
        init = c.request(request(22, 4, transactional_id="tx-listed", transaction_timeout=td(seconds=60),
                                 producer_id=-1, producer_epoch=-1))
        assert init.error_code == E.none

    def listed(c):
        r = c.request(request(66, 1, state_filters=[], producer_id_filters=[], duration_filter=-1))
        return {t.transactional_id for t in r.transaction_states}

    def described(c):  # the error code, read from the bytes (a refusal's start time is -1)
        c.send(request(65, 0, transactional_ids=["tx-listed"]))
        frame = c.recv_frame()
        return int.from_bytes(frame[10:12], "big", signed=True)

    with broker.wire("alice") as c:
        assert "tx-listed" not in listed(c)
        assert described(c) == E.transactional_id_authorization_failed
    broker.grant(acl("TRANSACTIONAL_ID", "tx-listed", "DESCRIBE"))
    with broker.wire("alice") as c:
        assert "tx-listed" in listed(c)
        assert described(c) == E.none
