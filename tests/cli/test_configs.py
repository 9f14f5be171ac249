"""`brook configs` against a real broker process: a broker's whole configuration, the
cluster-wide dynamic defaults, and changing dynamic configs."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from brook.cli import app

runner = CliRunner()


def brook(broker, *args):
    return runner.invoke(app, [*args, "--bootstrap-server", broker.bootstrap])


def rows(stdout: str) -> dict[str, list[str]]:
    return {line.split()[0]: line.split() for line in stdout.splitlines()[1:] if line.strip()}


def test_describe_shows_the_whole_configuration(broker):
    result = brook(broker, "configs", "describe", "--broker", "1")
    assert result.exit_code == 0, result.output
    assert result.stdout.split()[:4] == ["CONFIG", "VALUE", "SOURCE", "DYNAMIC"]
    table = rows(result.stdout)
    assert len(table) > 80
    assert table["num.partitions"] == ["num.partitions", "4", "STATIC_BROKER_CONFIG", "no"]
    assert table["log.cleaner.enable"] == ["log.cleaner.enable", "true", "DEFAULT_CONFIG", "no"]
    assert table["log.retention.hours"] == ["log.retention.hours", "168", "DEFAULT_CONFIG", "yes"]

    changed = rows(brook(broker, "configs", "describe", "--broker", "1", "--changed").stdout)
    assert "num.partitions" in changed and "log.cleaner.enable" not in changed

    result = brook(broker, "configs", "describe", "--broker", "1", "--output", "json")
    assert result.exit_code == 0, result.output
    entries = {c["name"]: c for c in json.loads(result.stdout)}
    assert entries["num.partitions"]["synonyms"] == [
        {"name": "num.partitions", "value": "4", "source": "STATIC_BROKER_CONFIG"},
        {"name": "num.partitions", "value": "1", "source": "DEFAULT_CONFIG"}]
    assert entries["broker.id"]["read_only"] and not entries["message.max.bytes"]["read_only"]


def test_describe_errors(broker):
    result = brook(broker, "configs", "describe", "--broker", "9")
    assert result.exit_code == 1 and "no broker 9 in the cluster (brokers: 1)" in result.output
    result = brook(broker, "configs", "describe")
    assert result.exit_code == 2 and "--broker ID or --broker-defaults" in result.output
