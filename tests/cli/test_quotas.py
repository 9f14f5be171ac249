"""`brook quotas` against a real broker process: kafka-configs.sh's options for users, client
ids and their defaults; describe as a table and as JSON."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from brook.cli import app

runner = CliRunner()


def brook(broker, *args):
    return runner.invoke(app, [*args, "--bootstrap-server", broker.bootstrap])


def described(broker, *args):
    result = brook(broker, "quotas", "describe", *args, "--output", "json")
    assert result.exit_code == 0, result.output
    return [(r["user"], r["client-id"], r["quota"], r["value"]) for r in json.loads(result.stdout)]


def test_alter_and_describe(broker):
    result = brook(broker, "quotas", "alter", "--entity-type", "users", "--entity-name", "alice",
                   "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048")
    assert result.exit_code == 0, result.output
    assert "Set producer_byte_rate=1024 for user alice." in result.stdout
    assert brook(broker, "quotas", "alter", "--entity-type", "users", "--entity-name", "alice",
                 "--entity-type", "clients", "--entity-default",
                 "--add-config", "request_percentage=12.5").exit_code == 0
    assert brook(broker, "quotas", "alter", "--client-defaults",
                 "--add-config", "producer_byte_rate=100").exit_code == 0

    assert described(broker) == [
        ("alice", None, "consumer_byte_rate", 2048.0),
        ("alice", None, "producer_byte_rate", 1024.0),
        ("alice", "<default>", "request_percentage", 12.5),
        (None, "<default>", "producer_byte_rate", 100.0),
    ]
    # An entity given exactly: only it; a type with no name: every entity of it.
    assert described(broker, "--user", "alice") == [
        ("alice", None, "consumer_byte_rate", 2048.0), ("alice", None, "producer_byte_rate", 1024.0)]
    assert described(broker, "--entity-type", "clients") == [(None, "<default>", "producer_byte_rate", 100.0)]

    table = brook(broker, "quotas", "describe")
    assert table.stdout.split()[:4] == ["USER", "CLIENT-ID", "QUOTA", "VALUE"]
    assert "request_percentage" in table.stdout and "12.5" in table.stdout

    result = brook(broker, "quotas", "alter", "--user", "alice", "--delete-config",
                   "producer_byte_rate,consumer_byte_rate")
    assert result.exit_code == 0 and "Removed consumer_byte_rate from user alice." in result.stdout
    assert described(broker, "--user", "alice") == []


def test_validate_only_changes_nothing(broker):
    result = brook(broker, "quotas", "alter", "--user", "bob", "--add-config", "producer_byte_rate=5",
                   "--validate-only")
    assert result.exit_code == 0 and "Would set" in result.stdout
    assert described(broker, "--user", "bob") == []


def test_errors(broker):
    result = brook(broker, "quotas", "alter", "--user", "carol", "--add-config", "bogus=1")
    assert result.exit_code == 1 and "INVALID_REQUEST" in result.output and "bogus" in result.output
    result = brook(broker, "quotas", "alter", "--user", "carol", "--add-config", "producer_byte_rate=1.5")
    assert result.exit_code == 1 and "fractional" in result.output
    result = brook(broker, "quotas", "alter", "--entity-type", "groups", "--entity-name", "g",
                   "--add-config", "producer_byte_rate=1")
    assert result.exit_code == 2 and "unknown entity type" in result.output
    result = brook(broker, "quotas", "alter", "--entity-type", "users",
                   "--add-config", "producer_byte_rate=1")
    assert result.exit_code == 2 and "--entity-name or --entity-default" in result.output
    result = brook(broker, "quotas", "alter", "--user", "carol")
    assert result.exit_code == 2 and "nothing to change" in result.output
