"""kafka-python's and aiokafka's transactional producers against a broker process, end to end:
begin, send, commit; begin, send, abort; begin, send, commit, on two partitions. Then each
library's read_committed consumer (kafka-python, aiokafka, confluent-kafka) reads every
committed record of each partition in order and none of the aborted ones, while a
read_uncommitted reader sees the aborted records in the log between them. (confluent-kafka's
own transactional producer: tests/clients/test_transaction_coordinator.py.)"""

from __future__ import annotations

import asyncio
import time

import pytest
from kio.schema.errors import ErrorCode as E

from tests.support.broker_harness import confluent_config
from tests.support.kafka_wire import WireClient
from tests.support.wire_requests import create_topic

pytestmark = pytest.mark.broker

PARTITIONS = (0, 1)
READ_TIMEOUT = 30.0


def _values(prefix: str, numbers: range) -> dict[int, list[bytes]]:
    return {p: [f"{prefix}-{p}-{i}".encode() for i in numbers] for p in PARTITIONS}


FIRST, ABORTED, SECOND = _values("committed", range(5)), _values("aborted", range(5)), \
    _values("committed", range(5, 10))
COMMITTED = {p: FIRST[p] + SECOND[p] for p in PARTITIONS}
EVERYTHING = {p: FIRST[p] + ABORTED[p] + SECOND[p] for p in PARTITIONS}


def _kafka_python_transactions(bootstrap: str, topic: str) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=topic)
    try:
        p.init_transactions()
        for values, commit in ((FIRST, True), (ABORTED, False), (SECOND, True)):
            p.begin_transaction()
            for partition, vs in values.items():
                for v in vs:
                    p.send(topic, v, partition=partition)
            p.flush()  # in the log before the marker: the abort has records to drop
            p.commit_transaction() if commit else p.abort_transaction()
    finally:
        p.close(timeout=10)


def _aiokafka_transactions(bootstrap: str, topic: str) -> None:
    from aiokafka import AIOKafkaProducer

    async def main():
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=topic)
        await asyncio.wait_for(p.start(), 30)
        try:
            for values, commit in ((FIRST, True), (ABORTED, False), (SECOND, True)):
                await p.begin_transaction()
                for partition, vs in values.items():
                    for v in vs:
                        await p.send_and_wait(topic, v, partition=partition)
                await (p.commit_transaction() if commit else p.abort_transaction())
        finally:
            await p.stop()

    asyncio.run(main())


PRODUCERS = {"kafka-python": _kafka_python_transactions, "aiokafka": _aiokafka_transactions}


@pytest.fixture(scope="module", params=sorted(PRODUCERS))
def topic(request, broker) -> str:
    """A topic written by one library's transactional producer."""
    name = f"txn-{request.param}"
    with WireClient(broker.bootstrap) as c:
        assert create_topic(c, name, partitions=len(PARTITIONS)).error_code == E.none
    PRODUCERS[request.param](broker.bootstrap, name)
    return name


def _until(poll, want: int) -> dict[int, list[bytes]]:
    """{partition: values} from `poll()`'s (partition, value) pairs, until `want` came."""
    out: dict[int, list[bytes]] = {p: [] for p in PARTITIONS}
    deadline = time.monotonic() + READ_TIMEOUT
    while sum(map(len, out.values())) < want and time.monotonic() < deadline:
        for partition, value in poll():
            out[partition].append(value)
    return out


def _confluent(bootstrap: str, topic: str, want: int, isolation: str = "read_committed"):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer(confluent_config(bootstrap, **{"group.id": f"{topic}-confluent",
                                                "enable.auto.commit": False,
                                                "isolation.level": isolation}))
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in PARTITIONS])
        return _until(lambda: [(m.partition(), m.value()) for m in c.consume(100, 0.3)
                               if m.error() is None], want)
    finally:
        c.close()


def _kafka_python(bootstrap: str, topic: str, want: int):
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      auto_offset_reset="earliest", isolation_level="read_committed")
    try:
        tps = [TopicPartition(topic, p) for p in PARTITIONS]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        return _until(lambda: [(tp.partition, r.value) for tp, rs in c.poll(300).items()
                               for r in rs], want)
    finally:
        c.close()


def _aiokafka(bootstrap: str, topic: str, want: int):
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def main():
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest", isolation_level="read_committed")
        c.assign([TopicPartition(topic, p) for p in PARTITIONS])
        await asyncio.wait_for(c.start(), 30)
        try:
            out: dict[int, list[bytes]] = {p: [] for p in PARTITIONS}
            deadline = time.monotonic() + READ_TIMEOUT
            while sum(map(len, out.values())) < want and time.monotonic() < deadline:
                for tp, records in (await c.getmany(timeout_ms=300)).items():
                    out[tp.partition].extend(r.value for r in records)
            return out
        finally:
            await c.stop()

    return asyncio.run(main())


CONSUMERS = {"confluent-kafka": _confluent, "kafka-python": _kafka_python, "aiokafka": _aiokafka}


@pytest.mark.parametrize("consumer", sorted(CONSUMERS))
def test_read_committed_sees_the_committed_records_in_order_and_no_aborted_one(
        broker, topic, consumer):
    want = sum(map(len, COMMITTED.values()))
    # the aborted records come before the last committed ones: reading those, a consumer has
    # passed them, so nothing more is waited for
    assert CONSUMERS[consumer](broker.bootstrap, topic, want) == COMMITTED


def test_the_aborted_records_are_in_the_log(broker, topic):
    want = sum(map(len, EVERYTHING.values()))
    assert _confluent(broker.bootstrap, topic, want, "read_uncommitted") == EVERYTHING
