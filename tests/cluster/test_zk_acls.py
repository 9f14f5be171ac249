"""ACLs' ZooKeeper layout and formats (brook.cluster.zk_acls), byte for byte as Kafka writes
them, and read in every spelling Kafka's readers accept."""

from __future__ import annotations

import json

import pytest

from brook.cluster import zk_acls
from brook.security.acls import Operation as Op, PatternType as PT, Permission, ResourceType as RT


def test_paths():
    assert zk_acls.resource_path(RT.TOPIC, PT.LITERAL, "orders") == "/kafka-acl/Topic/orders"
    assert zk_acls.resource_path(RT.TRANSACTIONAL_ID, PT.PREFIXED, "tx-") == \
        "/kafka-acl-extended/prefixed/TransactionalId/tx-"
    assert zk_acls.resource_path(RT.CLUSTER, PT.LITERAL, "kafka-cluster") == "/kafka-acl/Cluster/kafka-cluster"


def test_acls_round_trip_in_kafkas_json():
    entries = {("User:alice", "*", Op.IDEMPOTENT_WRITE, Permission.ALLOW),
               ("User:bob", "10.0.0.1", Op.DESCRIBE_CONFIGS, Permission.DENY)}
    data = zk_acls.encode_acls(entries)
    assert json.loads(data) == {"version": 1, "acls": [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "IdempotentWrite", "host": "*"},
        {"principal": "User:bob", "permissionType": "Deny", "operation": "DescribeConfigs",
         "host": "10.0.0.1"}]}
    assert zk_acls.decode_acls(data) == entries
    assert zk_acls.decode_acls(None) == set()
    # upper-case spellings as well
    assert zk_acls.decode_acls(b'{"version":1,"acls":[{"principal":"User:a","permissionType":"ALLOW",'
                               b'"operation":"CLUSTER_ACTION","host":"*"}]}') == {
        ("User:a", "*", Op.CLUSTER_ACTION, Permission.ALLOW)}


def test_change_notifications():
    assert zk_acls.change_node(RT.GROUP, PT.LITERAL, "g:1") == \
        ("/kafka-acl-changes/acl_changes_", b"GROUP:g:1")
    prefix, data = zk_acls.change_node(RT.TOPIC, PT.PREFIXED, "t-")
    assert prefix == "/kafka-acl-extended-changes/acl_changes_"
    assert json.loads(data) == {"version": 1, "resourceType": "TOPIC", "name": "t-", "patternType": "PREFIXED"}
    assert zk_acls.decode_change(zk_acls.ACL_CHANGES, b"GROUP:g:1") == (RT.GROUP, PT.LITERAL, "g:1")
    assert zk_acls.decode_change(zk_acls.ACL_CHANGES, b"Topic:t") == (RT.TOPIC, PT.LITERAL, "t")
    assert zk_acls.decode_change(zk_acls.EXTENDED_ACL_CHANGES, data) == (RT.TOPIC, PT.PREFIXED, "t-")
    with pytest.raises(ValueError):
        zk_acls.decode_change(zk_acls.ACL_CHANGES, b"Nonsense:t")

