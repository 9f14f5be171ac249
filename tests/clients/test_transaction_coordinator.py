"""confluent-kafka's transactional producer against a brook broker process: the transaction
coordinator's side (FindCoordinator for a transactional id, InitProducerId with it, fencing a
second producer of the same id, AddPartitionsToTxn and EndTxn), and the whole transaction end to
end once the partitions write markers (the partition side of issue 29)."""

from __future__ import annotations

import signal

import pytest

from tests.support.broker_harness import confluent_config


def _producer(bootstrap: str, tid: str, **extra):
    from confluent_kafka import Producer

    conf = {"transactional.id": tid, "transaction.timeout.ms": 60_000, **extra}
    return Producer(confluent_config(bootstrap, **conf))


def test_init_transactions_succeeds(broker):
    p = _producer(broker.bootstrap, "txn-init")
    p.init_transactions(30)


def test_a_second_producer_with_the_same_id_fences_the_first(broker):
    from confluent_kafka import KafkaException

    first = _producer(broker.bootstrap, "txn-fence")
    first.init_transactions(30)
    second = _producer(broker.bootstrap, "txn-fence")
    second.init_transactions(30)
    first.begin_transaction()
    first.produce("txn-fence-topic", b"zombie")
    with pytest.raises(KafkaException) as raised:
        first.commit_transaction(30)
    error = raised.value.args[0]
    assert error.fatal() or error.txn_requires_abort(), error
    assert "fenced" in str(error).lower() or "epoch" in str(error).lower(), error


def test_a_timeout_above_transaction_max_timeout_ms_is_refused(broker):
    from confluent_kafka import KafkaException

    p = _producer(broker.bootstrap, "txn-long", **{"transaction.timeout.ms": 900_001})
    with pytest.raises(KafkaException) as raised:
        p.init_transactions(30)
    assert "timeout" in str(raised.value).lower()


def test_aiokafka_transactional_producer_starts(broker):
    import asyncio

    from aiokafka import AIOKafkaProducer

    async def main():
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="txn-aio")
        try:
            await asyncio.wait_for(producer.start(), 30)
            assert producer._txn_manager.producer_id >= 0
        finally:
            await producer.stop()

    asyncio.run(main())


def _markers_written(bootstrap: str) -> bool:
    """Whether this broker writes transaction markers (the partition side's WriteTxnMarkers)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(confluent_config(bootstrap))
    admin.list_topics(timeout=10)
    import socket
    import struct

    host, port = bootstrap.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        # ApiVersions v0: which APIs the broker serves
        body = struct.pack(">hhih", 18, 0, 1, -1)
        s.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", s.recv(4))[0]
        data = b""
        while len(data) < size:
            data += s.recv(size - len(data))
    _, error, count = struct.unpack_from(">ihi", data)
    keys = {struct.unpack_from(">h", data, 10 + 6 * i)[0] for i in range(count)}
    return 27 in keys


def test_commit_and_abort_end_to_end(broker):
    if not _markers_written(broker.bootstrap):
        pytest.xfail("this broker writes no transaction markers yet (WriteTxnMarkers is the "
                     "partition side of issue 29)")
    from confluent_kafka import Consumer, TopicPartition

    topic = "txn-e2e"
    p = _producer(broker.bootstrap, "txn-e2e")
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, f"committed-{i}".encode(), partition=0)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, f"aborted-{i}".encode(), partition=0)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(topic, b"last", partition=0)
    p.commit_transaction(30)

    c = Consumer(confluent_config(broker.bootstrap, **{"group.id": "txn-e2e-reader",
                                                       "isolation.level": "read_committed",
                                                       "enable.auto.commit": False}))
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        seen = []
        for _ in range(100):
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                seen.append(m.value().decode())
            if seen and seen[-1] == "last":
                break
    finally:
        c.close()
    assert seen == [f"committed-{i}" for i in range(10)] + ["last"]


# --- the coordinator over the wire, and across a restart ------------------------------------


def _wire_init(w, tid, timeout_s=60, **kw):
    from datetime import timedelta

    from tests.support.wire_build import request

    return w.request(request(22, 4, transactional_id=tid, transaction_timeout=timedelta(seconds=timeout_s),
                             producer_id=kw.get("producer_id", -1),
                             producer_epoch=kw.get("producer_epoch", -1)))


def _wire_add(w, tid, pid, epoch, topic, version=3):
    from tests.support.wire_build import request

    r = w.request(request(24, version, v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
                          v3_and_below_producer_epoch=epoch,
                          v3_and_below_topics=[{"name": topic, "partitions": [0]}]))
    return {p.partition_error_code for t in r.results_by_topic_v3_and_below
            for p in t.results_by_partition}


def _wire_end(w, tid, pid, epoch, commit=True, version=3):
    from tests.support.wire_build import request

    return w.request(request(26, version, transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                             committed=commit)).error_code


def _coordinator_ready(w, tid):
    import time

    from kio.schema.errors import ErrorCode as E

    from tests.support.wire_build import request

    for _ in range(100):
        r = w.request(request(10, 4, key_type=1, coordinator_keys=[tid]))
        if r.coordinators[0].error_code == E.none:
            return r.coordinators[0]
        time.sleep(0.1)
    raise AssertionError(f"no transaction coordinator: {r}")


def test_error_codes_over_the_wire(broker):
    from kio.schema.errors import ErrorCode as E

    from tests.support.kafka_wire import WireClient
    from tests.support.wire_requests import create_topic

    with WireClient(broker.bootstrap) as w:
        create_topic(w, "txn-wire", partitions=1)
        _coordinator_ready(w, "txn-wire")
        first = _wire_init(w, "txn-wire")
        assert first.error_code == E.none and first.producer_epoch == 0
        assert _wire_init(w, "txn-wire", timeout_s=3600).error_code == E.invalid_transaction_timeout
        pid = first.producer_id
        assert _wire_add(w, "txn-wire", pid, 0, "no-such-topic") == {E.unknown_topic_or_partition}
        assert _wire_add(w, "txn-wire", pid + 1, 0, "txn-wire") == {E.invalid_producer_id_mapping}
        second = _wire_init(w, "txn-wire")
        assert (second.producer_id, second.producer_epoch) == (pid, 1)
        # the first producer is fenced: PRODUCER_FENCED, INVALID_PRODUCER_EPOCH to old versions
        assert _wire_add(w, "txn-wire", pid, 0, "txn-wire") == {E.producer_fenced}
        assert _wire_add(w, "txn-wire", pid, 0, "txn-wire", version=1) == {E.invalid_producer_epoch}
        assert _wire_end(w, "txn-wire", pid, 0, version=1) == E.invalid_producer_epoch
        assert _wire_end(w, "txn-wire", pid, 1) == E.invalid_txn_state  # nothing to end
        # KIP-360: the current producer bumps its own epoch
        bumped = _wire_init(w, "txn-wire", producer_id=pid, producer_epoch=1)
        assert (bumped.error_code, bumped.producer_epoch) == (E.none, 2)
        assert _wire_init(w, "txn-wire", producer_id=pid, producer_epoch=0).error_code == E.producer_fenced


def test_a_prepared_commit_is_loaded_again_after_a_restart(broker_factory):
    """EndTxn is answered once PrepareCommit is written; until every marker is written the
    producer's next transaction waits (CONCURRENT_TRANSACTIONS), and so it does after the
    broker is killed and started again: its coordinator loads __transaction_state and owes the
    markers again (once partitions write markers, it writes them and the next transaction
    begins)."""
    from kio.schema.errors import ErrorCode as E

    from tests.support.kafka_wire import WireClient
    from tests.support.wire_requests import create_topic

    broker = broker_factory()
    with WireClient(broker.bootstrap) as w:
        create_topic(w, "txn-restart", partitions=1)
        _coordinator_ready(w, "txn-restart")
        init = _wire_init(w, "txn-restart")
        pid, epoch = init.producer_id, init.producer_epoch
        assert _wire_add(w, "txn-restart", pid, epoch, "txn-restart") == {E.none}
        assert _wire_end(w, "txn-restart", pid, epoch) == E.none
        markers = _markers_written(broker.bootstrap)
        if not markers:
            assert _wire_add(w, "txn-restart", pid, epoch, "txn-restart") == {E.concurrent_transactions}
    broker.restart(signal.SIGKILL)  # killed between PrepareCommit and CompleteCommit
    with WireClient(broker.bootstrap) as w:
        _coordinator_ready(w, "txn-restart")
        if markers:  # the markers are written (now, or before the restart): a new transaction
            import time
            for _ in range(100):
                codes = _wire_add(w, "txn-restart", pid, epoch, "txn-restart")
                if codes != {E.concurrent_transactions}:
                    break
                time.sleep(0.1)
            assert codes == {E.none}
        else:
            assert _wire_add(w, "txn-restart", pid, epoch, "txn-restart") == {E.concurrent_transactions}
            assert _wire_end(w, "txn-restart", pid, epoch) == E.concurrent_transactions
            assert _wire_init(w, "txn-restart").error_code == E.concurrent_transactions


def test_metadata_makes_the_transaction_topic_as_the_coordinator_does(broker_factory):
    """A client asking for __transaction_state by name gets it made as the coordinator makes it
    (transaction.state.log.num.partitions, compacted), never as a plain auto-created topic."""
    from confluent_kafka.admin import AdminClient, ConfigResource

    broker = broker_factory({"transaction.state.log.num.partitions": 7})
    admin = AdminClient(confluent_config(broker.bootstrap))
    md = admin.list_topics("__transaction_state", timeout=10)
    topic = md.topics["__transaction_state"]
    if topic.error is not None or not topic.partitions:  # made on the first ask: ask again
        md = admin.list_topics("__transaction_state", timeout=10)
        topic = md.topics["__transaction_state"]
    assert len(topic.partitions) == 7
    resource = ConfigResource("topic", "__transaction_state")
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["cleanup.policy"].value == "compact"


def test_describe_and_list_transactions(broker):
    from kio.schema.errors import ErrorCode as E

    from tests.support.kafka_wire import WireClient
    from tests.support.wire_build import request
    from tests.support.wire_requests import create_topic

    with WireClient(broker.bootstrap) as w:
        create_topic(w, "txn-listed", partitions=2)
        _coordinator_ready(w, "txn-listed")
        init = _wire_init(w, "txn-listed", timeout_s=45)
        assert _wire_add(w, "txn-listed", init.producer_id, init.producer_epoch, "txn-listed") == {E.none}
        [d] = w.request(request(65, 0, transactional_ids=["txn-listed"])).transaction_states
        assert (d.error_code, d.transaction_state, d.producer_id, d.producer_epoch) == \
            (E.none, "Ongoing", init.producer_id, init.producer_epoch)
        assert d.transaction_timeout.total_seconds() == 45 and d.transaction_start_time is not None
        assert [(t.topic, tuple(t.partitions)) for t in d.topics] == [("txn-listed", (0,))]
        # an unknown id: its start time is -1, as Kafka writes it (which kio's reader refuses to
        # read: the error code is read from the bytes, after the header's correlation id and
        # tags, the throttle time and the array's length)
        w.send(request(65, 0, transactional_ids=["txn-none"]))
        frame = w.recv_frame()
        assert frame[4] == 0 and frame[9] == 2
        assert int.from_bytes(frame[10:12], "big", signed=True) == E.transactional_id_not_found
        listed = w.request(request(66, 1, state_filters=["Ongoing", "Bogus"], producer_id_filters=[],
                                   duration_filter=-1))
        assert listed.error_code == E.none and tuple(listed.unknown_state_filters) == ("Bogus",)
        assert ("txn-listed", init.producer_id, "Ongoing") in {
            (t.transactional_id, t.producer_id, t.transaction_state) for t in listed.transaction_states}
        assert all(t.transaction_state == "Ongoing" for t in listed.transaction_states)
        long_running = w.request(request(66, 1, state_filters=[], producer_id_filters=[init.producer_id],
                                         duration_filter=3_600_000))
        assert not long_running.transaction_states


def test_add_partitions_to_txn_v4_batches_transactions_and_verifies(broker):
    """v4 (KIP-890, from brokers): several transactions in one request, and verify_only, which
    adds nothing and says whether the partitions are in the transaction."""
    from kio.schema.errors import ErrorCode as E

    from tests.support.kafka_wire import WireClient
    from tests.support.wire_build import request
    from tests.support.wire_requests import create_topic

    def v4(*transactions):
        r = w.request(request(24, 4, transactions=[
            {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
             "verify_only": verify, "topics": [{"name": "txn-v4", "partitions": [p]}]}
            for tid, pid, epoch, verify, p in transactions]))
        assert r.error_code == E.none
        return {res.transactional_id: {pr.partition_error_code for t in res.topic_results
                                       for pr in t.results_by_partition}
                for res in r.results_by_transaction}

    with WireClient(broker.bootstrap) as w:
        create_topic(w, "txn-v4", partitions=2)
        _coordinator_ready(w, "txn-v4-a")
        a, b = _wire_init(w, "txn-v4-a"), _wire_init(w, "txn-v4-b")
        # not in the transaction: TRANSACTION_ABORTABLE, as Kafka 3.9's coordinator answers
        assert v4(("txn-v4-a", a.producer_id, 0, True, 0)) == {"txn-v4-a": {E.transaction_abortable}}
        assert v4(("txn-v4-a", a.producer_id + 1, 0, True, 0)) == {
            "txn-v4-a": {E.invalid_producer_id_mapping}}
        assert v4(("txn-v4-a", a.producer_id, 1, True, 0)) == {"txn-v4-a": {E.producer_fenced}}
        assert v4(("txn-v4-a", a.producer_id, 0, False, 0),
                  ("txn-v4-b", b.producer_id, 0, False, 1)) == {"txn-v4-a": {E.none},
                                                                "txn-v4-b": {E.none}}
        assert v4(("txn-v4-a", a.producer_id, 0, True, 0),
                  ("txn-v4-b", b.producer_id, 0, True, 0)) == {"txn-v4-a": {E.none},
                                                               "txn-v4-b": {E.transaction_abortable}}


def _wire_produce(w, tid, pid, epoch, seq, topic, version=9):
    import time
    from datetime import timedelta

    from brook.records import Record, encode_batch
    from tests.support.wire_build import request

    records = encode_batch([Record(0, int(time.time() * 1000), None, b"late")], producer_id=pid,
                           producer_epoch=epoch, base_sequence=seq, transactional=True)
    r = w.request(request(0, version, transactional_id=tid, acks=-1, timeout=timedelta(seconds=30), topic_data=[
        {"name": topic, "partition_data": [{"index": 0, "records": records}]}]))
    return r.responses[0].partition_responses[0].error_code


def _wire_latest(w, topic, isolation):
    from tests.support.wire_build import request

    r = w.request(request(2, 5, replica_id=-1, isolation_level=isolation, topics=[
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1,
                                        "current_leader_epoch": -1}]}]))
    return r.topics[0].partitions[0].offset


def test_a_produce_arriving_after_its_transaction_ended_begins_no_transaction(broker):
    """KIP-890: a transactional batch delayed past its transaction's abort is refused
    (INVALID_TXN_STATE) instead of beginning a transaction no coordinator would end, which
    would hold the last stable offset, and read_committed readers, forever."""
    import time

    from kio.schema.errors import ErrorCode as E

    from tests.support.kafka_wire import WireClient
    from tests.support.wire_requests import create_topic

    tid, topic = "txn-late-produce", "txn-late-produce"
    with WireClient(broker.bootstrap) as w:
        create_topic(w, topic, partitions=1)
        _coordinator_ready(w, tid)
        init = _wire_init(w, tid)
        pid, epoch = init.producer_id, init.producer_epoch
        # never added to the transaction: refused, nothing written (the coordinator's
        # TRANSACTION_ABORTABLE, and PRODUCER_FENCED, as Kafka passes them to Produce v0-v10)
        assert _wire_produce(w, tid, pid, epoch, 0, topic) == E.invalid_txn_state
        assert _wire_produce(w, tid, pid, epoch + 1, 0, topic) == E.invalid_producer_epoch
        # Produce v11 (KIP-890) is told TRANSACTION_ABORTABLE itself
        assert _wire_produce(w, tid, pid, epoch, 0, topic, version=11) == E.transaction_abortable
        assert _wire_add(w, tid, pid, epoch, topic) == {E.none}
        assert _wire_produce(w, tid, pid, epoch, 0, topic) == E.none  # verified, begins it
        assert _wire_produce(w, tid, pid, epoch, 1, topic) == E.none  # open: no asking
        assert _wire_end(w, tid, pid, epoch, commit=False) == E.none
        deadline = time.monotonic() + 30
        while _wire_latest(w, topic, 1) != _wire_latest(w, topic, 0):  # abort marker written
            assert time.monotonic() < deadline, "the abort marker was not written"
            time.sleep(0.05)
        end = _wire_latest(w, topic, 0)
        # the producer's next batch, delayed in the network past the abort
        assert _wire_produce(w, tid, pid, epoch, 2, topic) == E.invalid_txn_state
        assert (_wire_latest(w, topic, 0), _wire_latest(w, topic, 1)) == (end, end)
