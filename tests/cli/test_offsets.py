"""`brook offsets export/import` against a real broker process: a group's offsets go to a file
and back, and ZooKeeper-stored offsets of old consumers land where they were, checked with a
separate confluent-kafka AdminClient."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from typer.testing import CliRunner

from brook.cli import app
from tests.support.broker_harness import BROKER_DEFAULTS, BrokerProcess
from tests.support.group_offsets import committed

runner = CliRunner()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("broker-cli-offsets"), overrides={
            **BROKER_DEFAULTS, "group.initial.rebalance.delay.ms": 0,
            "offsets.topic.num.partitions": 5}) as proc:
        yield proc


@pytest.fixture(scope="module")
def admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


@pytest.fixture(scope="module")
def topics(broker, admin):
    """Two topics: `orders` (3 partitions of 100, 50 and 0 records), `payments` (1 of 20)."""
    suffix = uuid.uuid4().hex[:6]
    names = {"orders": f"orders-{suffix}", "payments": f"payments-{suffix}"}
    for key, partitions in (("orders", 3), ("payments", 1)):
        admin.create_topics([NewTopic(names[key], partitions, 1)])[names[key]].result(10)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for topic, partition, n in ((names["orders"], 0, 100), (names["orders"], 1, 50),
                                (names["payments"], 0, 20)):
        for i in range(n):
            producer.produce(topic, value=b"%d" % i, partition=partition)
    assert producer.flush(30) == 0
    return names


def brook(broker, *args, input=None):
    return runner.invoke(app, [*args, "--bootstrap-server", broker.bootstrap], input=input)


def test_export_then_import_into_another_group(broker, admin, topics, tmp_path):
    orders, payments = topics["orders"], topics["payments"]
    group = f"g-{uuid.uuid4().hex[:8]}"
    tps = [TopicPartition(orders, 0, 40, metadata="batch-7"), TopicPartition(orders, 1, 50),
           TopicPartition(payments, 0, 3)]
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)])[group].result(10)

    result = brook(broker, "offsets", "export", group)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc == {"format": "brook-offsets", "version": 1, "group": group, "offsets": [
        {"topic": orders, "partition": 0, "offset": 40, "metadata": "batch-7"},
        {"topic": orders, "partition": 1, "offset": 50, "metadata": ""},
        {"topic": payments, "partition": 0, "offset": 3, "metadata": ""}]}

    path = tmp_path / "offsets.json"
    assert brook(broker, "offsets", "export", group, "--file", str(path)).exit_code == 0
    copy = f"{group}-copy"
    result = brook(broker, "offsets", "import", str(path), "--to-group", copy, "--dry-run")
    assert result.exit_code == 0 and committed(admin, copy) == {}
    assert "Dry run" in result.stderr
    result = brook(broker, "offsets", "import", str(path), "--to-group", copy)
    assert result.exit_code == 0, result.output
    assert committed(admin, copy) == {(orders, 0): 40, (orders, 1): 50, (payments, 0): 3}
    fut = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(copy)])[copy]
    assert {tp.partition: tp.metadata for tp in fut.result(10).topic_partitions
            if tp.topic == orders}[0] == "batch-7"

    result = brook(broker, "offsets", "export", "no-such-group")
    assert result.exit_code == 1
    assert result.stderr == "brook: consumer group 'no-such-group' does not exist\n"


def test_zookeeper_offsets_land_where_the_old_consumers_were(broker, admin, topics, tmp_path):
    orders, payments = topics["orders"], topics["payments"]
    billing, audit = f"billing-{uuid.uuid4().hex[:6]}", f"audit-{uuid.uuid4().hex[:6]}"
    text = tmp_path / "zk-offsets.txt"
    text.write_text(
        "# zkCli dump of /consumers\n"
        f"/consumers/{billing}/ids/{billing}_host-1 {{\"version\":1}}\n"
        f"/consumers/{billing}/offsets/{orders}/0 73\n"
        f"/consumers/{billing}/offsets/{orders}/1 50\n"
        f"/consumers/{billing}/offsets/{orders}/2 0\n"
        f"/consumers/{audit}/offsets/{payments}/0 = 500\n")  # beyond the log end: clamped
    result = brook(broker, "offsets", "import", str(text))
    assert result.exit_code == 0, result.output
    assert committed(admin, billing) == {(orders, 0): 73, (orders, 1): 50, (orders, 2): 0}
    assert committed(admin, audit) == {(payments, 0): 20}
    assert f"new offset 500 is above the log end offset of {payments}-0; using 20" in result.stderr

    # A consumer of the group then starts exactly there.
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": billing,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([orders])
    first: dict[int, int] = {}
    deadline = time.monotonic() + 30
    while len(first) < 1 and time.monotonic() < deadline:
        msg = c.poll(0.2)
        if msg is not None and not msg.error():
            first.setdefault(msg.partition(), msg.offset())
    c.close()
    assert first == {0: 73}  # partition 1 is at its end, partition 2 empty

    zk_json = {f"/consumers/{billing}-2/offsets/{orders}/{p}": str(o)
               for p, o in ((0, 10), (1, 20))}
    zk_json[f"/consumers/{billing}-2/owners/{orders}/0"] = "host-1"
    result = brook(broker, "offsets", "import", "-", "--output", "json",
                   input=json.dumps(zk_json))
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["executed"] is True
    assert committed(admin, f"{billing}-2") == {(orders, 0): 10, (orders, 1): 20}


def test_import_is_all_or_nothing_and_refused_while_active(broker, admin, topics, tmp_path):
    orders = topics["orders"]
    group = f"g-{uuid.uuid4().hex[:8]}"
    bad = tmp_path / "bad.txt"
    bad.write_text(f"/consumers/{group}/offsets/{orders}/0 5\n"
                   f"/consumers/{group}/offsets/{orders}/9 5\n")
    result = brook(broker, "offsets", "import", str(bad))
    assert result.exit_code == 1
    assert result.stderr == f"brook: topic '{orders}' has no partition 9 (it has 3)\n"
    assert committed(admin, group) == {}

    good = tmp_path / "good.txt"
    good.write_text(f"/consumers/{group}/offsets/{orders}/0 5\n")
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                  "session.timeout.ms": 6000, "heartbeat.interval.ms": 200})
    try:
        c.subscribe([orders])
        deadline = time.monotonic() + 30
        while not c.assignment() and time.monotonic() < deadline:
            c.poll(0.1)
        assert c.assignment()
        result = brook(broker, "offsets", "import", str(good))
        assert result.exit_code == 1
        assert result.stderr.startswith(f"brook: cannot import offsets of group '{group}' while "
                                        "it has active members (state Stable, 1 member)")
    finally:
        c.close()
    assert committed(admin, group) == {}
    assert brook(broker, "offsets", "import", str(good)).exit_code == 0
    assert committed(admin, group) == {(orders, 0): 5}
