"""`brook groups` against a real broker process: what it prints, and what it did, checked with a
separate confluent-kafka AdminClient. Pure row building is tested without a broker at the end."""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from datetime import datetime, timezone

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from typer.testing import CliRunner

from brook.cli import app
from brook.cli.client import Group, Member
from brook.cli.groups import assignment_text, offset_rows
from tests.support.broker_harness import BROKER_DEFAULTS, BrokerProcess
from tests.support.group_offsets import commit, committed
from tests.support.group_offsets import unique_name as name

runner = CliRunner()
HOUR = 3_600_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("broker-cli-groups"), overrides={
            **BROKER_DEFAULTS, "group.initial.rebalance.delay.ms": 0,
            "offsets.topic.num.partitions": 5}) as proc:
        yield proc


@pytest.fixture(scope="module")
def admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def brook(broker, *args):
    return runner.invoke(app, [*args, "--bootstrap-server", broker.bootstrap])


def make_topic(broker, admin, partitions: int, records: dict[int, list[int]]) -> str:
    """A topic whose partition p holds records with the timestamps records[p]."""
    topic = name("t")
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(10)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for p, stamps in records.items():
        for i, ts in enumerate(stamps):
            producer.produce(topic, value=b"v%d" % i, partition=p, timestamp=ts)
    assert producer.flush(30) == 0
    return topic


@contextmanager
def active_member(broker, group: str, topic: str, consume: int = 0):
    """A consumer of `group` that owns every partition of `topic` (and has read `consume`
    records and committed them) until the block ends."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                  "client.id": "cli-test-client", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "session.timeout.ms": 6000,
                  "heartbeat.interval.ms": 200})
    try:
        c.subscribe([topic])
        read = 0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (not c.assignment() or read < consume):
            msg = c.poll(0.1)
            if msg is not None and not msg.error():
                read += 1
        assert c.assignment() and read >= consume
        if consume:
            c.commit(asynchronous=False)
        yield c
    finally:
        c.close()


def rows(stdout: str) -> list[list[str]]:
    """Table rows (header first) split on whitespace."""
    return [line.split() for line in stdout.splitlines() if line.strip()]


# --- list and describe ------------------------------------------------------------------------


def test_list_and_describe_a_group_while_active_and_after(broker, admin):
    topic = make_topic(broker, admin, 2, {0: [1, 2, 3, 4, 5, 6], 1: [1, 2, 3, 4]})
    group = name("g")
    with active_member(broker, group, topic, consume=10) as member:
        result = brook(broker, "groups", "list")
        assert result.exit_code == 0, result.output
        listed = {r[0]: r for r in rows(result.stdout)}
        assert listed["GROUP"] == ["GROUP", "STATE", "PROTOCOL", "MEMBERS"]
        assert listed[group] == [group, "Stable", "range", "1"]

        result = brook(broker, "groups", "describe", group)
        assert result.exit_code == 0, result.output
        table = rows(result.stdout)
        assert table[0] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET",
                            "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
        member_id = member.memberid()
        assert table[1:] == [[group, topic, "0", "6", "6", "0", member_id, "/127.0.0.1",
                              "cli-test-client"],
                             [group, topic, "1", "4", "4", "0", member_id, "/127.0.0.1",
                              "cli-test-client"]]

        result = brook(broker, "groups", "describe", group, "--members", "--verbose")
        assert rows(result.stdout) == [
            ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"],
            [group, member_id, "/127.0.0.1", "cli-test-client", "2", f"{topic}(0,1)"]]

        result = brook(broker, "groups", "describe", group, "--state")
        assert rows(result.stdout)[1] == [group, f"127.0.0.1:{broker.port}", "(1)", "range",
                                          "Stable", "1"]
        state = json.loads(brook(broker, "groups", "describe", group, "--state", "--output",
                                 "json").stdout)
        assert state == {"group": group, "coordinator": {"id": 1, "host": "127.0.0.1",
                                                         "port": broker.port},
                         "assignment_strategy": "range", "state": "Stable", "members": 1}

        doc = json.loads(brook(broker, "groups", "describe", group, "--output", "json").stdout)
        assert doc["state"] == "Stable"
        assert doc["partitions"][1] == {
            "topic": topic, "partition": 1, "current_offset": 4, "log_end_offset": 4, "lag": 0,
            "consumer_id": member_id, "host": "/127.0.0.1", "client_id": "cli-test-client"}

        # Changing offsets is refused while the member is there, and nothing changes.
        before = committed(admin, group)
        for args in (["groups", "reset-offsets", group, "--all-topics", "--to-earliest",
                      "--execute"],
                     ["groups", "delete", group]):
            result = brook(broker, *args)
            assert result.exit_code == 1
            assert result.stderr.count("\n") == 1 and "active members" in result.stderr
        assert "stop its consumers first" in brook(
            broker, "groups", "reset-offsets", group, "--all-topics", "--to-earliest").stderr
        result = brook(broker, "groups", "delete-offsets", group, "--topic", topic)
        assert result.exit_code == 1
        assert "Error: GROUP_SUBSCRIBED_TO_TOPIC" in result.stdout
        assert "the group's members subscribe to the topic" in result.stderr
        assert committed(admin, group) == before == {(topic, 0): 6, (topic, 1): 4}

    # The member left: the group is Empty, its offsets stay, with no consumer.
    result = brook(broker, "groups", "describe", group)
    assert result.exit_code == 0
    assert result.stderr == f"Consumer group '{group}' has no active members.\n"
    assert rows(result.stdout)[1] == [group, topic, "0", "6", "6", "0", "-", "-", "-"]
    assert [group, "Empty", "-", "0"] in rows(brook(broker, "groups", "list", "--state",
                                                    "empty").stdout)
    assert group not in brook(broker, "groups", "list", "--state", "Stable").stdout


def test_describe_lag_and_unknown_groups(broker, admin):
    topic = make_topic(broker, admin, 2, {0: [1] * 8, 1: [1] * 3})
    group = name("g")
    commit(admin, group, {(topic, 0): 5})
    doc = json.loads(brook(broker, "groups", "describe", group, "--output", "json").stdout)
    assert doc["partitions"] == [{
        "topic": topic, "partition": 0, "current_offset": 5, "log_end_offset": 8, "lag": 3,
        "consumer_id": None, "host": None, "client_id": None}]
    for args in (["describe", "nope-group"], ["describe", "nope-group", "--members"],
                 ["delete-offsets", "nope-group", "--topic", topic]):
        result = brook(broker, "groups", *args)
        assert result.exit_code == 1
        assert result.stderr == "brook: consumer group 'nope-group' does not exist\n"
    result = brook(broker, "groups", "describe", group, "--members", "--state")
    assert result.exit_code == 2 and "choose one of --members and --state" in result.stderr
    # A deleted topic's offsets went with it, as in Kafka.
    gone = make_topic(broker, admin, 1, {0: [1, 2]})
    commit(admin, group, {(gone, 0): 1})
    admin.delete_topics([gone])[gone].result(10)
    result = brook(broker, "groups", "describe", group)
    assert result.exit_code == 0, result.output
    assert not [row for row in rows(result.stdout) if gone in row]
    result = brook(broker, "groups", "list", "--state", "Bogus")
    assert result.exit_code == 2 and "unknown group state 'Bogus'" in result.stderr


# --- reset-offsets ----------------------------------------------------------------------------


def reset(broker, group, *args):
    return brook(broker, "groups", "reset-offsets", group, *args)


def test_reset_offsets_dry_run_then_every_scenario(broker, admin):
    now = int(time.time() * 1000)
    old, recent = now - 3 * HOUR, now - 10 * 60_000
    topic = make_topic(broker, admin, 3, {0: [old] * 5 + [recent] * 5,
                                          1: [old + i * 1000 for i in range(5)]})
    group = name("g")
    commit(admin, group, {(topic, 0): 4, (topic, 1): 2})

    result = reset(broker, group, "--topic", topic, "--to-earliest")
    assert result.exit_code == 0, result.output
    assert rows(result.stdout) == [
        ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
        [group, topic, "0", "4", "0"], [group, topic, "1", "2", "0"], [group, topic, "2", "-", "0"]]
    assert "Dry run: nothing was changed" in result.stderr
    assert committed(admin, group) == {(topic, 0): 4, (topic, 1): 2}

    def execute(*args) -> dict:
        result = reset(broker, group, *args, "--execute", "--output", "json")
        assert result.exit_code == 0, result.output
        doc = json.loads(result.stdout)
        assert doc["executed"] is True
        return doc

    execute("--topic", topic, "--to-latest")
    assert committed(admin, group) == {(topic, 0): 10, (topic, 1): 5, (topic, 2): 0}

    execute("--all-topics", "--to-earliest")
    assert committed(admin, group) == {(topic, 0): 0, (topic, 1): 0, (topic, 2): 0}

    doc = execute("--topic", topic, "--to-offset", "7")
    assert committed(admin, group) == {(topic, 0): 7, (topic, 1): 5, (topic, 2): 0}
    assert doc["warnings"] == [
        f"new offset 7 is above the log end offset of {topic}-1; using 5",
        f"new offset 7 is above the log end offset of {topic}-2; using 0"]

    execute("--topic", f"{topic}:0,1", "--shift-by", "-3")
    assert committed(admin, group) == {(topic, 0): 4, (topic, 1): 2, (topic, 2): 0}

    execute("--topic", f"{topic}:1", "--shift-by", "10")
    assert committed(admin, group)[(topic, 1)] == 5

    when = datetime.fromtimestamp((old + 2500) / 1000, timezone.utc)
    text = when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}"
    doc = execute("--topic", topic, "--to-datetime", text)
    # partition 0: only "recent" records are at or after old+2.5s; partition 1: the 4th record;
    # partition 2 is empty: the log end, with a warning, as Kafka does
    assert committed(admin, group) == {(topic, 0): 5, (topic, 1): 3, (topic, 2): 0}
    assert doc["warnings"] == [f"{topic}-2 has no record at or after the time; "
                               "using its log end offset 0"]

    execute("--topic", f"{topic}:0", "--by-duration", "PT1H")
    assert committed(admin, group)[(topic, 0)] == 5
    execute("--topic", f"{topic}:0", "--by-duration", "P1D")
    assert committed(admin, group)[(topic, 0)] == 0


def test_reset_offsets_refuses_bad_arguments_in_one_line(broker, admin):
    topic = make_topic(broker, admin, 1, {0: [1, 2]})
    group = name("g")
    cases = [
        (["--topic", topic], 2, "choose exactly one of --to-earliest"),
        (["--to-earliest"], 2, "choose the partitions"),
        (["--topic", topic, "--all-topics", "--to-latest"], 2, "choose the partitions"),
        (["--topic", topic, "--to-datetime", "2024-01-01"], 2, "invalid datetime"),
        (["--topic", topic, "--by-duration", "1h"], 2, "invalid duration"),
        (["--topic", "no-such-topic", "--to-latest"], 1, "unknown topic 'no-such-topic'"),
        (["--topic", f"{topic}:3", "--to-latest"], 1, f"topic '{topic}' has no partition 3"),
        (["--all-topics", "--to-latest"], 1, "has no committed offsets"),
        (["--topic", topic, "--shift-by", "1"], 1, "no committed offset"),
        (["--topic", topic, "--to-latest", "--execute", "--dry-run"], 2, "choose one of"),
    ]
    for args, code, message in cases:
        result = reset(broker, group, *args)
        assert result.exit_code == code, (args, result.output)
        assert result.stderr.count("\n") == 1 and result.stderr.startswith("brook: "), args
        assert message in result.stderr, (args, result.stderr)
    assert committed(admin, group) == {}


# --- delete and delete-offsets ----------------------------------------------------------------


def test_delete_groups(broker, admin):
    topic = make_topic(broker, admin, 1, {0: [1, 2, 3]})
    g1, g2 = name("g"), name("g")
    commit(admin, g1, {(topic, 0): 2})
    commit(admin, g2, {(topic, 0): 1})
    result = brook(broker, "groups", "delete", g1, g2)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [f"Deleted consumer group '{g1}'.",
                                          f"Deleted consumer group '{g2}'."]
    assert committed(admin, g1) == {} and committed(admin, g2) == {}
    listed = {g.group_id for g in admin.list_consumer_groups().result(10).valid}
    assert g1 not in listed and g2 not in listed
    result = brook(broker, "groups", "delete", g1)
    assert result.exit_code == 1
    assert result.stderr == f"brook: cannot delete consumer group '{g1}': it does not exist\n"


def test_delete_offsets_of_one_topic(broker, admin):
    a = make_topic(broker, admin, 2, {0: [1, 2], 1: [1]})
    b = make_topic(broker, admin, 1, {0: [1, 2, 3]})
    group = name("g")
    commit(admin, group, {(a, 0): 2, (a, 1): 1, (b, 0): 3})
    result = brook(broker, "groups", "delete-offsets", group, "--topic", a)
    assert result.exit_code == 0, result.output
    assert rows(result.stdout) == [["TOPIC", "PARTITION", "STATUS"], [a, "0", "Successful"],
                                   [a, "1", "Successful"]]
    assert committed(admin, group) == {(b, 0): 3}
    result = brook(broker, "groups", "delete-offsets", group, "--topic", f"{b}:0", "--output",
                   "json")
    assert json.loads(result.stdout) == {"group": group, "partitions": [
        {"topic": b, "partition": 0, "error": None}]}
    assert committed(admin, group) == {}


def test_delete_offsets_refuses_partitions_and_topics_that_do_not_exist(broker, admin):
    topic = make_topic(broker, admin, 3, {0: [1, 2]})
    group = name("g")
    commit(admin, group, {(topic, 0): 2})
    cases = [([f"{topic}:7"], f"brook: topic '{topic}' has no partition 7 (it has 3)"),
             ([f"{topic}:0", "no-such-topic"], "brook: unknown topic 'no-such-topic'"),
             (["no-such-topic:0"], "brook: unknown topic 'no-such-topic'")]
    for topics, message in cases:
        args = [a for t in topics for a in ("--topic", t)]
        result = brook(broker, "groups", "delete-offsets", group, *args)
        assert result.exit_code == 1, (topics, result.output)
        assert result.stderr == message + "\n" and result.stdout == "", (topics, result.output)
    assert committed(admin, group) == {(topic, 0): 2}  # nothing was deleted



# --- pure rows --------------------------------------------------------------------------------


def test_offset_rows_follow_kafkas_order():
    big = Member("m-big", None, "c1", "/h1", (("t", 2), ("t", 0), ("u", 1)))
    small = Member("m-small", "static-1", "c2", "/h2", (("t", 1),))
    idle = Member("m-idle", None, "c3", "/h3", ())
    group = Group("g", "Stable", "range", False, (1, "h", 9092), (small, idle, big))
    rows_ = offset_rows(group, committed={("t", 0): 5, ("t", 1): 1, ("v", 0): 9},
                        log_end={("t", 0): 7, ("t", 1): 1, ("t", 2): 4, ("u", 1): 0, ("v", 0): 10})
    assert [(r["topic"], r["partition"], r["current_offset"], r["lag"], r["consumer_id"])
            for r in rows_] == [
        ("t", 0, 5, 2, "m-big"), ("t", 2, None, None, "m-big"), ("u", 1, None, None, "m-big"),
        ("t", 1, 1, 0, "m-small"),
        ("v", 0, 9, 1, None),  # committed, but no member has it
    ]
    assert assignment_text([{"topic": "u", "partition": 1}, {"topic": "t", "partition": 2},
                            {"topic": "t", "partition": 0}]) == "t(0,2), u(1)"
