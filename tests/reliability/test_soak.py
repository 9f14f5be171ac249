"""A compressed soak of a real broker process: producers, a consumer group whose members join
and leave, offset commits, compaction and retention, all at once for SOAK_SECONDS (60 in CI,
where the environment variable CI is set, 30 elsewhere, enough for members to come and go; set
SOAK_SECONDS for a longer run). It stops by itself, then checks that the broker's memory stayed
flat, no file descriptor leaked, and the group's lag returned to zero."""

from __future__ import annotations

import os
import random
import threading
import time
import uuid

import pytest

from tests.support.broker_harness import BrokerProcess

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

SOAK_SECONDS = float(os.environ.get("SOAK_SECONDS", "60" if os.environ.get("CI") else "30"))
ASSIGNOR = os.environ.get("SOAK_ASSIGNOR", "roundrobin")
PARTITIONS = 6
REBALANCE_ERRORS = {confluent_kafka.KafkaError.ILLEGAL_GENERATION,
                    confluent_kafka.KafkaError.REBALANCE_IN_PROGRESS,
                    confluent_kafka.KafkaError.UNKNOWN_MEMBER_ID}


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


class Member(threading.Thread):
    """A group member that consumes and commits until told to leave (or to vanish)."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group,
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
            "partition.assignment.strategy": ASSIGNOR,
        })
        self.topic = topic
        self.leave = threading.Event()
        self.consumed = 0
        self.refused_commits = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.consumer.subscribe([self.topic])
            while not self.leave.is_set():
                msgs = self.consumer.consume(500, 0.2)
                real = [m for m in msgs if not m.error()]
                if real:
                    self.consumed += len(real)
                    try:
                        self.consumer.commit(asynchronous=False)
                    except confluent_kafka.KafkaException as exc:
                        # A commit racing a rebalance is refused, as by Kafka; the member
                        # rejoins and the next commit covers these records.
                        if exc.args[0].code() not in REBALANCE_ERRORS:
                            raise
                        self.refused_commits += 1
            self.consumer.close()
        except BaseException as exc:  # reported by the test
            self.error = exc


def test_soak_memory_flat_no_fd_leak_lag_back_to_zero(tmp_path):
    rng = random.Random(3)
    broker = BrokerProcess(tmp_path / "broker", overrides={
        "num.partitions": PARTITIONS, "group.initial.rebalance.delay.ms": 0,
        "offsets.topic.num.partitions": 4, "offsets.topic.segment.bytes": 256 * 1024,
        "log.segment.bytes": 512 * 1024, "log.retention.bytes": 2 * 1024 * 1024,
        "log.retention.check.interval.ms": 500, "log.cleaner.backoff.ms": 500,
        "file.delete.delay.ms": 1000,
    })
    broker.start()
    events, table = f"events-{uuid.uuid4().hex[:6]}", f"table-{uuid.uuid4().hex[:6]}"
    group = "soakers"
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_topics([
                NewTopic(events, PARTITIONS, 1, config={"compression.type": "producer"}),
                NewTopic(table, 2, 1, config={"cleanup.policy": "compact",
                                              "segment.bytes": str(128 * 1024),
                                              "min.cleanable.dirty.ratio": "0.1"})]).values():
            f.result(10)

        stop = threading.Event()
        produced = {"events": 0, "table": 0}

        def produce() -> None:
            p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5,
                          "compression.type": "lz4", "acks": "all"})
            payload = os.urandom(200)
            while not stop.is_set():
                for _ in range(50):  # a steady ~2,500 records/s per topic
                    p.produce(events, value=payload)
                    p.produce(table, key=b"k%d" % rng.randrange(500), value=payload[:50])
                produced["events"] += 50
                produced["table"] += 50
                p.poll(0)
                time.sleep(0.02)
            assert p.flush(60) == 0

        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        members = [Member(broker.bootstrap, group, events) for _ in range(2)]
        for m in members:
            m.start()

        pid = broker.proc.pid
        samples: list[tuple[float, int, int]] = []
        start = time.monotonic()
        next_change = start + 5
        while time.monotonic() - start < SOAK_SECONDS:
            time.sleep(1.0)
            samples.append((time.monotonic() - start, rss_bytes(pid), open_fds(pid)))
            if time.monotonic() >= next_change:  # members come and go
                next_change += rng.uniform(4, 8)
                live = [m for m in members if m.is_alive()]
                if len(live) > 1 and rng.random() < 0.5:
                    rng.choice(live).leave.set()
                else:
                    m = Member(broker.bootstrap, group, events)
                    m.start()
                    members.append(m)
        stop.set()
        producer.join(90)

        # Lag returns to zero: the members still there catch up and commit.
        live = [m for m in members if m.is_alive()] or [Member(broker.bootstrap, group, events)]
        for m in live:
            if not m.is_alive() and m.ident is None:
                m.start()
        probe = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
        tps = [TopicPartition(events, p) for p in range(PARTITIONS)]
        deadline = time.monotonic() + 90
        lag = None
        while time.monotonic() < deadline:
            ends = [probe.get_watermark_offsets(tp, timeout=10)[1] for tp in tps]
            committed = [tp.offset for tp in probe.committed(tps, timeout=10)]
            lag = sum(e - max(c, 0) for e, c in zip(ends, committed))
            if lag == 0:
                break
            time.sleep(1.0)
        probe.close()
        for m in members:
            m.leave.set()
        for m in members:
            m.join(30)
        assert lag == 0, (f"the group's lag stayed at {lag}; produced {produced}, members "
                          f"(consumed, alive, error): "
                          f"{[(m.consumed, m.is_alive(), m.error) for m in members]}")
        errors = [m.error for m in members if m.error is not None]
        assert not errors, errors
        assert len(members) > 3, "no member joined during the soak"
        stderr = broker.stderr_path.read_text()
        table_dir = broker.log_dir / f"{table}-0"
        final_fds = open_fds(pid)
    finally:
        broker.close()

    assert "Traceback" not in stderr
    assert produced["events"] > 20 * SOAK_SECONDS
    # Flat memory and no leak: after a warm-up third, the last samples stay near the first ones.
    warm = [s for s in samples if s[0] >= SOAK_SECONDS / 3]
    early, late = warm[: len(warm) // 3], warm[-(len(warm) // 3):]
    rss_early = max(s[1] for s in early)
    rss_late = max(s[1] for s in late)
    assert rss_late < rss_early * 1.25 + (16 << 20), \
        f"RSS grew from {rss_early >> 20} MiB to {rss_late >> 20} MiB"
    # Descriptors move with segments rolled, deleted after file.delete.delay.ms, and client
    # connections; a leak grows without bound, so allow a margin, not a trend.
    fds_early = max(s[2] for s in early)
    limit = fds_early * 3 // 2 + 32
    assert max(s[2] for s in late) <= limit, [s[2] for s in samples]
    assert final_fds <= limit
    assert table_dir.exists()
