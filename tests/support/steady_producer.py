"""A producer thread sending records in a steady stream (confluent-kafka, a pause after every
hundred), noting where each landed: for tests that stop, start or fail things meanwhile."""

from __future__ import annotations

import threading
import time


class SteadyProducer(threading.Thread):
    """``positions[i]`` is (partition, offset) of ``records[i]`` once acknowledged; ``errors``
    the delivery errors; ``sent`` how many were handed to the client so far."""

    def __init__(self, bootstrap: str, topic: str, records: list, *, every: int = 100,
                 pause_s: float = 0.2, config: dict | None = None, flush_s: float = 30) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.records = bootstrap, topic, records
        self.every, self.pause_s, self.flush_s = every, pause_s, flush_s
        self.config = {"bootstrap.servers": bootstrap, "linger.ms": 5, **(config or {})}
        self.positions: list = [None] * len(records)
        self.errors: list = []
        self.sent = 0

    def run(self) -> None:
        from confluent_kafka import Producer
        producer = Producer(self.config)

        def delivered(i):
            def report(err, msg):
                if err is not None:
                    self.errors.append(err)
                else:
                    self.positions[i] = (msg.partition(), msg.offset())
            return report

        for i, r in enumerate(self.records):
            producer.produce(self.topic, key=r.key, value=r.value, headers=list(r.headers),
                             timestamp=r.timestamp, on_delivery=delivered(i))
            self.sent = i + 1
            if i % self.every == self.every - 1:
                producer.flush(self.flush_s)
                time.sleep(self.pause_s)
        producer.flush(self.flush_s)
