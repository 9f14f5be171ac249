"""Crash safety with a real broker process killed by SIGKILL under sustained produce.

An idempotent confluent-kafka producer (acks=all) writes numbered records without pause while
the broker is killed and restarted again and again. Afterwards every record the broker
acknowledged must be in the log exactly once, at the offset it was acknowledged with, and each
partition must hold its records in the order they were produced.
"""

from __future__ import annotations

import random
import signal
import threading
import time
import uuid

import pytest

from kio.schema.errors import ErrorCode

from brook.protocol.messages import make
from tests.support.broker_harness import BrokerProcess
from tests.support.kafka_wire import WireClient, request_class
from tests.support.sustained_producer import SustainedProducer, read_all

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

PARTITIONS = 3


@pytest.mark.parametrize("flush_messages, kills", [
    (1, 20),      # fsync after every message: survives an OS crash too
    (None, 10),   # Kafka's default (no forced fsync): a process crash leaves the page cache
], ids=["flush.messages=1", "default-flush"])
def test_acknowledged_records_survive_kills_exactly_once_in_order(tmp_path, flush_messages, kills):
    rng = random.Random(7)
    overrides = {"num.partitions": PARTITIONS,
                 "log.segment.bytes": 256 * 1024}  # several rolls (and producer snapshots)
    if flush_messages is not None:
        overrides["flush.messages"] = flush_messages
    broker = BrokerProcess(tmp_path / "broker", overrides=overrides)
    broker.start()
    topic = f"crash-{uuid.uuid4().hex[:6]}"
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(10)
        producer = SustainedProducer(broker.bootstrap, topic)
        producer.start()
        acked_at_kill = 0
        for _ in range(kills):
            # Each kill hits live traffic: the producer got acknowledgements since the last one.
            deadline = time.monotonic() + 30
            while len(producer.acked) <= acked_at_kill and time.monotonic() < deadline:
                time.sleep(0.02)
            assert len(producer.acked) > acked_at_kill, "the producer made no progress"
            time.sleep(rng.uniform(0.1, 0.5))
            acked_at_kill = len(producer.acked)
            broker.restart(signal.SIGKILL)
        producer.stop()
        assert not producer.errors, producer.errors[:5]

        consumer_probe = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "probe"})
        ends = {p: consumer_probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(PARTITIONS)}
        consumer_probe.close()
        log = read_all(broker.bootstrap, topic, ends)
    finally:
        broker.close()

    seen: dict[int, tuple[int, int]] = {}
    for partition, rows in log.items():
        ns = [n for _, n in rows]
        assert ns == sorted(ns), f"partition {partition} holds records out of produce order"
        for offset, n in rows:
            assert n not in seen, f"record {n} written twice: {seen[n]} and {(partition, offset)}"
            seen[n] = (partition, offset)
    # Everything sent was acknowledged (flush returned 0, no errors), and every acknowledged
    # record is in the log at the offset it was acknowledged with.
    assert len(producer.acked) == producer.sent
    missing = [n for n in producer.acked if n not in seen]
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:5]}"
    moved = [n for n, where in producer.acked.items() if seen[n] != where]
    assert not moved, f"records not where they were acknowledged, e.g. {moved[:5]}"
    assert len(seen) == producer.sent
    # Every restart after a kill recovered the log without a clean-shutdown marker.
    assert broker.starts == kills + 1


def _commit_request(group: str, topic: str, partitions: int, n: int):
    cls = request_class(8, 9)
    cm = __import__(cls.__module__, fromlist=["x"])
    return make(cls, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                group_instance_id=None, topics=(cm.OffsetCommitRequestTopic(
                    name=topic, partitions=tuple(cm.OffsetCommitRequestPartition(
                        partition_index=p, committed_offset=n, committed_leader_epoch=-1,
                        committed_metadata="") for p in range(partitions))),))


def test_offset_commits_of_many_partitions_are_all_or_nothing_across_kills(tmp_path):
    """Each commit sets every one of 200 partitions to the same offset n; whatever a kill
    interrupts, a restarted broker serves one n for all of them, at least the last
    acknowledged one, and the group loads without error."""
    rng = random.Random(11)
    partitions, kills = 200, 8
    broker = BrokerProcess(tmp_path / "broker", overrides={
        "offsets.topic.num.partitions": 3, "offsets.topic.segment.bytes": 64 * 1024})
    broker.start()
    topic, group = f"atomic-{uuid.uuid4().hex[:6]}", "committer"
    n = 0
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(10)
        for _ in range(kills):
            acked = 0

            def commit_until_killed() -> None:
                nonlocal n, acked
                try:
                    with WireClient(broker.bootstrap) as wire:
                        while True:
                            n += 1
                            answer = wire.request(_commit_request(group, topic, partitions, n))
                            codes = {p.error_code for p in answer.topics[0].partitions}
                            assert codes == {ErrorCode.none}, codes
                            acked = n
                except (OSError, EOFError, ConnectionError):
                    return  # the broker was killed

            thread = threading.Thread(target=commit_until_killed, daemon=True)
            thread.start()
            deadline = time.monotonic() + 30
            while acked < 20 and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(rng.uniform(0.0, 0.2))
            broker.kill()  # while commits are in flight
            thread.join(30)
            assert not thread.is_alive()
            assert acked >= 20, "the commits made no progress before the kill"
            broker.start()

            reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
            committed = reader.committed([TopicPartition(topic, p) for p in range(partitions)],
                                         timeout=30)
            reader.close()
            values = {tp.offset for tp in committed}
            assert len(values) == 1, f"a commit was torn: offsets {sorted(values)[:10]}"
            assert acked <= values.pop() <= n
        assert "Traceback" not in broker.stderr_path.read_text()
    finally:
        broker.close()
