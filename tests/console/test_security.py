"""The console against a broker with SASL and ACLs: the security page lists the ACLs, a user
without rights gets the broker's refusal as a message, and no password (the console's own, or
the broker's JAAS users') reaches any page."""

from __future__ import annotations

import logging
import re

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from starlette.testclient import TestClient

from brook.console.app import ConsoleSettings, create_app
from brook.console.backend import Backend
from brook.security.client_settings import ClientSecurity
from tests.support.acl_broker import PASSWORDS, AclBroker, acl
from tests.support.group_offsets import commit, unique_name

PAGES = ("/groups", "/offsets-topic", "/cluster", "/cluster/brokers/1", "/topics",
         "/security")


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    broker = AclBroker(tmp_path_factory.mktemp("broker-console-acl"),
                       **{"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256"})
    broker.proc.start()
    try:
        yield broker
    finally:
        broker.proc.close()


def console(broker, user: str) -> TestClient:
    security = ClientSecurity.from_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                            f'username="{user}" password="{PASSWORDS[user]}";'})
    backend = Backend(broker.bootstrap, 10.0, security)
    return TestClient(create_app(backend, ConsoleSettings()), raise_server_exceptions=False)


def test_the_security_page_lists_the_acls_and_no_page_shows_a_password(secured):
    topic = unique_name("secret-topic")
    admin = secured.admin()  # kept: its futures die with it
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    secured.grant(acl("TOPIC", topic, "READ"), acl("GROUP", "billing", "READ", "User:bob"))
    commit(admin, unique_name("g"), {(topic, 0): 0})
    with console(secured, "admin") as c:
        page = c.get("/security").text
        assert f"<td>{topic}</td>" in page and "User:alice" in page and "User:bob" in page
        assert "SASL_PLAINTEXT, PLAIN as admin" in c.get("/groups").text
        for path in PAGES + (f"/topics/{topic}",):
            r = c.get(path)
            assert r.status_code == 200, (path, r.text[-500:])
            for password in PASSWORDS.values():
                assert password not in r.text, (path, password)
        configs = c.get("/cluster/brokers/1").text
        assert "listener.name.sasl_plaintext.plain.sasl.jaas.config" in configs
        assert "(sensitive)" in configs


def test_a_user_the_broker_refuses_gets_its_reason(secured):
    topic = unique_name("closed")
    admin = secured.admin()
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    with console(secured, "bob") as c:
        r = c.get(f"/topics/{topic}/messages")
        assert r.status_code in (404, 502)
        assert "Traceback" not in r.text
        page = c.get("/security").text
        assert "The ACLs: cannot list ACLs: CLUSTER_AUTHORIZATION_FAILED" in page
        assert "The users: cannot list users: CLUSTER_AUTHORIZATION_FAILED" in page


def post(c: TestClient, path: str, data: dict):
    token = re.search(r'name="csrf_token" value="([0-9a-f]+)"', c.get("/security").text).group(1)
    return c.post(path, data={**data, "csrf_token": token})


def acls_of(broker, principal: str) -> set[tuple]:
    from confluent_kafka.admin import (AclBindingFilter, AclOperation, AclPermissionType,
                                       ResourcePatternType, ResourceType)
    admin = broker.admin()
    f = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, principal, None,
                         AclOperation.ANY, AclPermissionType.ANY)
    return {(b.restype.name, b.name, b.resource_pattern_type.name, b.host, b.operation.name,
             b.permission_type.name) for b in admin.describe_acls(f, request_timeout=10).result()}


def test_acls_are_added_filtered_and_deleted_through_the_page(secured):
    topic, principal = unique_name("acl-topic"), "User:" + unique_name("carol")
    with console(secured, "admin") as c:
        r = post(c, "/security/acls", {"resource": "Topic", "name": topic, "pattern": "Literal",
                                       "principal": principal, "host": "*",
                                       "operation": "Read", "permission": "Allow"})
        assert r.status_code == 200 and "Added the ACL: ALLOW" in r.text, r.text[-800:]
        post(c, "/security/acls", {"resource": "Topic", "name": topic[:5], "pattern": "Prefixed",
                                   "principal": principal, "operation": "Write",
                                   "permission": "Deny"})
        post(c, "/security/acls", {"resource": "Cluster", "name": "", "principal": principal,
                                   "operation": "DescribeConfigs"})
        assert acls_of(secured, principal) == {
            ("TOPIC", topic, "LITERAL", "*", "READ", "ALLOW"),
            ("TOPIC", topic[:5], "PREFIXED", "*", "WRITE", "DENY"),
            ("BROKER", "kafka-cluster", "LITERAL", "*", "DESCRIBE_CONFIGS", "ALLOW")}
        # the filter asks the cluster: only this principal's Topic ACLs
        page = c.get("/security", params={"resource": "Topic", "principal": principal}).text
        rows = re.findall(r"<tr><td>(Topic|Cluster)</td><td>([^<]*)</td>", page)
        assert sorted(n for _, n in rows) == sorted([topic, topic[:5]]), rows
        assert "Delete 2 ACL(s)" in page
        # one row's delete removes exactly that ACL
        r = post(c, "/security/acls/delete", {
            "resource": "Topic", "name": topic, "pattern": "LITERAL", "principal": principal,
            "host": "*", "operation": "Read", "permission": "ALLOW"})
        assert "Deleted 1 ACL(s)." in r.text, r.text[-800:]
        assert len(acls_of(secured, principal)) == 2
        # the filter's delete removes what it matches
        r = post(c, "/security/acls/delete", {"principal": principal, "resource": "Any",
                                              "operation": "Any", "permission": "Any"})
        assert "Deleted 2 ACL(s)." in r.text
        assert acls_of(secured, principal) == set()
        # an empty filter would delete everything: refused
        r = post(c, "/security/acls/delete", {"resource": "Any"})
        assert r.status_code == 400 and "narrow the filter" in r.text
        r = post(c, "/security/acls", {"resource": "Topic", "name": topic, "principal": "alice",
                                       "operation": "Read"})
        assert r.status_code == 400 and "a principal is TYPE:NAME" in r.text


def scram_login(broker, user: str, password: str) -> bool:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "broker.address.family": "v4",
                         "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                         "sasl.username": user, "sasl.password": password})
    try:
        admin.list_topics(timeout=8)
        return True
    except KafkaException:
        return False


def test_scram_users_are_set_and_deleted_and_the_password_never_shown_or_logged(secured, caplog):
    user, password = unique_name("dave"), "Pa55-word-never-shown"
    caplog.set_level(logging.DEBUG)
    with console(secured, "admin") as c:
        r = post(c, "/security/users", {"user": user, "mechanism": "SCRAM-SHA-256",
                                        "iterations": "8192", "password": password,
                                        "confirm_password": password})
        assert r.status_code == 200 and f"User {user}: SCRAM-SHA-256 credential set" in r.text
        assert password not in r.text
        page = c.get("/security").text
        assert f"<tr><td>{user}</td><td>SCRAM-SHA-256</td><td class=\"num\">8192</td>" in page
        assert password not in page
        assert scram_login(secured, user, password)
        r = post(c, "/security/users", {"user": user, "mechanism": "SCRAM-SHA-256",
                                        "password": password, "confirm_password": "other"})
        assert r.status_code == 400 and password not in r.text
        r = post(c, "/security/users/delete", {"user": user, "mechanism": ""})
        assert f"User {user}: SCRAM-SHA-256 deleted." in r.text
        assert user not in c.get("/security").text
        assert not scram_login(secured, user, password)
    assert password not in caplog.text
    assert f"set the SCRAM-SHA-256 credential of user '{user}'" in caplog.text


def quotas_of(broker, user: str) -> dict:
    from brook.cli.quotas import quota_rows
    from brook.security.client_settings import ClientSecurity
    security = ClientSecurity.from_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                            f'username="admin" password="{PASSWORDS["admin"]}";'})
    host, port = broker.bootstrap.rsplit(":", 1)
    return {(r["client-id"], r["quota"]): r["value"]
            for r in quota_rows(host, int(port), {"user": user}, 10.0, security)}


def test_client_quotas_are_set_altered_and_deleted_through_the_page(secured):
    user = unique_name("erin")
    with console(secured, "admin") as c:
        r = post(c, "/security/quotas", {"user": user, "quota": "producer_byte_rate",
                                         "value": "1048576"})
        assert f"Set producer_byte_rate=1048576 for user {user}." in r.text, r.text[-800:]
        post(c, "/security/quotas", {"user": user, "client": "app", "quota": "consumer_byte_rate",
                                     "value": "2048"})
        post(c, "/security/quotas", {"user": user, "quota": "producer_byte_rate", "value": "4096"})
        assert quotas_of(secured, user) == {(None, "producer_byte_rate"): 4096.0}
        page = c.get("/security").text
        assert user in page and "consumer_byte_rate" in page
        r = post(c, "/security/quotas/delete", {"user": user, "client": "",
                                                "quota": "producer_byte_rate"})
        assert f"Removed producer_byte_rate from user {user}." in r.text
        assert quotas_of(secured, user) == {}
        r = post(c, "/security/quotas", {"user": user, "quota": "producer_byte_rate", "value": "x"})
        assert r.status_code == 400 and "must be a number" in r.text
        r = post(c, "/security/quotas", {"quota": "producer_byte_rate", "value": "1"})
        assert r.status_code == 400 and "name a user, a client id" in r.text


def test_changes_the_cluster_refuses_are_shown_as_its_reason(secured):
    with console(secured, "bob") as c:
        for path, data in (
                ("/security/acls", {"resource": "Topic", "name": "t", "principal": "User:bob",
                                    "operation": "All"}),
                ("/security/users", {"user": "mallory", "password": "x1", "confirm_password": "x1"}),
                ("/security/quotas", {"user": "bob", "quota": "producer_byte_rate", "value": "9"})):
            r = post(c, path, data)
            assert r.status_code == 502, (path, r.text[-600:])
            assert "CLUSTER_AUTHORIZATION_FAILED" in r.text and "(null)" not in r.text, r.text[-600:]
            assert "Traceback" not in r.text


def test_read_only_hides_the_security_forms(secured):
    security = ClientSecurity.from_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                            f'username="admin" password="{PASSWORDS["admin"]}";'})
    app = create_app(Backend(secured.bootstrap, 10.0, security), ConsoleSettings(read_only=True))
    with TestClient(app, raise_server_exceptions=False) as c:
        page = c.get("/security").text
        assert 'method="post"' not in page and 'type="password"' not in page
        assert c.post("/security/users", data={"user": "x", "password": "y"}).status_code == 403
