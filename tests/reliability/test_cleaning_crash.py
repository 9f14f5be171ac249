"""SIGKILL while the log cleaner compacts and retention deletes segments, under sustained
produce: after each restart no live record is lost and no half-cleaned or half-deleted
segment is visible."""

from __future__ import annotations

import random
import signal
import time
import uuid

import pytest

from tests.support.broker_harness import BrokerProcess
from tests.support.sustained_producer import SustainedProducer, read_all

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

KEYS = 97  # SustainedProducer keys record n with n % 97


def ends_of(bootstrap: str, topic: str) -> dict[int, int]:
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    try:
        return {0: probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]}
    finally:
        probe.close()


def check_compacted(rows, acked: dict[int, tuple[int, int]]) -> None:
    """The log holds, for every key, a value at least as new as the last acknowledged one."""
    latest: dict[int, int] = {}
    for _, n in rows:
        latest[n % KEYS] = max(latest.get(n % KEYS, -1), n)
    last_acked: dict[int, int] = {}
    for n in acked:
        last_acked[n % KEYS] = max(last_acked.get(n % KEYS, -1), n)
    lost = {k: n for k, n in last_acked.items() if latest.get(k, -1) < n}
    assert not lost, f"latest values lost for keys {sorted(lost)[:10]}"


def check_retained(rows, acked: dict[int, tuple[int, int]], end: int) -> None:
    """What retention kept is contiguous up to the end, and is what was acknowledged there."""
    offsets = [o for o, _ in rows]
    assert offsets, "nothing readable"
    assert offsets == list(range(offsets[0], end))
    by_offset = {where[1]: n for n, where in acked.items()}
    assert all(by_offset.get(o, n) == n for o, n in rows)


@pytest.mark.parametrize("policy", ["compact", "delete"])
def test_kills_during_cleaning_lose_no_live_record(tmp_path, policy):
    rng = random.Random(5)
    broker = BrokerProcess(tmp_path / "broker", overrides={
        "log.segment.bytes": 32 * 1024,  # many small segments: the cleaner always has work
        "log.cleaner.backoff.ms": 20,
        "log.retention.check.interval.ms": 20,
    })
    broker.start()
    topic = f"clean-{policy}-{uuid.uuid4().hex[:6]}"
    configs = {"cleanup.policy": policy, "segment.bytes": "32768"}
    if policy == "compact":
        configs["min.cleanable.dirty.ratio"] = "0.01"
    else:
        configs["retention.bytes"] = "131072"
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(10)
        producer = SustainedProducer(broker.bootstrap, topic, **{"batch.size": 16384})
        producer.start()
        for _ in range(4):
            time.sleep(rng.uniform(0.4, 1.0))
            broker.restart(signal.SIGKILL)
            # Every restart: what was acknowledged is readable as it should be.
            producer.pause()
            acked = dict(producer.acked)
            ends = ends_of(broker.bootstrap, topic)
            rows = read_all(broker.bootstrap, topic, ends)[0]
            if policy == "compact":
                check_compacted(rows, acked)
            else:
                check_retained(rows, acked, ends[0])
            producer.resume()
        producer.stop()
        assert not producer.errors, producer.errors[:5]
        ends = ends_of(broker.bootstrap, topic)
        rows = read_all(broker.bootstrap, topic, ends)[0]
        stderr = broker.stderr_path.read_text()
    finally:
        broker.close()

    assert "Traceback" not in stderr
    if policy == "compact":
        assert len(rows) < producer.sent, "nothing was compacted"
        check_compacted(rows, producer.acked)
    else:
        assert rows[0][0] > 0, "retention deleted nothing"
        check_retained(rows, producer.acked, ends[0])
