"""`make demo-cluster`: three brokers on a real ZooKeeper, a topic replicated three times, and
a leader killed in the middle of it, with real Kafka clients (confluent-kafka).

It starts Debian's ZooKeeper on a free port and three `brook broker` processes joined to it,
creates a topic of 3 partitions with replication factor 3 and min.insync.replicas=2, produces
page views with acks=all, kills the leader of partition 0 with SIGKILL, shows the controller
electing a new one from the ISR, produces more, reads every acknowledged record back, brings
the dead broker back (it truncates, catches up and rejoins the ISR), and finally stops a leader
with SIGTERM, whose leaderships move before it exits.
"""

from __future__ import annotations

import json
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .cluster.local_zookeeper import ZooKeeperServer, missing_reason

TOPIC = "page-views"
PARTITIONS = 3
SESSION_MS = 4000
URLS = ["/", "/pricing", "/docs", "/blog", "/signup", "/login"]


def say(text: str) -> None:
    print(f"\n== {text}", flush=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Broker:
    def __init__(self, broker_id: int, work: Path, zk_connect: str) -> None:
        self.id = broker_id
        self.port = _free_port()
        self.dir = work / f"broker{broker_id}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.dir / "broker.log"
        self.cmd = [sys.executable, "-m", "brook", "broker",
                    "-o", f"broker.id={broker_id}", "-o", f"zookeeper.connect={zk_connect}",
                    "-o", f"zookeeper.session.timeout.ms={SESSION_MS}",
                    "-o", f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
                    "-o", f"log.dirs={self.dir / 'logs'}",
                    "-o", "replica.lag.time.max.ms=5000",
                    "-o", "controlled.shutdown.retry.backoff.ms=200"]
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker {self.id} exited early:\n{self.log_path.read_text()[-3000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"broker {self.id} did not start")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            self.proc.send_signal(sig)
            self.proc.wait(60)

    def stop(self) -> None:
        self.signal(signal.SIGTERM)


def _describe(admin, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    md = admin.list_topics(topic, timeout=10).topics[topic]
    return {p: (m.leader, list(m.replicas), list(m.isrs)) for p, m in sorted(md.partitions.items())}


def _show(admin, topic: str) -> None:
    print(f"   {'PARTITION':<10}{'LEADER':<8}{'REPLICAS':<12}ISR")
    for p, (leader, replicas, isr) in _describe(admin, topic).items():
        print(f"   {p:<10}{leader:<8}{','.join(map(str, replicas)):<12}{','.join(map(str, isr))}")


def _wait(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise RuntimeError(f"not within {timeout:.0f} s: {what}")


def _produce(bootstrap: str, n: int, start: int) -> list[bytes]:
    from confluent_kafka import Producer
    acked: list[bytes] = []
    failed: list[str] = []

    def report(err, msg):
        if err is None:
            acked.append(msg.value())
        else:
            failed.append(str(err))

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                  "enable.idempotence": True, "message.timeout.ms": 60000})
    rng = random.Random(start)
    for i in range(start, start + n):
        view = {"view": i, "user": f"u{rng.randrange(500)}", "url": rng.choice(URLS)}
        p.produce(TOPIC, json.dumps(view).encode(), key=view["user"].encode(), on_delivery=report)
        p.poll(0)
    p.flush(90)
    if failed:
        raise RuntimeError(f"{len(failed)} records not acknowledged: {failed[:3]}")
    return acked


def _consume(bootstrap: str, expected: int) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "demo-check", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    out: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(out) < expected and time.monotonic() < deadline:
        for m in c.consume(1000, 0.5):
            if not m.error():
                out.append(m.value())
    c.close()
    return out


def main() -> None:
    reason = missing_reason()
    if reason:
        print(f"demo-cluster needs ZooKeeper: {reason}")
        sys.exit(1)
    from confluent_kafka.admin import AdminClient, NewTopic
    work = Path(tempfile.mkdtemp(prefix="brook-demo-cluster-"))
    zk = ZooKeeperServer(work / "zookeeper")
    brokers: dict[int, _Broker] = {}
    try:
        say(f"ZooKeeper on {zk.start().connect}, and three brokers joined to it (chroot /demo)")
        for i in (1, 2, 3):
            brokers[i] = _Broker(i, work, zk.connect + "/demo")
            brokers[i].start()
        bootstrap = ",".join(b.bootstrap for b in brokers.values())
        admin = AdminClient({"bootstrap.servers": bootstrap})
        _wait(lambda: len(admin.list_topics(timeout=10).brokers) == 3, 30, "three brokers in the metadata")
        md = admin.list_topics(timeout=10)
        print(f"   brokers {sorted(md.brokers)}, controller {md.controller_id}")

        say(f"topic {TOPIC}: {PARTITIONS} partitions, replication factor 3, min.insync.replicas=2")
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})],
                            operation_timeout=30)[TOPIC].result(60)
        _wait(lambda: all(len(isr) == 3 for _, _, isr in _describe(admin, TOPIC).values()), 30, "full ISRs")
        _show(admin, TOPIC)

        say("producing 5,000 page views with acks=all (each on all three brokers before it is acknowledged)")
        acked = _produce(bootstrap, 5000, 0)
        print(f"   {len(acked):,} acknowledged")

        leader = _describe(admin, TOPIC)[0][0]
        say(f"SIGKILL of broker {leader}, the leader of partition 0")
        killed_at = time.monotonic()
        brokers[leader].signal(signal.SIGKILL)
        survivors = ",".join(b.bootstrap for b in brokers.values() if b.alive())
        admin = AdminClient({"bootstrap.servers": survivors})
        _wait(lambda: _describe(admin, TOPIC)[0][0] not in (leader, -1), SESSION_MS / 1000 * 4,
              "a new leader for partition 0")
        print(f"   a new leader after {time.monotonic() - killed_at:.1f} s "
              f"(zookeeper.session.timeout.ms={SESSION_MS}): the controller chose it from the ISR")
        _show(admin, TOPIC)

        say("producing 5,000 more while broker %d is down (the ISR of two still meets min.insync.replicas)" % leader)
        acked += _produce(survivors, 5000, 5000)
        got = _consume(survivors, len(acked))
        missing = set(acked) - set(got)
        print(f"   read back {len(got):,} records; acknowledged and missing: {len(missing)}")
        if missing:
            raise RuntimeError(f"{len(missing)} acknowledged records are missing")

        say(f"broker {leader} comes back: it truncates what its successor never had, catches up and rejoins the ISR")
        brokers[leader].start()
        admin = AdminClient({"bootstrap.servers": bootstrap})
        _wait(lambda: all(len(isr) == 3 for _, _, isr in _describe(admin, TOPIC).values()), 60,
              "every ISR complete again")
        _show(admin, TOPIC)

        target = _describe(admin, TOPIC)[0][0]
        say(f"SIGTERM to broker {target}: a controlled shutdown moves its leaderships first")
        t = time.monotonic()
        brokers[target].stop()
        print(f"   stopped in {time.monotonic() - t:.1f} s; its partitions were already led elsewhere:")
        admin = AdminClient({"bootstrap.servers": ",".join(b.bootstrap for b in brokers.values() if b.alive())})
        _show(admin, TOPIC)
        say("done: every acknowledged record survived a leader's crash")
    finally:
        for b in brokers.values():
            try:
                b.stop()
            except Exception:  # noqa: BLE001 - tearing down
                pass
        zk.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
