"""A partition with transactions for the console's tests: a confluent-kafka transactional
producer commits one transaction and aborts another, between plain records."""

from __future__ import annotations

import time

from confluent_kafka import IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec


def write_transactions(bootstrap: str, topic: str, transactional_id: str) -> None:
    """Offsets of partition 0 of `topic`, as written:

        0     plain-0
        1-3   committed-0..2 (a transaction)
        4     COMMIT marker
        5-6   aborted-0..1 (a transaction)
        7     ABORT marker
        8     plain-1
    """
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, b"plain-0", partition=0)
    assert plain.flush(20) == 0
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, b"committed-%d" % i, key=b"k", partition=0)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(2):
        p.produce(topic, b"aborted-%d" % i, key=b"k", partition=0)
    assert p.flush(20) == 0
    p.abort_transaction(30)
    # EndTxn answers before the markers are written (as Kafka's does): wait for the ABORT
    # marker, which moves the last stable offset past it, before the next record.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        tp = TopicPartition(topic, 0)
        stable = admin.list_offsets({tp: OffsetSpec.latest()},
                                    isolation_level=IsolationLevel.READ_COMMITTED)[tp].result(10)
        if stable.offset == 8:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the ABORT marker was not written")
    plain.produce(topic, b"plain-1", partition=0)
    assert plain.flush(20) == 0
