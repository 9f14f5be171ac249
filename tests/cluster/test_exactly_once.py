"""Exactly-once consume-transform-produce on three brokers on ZooKeeper, with SIGKILL in a loop:
the application (a transactional confluent-kafka transformer, tests/chaos/client.py), the
broker coordinating its transactional id, and the leader of an input partition, each killed in
turn and brought back while records keep arriving. Once the application has caught up, the
output read with read_committed holds every input record exactly once, and the group's
committed offsets are the end of the input: offsets and output were committed together or not
at all, across every kill.

The application defends itself against a client hang as a supervised application would: a
transactional call still blocked well past its timeout (librdkafka's send_offsets_to_transaction
waits forever for a group coordinator whose broker left the metadata, confluentinc/librdkafka
#5511, which a coordinator kill brings about) makes it start itself again (tests/chaos/client.py).
Before that, one run in four failed here with no progress for 90 s after a kill (its consumer
left the group on max.poll.interval.ms while the call hung)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.support.cluster_harness import brokers, wait_for, zk, zookeeper  # noqa: F401

pytestmark = [pytest.mark.broker, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
TOPIC, OUTPUT, PARTITIONS = "eos-in", "eos-in-out", 3
GROUP = "eos-kills"  # the transformer's group is GROUP + "-eos", its transactional id "eos-app"
SETTINGS = {"replica.fetch.wait.max.ms": 100, "replica.fetch.backoff.ms": 200,
            "controlled.shutdown.retry.backoff.ms": 200, "transaction.state.log.num.partitions": 3,
            "offsets.topic.num.partitions": 3, "group.initial.rebalance.delay.ms": 0,
            "zookeeper.session.timeout.ms": 6000}
KILLS = 6


class App:
    """The transformer as its own process, killed and started again under the same name (so
    the same transactional id: each start fences the previous one)."""

    def __init__(self, bootstrap: str, work: Path) -> None:
        self.bootstrap, self.work = bootstrap, work
        self.stop_file = work / "stop"
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
        err = open(self.work / f"app{self.starts}.stderr", "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.chaos.client", "transformer", "--name", "app",
             "--bootstrap", self.bootstrap, "--topic", TOPIC, "--partitions", str(PARTITIONS),
             "--group", GROUP, "--out", str(self.work / "app.jsonl"), "--stop",
             str(self.stop_file)], cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=err,
            stderr=err)
        err.close()

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        self.stop_file.touch()
        try:
            self.proc.wait(40)
        except subprocess.TimeoutExpired:
            self.kill()


def _committed(bootstrap: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{GROUP}-eos"})
    try:
        got = c.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=10)
        return {tp.partition: tp.offset for tp in got}
    except Exception:  # noqa: BLE001 - the coordinator moving: asked again
        return {}
    finally:
        c.close()


def _ends(bootstrap: str, topic: str, isolation: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos-ends",
                  "isolation.level": isolation})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(PARTITIONS)}
    finally:
        c.close()


def _read(bootstrap: str, topic: str, isolation: str) -> list:
    """Every record of `topic` to its end (the LSO with read_committed), as messages."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos-reader",
                  "isolation.level": isolation, "enable.partition.eof": True,
                  "auto.offset.reset": "earliest"})
    out, eof = [], set()
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    deadline = time.monotonic() + 60
    while len(eof) < PARTITIONS:
        assert time.monotonic() < deadline, f"reading {topic}: end of {sorted(eof)} only"
        for m in c.consume(500, timeout=1.0):
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
                continue
            out.append(m)
    c.close()
    return out


def test_each_input_record_is_in_the_output_once_across_kills(zk, brokers, tmp_path):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    for i in (1, 2, 3):
        brokers(i, SETTINGS)
    bootstrap = brokers.wait_ready(zk, [1, 2, 3])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, PARTITIONS, 3, config={"min.insync.replicas": "2"})
                                   for t in (TOPIC, OUTPUT)], operation_timeout=20)
    for f in futures.values():
        f.result(30)
    wait_for(lambda: zk.in_sync([TOPIC, OUTPUT]), 30, "the topics in sync", brokers)

    # input arriving all along: an idempotent producer, acks=all
    stop_input, sent = threading.Event(), Counter()

    def produce() -> None:
        p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                      "linger.ms": 5, "message.timeout.ms": 120_000})
        seq = 0
        while not stop_input.is_set():
            for _ in range(20):
                p.produce(TOPIC, b"in:%d" % seq, partition=seq % PARTITIONS)
                seq += 1
            p.poll(0)
            time.sleep(0.1)
        assert p.flush(120) == 0
        sent["records"] = seq

    feeder = threading.Thread(target=produce, daemon=True)
    feeder.start()
    app = App(bootstrap, tmp_path)
    app.start()

    def progress() -> int:
        return sum(o for o in _committed(bootstrap).values() if o > 0)

    def coordinator() -> int:
        from tests.cluster.test_transaction_coordinator import _coordinator
        code, node = _coordinator(bootstrap, "eos-app")
        return node if code == 0 else -1

    try:
        victims = []
        for round_ in range(KILLS):
            before = progress()
            wait_for(lambda: progress() > before, 90, f"progress before kill {round_}", brokers)
            victim = ("app", "coordinator", "leader")[round_ % 3]
            if victim == "app":
                app.kill()
                time.sleep(1)
                app.start()
            else:
                node = (wait_for(lambda: (c := coordinator()) > 0 and c, 30, "the coordinator",
                                 brokers) if victim == "coordinator"
                        else zk.json(f"/brokers/topics/{TOPIC}/partitions/{round_ % PARTITIONS}"
                                     f"/state")["leader"])
                victim = f"{victim} (broker {node})"
                brokers[node].kill()
                time.sleep(2)
                brokers[node].start()
                wait_for(lambda: zk.broker_ids() == [1, 2, 3], 60, "the broker back", brokers)
            victims.append(victim)
        stop_input.set()
        feeder.join(150)
        assert not feeder.is_alive() and sent["records"] > 0
        wait_for(lambda: zk.in_sync([TOPIC, OUTPUT]), 60, "the topics in sync again", brokers)
        ends = _ends(bootstrap, TOPIC, "read_uncommitted")
        wait_for(lambda: _committed(bootstrap) == ends, 120,
                 f"the application caught up to {ends}", brokers)
    finally:
        stop_input.set()
        app.stop()

    inputs = {(m.partition(), m.offset()): m.value() for m in _read(bootstrap, TOPIC,
                                                                     "read_uncommitted")}
    assert len(inputs) == sum(ends.values())
    outputs = _read(bootstrap, OUTPUT, "read_committed")
    copies = Counter(m.key().decode() for m in outputs)
    twice = [k for k, n in copies.items() if n > 1]
    assert not twice, f"input records in the output more than once: {twice[:10]}"
    for m in outputs:
        p, _, o = m.key().decode().partition(":")
        assert inputs[(int(p), int(o))] == m.value(), m.key()
    missing = [f"{p}:{o}" for p, o in inputs if f"{p}:{o}" not in copies]
    assert not missing, f"input records not in the output: {missing[:10]} (kills: {victims})"
    assert app.starts >= 3
    for i in (1, 2, 3):
        assert "Traceback" not in brokers[i].stderr_path.read_text()
