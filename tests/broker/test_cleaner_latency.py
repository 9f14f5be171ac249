"""The log cleaner runs off the event loop: while a real broker compacts tens of MB, a
client's ApiVersions requests are answered promptly instead of waiting for the clean, and a
clean shutdown abandons a clean in progress instead of waiting for it."""

from __future__ import annotations

import re
import threading
import time
import uuid

import pytest

from tests.support.broker_harness import BrokerProcess, confluent_config
from tests.support.kafka_wire import WireClient

from kio.index import load_payload_module
from kio.static.constants import EntityType

from brook.protocol.messages import make

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

DATA_BYTES = 32 * 1024 * 1024
VALUE = b"v" * 50
KEYS = 4000
CLEANED = re.compile(r"cleaned up to offset \d+.* in (\d+) ms")
STARTS = "===== start #"


def fill(bootstrap: str, topic: str) -> None:
    """DATA_BYTES of keyed records, every key overwritten many times."""
    producer = Producer(confluent_config(bootstrap, **{
        "linger.ms": 20, "batch.size": 1_000_000, "acks": "1",
        "queue.buffering.max.kbytes": 262_144, "compression.type": "none"}))
    for n in range(DATA_BYTES // (len(VALUE) + 20)):
        while True:
            try:
                producer.produce(topic, key=b"key-%d" % (n % KEYS), value=VALUE)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0


class Pinger(threading.Thread):
    """ApiVersions in a loop on one connection; the worst round trip seen."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.client = WireClient(bootstrap, timeout=120)
        self.worst = 0.0
        self.count = 0
        self.done = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        m = load_payload_module(18, 3, EntityType.request)
        req = make(m.ApiVersionsRequest, client_software_name="t", client_software_version="1")
        try:
            while not self.done.is_set():
                t0 = time.monotonic()
                self.client.request(req)
                self.worst = max(self.worst, time.monotonic() - t0)
                self.count += 1
                time.sleep(0.005)
        except BaseException as exc:  # surfaces in the test's assertion
            self.error = exc
        finally:
            self.client.close()


def wait_for_log(broker: BrokerProcess, pattern: re.Pattern, timeout: float) -> re.Match | None:
    """The first match of `pattern` in what the broker logged since its last start."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = pattern.search(broker.stderr_path.read_text().rsplit(STARTS, 1)[-1])
        if found:
            return found
        time.sleep(0.05)
    return None


def test_requests_are_answered_while_a_large_log_is_cleaned(tmp_path):
    broker = BrokerProcess(tmp_path / "broker", overrides={"log.cleaner.enable": "false"})
    broker.start()
    topic = f"compacted-{uuid.uuid4().hex[:6]}"
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1, config={
            "cleanup.policy": "compact", "segment.bytes": str(4 * 1024 * 1024),
            "min.cleanable.dirty.ratio": "0.01"})])[topic].result(10)
        fill(broker.bootstrap, topic)
        broker.stop()
        # With the cleaner on, its first pass compacts the whole log. A shutdown during that
        # pass abandons it.
        broker.overrides.update({"log.cleaner.enable": "true", "log.cleaner.backoff.ms": 1500})
        broker.start()
        assert wait_for_log(broker, re.compile(r"cleaning from offset"), 30), broker.stderr_tail()
        t0 = time.monotonic()
        assert broker.stop() == 0
        stop_s = time.monotonic() - t0
        assert not CLEANED.search(broker.stderr_path.read_text().rsplit(STARTS, 1)[-1])
        # The next start cleans the log again, from the start, while a client asks away.
        broker.start()
        pinger = Pinger(broker.bootstrap)
        pinger.start()
        found = wait_for_log(broker, CLEANED, 50)
        time.sleep(0.3)  # requests queued behind the swap are answered too
        pinger.done.set()
        pinger.join(120)
        assert pinger.error is None, pinger.error
        assert found, f"no clean finished\n{broker.stderr_tail()}"
        clean_ms = int(found.group(1))
        print(f"clean took {clean_ms} ms; worst ApiVersions round trip {pinger.worst * 1000:.0f} ms "
              f"over {pinger.count} requests; a shutdown during the clean took {stop_s * 1000:.0f} ms")
        assert clean_ms >= 2000, "the clean is too short to tell a stall from noise"
        assert pinger.worst < min(1.0, clean_ms / 3000), \
            f"a request waited {pinger.worst:.2f} s during a clean of {clean_ms} ms"
        assert stop_s < clean_ms / 2000, f"the shutdown waited {stop_s:.2f} s for a clean of {clean_ms} ms"
    finally:
        broker.close()
