"""Real clients across broker restarts: a clean stop (SIGTERM) and a crash (SIGKILL).

Acknowledged records survive a restart and new records continue at the next offsets; an
idempotent producer whose broker restarts mid-stream ends with every acknowledged record in
the log exactly once, in order.
"""

from __future__ import annotations

import signal
import threading
import time

import pytest

from tests.support.broker_harness import (
    Delivery,
    Record,
    TcpProxy,
    check_round_trip,
    confluent_config,
    confluent_consume,
    confluent_produce,
    create_topic_confluent,
    make_records,
    partition_counts,
)

PARTITIONS = 4
SIGNALS = [pytest.param(signal.SIGTERM, id="sigterm"), pytest.param(signal.SIGKILL, id="sigkill")]


CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"


def _bounce(broker, sig) -> None:
    """Stop the broker with ``sig`` and start it again. A SIGTERM stop exits with 0 and leaves
    Kafka's clean-shutdown marker in the log dir; a killed broker leaves none (the marker is
    removed once a broker has started, so a crash is recovered)."""
    marker = broker.log_dir / CLEAN_SHUTDOWN_MARKER
    if sig == signal.SIGKILL:
        broker.kill()
        assert not marker.exists(), "a running broker's log dir has the clean-shutdown marker"
    else:
        code = broker.stop(sig)
        assert code == 0, f"broker exited with {code} on {sig.name}\n{broker.stderr_tail()}"
        assert marker.exists(), f"no clean-shutdown marker after {sig.name}"
    broker.start()


def _watermarks(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(confluent_config(bootstrap, **{"group.id": "brook-tests-watermarks"}))
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                for p in range(PARTITIONS)}
    finally:
        consumer.close()


def _merge(first: Delivery, second: Delivery) -> Delivery:
    return Delivery(first.positions + second.positions, first.errors + second.errors)


@pytest.mark.parametrize("sig", SIGNALS + [pytest.param(signal.SIGINT, id="sigint")])
def test_restart_keeps_records_and_continues_offsets(broker_factory, sig):
    broker = broker_factory()
    topic = "restart"
    create_topic_confluent(broker.bootstrap, topic, PARTITIONS)
    records = make_records(20_000, seed=11)
    before, after = records[:10_000], records[10_000:]

    first = confluent_produce(broker.bootstrap, topic, before, "lz4")
    counts = partition_counts(first, PARTITIONS)
    check_round_trip(before, first, confluent_consume(broker.bootstrap, topic, counts))

    _bounce(broker, sig)

    # Everything acknowledged before the restart is still there, at the same offsets.
    assert _watermarks(broker.bootstrap, topic) == {p: (0, counts[p]) for p in counts}
    check_round_trip(before, first, confluent_consume(broker.bootstrap, topic, counts))

    # New records continue at the next offsets of every partition.
    second = confluent_produce(broker.bootstrap, topic, after, "zstd")
    assert not second.errors, second.errors[:3]
    for p in range(PARTITIONS):
        offsets = sorted(o for (q, o) in second.positions if q == p)
        assert offsets and offsets[0] == counts[p], (
            f"partition {p}: first offset after restart {offsets[:1]}, expected {counts[p]}"
        )
    both = _merge(first, second)
    total = partition_counts(both, PARTITIONS)
    assert _watermarks(broker.bootstrap, topic) == {p: (0, total[p]) for p in total}
    check_round_trip(records, both, confluent_consume(broker.bootstrap, topic, total))


def _sequenced_records(n: int) -> list[Record]:
    base = int(time.time() * 1000) - 60_000
    return [Record(b"key-%d" % (i % 97), b"seq=%08d" % i, (), base + i) for i in range(n)]


@pytest.mark.parametrize("sig", SIGNALS)
def test_idempotent_producer_across_restart(broker_factory, request, sig):
    """The broker restarts twice while an idempotent producer is sending, each time after it
    has appended requests whose answers the producer never got (a relay drops them), so the
    producer retries batches that are already in the log. After flush(), every record the
    delivery callback acknowledged is in the log exactly once, in order, and none is missing."""
    from confluent_kafka import Producer

    broker = broker_factory(start=False)
    proxy = TcpProxy(broker)  # its port once it has started
    request.addfinalizer(proxy.close)
    broker.overrides["advertised.listeners"] = f"PLAINTEXT://{proxy.address}"
    broker.start()
    topic = "idempotent"
    create_topic_confluent(proxy.address, topic, PARTITIONS)
    records = _sequenced_records(30_000)
    delivery = Delivery([None] * len(records))
    producer = Producer(confluent_config(proxy.address, **{
        "enable.idempotence": True,
        "linger.ms": 5,
        "batch.num.messages": 500,
        "message.timeout.ms": 90_000,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
        "compression.type": "lz4",
    }))

    def on_delivery(err, msg):
        i = int(msg.value()[4:])
        if err is not None:
            delivery.errors.append(f"seq {i}: {err}")
        else:
            delivery.positions[i] = (msg.partition(), msg.offset())

    # The broker is bounced when the stream reaches each point; records past the last point
    # wait for the bounces to finish, so both restarts happen while records are in flight.
    points = (8_000, 19_000)
    produced = [0]
    bounced = threading.Event()
    bounce_errors: list[BaseException] = []

    def bouncer():
        try:
            for point in points:
                while produced[0] < point:
                    time.sleep(0.005)
                lost = proxy.swallowed_bytes
                proxy.swallow_responses()
                deadline = time.monotonic() + 10
                while proxy.swallowed_bytes == lost and time.monotonic() < deadline:
                    time.sleep(0.005)
                time.sleep(0.2)  # a few more requests handled, their answers lost
                _bounce(broker, sig)
                proxy.reset()
        except BaseException as e:  # reported by the test thread
            bounce_errors.append(e)
        finally:
            bounced.set()

    thread = threading.Thread(target=bouncer, daemon=True)
    thread.start()
    for i, r in enumerate(records):
        if i == 25_000:
            deadline = time.monotonic() + 120
            while not bounced.is_set() and time.monotonic() < deadline:
                producer.poll(0.05)
            assert bounced.is_set(), "the broker restarts did not finish within 120s"
        while True:
            try:
                producer.produce(topic, key=r.key, value=r.value, timestamp=r.timestamp,
                                 on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        produced[0] = i + 1
        if i % 100 == 0:
            producer.poll(0.01)  # about 10,000 records a second: a stream, not a burst
    thread.join(5)
    assert not bounce_errors, bounce_errors
    assert proxy.swallowed_bytes > 0, "no answer was lost: the retries were not exercised"
    remaining = producer.flush(120)
    assert remaining == 0, f"{remaining} records not delivered after flush"
    assert broker.starts == 1 + len(points)

    counts = partition_counts(delivery, PARTITIONS)
    consumed = confluent_consume(proxy.address, topic, counts)
    check_round_trip(records, delivery, consumed)
