"""`brook acls` against a broker process with ACLs on: add, list and remove with
kafka-acls.sh's option names, and the ACLs taking effect for a SASL user. (Mostly through a
PLAINTEXT listener whose User:ANONYMOUS is a super user; once with --command-config.)"""

from __future__ import annotations

import json

import pytest
from kio.schema.errors import ErrorCode
from typer.testing import CliRunner

from brook.cli import app
from tests.support.acl_broker import AclBroker
from tests.support.broker_harness import free_port
from tests.support.wire_build import request

pytestmark = pytest.mark.broker
runner = CliRunner()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    plain = free_port()
    b = AclBroker(tmp_path_factory.mktemp("cli-acls"), **{"super.users": "User:admin;User:ANONYMOUS"})
    b.proc.overrides["listeners"] += f",PLAINTEXT://127.0.0.1:{plain}"
    b.plain = f"127.0.0.1:{plain}"
    b.proc.start()
    try:
        yield b
    finally:
        b.proc.close()


def brook(broker, *args):
    return runner.invoke(app, [*args, "--bootstrap-server", broker.plain])


def listed(broker, *args):
    result = brook(broker, "acls", "list", *args, "--output", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _describe_topic(broker, user, topic):
    with broker.wire(user) as c:
        return c.request(request(3, 12, topics=[{"name": topic, "topic_id": __import__("uuid").UUID(int=0)}],
                                 allow_auto_topic_creation=False)).topics[0].error_code


def test_add_list_remove(broker):
    result = brook(broker, "acls", "add", "--allow-principal", "User:alice", "--operation", "Read",
                   "--operation", "DescribeConfigs", "--topic", "orders", "--group", "billing")
    assert result.exit_code == 0, result.output
    assert "added 4 ACL(s)" in result.output
    result = brook(broker, "acls", "add", "--deny-principal", "User:bob", "--deny-host", "10.0.0.9",
                   "--operation", "All", "--topic", "orders-", "--resource-pattern-type", "PREFIXED")
    assert result.exit_code == 0, result.output
    rows = listed(broker)
    fields = ("resource", "name", "pattern", "principal", "host", "operation", "permission")
    assert {tuple(r[f] for f in fields) for r in rows} == {
        ("Topic", "orders", "LITERAL", "User:alice", "*", "Read", "ALLOW"),
        ("Topic", "orders", "LITERAL", "User:alice", "*", "DescribeConfigs", "ALLOW"),
        ("Group", "billing", "LITERAL", "User:alice", "*", "Read", "ALLOW"),
        ("Group", "billing", "LITERAL", "User:alice", "*", "DescribeConfigs", "ALLOW"),
        ("Topic", "orders-", "PREFIXED", "User:bob", "10.0.0.9", "All", "DENY")}
    assert len(listed(broker, "--topic", "orders-eu", "--resource-pattern-type", "MATCH")) == 1
    assert len(listed(broker, "--principal", "User:alice")) == 4
    table = brook(broker, "acls", "list")
    assert table.exit_code == 0 and "PRINCIPAL" in table.stdout and "User:bob" in table.stdout
    # the ACL takes effect: alice may describe orders (Read implies Describe), bob may not
    assert _describe_topic(broker, "alice", "orders") == ErrorCode.unknown_topic_or_partition
    assert _describe_topic(broker, "bob", "orders") == ErrorCode.topic_authorization_failed

    result = brook(broker, "acls", "remove", "--allow-principal", "User:alice",
                   "--operation", "DescribeConfigs", "--topic", "orders", "--group", "billing")
    assert result.exit_code == 0 and "removed 2 ACL(s)" in result.output, result.output
    result = brook(broker, "acls", "remove", "--topic", "orders-", "--resource-pattern-type", "PREFIXED")
    assert result.exit_code == 0 and "removed 1 ACL(s)" in result.output, result.output
    assert {(r["name"], r["operation"]) for r in listed(broker)} == {("orders", "Read"), ("billing", "Read")}
    brook(broker, "acls", "remove", "--topic", "orders", "--group", "billing")
    assert listed(broker) == []


def test_producer_and_consumer_conveniences(broker):
    result = brook(broker, "acls", "add", "--allow-principal", "User:carol", "--producer", "--topic", "events")
    assert result.exit_code == 0 and "added 3 ACL(s)" in result.output, result.output
    result = brook(broker, "acls", "add", "--allow-principal", "User:dan", "--consumer", "--topic", "events",
                   "--group", "readers")
    assert result.exit_code == 0 and "added 3 ACL(s)" in result.output, result.output
    assert {(r["principal"], r["resource"], r["name"], r["operation"]) for r in listed(broker)} == {
        ("User:carol", "Topic", "events", "Write"), ("User:carol", "Topic", "events", "Describe"),
        ("User:carol", "Topic", "events", "Create"), ("User:dan", "Topic", "events", "Read"),
        ("User:dan", "Topic", "events", "Describe"), ("User:dan", "Group", "readers", "Read")}
    result = brook(broker, "acls", "add", "--allow-principal", "User:dan", "--consumer", "--group", "readers")
    assert result.exit_code == 2 and "need --topic" in result.output
    brook(broker, "acls", "remove", "--topic", "events", "--group", "readers")
    assert listed(broker) == []


def test_usage_errors(broker):
    result = brook(broker, "acls", "add", "--operation", "Read", "--topic", "t")
    assert result.exit_code == 2 and "--allow-principal or --deny-principal" in result.output
    result = brook(broker, "acls", "add", "--allow-principal", "User:a", "--operation", "Fly", "--topic", "t")
    assert result.exit_code == 2 and "unknown operation 'Fly'" in result.output
    result = brook(broker, "acls", "add", "--allow-principal", "User:a", "--operation", "Read")
    assert result.exit_code == 2 and "name a resource" in result.output


def test_a_principal_without_cluster_alter_is_refused(tmp_path):
    """Without a super user behind the PLAINTEXT listener, the command reports the refusal;
    with an administrator's --command-config it works."""
    plain = free_port()
    b = AclBroker(tmp_path)
    b.proc.overrides["listeners"] += f",PLAINTEXT://127.0.0.1:{plain}"
    b.plain = f"127.0.0.1:{plain}"
    b.proc.start()
    try:
        result = brook(b, "acls", "add", "--allow-principal", "User:a", "--operation", "Read", "--topic", "t")
        assert result.exit_code == 1 and "CLUSTER_AUTHORIZATION_FAILED" in result.output, result.output
        # an administrator's credentials with --command-config, as with Kafka's tools
        config = tmp_path / "admin.properties"
        config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                          'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required '
                          'username="admin" password="admin-secret";\n')
        result = runner.invoke(app, ["acls", "add", "--allow-principal", "User:a", "--operation", "Read",
                                     "--topic", "t", "--bootstrap-server", b.bootstrap,
                                     "--command-config", str(config)])
        assert result.exit_code == 0 and "added 1 ACL(s)" in result.output, result.output
    finally:
        b.proc.close()
