"""brook.spark.group and brook.spark.admin against a real broker: a streaming query's commits
to its consumer group, without Spark (tests/spark/test_streaming.py runs them inside queries).

Commits are simple commits (no member, generation -1), only positions that changed are sent,
and a commit the broker refuses is logged and retried later (a fake clock for the pause)
without ever raising: the checkpoint, not the group, is what a query depends on.
"""

from __future__ import annotations

import logging
import time

import pytest

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.support.broker_harness import BrokerProcess, create_topic_confluent
from brook.clock import FakeClock
from brook.spark.admin import Admin, BrokerRequestError
from brook.spark.group import GroupCommitter
from brook.spark.options import OptionError, Subscription

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("broker-spark-group"), overrides={
            "num.partitions": 2, "offsets.topic.num.partitions": 3,
            "group.initial.rebalance.delay.ms": 0}) as proc:
        yield proc


def group_offsets(kafka, group):
    client = AdminClient({"bootstrap.servers": kafka.bootstrap})
    result = client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[
        group].result(30)
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions
            if tp.offset >= 0}


def test_admin_lists_partitions_offsets_and_commits(kafka):
    create_topic_confluent(kafka.bootstrap, "admin-a", partitions=2)
    create_topic_confluent(kafka.bootstrap, "admin-b", partitions=1)
    admin = Admin({"bootstrap.servers": kafka.bootstrap})
    assert admin.partitions(Subscription(topics=("admin-a", "missing"))) == [
        ("admin-a", 0), ("admin-a", 1)]
    assert admin.partitions(Subscription(pattern="admin-.*")) == [
        ("admin-a", 0), ("admin-a", 1), ("admin-b", 0)]
    assert admin.partitions(Subscription(assigned=(("admin-b", 0),))) == [("admin-b", 0)]
    with pytest.raises(BrokerRequestError, match="assigned partitions do not exist: admin-b-3"):
        admin.partitions(Subscription(assigned=(("admin-b", 3),)))
    # subscribing to a missing topic did not create it (brook auto-creates on Metadata)
    assert "missing" not in AdminClient({"bootstrap.servers": kafka.bootstrap}).list_topics(
        timeout=10).topics
    tps = [("admin-a", 0), ("admin-a", 1)]
    assert admin.earliest(tps) == admin.latest(tps) == {("admin-a", 0): 0, ("admin-a", 1): 0}
    admin.commit("admin-group", {("admin-a", 1): 5})
    assert admin.committed("admin-group", tps) == {("admin-a", 1): 5}
    with pytest.raises(OptionError, match="client settings are not valid"):
        Admin({"bootstrap.servers": kafka.bootstrap, "no.such.setting": "1"}).latest(tps)


def test_commits_send_only_what_moved(kafka):
    create_topic_confluent(kafka.bootstrap, "moves", partitions=2)
    committer = GroupCommitter(Admin({"bootstrap.servers": kafka.bootstrap}), "movers")
    assert committer.commit({("moves", 0): 10, ("moves", 1): 20})
    assert group_offsets(kafka, "movers") == {("moves", 0): 10, ("moves", 1): 20}
    # someone else moves the group; the same position again is not re-sent...
    other = GroupCommitter(Admin({"bootstrap.servers": kafka.bootstrap}), "movers")
    assert other.commit({("moves", 0): 99})
    assert committer.commit({("moves", 0): 10, ("moves", 1): 20})
    assert group_offsets(kafka, "movers") == {("moves", 0): 99, ("moves", 1): 20}
    # ...a new one is, and only for the partition that moved; offsets can also go back
    # (a query restarted from an older checkpoint)
    assert committer.commit({("moves", 0): 10, ("moves", 1): 15})
    assert group_offsets(kafka, "movers") == {("moves", 0): 99, ("moves", 1): 15}


def test_a_refused_commit_is_logged_retried_later_and_never_raised(kafka, caplog):
    create_topic_confluent(kafka.bootstrap, "busy", partitions=1)
    member = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "busy-group",
                       "enable.auto.commit": False, "session.timeout.ms": 6000})
    member.subscribe(["busy"])
    deadline = time.monotonic() + 60
    while not member.assignment():
        assert time.monotonic() < deadline, "the consumer never joined"
        member.poll(0.2)
    clock = FakeClock()
    committer = GroupCommitter(Admin({"bootstrap.servers": kafka.bootstrap}), "busy-group",
                               clock=lambda: clock.milliseconds() / 1000)
    with caplog.at_level(logging.WARNING, logger="brook.spark"):
        # a simple commit may not override a group with live members (Kafka's rule)
        assert committer.commit({("busy", 0): 7}) is False
        assert committer.commit({("busy", 0): 8}) is False  # not tried again within a second
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "cannot commit offsets" in warnings[0] \
        and "Unknown member" in warnings[0]
    member.close()  # leaves the group: it is Empty now
    assert committer.commit({("busy", 0): 8}) is False  # still within the pause
    clock.advance(1000)
    assert committer.commit({("busy", 0): 8}) is True
    assert group_offsets(kafka, "busy-group") == {("busy", 0): 8}


def test_an_unreachable_broker_does_not_raise(tmp_path):
    proc = BrokerProcess(tmp_path / "gone")
    proc.start()
    address = proc.bootstrap
    proc.close()
    admin = Admin({"bootstrap.servers": address, "socket.connection.setup.timeout.ms": "1000"},
                  timeout_s=2)
    assert GroupCommitter(admin, "g").commit({("t", 0): 1}) is False
