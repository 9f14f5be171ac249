"""`brook produce` and `brook consume` against a real broker process, checked with confluent-kafka
consumers and producers; the line formats without a broker."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import (Consumer, ConsumerGroupState, ConsumerGroupTopicPartitions, Producer,
                             TopicPartition)
from confluent_kafka.admin import AdminClient, NewTopic
from typer.testing import CliRunner

from brook.cli import app
from brook.cli.console import format_message, parse_headers, split_line
from brook.cli.errors import CliError

runner = CliRunner()
BROOK = str(Path(sys.executable).with_name("brook"))


def brook(broker, *args, input=None):
    return runner.invoke(app, [*args, "--bootstrap-server", broker.bootstrap], input=input)


def new_topic(broker, partitions: int = 1) -> str:
    topic = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(10)
    return topic


def topic_with_messages(broker, count: int) -> str:
    """A new topic holding the values m0, m1, ... in its partition 0."""
    topic = new_topic(broker)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(count):
        producer.produce(topic, value=b"m%d" % i, partition=0)
    assert producer.flush(30) == 0
    return topic


def read_all(broker, topic: str, n: int) -> list:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    out, deadline = [], time.monotonic() + 30
    while len(out) < n and time.monotonic() < deadline:
        msg = c.poll(0.2)
        if msg is not None and not msg.error():
            out.append(msg)
    c.close()
    return out


def test_produce_lines_with_keys_and_headers(broker):
    topic = new_topic(broker)
    result = brook(broker, "produce", topic, "--key-separator", ":", "--headers", "src=cli,v=2",
                   input="k1:hello\nk2:wor:ld\n:no key\n")
    assert result.exit_code == 0, result.output
    assert result.stderr == f"Produced 3 messages to '{topic}'.\n"
    result = brook(broker, "produce", topic, input="one\n")
    assert result.stderr == f"Produced 1 message to '{topic}'.\n"
    msgs = read_all(broker, topic, 3)
    assert [(m.key(), m.value()) for m in msgs] == [(b"k1", b"hello"), (b"k2", b"wor:ld"),
                                                   (b"", b"no key")]
    assert msgs[0].headers() == [("src", b"cli"), ("v", b"2")]


def test_produce_a_file(broker, tmp_path):
    topic = new_topic(broker)
    path = tmp_path / "lines.txt"
    path.write_text("".join(f"line {i}\n" for i in range(500)))
    result = brook(broker, "produce", topic, "--file", str(path))
    assert result.exit_code == 0, result.output
    msgs = read_all(broker, topic, 500)
    assert [m.value() for m in msgs] == [f"line {i}".encode() for i in range(500)]
    assert all(m.key() is None for m in msgs)


def test_produce_errors(broker, tmp_path):
    topic = new_topic(broker)
    result = brook(broker, "produce", topic, "--key-separator", ":", input="no separator\n")
    assert result.exit_code == 2
    assert result.stderr == "brook: line 1: no key separator ':'\n"
    result = brook(broker, "produce", topic, "--headers", "src=cli,bad", input="x\n")
    assert result.exit_code == 2
    assert result.stderr == "brook: invalid header 'bad' in --headers: expected key=value\n"
    result = brook(broker, "produce", "no-such-topic", input="x\n")
    assert result.exit_code == 1 and result.stderr == "brook: unknown topic 'no-such-topic'\n"
    result = brook(broker, "produce", topic, "--file", str(tmp_path / "missing.txt"))
    assert result.exit_code == 1 and "cannot read" in result.stderr
    result = brook(broker, "produce", topic, "--partition", "5", input="x\n")
    assert result.exit_code == 2 and "has no partition 5" in result.stderr


def test_a_line_without_separator_says_the_lines_before_it_were_produced(broker):
    topic = new_topic(broker)
    result = brook(broker, "produce", topic, "--key-separator", "=",
                   input="k1=v1\nk2=v2\nnosep\nk4=v4\n")
    assert result.exit_code == 2
    assert result.stderr == ("brook: line 3: no key separator '='; "
                             "the 2 lines before it were produced\n")
    assert [(m.key(), m.value()) for m in read_all(broker, topic, 2)] == [(b"k1", b"v1"),
                                                                         (b"k2", b"v2")]
    result = brook(broker, "produce", topic, "--key-separator", "=", input="k=v\nnosep\n")
    assert result.stderr == ("brook: line 2: no key separator '='; "
                             "the line before it was produced\n")


def test_bytes_that_are_not_utf8_round_trip(broker, tmp_path):
    topic = new_topic(broker)
    data = b"\xff\xfe\n\xc3\x28\xa0=\x80\xfe\nplain\r\n"
    proc = subprocess.run([BROOK, "produce", topic, "--key-separator", "\xa0=".encode("latin-1")
                           .decode("utf-8", "surrogateescape"), "-b", broker.bootstrap],
                          input=b"k\xa0=" + data.replace(b"\n", b"\nk\xa0=", 2),
                          capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    msgs = read_all(broker, topic, 3)
    assert [(m.key(), m.value()) for m in msgs] == [
        (b"k", b"\xff\xfe"), (b"k", b"\xc3\x28\xa0=\x80\xfe"), (b"k", b"plain\r")]
    path = tmp_path / "raw.bin"
    path.write_bytes(data)
    proc = subprocess.run([BROOK, "produce", topic, "--file", str(path), "-b", broker.bootstrap],
                          capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert [m.value() for m in read_all(broker, topic, 6)[3:]] == data.split(b"\n")[:3]
    result = brook(broker, "consume", topic, "--from-beginning", "--max-messages", "1")
    assert result.stdout == "\\xff\\xfe\n"  # shown with escapes, as before


def test_sigterm_stops_a_group_consumer_as_ctrl_c_does(broker):
    topic = topic_with_messages(broker, 6)
    group = f"g-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen([BROOK, "consume", topic, "--group", group, "--from-beginning",
                             "-b", broker.bootstrap],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 30
        while len(lines) < 6 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert lines == [f"m{i}\n" for i in range(6)]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.stderr.read() == "Processed a total of 6 messages\n"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    assert [(tp.partition, tp.offset) for tp in offsets.result(10).topic_partitions] == [(0, 6)]
    desc = admin.describe_consumer_groups([group])[group].result(10)
    assert desc.state == ConsumerGroupState.EMPTY and not desc.members


def test_consume_prints_kafka_console_lines(broker):
    topic = new_topic(broker, partitions=2)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(4):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % 2,
                         timestamp=1_700_000_000_000 + i)
    producer.produce(topic, key=None, value=None, partition=0, timestamp=1_700_000_000_100)
    assert producer.flush(30) == 0

    result = brook(broker, "consume", topic, "--from-beginning", "--max-messages", "5",
                   "--print-key", "--print-offset", "--print-timestamp")
    assert result.exit_code == 0, result.output
    lines = sorted(result.stdout.splitlines())
    assert lines == sorted([
        "CreateTime:1700000000000\tPartition:0\tOffset:0\tk0\tv0",
        "CreateTime:1700000000002\tPartition:0\tOffset:1\tk2\tv2",
        "CreateTime:1700000000100\tPartition:0\tOffset:2\tnull\tnull",
        "CreateTime:1700000000001\tPartition:1\tOffset:0\tk1\tv1",
        "CreateTime:1700000000003\tPartition:1\tOffset:1\tk3\tv3",
    ])
    assert result.stderr == "Processed a total of 5 messages\n"

    result = brook(broker, "consume", topic, "--from-beginning", "--timeout-ms", "1500",
                   "--output", "json")
    assert result.exit_code == 0, result.output
    docs = sorted((json.loads(line) for line in result.stdout.splitlines()),
                  key=lambda d: (d["partition"], d["offset"]))
    assert len(docs) == 5
    assert docs[0] == {"topic": topic, "partition": 0, "offset": 0,
                       "timestamp": 1_700_000_000_000, "timestamp_type": "CreateTime",
                       "key": "k0", "value": "v0", "headers": {}}

    # Without --from-beginning a consumer starts at the end: nothing old comes back.
    result = brook(broker, "consume", topic, "--timeout-ms", "1000")
    assert result.exit_code == 0 and result.stdout == ""


def test_consume_as_a_group_commits_what_it_printed(broker):
    topic = topic_with_messages(broker, 6)
    group = f"g-{uuid.uuid4().hex[:8]}"
    result = brook(broker, "consume", topic, "--group", group, "--from-beginning",
                   "--max-messages", "4")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["m0", "m1", "m2", "m3"]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    assert [(tp.partition, tp.offset) for tp in offsets.result(10).topic_partitions] == [(0, 4)]
    result = brook(broker, "consume", topic, "--group", group, "--max-messages", "2")
    assert result.stdout.splitlines() == ["m4", "m5"]  # the group resumes where it stopped


def test_consume_an_unknown_topic(broker):
    result = brook(broker, "consume", "no-such-topic", "--max-messages", "1")
    assert result.exit_code == 1 and result.stderr == "brook: unknown topic 'no-such-topic'\n"


# --- pure -------------------------------------------------------------------------------------


def test_line_helpers():
    assert split_line(b"a=b=c", b"=", 1) == (b"a", b"b=c")
    assert split_line(b"pl\xffain", None, 1) == (None, b"pl\xffain")
    with pytest.raises(CliError, match="line 7"):
        split_line(b"plain", b"=", 7)
    assert parse_headers("a=1, b=, c=x=y") == [("a", b"1"), ("b", b""), ("c", b"x=y")]
    with pytest.raises(CliError, match="invalid header 'c'"):
        parse_headers("a=1,c")
    assert parse_headers(None) == []
    with pytest.raises(CliError):
        parse_headers("=1")
    view = {"topic": "t", "partition": 3, "offset": 9, "timestamp": 5,
            "timestamp_type": "LogAppendTime", "key": None, "value": "v", "headers": {}}
    assert format_message(view, print_key=True, print_offset=False, print_timestamp=True,
                          separator=" | ") == "LogAppendTime:5 | null | v"
    assert format_message(view, print_key=False, print_offset=True,
                          print_timestamp=False) == "Partition:3\tOffset:9\tv"
