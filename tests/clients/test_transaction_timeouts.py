"""Transactions ended by the coordinator and by other clients' producers, against a broker
process: a transaction left open past its transaction.timeout.ms is aborted by the coordinator
(its producer fenced, the last stable offset moving on, so read_committed readers are not stuck),
and kafka-python's and aiokafka's transactional producers commit and abort.

These need both halves of issue 29: the coordinator (which ends the transactions) and the
partitions' markers (WriteTxnMarkers). On a broker without the markers they are skipped as
expected failures."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.support.broker_harness import confluent_config
from tests.support.wire_build import request

WRITE_TXN_MARKERS = 27


@pytest.fixture(scope="module")
def markers(broker):
    from tests.support.kafka_wire import WireClient

    with WireClient(broker.bootstrap) as w:
        versions = w.request(request(18, 3, client_software_name="t",
                                     client_software_version="1"))
    if WRITE_TXN_MARKERS not in {k.api_key for k in versions.api_keys}:
        pytest.xfail("this broker writes no transaction markers (WriteTxnMarkers is the "
                     "partition side of issue 29)")


def _read_committed(bootstrap: str, topic: str, last: str) -> list[str]:
    """The values of partition 0 a read_committed consumer sees, up to ``last``."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(confluent_config(bootstrap, **{"group.id": f"{topic}-reader",
                                                "isolation.level": "read_committed",
                                                "enable.auto.commit": False}))
    seen: list[str] = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (not seen or seen[-1] != last):
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                seen.append(m.value().decode())
    finally:
        c.close()
    return seen


def test_an_open_transaction_is_aborted_at_its_timeout(broker, markers):
    from confluent_kafka import KafkaException, Producer

    topic = "txn-timeout"
    zombie = Producer(confluent_config(broker.bootstrap, **{
        "transactional.id": "txn-timeout", "transaction.timeout.ms": 2_000}))
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, b"open", partition=0)
    zombie.flush(30)  # in the log, its transaction open: the LSO stays before it
    time.sleep(4)  # past the timeout: the coordinator aborts it with a bumped epoch

    other = Producer(confluent_config(broker.bootstrap, **{"enable.idempotence": True}))
    other.produce(topic, b"after", partition=0)
    other.flush(30)
    # read_committed readers are not stuck at the open transaction, and never see it
    assert _read_committed(broker.bootstrap, topic, "after") == ["after"]

    with pytest.raises(KafkaException):  # the zombie was fenced by the abort's bump
        zombie.produce(topic, b"late", partition=0)
        zombie.commit_transaction(30)


def test_kafka_python_commits_and_aborts(broker, markers):
    from kafka import KafkaProducer

    topic = "txn-kafka-python"
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="txn-kafka-python")
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, b"aborted", partition=0)
        p.abort_transaction()
        p.begin_transaction()
        p.send(topic, b"committed", partition=0)
        p.commit_transaction()
    finally:
        p.close(timeout=10)
    assert _read_committed(broker.bootstrap, topic, "committed") == ["committed"]


def test_aiokafka_commits_and_aborts(broker, markers):
    from aiokafka import AIOKafkaProducer

    topic = "txn-aiokafka"

    async def main():
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="txn-aiokafka")
        await asyncio.wait_for(p.start(), 30)
        try:
            async with p.transaction():
                await p.send_and_wait(topic, b"committed", partition=0)
            await p.begin_transaction()
            await p.send_and_wait(topic, b"aborted", partition=0)
            await p.abort_transaction()
            async with p.transaction():
                await p.send_and_wait(topic, b"last", partition=0)
        finally:
            await p.stop()

    asyncio.run(main())
    assert _read_committed(broker.bootstrap, topic, "last") == ["committed", "last"]
