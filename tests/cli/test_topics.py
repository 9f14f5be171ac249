"""`brook topics` against a real broker process; effects checked with confluent-kafka's
AdminClient."""

from __future__ import annotations

import json
import uuid

from confluent_kafka import Consumer, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType
from typer.testing import CliRunner

from brook.cli import app
from brook.cli.topics import parse_configs, topic_id_text

runner = CliRunner()


def brook(broker, *args):
    return runner.invoke(app, [*args, "--bootstrap-server", broker.bootstrap])


def rows(stdout: str) -> list[list[str]]:
    return [line.split() for line in stdout.splitlines() if line.strip()]


def topic_configs(admin, topic: str) -> dict[str, str]:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(10)
    return {k: e.value for k, e in entries.items()}


def test_create_describe_alter_list_delete(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = f"t-{uuid.uuid4().hex[:8]}"
    result = brook(broker, "topics", "create", topic, "--partitions", "3",
                   "--config", "retention.ms=3600000", "--config", "cleanup.policy=compact")
    assert result.exit_code == 0, result.output
    assert result.stdout == f"Created topic '{topic}'.\n"
    desc = admin.describe_topics(TopicCollection([topic]))[topic].result(10)
    assert len(desc.partitions) == 3
    assert topic_configs(admin, topic)["retention.ms"] == "3600000"

    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(5):
        producer.produce(topic, key=b"k", value=b"v", partition=1)
    assert producer.flush(30) == 0

    result = brook(broker, "topics", "describe", topic)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == (f"Topic: {topic}  TopicId: {topic_id_text(desc.topic_id)}  "
                        "PartitionCount: 3  ReplicationFactor: 1  Internal: no")
    table = rows("\n".join(lines[1:]))
    assert table[:4] == [
        ["PARTITION", "LEADER", "REPLICAS", "ISR", "LOG-START-OFFSET", "LOG-END-OFFSET"],
        ["0", "1", "1", "1", "0", "0"], ["1", "1", "1", "1", "0", "5"],
        ["2", "1", "1", "1", "0", "0"]]
    assert ["CONFIG", "VALUE"] in table
    assert ["retention.ms", "3600000"] in table and ["cleanup.policy", "compact"] in table
    assert not any(r[0] == "segment.bytes" for r in table)  # defaults only with --all-configs
    doc = json.loads(brook(broker, "topics", "describe", topic, "--all-configs", "--output",
                           "json").stdout)
    assert doc[0]["partitions"][1] == {"partition": 1, "leader": 1, "replicas": [1], "isr": [1],
                                       "log_start_offset": 0, "log_end_offset": 5}
    assert doc[0]["configs"]["segment.bytes"] == "1073741824"

    result = brook(broker, "topics", "alter-config", topic, "--set", "retention.ms=60000",
                   "--set", "max.message.bytes=2000", "--delete", "cleanup.policy")
    assert result.exit_code == 0, result.output
    configs = topic_configs(admin, topic)
    assert configs["retention.ms"] == "60000" and configs["max.message.bytes"] == "2000"
    assert configs["cleanup.policy"] == "delete"  # back to the default

    listed = json.loads(brook(broker, "topics", "list", "--output", "json").stdout)
    assert {"topic": topic, "partitions": 3, "internal": False} in listed
    listed = brook(broker, "topics", "list").stdout
    assert rows(listed)[0] == ["TOPIC", "PARTITIONS", "INTERNAL"]
    # Not a terminal: no line ends in spaces (rich pads the last column to its width).
    described = brook(broker, "topics", "describe", topic).stdout
    assert [ln for ln in (listed + described).splitlines() if ln != ln.rstrip()] == []

    result = brook(broker, "topics", "delete", topic)
    assert result.exit_code == 0 and result.stdout == f"Deleted topic '{topic}'.\n"
    assert topic not in admin.list_topics(timeout=10).topics


def test_errors_are_one_line(broker):
    topic = f"t-{uuid.uuid4().hex[:8]}"
    assert brook(broker, "topics", "create", topic).exit_code == 0  # the broker's partitions
    assert brook(broker, "topics", "create", topic, "--if-not-exists").exit_code == 0
    cases = [
        (["topics", "create", topic], 1, f"brook: topic '{topic}' already exists"),
        (["topics", "create", "bad name!"], 1, "brook: cannot create topic 'bad name!': "),
        (["topics", "create", "x", "--config", "nokey"], 2, "invalid --config 'nokey'"),
        (["topics", "describe", "nope"], 1, "brook: unknown topic 'nope'"),
        (["topics", "delete", "nope"], 1, "brook: unknown topic 'nope'"),
        (["topics", "alter-config", "nope", "--set", "retention.ms=1"], 1,
         "brook: unknown topic 'nope'"),
        (["topics", "alter-config", topic], 2, "nothing to change"),
        (["topics", "alter-config", topic, "--set", "retention.ms=abc"], 1,
         f"brook: cannot alter the configs of topic '{topic}': "),
        (["topics", "create", "y", "--partitions", "0"], 2, "--partitions must be at least 1"),
    ]
    for args, code, message in cases:
        result = brook(broker, *args)
        assert result.exit_code == code, (args, result.output)
        assert result.stderr.count("\n") == 1 and message in result.stderr, (args, result.stderr)
    assert brook(broker, "topics", "delete", "nope", "--if-exists").exit_code == 0
    described = json.loads(brook(broker, "topics", "describe", topic, "--output", "json").stdout)
    assert len(described[0]["partitions"]) == 4  # num.partitions of the test broker


def test_parse_configs():
    assert parse_configs(["a=1", "b=x=y", "c="], "--config") == {"a": "1", "b": "x=y", "c": ""}


def test_delete_records(broker):
    topic = f"dr-{uuid.uuid4().hex[:8]}"
    assert brook(broker, "topics", "create", topic, "--partitions", "2").exit_code == 0
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        producer.produce(topic, value=b"v", partition=i % 2)
    assert producer.flush(30) == 0
    result = brook(broker, "topics", "delete-records", topic, "--partition", "1", "--offset", "3")
    assert result.exit_code == 0, result.output
    assert rows(result.stdout) == [["TOPIC", "PARTITION", "LOW-WATERMARK", "ERROR"],
                                   [topic, "1", "3", "-"]]
    result = brook(broker, "topics", "delete-records", topic, "--offset", "-1", "--output", "json")
    assert json.loads(result.stdout) == [
        {"topic": topic, "partition": 0, "low_watermark": 5, "error": None},
        {"topic": topic, "partition": 1, "low_watermark": 5, "error": None}]
    result = brook(broker, "topics", "delete-records", topic, "--partition", "0", "--offset", "9")
    assert result.exit_code != 0 and "OFFSET_OUT_OF_RANGE" in result.output.upper().replace(" ", "_")


def test_delete_records_reports_every_partition_when_some_fail(broker):
    topic = f"dr-{uuid.uuid4().hex[:8]}"
    assert brook(broker, "topics", "create", topic, "--partitions", "2").exit_code == 0
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for _ in range(5):
        producer.produce(topic, value=b"v", partition=0)  # partition 1 stays empty
    assert producer.flush(30) == 0
    result = brook(broker, "topics", "delete-records", topic, "--offset", "3")
    assert result.exit_code == 1, result.output
    table = rows(result.stdout)
    assert table[0] == ["TOPIC", "PARTITION", "LOW-WATERMARK", "ERROR"]
    assert table[1] == [topic, "0", "3", "-"]
    assert table[2][:3] == [topic, "1", "-"] and "OFFSET_OUT_OF_RANGE" in result.stdout
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"brook: could not delete records of 1 of 2 partition(s) "
                                    f"of '{topic}', e.g. partition 1: ")

    result = brook(broker, "topics", "delete-records", topic, "--offset", "4", "--output", "json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc[0] == {"topic": topic, "partition": 0, "low_watermark": 4, "error": None}
    assert doc[1]["low_watermark"] is None and "OFFSET_OUT_OF_RANGE" in doc[1]["error"]


def test_refusals_name_what_is_wrong(broker):
    topic = f"r-{uuid.uuid4().hex[:8]}"
    assert brook(broker, "topics", "create", topic, "--partitions", "3").exit_code == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "makes-offsets-topic",
                         "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    consumer.close()
    cases = [
        (["topics", "delete-records", topic, "--offset", "0", "--partition", "7"],
         f"brook: topic '{topic}' has no partition 7 (it has 3)"),
        (["topics", "delete-records", "nope", "--offset", "0", "--partition", "0"],
         "brook: unknown topic 'nope'"),
        (["topics", "delete", "__consumer_offsets"],
         "brook: topic '__consumer_offsets' is internal and cannot be deleted"),
        (["topics", "alter-config", topic, "--delete", "nosuch"],
         f"brook: cannot alter the configs of topic '{topic}': unknown topic config 'nosuch'"),
    ]
    for args, message in cases:
        result = brook(broker, *args)
        assert result.exit_code == 1, (args, result.output)
        assert result.stderr == message + "\n", (args, result.stderr)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert "__consumer_offsets" in admin.list_topics(timeout=10).topics
