"""Incremental fetch sessions (KIP-227): the session cache on a fake clock, the broker's
answers over the wire, and kafka-python's consumer reading through a session."""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta

import pytest
from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from brook.broker.fetch_session import (
    EVICTION_MS,
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INT32_MAX,
    FetchSessionCache,
    IncrementalContext,
    SessionlessContext,
    next_epoch,
)
from brook.clock import FakeClock
from brook.protocol.fetch_response import PartitionResult
from brook.protocol.messages import make
from brook.records import Record, encode_batch
from tests.support.kafka_wire import WireClient

# =============================================================================================
# The cache, sans-I/O
# =============================================================================================


@dataclass
class Req:
    partition: int
    fetch_offset: int = 0
    partition_max_bytes: int = 1 << 20


def answer(partition=0, hw=10, lso=None, log_start=0, records=(), error=0) -> PartitionResult:
    return PartitionResult(partition, error_code=error, high_watermark=hw,
                           last_stable_offset=hw if lso is None else lso,
                           log_start_offset=log_start, records=records)


class Rng:
    """Picks the low or high end of the range it is asked for, in a given order."""

    def __init__(self, *picks: str) -> None:
        self.picks = list(picks)

    def randint(self, a: int, b: int) -> int:
        return a if self.picks.pop(0) == "low" else b


def make_cache(max_sessions=1000, clock=None, **kw) -> FetchSessionCache:
    return FetchSessionCache(max_sessions, clock or FakeClock(), **kw)


def open_session(cache, partitions, topic="t", hw=10, uses_topic_ids=False) -> int:
    fetch = [(topic, Req(p)) for p in partitions]
    ctx = cache.new_context(0, INITIAL_EPOCH, fetch, (), uses_topic_ids)
    done = ctx.complete([answer(p, hw) for p in partitions])
    assert done.error_code == ErrorCode.none
    return done.session_id


def test_a_full_request_opens_a_session_with_its_partitions_in_order():
    cache = make_cache()
    ctx = cache.new_context(0, INITIAL_EPOCH, [("b", Req(1, 5, 100)), ("a", Req(0, 7, 200))])
    assert [(t, r.partition) for t, r in ctx.partitions] == [("b", 1), ("a", 0)]
    done = ctx.complete([answer(1, hw=9, lso=8, log_start=2), answer(0, hw=7)])
    assert done.error_code == ErrorCode.none and done.session_id != 0 and done.include is None
    session = cache.get(done.session_id)
    assert session.epoch == 1
    assert [(c.topic, c.partition, c.fetch_offset, c.partition_max_bytes, c.high_watermark,
             c.last_stable_offset, c.log_start_offset) for c in session.partitions.values()] == [
        ("b", 1, 5, 100, 9, 8, 2), ("a", 0, 7, 200, 7, 7, 0)]
    assert len(cache) == 1 and cache.total_partitions == 2


def test_session_ids_are_positive_int32_and_unique():
    cache = make_cache(rng=Rng("low", "low", "high"))
    first = open_session(cache, [0])
    second = open_session(cache, [0])  # the lowest id is taken: the next pick is used
    assert (first, second) == (1, INT32_MAX)


def test_epochs_follow_one_by_one_and_wrap_past_int32_max():
    assert [next_epoch(e) for e in (0, 1, 41, INT32_MAX - 1, INT32_MAX, -1)] == [
        1, 2, 42, INT32_MAX, 1, -1]
    cache = make_cache()
    sid = open_session(cache, [0, 1])
    for epoch in (1, 2, 3):
        ctx = cache.new_context(sid, epoch, [])
        assert isinstance(ctx, IncrementalContext)
        assert ctx.complete([answer(0), answer(1)]).error_code == ErrorCode.none
    for stale_or_early in (3, 1, 5, INITIAL_EPOCH - 2):
        ctx = cache.new_context(sid, stale_or_early, [])
        assert ctx.error_code == ErrorCode.invalid_fetch_session_epoch and ctx.partitions == []
        assert ctx.complete([]).session_id == 0
    assert cache.new_context(sid, 4, []).error_code == ErrorCode.none  # still usable
    cache.get(sid).epoch = INT32_MAX
    assert cache.new_context(sid, INT32_MAX, []).error_code == ErrorCode.none
    assert cache.get(sid).epoch == 1
    assert cache.new_context(sid, 1, []).error_code == ErrorCode.none


def test_unknown_session_or_topic_naming_that_differs_is_an_error():
    cache = make_cache()
    sid = open_session(cache, [0])
    assert cache.new_context(sid + 1, 1, []).error_code == ErrorCode.fetch_session_id_not_found
    assert cache.new_context(0, 1, []).error_code == ErrorCode.fetch_session_id_not_found
    assert cache.new_context(sid, 1, [], (), uses_topic_ids=True).error_code == \
        ErrorCode.fetch_session_topic_id_error
    tid = uuid.uuid4()
    by_id = open_session(cache, [0], topic=tid, uses_topic_ids=True)
    assert cache.new_context(by_id, 1, []).error_code == ErrorCode.fetch_session_topic_id_error
    ctx = cache.new_context(by_id, 1, [], (), uses_topic_ids=True)
    assert ctx.error_code == ErrorCode.none and ctx.partitions[0][0] == tid


def test_full_and_final_requests_close_the_session_they_name():
    cache = make_cache()
    sid = open_session(cache, [0])
    ctx = cache.new_context(sid, INITIAL_EPOCH, [("t", Req(0))])
    assert sid not in cache  # closed at once, before the read
    new = ctx.complete([answer(0)]).session_id
    assert new not in (0, sid) and len(cache) == 1
    ctx = cache.new_context(new, FINAL_EPOCH, [("t", Req(0))])
    assert isinstance(ctx, SessionlessContext) and len(cache) == 0
    assert ctx.complete([answer(0)]).session_id == 0 and len(cache) == 0
    assert cache.new_context(new, 1, []).error_code == ErrorCode.fetch_session_id_not_found


def test_incremental_requests_add_update_and_forget_partitions():
    cache = make_cache()
    sid = open_session(cache, [0, 1, 2])
    ctx = cache.new_context(sid, 1, [("t", Req(1, 50, 99)), ("u", Req(0, 3))], [("t", 0), ("t", 7)])
    assert [(t, r.partition, r.fetch_offset, r.partition_max_bytes) for t, r in ctx.partitions] == [
        ("t", 1, 50, 99), ("t", 2, 0, 1 << 20), ("u", 0, 3, 1 << 20)]
    ctx.complete([answer(1), answer(2), answer(0)])
    assert cache.total_partitions == 3
    # forgetting every partition closes the session; the request is answered sessionless
    ctx = cache.new_context(sid, 2, [], [("t", 1), ("t", 2), ("u", 0)])
    assert isinstance(ctx, SessionlessContext) and ctx.partitions == []
    assert sid not in cache and ctx.complete([]).session_id == 0


def test_incremental_responses_carry_only_partitions_that_changed():
    cache = make_cache()
    sid = open_session(cache, range(7), hw=10)
    unchanged = answer(0)
    ctx = cache.new_context(sid, 1, [])
    done = ctx.complete([
        unchanged,
        answer(1, records=[b"batch"]),  # records: always sent
        answer(2, hw=11),  # high watermark moved
        answer(3, lso=9),  # last stable offset moved
        answer(4, log_start=4),  # log start moved (retention)
        answer(5, error=ErrorCode.offset_out_of_range),  # an error
        answer(6),
    ])
    assert done == (ErrorCode.none, sid, [False, True, True, True, True, True, False])
    # what was sent is remembered: the same state again is news only for the error partition
    # (and still for partitions with records); once the error clears, that partition is sent
    # again although its watermark is what it was before the error
    order = [cp.partition for cp in cache.get(sid).partitions.values()]
    answers = {0: answer(0), 1: answer(1, records=[b"more"]), 2: answer(2, hw=11),
               3: answer(3, lso=9), 4: answer(4, log_start=4),
               5: answer(5, error=ErrorCode.offset_out_of_range), 6: answer(6)}
    done = cache.new_context(sid, 2, []).complete([answers[p] for p in order])
    assert [p for p, keep in zip(order, done.include) if keep] == [5, 1]
    order = [cp.partition for cp in cache.get(sid).partitions.values()]
    answers[1], answers[5] = answer(1), answer(5, hw=10)
    done = cache.new_context(sid, 3, []).complete([answers[p] for p in order])
    assert [p for p, keep in zip(order, done.include) if keep] == [5]
    done = cache.new_context(sid, 4, []).complete([answers[p] for p in order])
    assert done.include == [False] * 7


def test_partitions_that_returned_records_move_to_the_end():
    cache = make_cache()
    sid = open_session(cache, [0, 1, 2, 3])
    ctx = cache.new_context(sid, 1, [])
    ctx.complete([answer(0, records=[b"x"]), answer(1), answer(2, records=[b"y"]), answer(3)])
    assert [cp.partition for cp in cache.get(sid).partitions.values()] == [1, 3, 0, 2]
    ctx = cache.new_context(sid, 2, [])
    assert [r.partition for _, r in ctx.partitions] == [1, 3, 0, 2]


def test_a_duplicate_request_that_finishes_late_is_refused():
    cache = make_cache()
    sid = open_session(cache, [0], hw=10)
    waiting = cache.new_context(sid, 1, [])  # e.g. long-polling
    newer = cache.new_context(sid, 2, [])  # the client gave up on it and went on
    late = waiting.complete([answer(0, hw=12)])
    assert late == (ErrorCode.invalid_fetch_session_epoch, sid, None)
    # the late answer changed nothing
    assert cache.get(sid).partitions[("t", 0)].high_watermark == 10
    assert newer.complete([answer(0, hw=12)]).include == [True]


def test_a_full_cache_answers_sessionless_until_a_session_can_be_evicted():
    clock = FakeClock()
    cache = make_cache(2, clock)
    a = open_session(cache, [0])
    b = open_session(cache, [0, 1])
    assert open_session(cache, range(50)) == 0  # both are new: nothing is evicted
    assert {a, b} == {s for s in (a, b) if s in cache}
    clock.advance(EVICTION_MS - 1000)
    cache.new_context(b, 1, []).complete([answer(0), answer(1)])  # b is used, a is not
    clock.advance(1001)  # a: idle just over the limit; b: used a second ago
    c = open_session(cache, [0])
    assert c != 0 and a not in cache and b in cache and cache.evictions == 1


def test_a_bigger_session_evicts_the_smallest_one_created_long_enough_ago():
    clock = FakeClock()
    cache = make_cache(3, clock)
    small = open_session(cache, [0, 1])
    big = open_session(cache, range(5))
    clock.advance(EVICTION_MS // 2)
    young = open_session(cache, [0])  # smallest, but too recently created to be evicted
    clock.advance(EVICTION_MS // 2 + 1)  # small and big were created over two minutes ago
    for sid, epoch in ((small, 1), (big, 1), (young, 1)):  # all in use: none is idle
        ctx = cache.new_context(sid, epoch, [])
        ctx.complete([answer(r.partition) for _, r in ctx.partitions])
    assert open_session(cache, [0, 1]) == 0  # not bigger than `small`
    bigger = open_session(cache, [0, 1, 2])
    assert bigger != 0 and small not in cache
    assert all(s in cache for s in (big, young, bigger))
    assert open_session(cache, range(4)) == 0  # `bigger` is new; `big` has more partitions
    assert open_session(cache, range(6)) != 0 and big not in cache


def test_no_slots_no_sessions():
    cache = make_cache(0)
    assert open_session(cache, [0]) == 0 and len(cache) == 0


# =============================================================================================
# Over the wire, against a broker process
# =============================================================================================

T0 = timedelta(0)


def req_mod(key: int, version: int):
    return load_payload_module(key, version, EntityType.request)


def batch(n=1, value=b"v") -> bytes:
    ts = int(time.time() * 1000)
    return encode_batch([Record(i, ts, b"k%d" % i, value, ()) for i in range(n)])


def create_topic(client, name, partitions):
    m = req_mod(19, 7)
    body = make(m.CreateTopicsRequest, topics=(make(
        m.CreatableTopic, name=name, num_partitions=partitions, replication_factor=-1,
        assignments=(), configs=()),), timeout=timedelta(seconds=5), validate_only=False)
    assert client.request(body).topics[0].error_code == ErrorCode.none


def topic_id(client, name) -> uuid.UUID:
    m = req_mod(3, 12)
    md = client.request(make(
        m.MetadataRequest, topics=(make(m.MetadataRequestTopic, name=name, topic_id=None),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    return md.topics[0].topic_id


def produce(client, topic, parts: dict[int, bytes]):
    m = req_mod(0, 9)
    body = make(m.ProduceRequest, transactional_id=None, acks=1, timeout=timedelta(seconds=5),
                topic_data=(make(m.TopicProduceData, name=topic, partition_data=tuple(
                    make(m.PartitionProduceData, index=i, records=r) for i, r in parts.items())),))
    for p in client.request(body).responses[0].partition_responses:
        assert p.error_code == ErrorCode.none


def fetch(client, session_id, epoch, topics: dict = None, forget: dict = None, version=12,
          max_wait_ms=0, max_bytes=50 << 20, partition_max_bytes=1 << 20):
    """A Fetch request: `topics` maps a topic (name, or id from v13) to {partition: offset};
    `forget` maps a topic to partitions to forget."""
    m = req_mod(1, version)
    key = "topic_id" if version >= 13 else "topic"
    body = make(
        m.FetchRequest, cluster_id=None, replica_id=-1,
        max_wait=timedelta(milliseconds=max_wait_ms), min_bytes=1, max_bytes=max_bytes,
        isolation_level=0, session_id=session_id, session_epoch=epoch,
        topics=tuple(make(m.FetchTopic, **{key: t}, partitions=tuple(
            make(m.FetchPartition, partition=p, current_leader_epoch=-1, fetch_offset=o,
                 last_fetched_epoch=-1, log_start_offset=-1,
                 partition_max_bytes=partition_max_bytes) for p, o in parts.items()))
            for t, parts in (topics or {}).items()),
        forgotten_topics_data=tuple(make(m.ForgottenTopic, **{key: t}, partitions=tuple(ps))
                                    for t, ps in (forget or {}).items()),
        rack_id="")
    return client.request(body)


def partitions_of(resp, version=12) -> dict:
    """{(topic, partition): partition data} of a response (topic ids from v13)."""
    return {(t.topic_id if version >= 13 else t.topic, p.partition_index): p
            for t in resp.responses for p in t.partitions}


@pytest.fixture
def client(broker):
    with WireClient(broker.bootstrap) as c:
        yield c


def test_wire_a_full_fetch_opens_a_session_and_incremental_fetches_answer_only_changes(client):
    create_topic(client, "inc", 4)
    produce(client, "inc", {0: batch(2), 1: batch(3)})
    full = fetch(client, 0, INITIAL_EPOCH, {"inc": {0: 0, 1: 0, 2: 0, 3: 0}})
    sid = full.session_id
    assert full.error_code == ErrorCode.none and sid != 0
    got = partitions_of(full)
    assert set(got) == {("inc", p) for p in range(4)}  # a full response has every partition
    assert got[("inc", 0)].records and got[("inc", 1)].records and not got[("inc", 2)].records
    # the client moves on past what it got from 0 and 1: nothing else has changed
    resp = fetch(client, sid, 1, {"inc": {0: 2, 1: 3}})
    assert (resp.error_code, resp.session_id, partitions_of(resp)) == (ErrorCode.none, sid, {})
    # new records in partition 2 only: the next request names nothing, and gets exactly that
    produce(client, "inc", {2: batch(4)})
    resp = fetch(client, sid, 2)
    got = partitions_of(resp)
    assert list(got) == [("inc", 2)] and got[("inc", 2)].records
    assert got[("inc", 2)].high_watermark == 4
    # the session's fetch offset of partition 2 is still 0: the same records again
    assert list(partitions_of(fetch(client, sid, 3))) == [("inc", 2)]
    assert partitions_of(fetch(client, sid, 4, {"inc": {2: 4}})) == {}


def test_wire_session_errors_and_closing(client):
    create_topic(client, "err", 2)
    sid = fetch(client, 0, INITIAL_EPOCH, {"err": {0: 0, 1: 0}}).session_id
    assert sid != 0
    for epoch in (2, -5):
        resp = fetch(client, sid, epoch)
        assert (resp.error_code, resp.session_id, resp.responses) == (
            ErrorCode.invalid_fetch_session_epoch, 0, ())
    resp = fetch(client, sid ^ 0x5A5A, 1)
    assert (resp.error_code, resp.session_id) == (ErrorCode.fetch_session_id_not_found, 0)
    assert fetch(client, sid, 1).error_code == ErrorCode.none  # the errors did not end it
    # epoch -1 closes the session and is answered as a sessionless full fetch
    resp = fetch(client, sid, FINAL_EPOCH, {"err": {0: 0}})
    assert (resp.error_code, resp.session_id, list(partitions_of(resp))) == (
        ErrorCode.none, 0, [("err", 0)])
    assert fetch(client, sid, 2).error_code == ErrorCode.fetch_session_id_not_found


def test_wire_forgotten_partitions_are_no_longer_read(client):
    create_topic(client, "fgt", 3)
    sid = fetch(client, 0, INITIAL_EPOCH, {"fgt": {0: 0, 1: 0, 2: 0}}).session_id
    assert partitions_of(fetch(client, sid, 1, forget={"fgt": [1]})) == {}
    produce(client, "fgt", {0: batch(), 1: batch(), 2: batch()})
    assert set(partitions_of(fetch(client, sid, 2))) == {("fgt", 0), ("fgt", 2)}
    # and a partition can be added back
    got = partitions_of(fetch(client, sid, 3, {"fgt": {1: 0}}))
    assert set(got) == {("fgt", 0), ("fgt", 1), ("fgt", 2)} and got[("fgt", 1)].records


def test_wire_an_incremental_long_poll_is_woken_by_any_partition_of_the_session(broker, client):
    create_topic(client, "lp", 3)
    sid = fetch(client, 0, INITIAL_EPOCH, {"lp": {0: 0, 1: 0, 2: 0}}).session_id

    def later():
        time.sleep(0.3)
        with WireClient(broker.bootstrap) as other:
            produce(other, "lp", {2: batch()})

    threading.Thread(target=later).start()
    start = time.monotonic()
    resp = fetch(client, sid, 1, {"lp": {0: 0}}, max_wait_ms=10_000)  # names partition 0 only
    elapsed = time.monotonic() - start
    got = partitions_of(resp)
    assert list(got) == [("lp", 2)] and got[("lp", 2)].records
    assert 0.25 < elapsed < 3


def test_wire_sessions_by_topic_id(client):
    create_topic(client, "ids", 2)
    tid = topic_id(client, "ids")
    full = fetch(client, 0, INITIAL_EPOCH, {tid: {0: 0, 1: 0}}, version=16)
    sid = full.session_id
    assert sid != 0 and set(partitions_of(full, 16)) == {(tid, 0), (tid, 1)}
    produce(client, "ids", {1: batch(2)})
    resp = fetch(client, sid, 1, version=16)
    got = partitions_of(resp, 16)
    assert list(got) == [(tid, 1)] and got[(tid, 1)].records and got[(tid, 1)].high_watermark == 2
    assert fetch(client, sid, 2, version=12).error_code == ErrorCode.fetch_session_topic_id_error
    assert fetch(client, sid, 2, version=13).error_code == ErrorCode.none


def test_wire_sessionless_requests_stay_sessionless(client):
    create_topic(client, "plain", 1)
    produce(client, "plain", {0: batch()})
    for version in (6, 7, 12, 16):
        topic = topic_id(client, "plain") if version >= 13 else "plain"
        resp = fetch(client, 0, FINAL_EPOCH, {topic: {0: 0}}, version=version)
        assert getattr(resp, "session_id", 0) == 0
        assert partitions_of(resp, version)[(topic, 0)].records
    # and the request after a sessionless one is not taken for part of a session
    assert fetch(client, 0, 1).error_code == ErrorCode.fetch_session_id_not_found


def test_wire_a_full_session_cache_answers_with_session_id_zero(broker_factory):
    broker = broker_factory({"max.incremental.fetch.session.cache.slots": 1})
    with WireClient(broker.bootstrap) as client:
        create_topic(client, "slots", 2)
        first = fetch(client, 0, INITIAL_EPOCH, {"slots": {0: 0, 1: 0}})
        second = fetch(client, 0, INITIAL_EPOCH, {"slots": {0: 0, 1: 0}})
        assert first.session_id != 0
        assert second.session_id == 0 and len(partitions_of(second)) == 2
        assert fetch(client, first.session_id, 1).error_code == ErrorCode.none


def test_wire_a_first_batch_larger_than_what_is_left_is_not_sent_cut_short(client):
    """Past the first partition with data, a partition whose next batch does not fit in what
    is left of max_bytes gets no records (as from Kafka), not the first bytes of that batch."""
    create_topic(client, "cut", 2)
    produce(client, "cut", {0: batch(1, value=b"a" * 100), 1: batch(1, value=b"b" * 2000)})
    resp = fetch(client, 0, FINAL_EPOCH, {"cut": {0: 0, 1: 0}}, max_bytes=1000)
    got = partitions_of(resp)
    assert got[("cut", 0)].records and not got[("cut", 1)].records
    resp = fetch(client, 0, FINAL_EPOCH, {"cut": {1: 0, 0: 0}}, max_bytes=1000)
    got = partitions_of(resp)
    assert len(got[("cut", 1)].records) > 2000  # first: whole, beyond max_bytes
    assert not got[("cut", 0)].records  # nothing left


# =============================================================================================
# kafka-python's consumer, through a session
# =============================================================================================


class SessionTrace:
    """What kafka-python's fetch session handler sends and is answered (its own objects,
    recorded by wrapping two of its methods)."""

    def __init__(self, monkeypatch) -> None:
        import kafka.consumer.fetcher as fetcher

        self.requests: list[tuple[int, int, int, int]] = []  # (id, epoch, sent, forgotten)
        self.responses: list[tuple[int, int, int]] = []  # (error, id, partitions)
        cls = fetcher.FetchSessionHandler
        build_next, handle_response = cls.build_next, cls.handle_response

        def traced_build(handler, next_partitions):
            data = build_next(handler, next_partitions)
            self.requests.append((data.id, data.epoch, len(data._to_send),
                                  len(data._to_forget)))
            return data

        def traced_handle(handler, response):
            self.responses.append((response.error_code, response.session_id,
                                   sum(len(t.partitions) for t in response.responses)))
            return handle_response(handler, response)

        monkeypatch.setattr(cls, "build_next", traced_build)
        monkeypatch.setattr(cls, "handle_response", traced_handle)


def test_kafka_python_consumes_many_partitions_through_one_session(broker, monkeypatch):
    from kafka import KafkaConsumer, TopicPartition

    trace = SessionTrace(monkeypatch)
    n_parts = 24
    with WireClient(broker.bootstrap) as client:
        create_topic(client, "kp-session", n_parts)
        expected = {p: [] for p in range(n_parts)}

        def produce_values(parts, rounds):
            for r in range(rounds):
                values = {}
                for p in parts:
                    vs = [b"p%d-%d-" % (p, len(expected[p]) + i) + b"x" * (p * 7) for i in range(5)]
                    expected[p] += vs
                    ts = int(time.time() * 1000)
                    values[p] = encode_batch([Record(i, ts, None, v, ()) for i, v in enumerate(vs)])
                produce(client, "kp-session", values)

        produce_values(range(n_parts), 4)
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None,
                                 enable_auto_commit=False, auto_offset_reset="earliest",
                                 fetch_max_wait_ms=100,
                                 fetch_max_bytes=3000)  # a few partitions per response
        got = {p: [] for p in range(n_parts)}

        def consume_until_complete():
            deadline = time.monotonic() + 60
            while any(len(got[p]) < len(expected[p]) for p in got) and time.monotonic() < deadline:
                for tp, msgs in consumer.poll(timeout_ms=200).items():
                    for m in msgs:
                        assert m.offset == len(got[tp.partition]), f"{tp}: offset {m.offset}"
                        got[tp.partition].append(m.value)
            assert got == expected

        try:
            tps = [TopicPartition("kp-session", p) for p in range(n_parts)]
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            consume_until_complete()
            first_phase = len(trace.requests)
            for _ in range(3):
                consumer.poll(timeout_ms=200)  # nothing new: incremental answers are empty
            quiet = len(trace.responses)
            produce_values([3, 17], 2)  # new records in two partitions only
            consume_until_complete()
        finally:
            consumer.close()

    assert trace.requests[0][:2] == (0, INITIAL_EPOCH)
    assert not [r for r in trace.responses if r[0] != ErrorCode.none]
    sid = trace.responses[0][1]
    assert sid != 0 and trace.responses[0][2] == n_parts  # the full response opened the session
    later = trace.requests[1:]
    assert len(later) > 5 and first_phase > 5
    # every later request is part of that one session, with the next epoch each time
    assert [r[:2] for r in later] == [(sid, e) for e in range(1, len(later) + 1)]
    assert all(r[1] == sid for r in trace.responses)
    # incremental answers leave out partitions without news: when nothing arrives, they are empty
    assert any(r[2] == 0 for r in trace.responses[1:quiet])
    assert max(r[2] for r in trace.responses[quiet:]) <= 2  # after the last produce: only 3 and 17
