"""`brook groups` on a KIP-848 consumer group (confluent-kafka, `group.protocol=consumer`): its
type, its group and target assignment epochs, each member's epoch and current and target
assignment, as Kafka 4's kafka-consumer-groups.sh shows them."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic
from typer.testing import CliRunner

from brook.cli import app
from tests.support.broker_harness import BROKER_DEFAULTS, BrokerProcess
from tests.support.group_offsets import unique_name as name

runner = CliRunner()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("broker-cli-consumer-groups"), overrides={
            **BROKER_DEFAULTS, "offsets.topic.num.partitions": 3,
            "group.consumer.heartbeat.interval.ms": 200}) as proc:
        yield proc


def brook(broker, *args):
    return runner.invoke(app, [*args, "--bootstrap-server", broker.bootstrap])


def test_a_consumer_group_shows_its_type_and_epochs(broker):
    topic, group = name("t"), name("g")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(10)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                  "client.id": "kip848-cli", "group.protocol": "consumer"})
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(c.assignment()) < 3:
            c.poll(0.1)
        assert len(c.assignment()) == 3

        listed = [line.split() for line in brook(broker, "groups", "list", "--type").stdout
                  .splitlines()]
        assert listed[0] == ["GROUP", "TYPE", "STATE", "PROTOCOL", "MEMBERS"]
        assert [group, "consumer", "Stable"] == next(r for r in listed if r[0] == group)[:3]

        state = json.loads(brook(broker, "groups", "describe", group, "--state", "--output",
                                 "json").stdout)
        assert state["type"] == "consumer" and state["state"] == "Stable"
        assert state["assignment_strategy"] == "uniform"  # the group's server-side assignor
        assert state["group_epoch"] == state["target_assignment_epoch"] == 1

        result = brook(broker, "groups", "describe", group, "--members", "--verbose")
        table = [line.split() for line in result.stdout.splitlines() if line.strip()]
        assert table[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                            "CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH",
                            "TARGET-ASSIGNMENT"]
        assert table[1][3:] == ["kip848-cli", "3", "1", f"{topic}(0,1,2)", "1",
                                f"{topic}(0,1,2)"]
    finally:
        c.close()
