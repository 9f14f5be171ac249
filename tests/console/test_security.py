"""The console against a broker with SASL and ACLs: the security page lists the ACLs, a user
without rights gets the broker's refusal as a message, and no password (the console's own, or
the broker's JAAS users') reaches any page."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import NewTopic
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
    broker = AclBroker(tmp_path_factory.mktemp("broker-console-acl"))
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
