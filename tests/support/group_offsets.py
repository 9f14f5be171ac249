"""A group's committed offsets through confluent-kafka's AdminClient, as the tests of the
tools that change them check them (brook groups, brook offsets, the web console)."""

from __future__ import annotations

import uuid

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition


def unique_name(prefix: str) -> str:
    """A topic or group name no other test of the run uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def committed(admin, group: str) -> dict[tuple[str, int], int]:
    """{(topic, partition): offset} of the partitions the group has an offset for."""
    fut = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    return {(tp.topic, tp.partition): tp.offset for tp in fut.result(10).topic_partitions
            if tp.offset >= 0}


def commit(admin, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commit offsets for a group without members (as a simple consumer does)."""
    tps = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)])[group].result(10)
