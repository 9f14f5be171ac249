"""Replication: produce with acks=all on three brokers with replication factor 3 against one
broker, and how long a partition is without a leader when its leader dies or is stopped.

    .venv/bin/python benchmarks/run_all.py bench_cluster
"""

from __future__ import annotations

import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench_broker import PRODUCER_CONFIG, _payloads  # noqa: E402
from brokers import brook_broker  # noqa: E402
from brook.cluster.local_zookeeper import ZooKeeperServer  # noqa: E402

COMMAND = ".venv/bin/python benchmarks/run_all.py bench_cluster"
TITLE = "Replication (three brokers on ZooKeeper against one)"
ROUNDS = 3
RECORDS = 100_000
SIZE = 1024
PARTITIONS = 4
SHORT_SESSION_MS = 3_000
KAFKA_SESSION_MS = 18_000
MB = 1e6
DESCRIPTION = f"""\
Produce: confluent-kafka with acks=all, {RECORDS:,} records of {SIZE} bytes to a topic of
{PARTITIONS} partitions, bench_broker's producer settings; on three brokers the topic has
replication factor 3 and `min.insync.replicas=2` (each record is on all three before it is
acknowledged), on one broker replication factor 1. All processes (one ZooKeeper, four brokers,
the client) share this machine's cores, so the three brokers' followers compete with their
leaders for CPU; the ratio is three brokers / one. Median of {ROUNDS} rounds.

Failover: a producer sends one acks=all record every 10 ms to a partition with three
replicas; the leader is then killed with SIGKILL (the controller learns it when the ZooKeeper
session expires: `zookeeper.session.timeout.ms`, Kafka's default {KAFKA_SESSION_MS:,} ms and
a short {SHORT_SESSION_MS:,} ms) or stopped with SIGTERM (controlled shutdown: leadership
moves before the broker leaves). The time is the longest stretch without an acknowledgement
from the signal until acknowledgements flow again.
"""


class Cluster:
    def __init__(self, work: Path, session_ms: int, brokers: int = 3) -> None:
        self.zk = ZooKeeperServer(work / "zookeeper")
        self.session_ms = session_ms
        self.brokers = {}
        self.work = work
        self.n = brokers

    def start(self) -> None:
        self.zk.start()
        for i in range(1, self.n + 1):
            self.brokers[i] = self._broker(i)
            self.brokers[i].start()
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        deadline = time.monotonic() + 30
        while len(admin.list_topics(timeout=10).brokers) < self.n:
            if time.monotonic() > deadline:
                raise RuntimeError("the brokers did not all join")
            time.sleep(0.1)

    def _broker(self, i: int):
        d = self.work / f"broker{i}"
        d.mkdir(exist_ok=True)
        return brook_broker(d, {"broker.id": str(i), "zookeeper.connect": self.zk.connect,
                                "zookeeper.session.timeout.ms": str(self.session_ms),
                                "controlled.shutdown.retry.backoff.ms": "200"})

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.proc and b.proc.poll() is None)

    def create(self, topic: str, partitions: int, rf: int) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        admin.create_topics([NewTopic(topic, partitions, rf, config={"min.insync.replicas": "2"})],
                            operation_timeout=30)[topic].result(timeout=60)
        deadline = time.monotonic() + 30
        while True:
            md = admin.list_topics(topic, timeout=10).topics[topic]
            if md.partitions and all(p.leader >= 0 and len(p.isrs) == rf for p in md.partitions.values()):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic} has no full ISR")
            time.sleep(0.1)

    def leader(self, topic: str) -> int:
        md = AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(topic, timeout=10)
        return md.topics[topic].partitions[0].leader

    def cpu(self) -> float:
        return sum(b.cpu() for b in self.brokers.values() if b.proc and b.proc.poll() is None)

    def stop(self) -> None:
        for b in self.brokers.values():
            try:
                b.stop()
            except Exception:  # noqa: BLE001 - a killed one is gone already
                pass
        self.zk.stop()


def produce(bootstrap: str, topic: str, payloads: list[bytes]) -> float:
    delivered, errors = [0], []

    def on_delivery(err, _msg):
        if err is None:
            delivered[0] += 1
        elif len(errors) < 5:
            errors.append(str(err))

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "on_delivery": on_delivery,
                  **PRODUCER_CONFIG})
    t = time.perf_counter()
    for i, v in enumerate(payloads):
        while True:
            try:
                p.produce(topic, v, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.001)
    p.flush(300)
    elapsed = time.perf_counter() - t
    if delivered[0] != len(payloads):
        raise RuntimeError(f"{delivered[0]} of {len(payloads)} delivered: {errors}")
    return len(payloads) * SIZE / MB / elapsed


def failover_seconds(cluster: Cluster, topic: str, sig: int) -> float:
    """The longest time without an acknowledgement around `sig` to the leader of `topic`-0,
    from the signal until acknowledgements have flowed again for a second."""
    acks: list[float] = []
    stop = threading.Event()

    def report(err, _msg):
        if err is None:
            acks.append(time.monotonic())

    def run():
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0,
                      "message.timeout.ms": 120_000, "retry.backoff.ms": 20,
                      "retry.backoff.max.ms": 100, "topic.metadata.refresh.interval.ms": 1000})
        while not stop.is_set():
            p.produce(topic, b"x", partition=0, on_delivery=report)
            p.poll(0.01)
        p.flush(60)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        time.sleep(1.0)
        leader = cluster.leader(topic)
        t_signal = time.monotonic()
        cluster.brokers[leader].proc.send_signal(sig)
        deadline = t_signal + cluster.session_ms / 1000 * 3 + 30
        while time.monotonic() < deadline:
            after = [a for a in acks if a > t_signal]
            if after and time.monotonic() - after[0] > 1.0 and len(after) > 20:
                break
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(90)
    cluster.brokers[leader].proc.wait(60)
    times = [t_signal] + sorted(a for a in acks if a > t_signal)
    if len(times) < 2:
        raise RuntimeError("no record was acknowledged after the leader went")
    return max(b - a for a, b in zip(times, times[1:]))


def _median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def run() -> list[dict]:
    results = []
    payloads = _payloads(SIZE, RECORDS)
    work = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    cluster = Cluster(work / "three", SHORT_SESSION_MS)
    single_dir = work / "one"
    single_dir.mkdir()
    single = brook_broker(single_dir)
    three_mb, one_mb, cpu3, cpu1 = [], [], [], []
    try:
        cluster.start()
        single.start()
        for r in range(ROUNDS):
            cluster.create(f"rep{r}", PARTITIONS, 3)
            single.create_topic(f"one{r}", PARTITIONS)
            c0 = cluster.cpu()
            three_mb.append(produce(cluster.bootstrap, f"rep{r}", payloads))
            cpu3.append(cluster.cpu() - c0)
            c0 = single.cpu()
            one_mb.append(produce(single.bootstrap, f"one{r}", payloads))
            cpu1.append(single.cpu() - c0)
    finally:
        single.stop()
        cluster.stop()
    results.append(dict(
        name=f"produce acks=all, {SIZE} B, {PARTITIONS} partitions, MB/s", value=_median(three_mb),
        unit="MB/s", peer="one broker, replication factor 1", peer_value=_median(one_mb),
        command=COMMAND,
        notes=f"three brokers {', '.join(f'{x:.1f}' for x in three_mb)}; one broker "
              f"{', '.join(f'{x:.1f}' for x in one_mb)}; broker CPU s per run: three "
              f"{_median(cpu3):.1f}, one {_median(cpu1):.1f}"))
    for session_ms, sig, label in ((SHORT_SESSION_MS, signal.SIGKILL, f"SIGKILL, session {SHORT_SESSION_MS} ms"),
                                   (KAFKA_SESSION_MS, signal.SIGKILL, f"SIGKILL, session {KAFKA_SESSION_MS} ms"),
                                   (SHORT_SESSION_MS, signal.SIGTERM, "SIGTERM (controlled shutdown)")):
        c = Cluster(work / f"failover-{session_ms}-{int(sig)}", session_ms)
        try:
            c.start()
            c.create("failover", 1, 3)
            seconds = failover_seconds(c, "failover", sig)
        finally:
            c.stop()
        results.append(dict(name=f"failover: longest time without an acknowledgement, {label}, s",
                            value=seconds, unit="s", higher_is_better=False, command=COMMAND))
    return results


if __name__ == "__main__":
    for r in run():
        print(r)
