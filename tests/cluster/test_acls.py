"""ACLs in a cluster, where Kafka's ZooKeeper mode keeps them: /kafka-acl/<Type>/<name> and
/kafka-acl-extended/prefixed/<Type>/<name>, announced under /kafka-acl-changes and
/kafka-acl-extended-changes, so an ACL made through one broker holds on every broker, and
ACLs written there by Kafka's own tools are followed too."""

from __future__ import annotations

import json
import uuid

import pytest
from kio.schema.errors import ErrorCode

from tests.support.acl_broker import AUTHORIZER, JAAS, PASSWORDS, acl
from tests.support.broker_harness import free_port
from tests.support.cluster_harness import brokers, wait_for, zk, zookeeper  # noqa: F401
from tests.support.kafka_wire import WireClient
from tests.support.sasl_wire import authenticate, handshake
from tests.support.wire_build import request

pytestmark = pytest.mark.broker


def _start(brokers, i) -> int:
    sasl, plain = free_port(), free_port()
    brokers(i, {"listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
                "inter.broker.listener.name": "PLAINTEXT",
                "sasl.enabled.mechanisms": "PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
                "authorizer.class.name": AUTHORIZER,
                # the brokers talk to each other on PLAINTEXT, as User:ANONYMOUS
                "super.users": "User:admin;User:ANONYMOUS",
                "connection.failed.authentication.delay.ms": 0})
    return sasl


def _describe_topic(port: int, user: str, topic: str) -> ErrorCode:
    with WireClient(f"127.0.0.1:{port}") as c:
        assert handshake(c, "PLAIN").error_code == ErrorCode.none
        assert authenticate(c, f"\0{user}\0{PASSWORDS[user]}".encode()).error_code == ErrorCode.none
        r = c.request(request(3, 12, topics=[{"name": topic, "topic_id": uuid.UUID(int=0)}],
                              allow_auto_topic_creation=False))
        return r.topics[0].error_code


def _admin(port: int):
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
                        "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": "admin-secret"})


def test_acls_live_in_zookeeper_and_hold_on_every_broker(zk, brokers):
    from confluent_kafka.admin import (AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType,
                                       ResourceType)

    sasl = {i: _start(brokers, i) for i in (1, 2)}
    wait_for(lambda: zk.broker_ids() == [1, 2], 30, "brokers registered", brokers)
    for i in (1, 2):  # no ACLs yet: unknown (allowed to ask), refused
        assert _describe_topic(sasl[i], "alice", "orders") == ErrorCode.topic_authorization_failed

    admin = _admin(sasl[1])
    made = [acl("TOPIC", "orders", "READ"), acl("TOPIC", "orders-", "WRITE", pattern="PREFIXED"),
            acl("GROUP", "billing", "READ", "User:bob", permission="DENY", host="10.0.0.1")]
    for f in admin.create_acls(made, request_timeout=30).values():
        assert f.result() is None
    # Kafka's layout and formats
    assert zk.json("/kafka-acl/Topic/orders") == {"version": 1, "acls": [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}]}
    assert zk.json("/kafka-acl-extended/prefixed/Topic/orders-")["acls"] == [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Write", "host": "*"}]
    assert zk.json("/kafka-acl/Group/billing")["acls"] == [
        {"principal": "User:bob", "permissionType": "Deny", "operation": "Read", "host": "10.0.0.1"}]
    literal = {zk.get(f"/kafka-acl-changes/{n}")[0] for n in zk.children("/kafka-acl-changes")}
    assert literal == {b"TOPIC:orders", b"GROUP:billing"}
    extended = "/kafka-acl-extended-changes"
    assert [zk.json(f"{extended}/{n}") for n in zk.children(extended)] == [
        {"version": 1, "resourceType": "TOPIC", "name": "orders-", "patternType": "PREFIXED"}]

    # in force on both brokers (the other one hears of it through the notification)
    for i in (1, 2):
        wait_for(lambda: _describe_topic(sasl[i], "alice", "orders") == ErrorCode.unknown_topic_or_partition,
                 15, f"broker {i} allowing alice", brokers)
        assert _describe_topic(sasl[i], "bob", "orders") == ErrorCode.topic_authorization_failed
        assert _describe_topic(sasl[i], "alice", "orders-eu") == ErrorCode.unknown_topic_or_partition

    # deleted through broker 2: gone on broker 1 too
    admin2 = _admin(sasl[2])
    f = AclBindingFilter(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, None, None,
                         AclOperation.ANY, AclPermissionType.ANY)
    assert len(admin2.delete_acls([f], request_timeout=30)[f].result()) == 1
    assert zk.get("/kafka-acl/Topic/orders") is None
    wait_for(lambda: _describe_topic(sasl[1], "alice", "orders") == ErrorCode.topic_authorization_failed,
             15, "broker 1 refusing alice again", brokers)
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    assert len(admin.describe_acls(everything, request_timeout=30).result()) == 2

    # written by Kafka's tools straight into ZooKeeper (kafka-acls.sh --authorizer-properties
    # zookeeper.connect=...): followed as well
    zk.kz.create(zk.chroot + "/kafka-acl/Topic/audit", json.dumps({"version": 1, "acls": [
        {"principal": "User:bob", "permissionType": "Allow", "operation": "Describe", "host": "*"}]}).encode(),
        makepath=True)
    zk.kz.create(zk.chroot + "/kafka-acl-changes/acl_changes_", b"Topic:audit", sequence=True)
    for i in (1, 2):
        wait_for(lambda: _describe_topic(sasl[i], "bob", "audit") == ErrorCode.unknown_topic_or_partition,
                 15, f"broker {i} following a change made by Kafka's tools", brokers)

    # the brokers' own requests (controller, followers' Fetch) pass: they are super users
    from confluent_kafka import Producer
    from confluent_kafka.admin import NewTopic
    for f in admin.create_topics([NewTopic("replicated", 1, 2)], request_timeout=30).values():
        assert f.result() is None
    p = Producer({"bootstrap.servers": f"127.0.0.1:{sasl[1]}", "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": "admin-secret",
                  "acks": "all"})
    delivered = []
    p.produce("replicated", b"x", on_delivery=lambda err, msg: delivered.append(err))
    assert p.flush(30) == 0 and delivered == [None]
    wait_for(lambda: zk.in_sync(["replicated"]), 30, "both replicas in sync", brokers)

    # a broker that starts later reads them all at start
    sasl[3] = _start(brokers, 3)
    assert _describe_topic(sasl[3], "bob", "audit") == ErrorCode.unknown_topic_or_partition
    assert _describe_topic(sasl[3], "alice", "orders-x") == ErrorCode.unknown_topic_or_partition
    assert _describe_topic(sasl[3], "alice", "orders") == ErrorCode.topic_authorization_failed


def test_a_broker_that_lost_its_session_still_follows_acl_changes(zk, brokers):
    """A broker paused past its ZooKeeper session comes back with a new one, which has none of
    the old one's watches: it reads the changes made meanwhile, and follows the next ones. (kazoo
    fires every watch when the connection goes; the reading of changes it starts retries until
    ZooKeeper is back, and sets the watch again.)"""
    import os
    import signal

    from tests.support.cluster_harness import SESSION_TIMEOUT_MS

    sasl = _start(brokers, 1)
    wait_for(lambda: zk.broker_ids() == [1], 30, "broker registered", brokers)

    def allow_bob(topic):
        zk.kz.create(zk.chroot + f"/kafka-acl/Topic/{topic}", json.dumps({"version": 1, "acls": [
            {"principal": "User:bob", "permissionType": "Allow", "operation": "Describe", "host": "*"}]}).encode(),
            makepath=True)
        zk.kz.create(zk.chroot + "/kafka-acl-changes/acl_changes_", f"TOPIC:{topic}".encode(), sequence=True)

    os.kill(brokers[1].proc.pid, signal.SIGSTOP)
    try:
        wait_for(lambda: zk.broker_ids() == [], SESSION_TIMEOUT_MS / 1000 + 10, "the session expired", brokers)
        allow_bob("while-away")
    finally:
        os.kill(brokers[1].proc.pid, signal.SIGCONT)
    wait_for(lambda: zk.broker_ids() == [1], 15, "broker 1 registered again", brokers)
    wait_for(lambda: _describe_topic(sasl, "bob", "while-away") == ErrorCode.unknown_topic_or_partition,
             15, "the change made while away", brokers)
    allow_bob("after")
    wait_for(lambda: _describe_topic(sasl, "bob", "after") == ErrorCode.unknown_topic_or_partition,
             15, "a change after the new session", brokers)

    # an ACL znode that is not Kafka's JSON is logged and skipped; the changes after it are read
    zk.kz.create(zk.chroot + "/kafka-acl/Topic/garbled", b"not json")
    zk.kz.create(zk.chroot + "/kafka-acl-changes/acl_changes_", b"TOPIC:garbled", sequence=True)
    allow_bob("after-garbled")
    wait_for(lambda: _describe_topic(sasl, "bob", "after-garbled") == ErrorCode.unknown_topic_or_partition,
             15, "a change after an unreadable one", brokers)
    assert "ignoring the ACLs of /kafka-acl/Topic/garbled" in brokers[1].stderr_path.read_text()


def test_concurrent_changes_of_one_resource_all_land(zk):
    """Two writers (two brokers' ZkClients) adding ACLs to one resource at once: each write is
    conditional on the version it read, so none overwrites the other's."""
    import threading

    from brook.cluster import zk_acls
    from brook.cluster.zk_client import ZkClient
    from brook.cluster.zk_paths import parse_connect
    from brook.security.acls import Operation, PatternType, Permission, ResourceType

    clients = [ZkClient(parse_connect(zk.connect), 10_000, lambda what: None) for _ in range(2)]
    stop = threading.Event()
    for c in clients:
        assert c.connect_until(stop, 10_000)
        c.ensure_acl_paths()
    path = zk_acls.resource_path(ResourceType.TOPIC, PatternType.LITERAL, "contended")
    notification = zk_acls.change_node(ResourceType.TOPIC, PatternType.LITERAL, "contended")

    def add(client, who):
        for i in range(15):
            entry = (f"User:{who}{i}", "*", Operation.READ, Permission.ALLOW)
            client.update_acls(
                path, lambda data, e=entry: zk_acls.encode_acls(zk_acls.decode_acls(data) | {e}), notification)

    try:
        threads = [threading.Thread(target=add, args=(c, who)) for c, who in zip(clients, "ab")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(zk_acls.decode_acls(zk.get(path)[0])) == 30
        assert len(zk.children(zk_acls.ACL_CHANGES)) == 30
    finally:
        for c in clients:
            c.close()


def test_change_notifications_older_than_the_expiration_are_purged(zk):
    """Every broker deletes the change notifications it has read once they are older than
    CHANGE_EXPIRATION_MS (Kafka's 15 minutes), config changes and ACL changes alike; newer
    ones stay for brokers that have not read them yet."""
    import threading
    import time

    from brook.cluster import zk_acls, zk_paths
    from brook.cluster.zk_client import ZkClient
    from brook.cluster.zk_cluster import CHANGE_EXPIRATION_MS
    from brook.cluster.zk_paths import parse_connect

    assert CHANGE_EXPIRATION_MS == 15 * 60 * 1000
    client = ZkClient(parse_connect(zk.connect), 10_000, lambda what: None)
    assert client.connect_until(threading.Event(), 10_000)
    try:
        client.ensure_acl_paths()
        for directory in (zk_paths.CONFIG_CHANGES, zk_acls.ACL_CHANGES):
            client.kz.ensure_path(client.p(directory))
            old = [client.kz.create(client.p(f"{directory}/change_"), b"{}", sequence=True) for _ in range(3)]
            time.sleep(0.6)
            new = client.kz.create(client.p(f"{directory}/change_"), b"{}", sequence=True)
            names = sorted(client.kz.get_children(client.p(directory)))
            assert client.purge_changes(directory, names, 500) == 3
            assert sorted(client.kz.get_children(client.p(directory))) == [new.rsplit("/", 1)[1]]
            assert client.purge_changes(directory, [o.rsplit("/", 1)[1] for o in old], 500) == 0  # gone already
    finally:
        client.close()
