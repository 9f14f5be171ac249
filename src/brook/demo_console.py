"""`make console`: a first look at the web console. Starts a `brook broker` process on a free
port (temporary data dir), keeps sample traffic going (page views, JSON orders, a few binary
readings, payments in transactions of which every fourth is aborted) with consumer groups that keep up, fall behind and catch up again, and serves
`brook console` on CONSOLE_LISTEN (default 127.0.0.1:8080) until Ctrl-C."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from .demo_broker import _Broker, _free_port, say

TOPICS = {"page-views": 4, "orders": 2, "sensor-readings": 1, "payments": 1}


def _producer(bootstrap: str, stop: threading.Event) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "log_level": 2})
    rng = random.Random(1)
    n = 0
    while not stop.is_set():
        burst = 150 if (n // 20) % 3 else 20  # busy and quiet spells: the lag moves
        for _ in range(burst):
            user = f"user-{rng.randrange(200)}"
            p.produce("page-views", key=user.encode(), headers=[("source", b"demo")],
                      value=json.dumps({"user": user, "url": rng.choice(
                          ["/", "/pricing", "/docs", "/blog", "/signup"])}).encode())
        p.produce("orders", key=f"order-{n}".encode(), value=json.dumps({
            "order": n, "lines": [{"sku": f"SKU-{rng.randrange(50)}", "qty": rng.randrange(1, 4)}],
            "total": round(rng.uniform(5, 200), 2)}).encode())
        if n % 5 == 0:
            p.produce("sensor-readings", value=os.urandom(24))
        p.poll(0)
        n += 1
        stop.wait(1.0)
    p.flush(10)


def _payments(bootstrap: str, stop: threading.Event) -> None:
    """A transactional producer: a payment's records in a transaction every 3 s, every fourth
    aborted, so the message browser has markers and aborted records to show."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "demo-payments",
                  "log_level": 2})
    p.init_transactions(30)
    n = 0
    while not stop.is_set():
        p.begin_transaction()
        for step in ("authorized", "captured"):
            p.produce("payments", key=f"payment-{n}".encode(),
                      value=json.dumps({"payment": n, "step": step}).encode())
        if n % 4 == 3:
            p.flush(10)
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)
        n += 1
        stop.wait(3.0)


def _consumer(bootstrap: str, group: str, topics: list[str], per_second: float,
              stop: threading.Event) -> None:
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 2,
                  "auto.offset.reset": "earliest", "auto.commit.interval.ms": 1000,
                  "client.id": f"{group}-worker"})
    c.subscribe(topics)
    try:
        while not stop.is_set():
            started = time.monotonic()
            c.consume(max(1, int(per_second)), 1.0)
            if per_second < 1000:  # at most per_second records a second
                stop.wait(max(0.0, 1.0 - (time.monotonic() - started)))
    finally:
        c.close()


def _interrupt(*_) -> None:
    raise KeyboardInterrupt


def main() -> None:
    signal.signal(signal.SIGTERM, _interrupt)  # stopped as by Ctrl-C: the broker stops too
    data_dir = tempfile.mkdtemp(prefix="brook-console-demo-")
    port = _free_port()
    bootstrap = f"127.0.0.1:{port}"
    listen = os.environ.get("CONSOLE_LISTEN", "127.0.0.1:8080")
    broker = _Broker(data_dir, port)
    metrics_port = _free_port()  # the Cluster page's produce and fetch rates read it
    broker.cmd += ["--override", f"metrics.port={metrics_port}"]
    stop = threading.Event()
    console = None
    try:
        say(f"start `brook broker` on {bootstrap} (data in {data_dir})")
        broker.start()
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})
        for topic, future in admin.create_topics(
                [NewTopic(t, n) for t, n in TOPICS.items()]).items():
            future.result(10)
        # a group with offsets and no members: its lag only grows (try a reset on it)
        admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
            "archive", [TopicPartition("orders", p, 0) for p in range(2)])])["archive"].result(10)
        say("sample traffic: page views, orders and sensor readings every second, payments in "
            "transactions (every fourth aborted) every 3 s; groups "
            "dashboard (keeps up), billing (falls behind in the busy spells, catches up in the "
            "quiet ones), archive (no members)")
        threads = [threading.Thread(target=_producer, args=(bootstrap, stop), daemon=True),
                   threading.Thread(target=_payments, args=(bootstrap, stop), daemon=True),
                   threading.Thread(target=_consumer, args=(bootstrap, "dashboard",
                                                            ["page-views"], 10_000, stop),
                                    daemon=True),
                   threading.Thread(target=_consumer, args=(bootstrap, "billing",
                                                            ["page-views", "orders"], 130, stop),
                                    daemon=True)]
        for t in threads:
            t.start()
        say(f"`brook console` on http://{listen}/ (Ctrl-C stops it all)")
        console = subprocess.Popen([sys.executable, "-m", "brook", "-b", bootstrap, "console",
                                    "--listen", listen, "--lag-interval", "2",
                                    "--metrics-port", str(metrics_port)])
        console.wait()
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        if console is not None and console.poll() is None:
            console.terminate()
            console.wait(15)
        time.sleep(1.5)
        broker.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
