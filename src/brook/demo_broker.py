"""The broker part of `make demo`: a real `brook broker` process and real Kafka clients.

Starts a broker on a free port with a temporary data dir, creates a topic with the admin
API, produces page views with an idempotent LZ4 producer (confluent-kafka), consumes them
back, restarts the broker and shows that everything is still there and offsets continue.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

URLS = ["/", "/pricing", "/docs", "/blog", "/signup", "/login"]
TOPIC = "page-views"
PARTITIONS = 4


def say(text: str) -> None:
    print(f"\n== {text}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Broker:
    def __init__(self, data_dir: str, port: int) -> None:
        self.cmd = [sys.executable, "-m", "brook", "broker",
                    "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
                    "--override", f"log.dirs={data_dir}/logs"]
        self.port = port
        self.log_path = os.path.join(data_dir, "broker.log")
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited early:\n{open(self.log_path).read()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("broker did not start")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)

    def log_lines(self) -> list[str]:
        with open(self.log_path) as f:
            return [line.rstrip() for line in f]


def _consume_all(bootstrap: str, expected: int) -> tuple[dict[str, int], dict[int, int]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "demo", "enable.auto.commit": False,
                         "log_level": 2})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    counts: dict[str, int] = {}
    last: dict[int, int] = {}
    n = 0
    deadline = time.monotonic() + 60
    while n < expected and time.monotonic() < deadline:
        for msg in consumer.consume(10_000, 1.0):
            if msg.error():
                raise RuntimeError(msg.error())
            assert msg.offset() == last.get(msg.partition(), -1) + 1, "offsets arrive in order, no gaps"
            last[msg.partition()] = msg.offset()
            url = json.loads(msg.value())["url"]
            counts[url] = counts.get(url, 0) + 1
            n += 1
    consumer.close()
    return counts, last


def _produce(bootstrap: str, n: int, seed: int) -> dict[str, int]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "compression.type": "lz4", "linger.ms": 5, "log_level": 2})
    rng = random.Random(seed)
    counts: dict[str, int] = {}
    failures: list = []
    for i in range(n):
        user = f"user-{rng.randrange(500)}"
        url = rng.choice(URLS)
        counts[url] = counts.get(url, 0) + 1
        producer.produce(TOPIC, key=user.encode(), value=json.dumps({"user": user, "url": url}).encode(),
                         headers=[("source", b"demo")],
                         on_delivery=lambda err, msg: err and failures.append(err))
        if i % 10_000 == 0:
            producer.poll(0)
    producer.flush(30)
    del producer  # disconnect now, not when garbage collected
    assert not failures, f"every record is acknowledged: {failures[:3]}"
    return counts


def run() -> None:
    try:
        from confluent_kafka.admin import AdminClient, NewTopic
    except ImportError:  # pragma: no cover - the Makefile installs it
        print("confluent-kafka is not installed: pip install 'brook[test]' for the broker demo")
        return
    data_dir = tempfile.mkdtemp(prefix="brook-demo-broker-")
    port = _free_port()
    bootstrap = f"127.0.0.1:{port}"
    broker = _Broker(data_dir, port)
    try:
        say(f"start `brook broker` on {bootstrap} (data in {data_dir})")
        broker.start()
        print("  " + broker.log_lines()[-1].split(": ", 1)[-1])

        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS)])[TOPIC].result(10)
        del admin
        say(f"confluent-kafka: create {TOPIC} ({PARTITIONS} partitions), produce 100,000 page views "
            "(idempotent producer, LZ4)")
        t = time.perf_counter()
        counts = _produce(bootstrap, 100_000, seed=7)
        secs = time.perf_counter() - t
        print(f"  {100_000 / secs:,.0f} records/s acknowledged")

        say("consume them back with assign() from the beginning and count views per URL")
        t = time.perf_counter()
        seen, last = _consume_all(bootstrap, 100_000)
        print(f"  {100_000 / (time.perf_counter() - t):,.0f} records/s consumed")
        for url in URLS:
            print(f"  {url:10s} {seen.get(url, 0):6d}")
        assert seen == counts, "every produced record is consumed exactly once"

        say("restart the broker (SIGTERM: flush, checkpoints, clean-shutdown marker)")
        broker.stop()
        broker.start()
        more = _produce(bootstrap, 10_000, seed=8)
        seen2, last2 = _consume_all(bootstrap, 110_000)
        for url in URLS:
            counts[url] = counts.get(url, 0) + more.get(url, 0)
        assert seen2 == counts, "records from before the restart are still there, once"
        print("  after the restart: " + ", ".join(
            f"partition {p} ends at offset {last[p]} -> {last2[p]}" for p in sorted(last2)))
    finally:
        broker.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
