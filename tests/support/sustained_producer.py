"""A producer that writes numbered records without pause while a broker is killed and
restarted, remembering what was acknowledged, and a reader of what the log then holds (the
crash tests compare the two)."""

from __future__ import annotations

import threading
import time

import confluent_kafka
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition


class SustainedProducer:
    """Produces ``<n>`` values as fast as the broker takes them, on a thread, remembering
    the offset of every acknowledged record."""

    def __init__(self, bootstrap: str, topic: str, **config) -> None:
        self.topic = topic
        self.acked: dict[int, tuple[int, int]] = {}  # n -> (partition, offset)
        self.errors: list[str] = []
        self.sent = 0
        self._stop = threading.Event()
        self._running = threading.Event()
        self._running.set()
        self._producer = Producer({
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 2,
            "message.timeout.ms": 120_000,
            "reconnect.backoff.ms": 20,
            "reconnect.backoff.max.ms": 200,
            "retry.backoff.ms": 20,
            "retry.backoff.max.ms": 200,
            **config,
        })
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err, msg) -> None:
        n = int(msg.value())
        if err is not None:
            self.errors.append(f"record {n}: {err}")
        else:
            self.acked[n] = (msg.partition(), msg.offset())

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self._running.wait(0.05):
                self._producer.poll(0.01)
                continue
            n = self.sent
            try:
                self._producer.produce(self.topic, value=str(n).encode(), key=str(n % 97).encode(),
                                       on_delivery=self._delivered)
            except BufferError:
                self._producer.poll(0.05)
                continue
            self.sent += 1
            self._producer.poll(0)
            if n % 200 == 0:
                time.sleep(0.002)

    def start(self) -> None:
        self._thread.start()

    def pause(self, timeout: float = 120.0) -> None:
        """Stop sending and wait until everything sent is delivered."""
        self._running.clear()
        time.sleep(0.1)  # let the thread finish its current produce call
        assert self._producer.flush(timeout) == 0

    def resume(self) -> None:
        self._running.set()

    def stop(self, timeout: float = 120.0) -> None:
        self._stop.set()
        self._thread.join()
        remaining = self._producer.flush(timeout)
        assert remaining == 0, f"{remaining} records never delivered"


def read_all(bootstrap: str, topic: str, ends: dict[int, int]) -> dict[int, list[tuple[int, int]]]:
    """partition -> [(offset, n)] for every record below ``ends``."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "auto.offset.reset": "error"})
    consumer.assign([TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in ends])
    out: dict[int, list[tuple[int, int]]] = {p: [] for p in ends}
    done = {p for p, end in ends.items() if end == 0}
    deadline = time.monotonic() + 60
    try:
        while len(done) < len(ends) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    if msg.offset() >= ends[msg.partition()]:
                        done.add(msg.partition())
                    continue
                raise AssertionError(msg.error())
            if msg.offset() >= ends[msg.partition()]:
                continue
            out[msg.partition()].append((msg.offset(), int(msg.value())))
            if msg.offset() >= ends[msg.partition()] - 1:  # more may be arriving meanwhile
                done.add(msg.partition())
    finally:
        consumer.close()
    assert len(done) == len(ends), f"could not read to the end: {done} of {ends}"
    return out
