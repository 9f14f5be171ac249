"""One round trip per real client, for the security tests: produce a few records, consume them
in a group, commit, and check what was committed. Each takes the client's own settings (TLS,
SASL, ...) as its users write them."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time

KCAT = shutil.which("kcat")


def confluent(conf: dict, topic: str, group: str, n: int = 5, partitions: int = 4) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    p = Producer(conf)
    for i in range(n):
        p.produce(topic, f"m{i}".encode())
    assert p.flush(30) == 0
    c = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(1)
        if m is not None and m.error() is None:
            got.append(m.value())
    assert sorted(got) == sorted(f"m{i}".encode() for i in range(n))
    c.commit(asynchronous=False)
    committed = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
    assert sum(tp.offset for tp in committed if tp.offset > 0) == n
    c.close()


def kafka_python(conf: dict, topic: str, group: str, n: int = 3) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    p = KafkaProducer(**conf)
    for i in range(n):
        p.send(topic, f"m{i}".encode()).get(30)
    p.close()
    c = KafkaConsumer(topic, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
                      consumer_timeout_ms=15000, **conf)
    got = []
    for m in c:
        got.append(m.value)
        if len(got) == n:
            break
    assert sorted(got) == sorted(f"m{i}".encode() for i in range(n))
    c.commit()
    assert sum(c.committed(tp) or 0 for tp in c.assignment()) == n
    c.close()


def aiokafka(conf: dict, topic: str, group: str, n: int = 3) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def run():
        p = AIOKafkaProducer(**conf)
        await p.start()
        try:
            for i in range(n):
                await p.send_and_wait(topic, f"m{i}".encode())
        finally:
            await p.stop()
        c = AIOKafkaConsumer(topic, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, **conf)
        await c.start()
        try:
            got = []
            async with asyncio.timeout(30):
                async for m in c:
                    got.append(m.value)
                    if len(got) == n:
                        break
            await c.commit()
            committed = [await c.committed(tp) or 0 for tp in c.assignment()]
        finally:
            await c.stop()
        return sorted(got), sum(committed)

    assert asyncio.run(run()) == (sorted(f"m{i}".encode() for i in range(n)), n)


def kcat(conf: dict, topic: str, group: str) -> None:
    """kcat with librdkafka settings `conf` (bootstrap.servers among them)."""
    conf = dict(conf)
    bootstrap = conf.pop("bootstrap.servers")
    settings = [a for k, v in conf.items() for a in ("-X", f"{k}={v}")] + ["-X", "broker.address.family=v4"]

    def run(*args, input=None):
        proc = subprocess.run([KCAT, "-b", bootstrap, *settings, *args], input=input,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout

    run("-P", "-t", topic, input="a\nb\nc\n")
    out = run("-G", group, "-o", "beginning", "-c", "3", "-e", "-f", "%s\n",
              "-X", "enable.auto.commit=true", "-X", "auto.commit.interval.ms=100", topic)
    assert sorted(out.split()) == ["a", "b", "c"]
