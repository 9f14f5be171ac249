"""Producer state is bounded per broker (`producer.id.max.count`, the idlest producer ids
forgotten first) and InitProducerId is throttled per client (`producer.ids.rate`, KIP-936's
idea): real broker processes, hand-built requests, and the budget on its own."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from kio.schema.errors import ErrorCode

from brook.protocol.messages import make
from brook.records import Record, encode_batch
from brook.storage.producer_budget import ACTIVE_PRODUCER_MS, ProducerIdBudget, ProducerIdBudgetFullError
from brook.storage.producer_state import (ProducerBatch, ProducerStateManager, decode_snapshot,
                                          list_snapshot_offsets, snapshot_file_name)
from tests.support.kafka_wire import WireClient, frame, request_class


def test_the_budget_forgets_the_least_recently_written_producers_of_every_partition():
    budget = ProducerIdBudget(3)
    a, b = ProducerStateManager(budget=budget), ProducerStateManager(budget=budget)

    clock = iter(range(0, 100 * ACTIVE_PRODUCER_MS, ACTIVE_PRODUCER_MS))  # each write idle long after

    def write(mgr, pid, offset, seq=0):
        mgr.apply(mgr.prepare([ProducerBatch(pid, 0, seq, offset, offset, 1000 + offset)],
                              now_ms=next(clock)))

    write(a, 1, 0)
    write(b, 2, 0)
    write(a, 3, 1)
    write(a, 1, 2, seq=1)  # producer 1 of a is the newest again
    write(b, 4, 1)  # over the bound: b's producer 2, written longest ago, goes
    assert sorted(a.producers) == [1, 3] and sorted(b.producers) == [4]
    assert len(budget) == 3 and budget.evicted == 1
    a.remove_expired_producers(10**12)  # what a manager drops itself leaves the budget
    assert len(budget) == 1
    write(b, 5, 2)
    write(b, 6, 3)
    assert sorted(b.producers) == [4, 5, 6] and budget.evicted == 1


def test_a_producer_with_a_transaction_open_is_never_forgotten():
    """Its marker must find its transaction, or the partition's last stable offset would stay
    at the transaction's start for good."""
    from brook.records.batch import TRANSACTIONAL_BIT

    budget = ProducerIdBudget(2)
    mgr = ProducerStateManager(budget=budget)
    clock = iter(range(0, 100 * ACTIVE_PRODUCER_MS, ACTIVE_PRODUCER_MS))

    def write(pid, offset, attributes=0):
        mgr.apply(mgr.prepare([ProducerBatch(pid, 0, 0, offset, offset, 1000, attributes)],
                              now_ms=next(clock)))

    write(1, 0, TRANSACTIONAL_BIT)  # the idlest, but in a transaction
    write(2, 1)
    write(3, 2)  # over the bound: producer 2 goes, not producer 1
    assert sorted(mgr.producers) == [1, 3] and mgr.ongoing == {0: 1}
    write(4, 3)
    assert sorted(mgr.producers) == [1, 4] and budget.evicted == 2


def _produce(w: WireClient, topic: str, pid: int, seq: int = 0, value: bytes = b"v"):
    cls = request_class(0, 9)
    mod = __import__(cls.__module__, fromlist=["x"])
    batch = encode_batch([Record(0, int(time.time() * 1000), b"k", value)], producer_id=pid,
                         producer_epoch=0, base_sequence=seq)
    answer = w.request(make(cls, transactional_id=None, acks=1, timeout=timedelta(seconds=5), topic_data=(
        mod.TopicProduceData(name=topic, partition_data=(mod.PartitionProduceData(index=0, records=batch),)),)))
    return answer.responses[0].partition_responses[0]


def test_made_up_producer_ids_are_bounded_and_never_evict_an_active_producer(broker_factory):
    # A producer writes, then a flood of made-up producer ids fills producer.id.max.count.
    # Every entry is younger than ACTIVE_PRODUCER_MS, so none is forgotten to make room: the
    # flood's new ids are refused (retriable), and the producer's retry is still recognised
    # as a duplicate (before, it was forgotten and its retry written twice).
    broker = broker_factory({"producer.id.max.count": 500, "num.partitions": 1})
    n = 2000
    with WireClient(broker.bootstrap) as w:
        first = _produce(w, "pids", 1)
        assert (first.error_code, first.base_offset) == (ErrorCode.none, 0)
        codes = [_produce(w, "pids", pid).error_code for pid in range(2, n + 1)]
        assert codes[:499] == [ErrorCode.none] * 499
        assert set(codes[499:]) == {ErrorCode.request_timed_out}
        again = _produce(w, "pids", 1)
        assert (again.error_code, again.base_offset) == (ErrorCode.none, 0)  # a duplicate
        assert _produce(w, "pids", 1, seq=1).base_offset == 500  # and it goes on in sequence
    broker.stop()
    log_dir = broker.log_dir / "pids-0"
    [last] = list_snapshot_offsets(str(log_dir))[-1:]
    entries = decode_snapshot((log_dir / snapshot_file_name(last)).read_bytes(), last)
    assert len(entries) <= 500
    assert "producer.id.max.count=500 reached by producers active" in broker.stderr_tail()
    broker.start()  # the state loaded again stays within the bound, and protected
    with WireClient(broker.bootstrap) as w:
        again = _produce(w, "pids", 1, seq=1)
        assert again.base_offset == 500
        assert _produce(w, "pids", n + 1).error_code == ErrorCode.request_timed_out


def test_the_budget_makes_room_only_by_forgetting_producers_idle_past_the_active_window():
    budget = ProducerIdBudget(2)
    a = ProducerStateManager(budget=budget)

    def write(pid, now, seq=0):
        a.apply(a.prepare([ProducerBatch(pid, 0, seq, pid * 10 + seq, pid * 10 + seq, 0)],
                          now_ms=now))

    write(1, now=0)
    write(2, now=1000)
    with pytest.raises(ProducerIdBudgetFullError):
        write(3, now=ACTIVE_PRODUCER_MS - 1)  # producer 1 may still be retrying
    assert sorted(a.producers) == [1, 2] and budget.refused == 1
    write(1, now=ACTIVE_PRODUCER_MS - 1, seq=1)  # a known producer is never refused
    write(3, now=ACTIVE_PRODUCER_MS + 1000)  # producer 2 has been idle long enough
    assert sorted(a.producers) == [1, 3] and budget.evicted == 1
    with pytest.raises(ProducerIdBudgetFullError):  # two new ids need two idle entries
        a.prepare([ProducerBatch(4, 0, 0, 50, 50, 0), ProducerBatch(5, 0, 0, 51, 51, 0)],
                  now_ms=2 * ACTIVE_PRODUCER_MS - 2)


def _init_producer_id(w: WireClient, client_id: str):
    body = make(request_class(22, 4), transactional_id=None, transaction_timeout=timedelta(seconds=60),
                producer_id=-1, producer_epoch=-1)
    w.correlation_id += 1
    w.send_raw(frame(body, w.correlation_id, client_id=client_id))
    return w.recv(22, 4, w.correlation_id)


def test_init_producer_id_is_throttled_per_client_id_and_per_address(broker_factory):
    broker = broker_factory({"producer.ids.rate": 20})
    with WireClient(broker.bootstrap) as w:
        t0 = time.monotonic()
        answers = [_init_producer_id(w, "burst") for _ in range(20)]  # one second's worth
        assert all(a.error_code == ErrorCode.none and a.throttle_time == timedelta(0) for a in answers)
        assert time.monotonic() - t0 < 1.0
        # Past the burst: each answer is held back and says so, whatever the client id
        # (the address is throttled too), but an id is still given.
        t0 = time.monotonic()
        answers = [_init_producer_id(w, f"other-{i}") for i in range(20)]
        took = time.monotonic() - t0
        assert all(a.error_code == ErrorCode.none and a.producer_id >= 0 for a in answers)
        assert answers[-1].throttle_time > timedelta(0)
        assert took >= 0.7, took  # about 20 ids at 20 per second
        ids = [a.producer_id for a in answers]
        assert len(set(ids)) == 20


def test_an_idempotent_producer_starts_under_the_default_rate(broker_factory):
    from confluent_kafka import Producer

    broker = broker_factory()
    producers = [Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
                 for _ in range(5)]
    t0 = time.monotonic()
    for p in producers:
        p.produce("idem", key=b"k", value=b"v")
    assert all(p.flush(15) == 0 for p in producers)
    assert time.monotonic() - t0 < 5
