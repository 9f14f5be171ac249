"""The transaction coordinator's shard on a fake clock: each operation's records and Kafka's error
codes, the state machine's table, timeouts and expiry, and Hypothesis properties over random
sequences of operations, marker rounds and timeouts (every step one Kafka allows; epochs never
go back; the records written, loaded into a fresh shard, give the same state)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode as E

from brook.coordinator.common.loader import replay_batches
from brook.coordinator.transaction.batch_writer import encode_records
from brook.coordinator.transaction.metadata import (
    VALID_PREVIOUS,
    InvalidTransition,
    TransactionMetadata,
    TransactionState,
    check_transition,
)
from brook.coordinator.transaction.schemas import TransactionLogKey
from brook.coordinator.transaction.shard import (
    NEED_PRODUCER_ID,
    InitProducerIdAnswer,
    TransactionConfig,
    TransactionShard,
    metadata_equal,
)
from tests.support.examples import examples

S = TransactionState
T0 = 1_700_000_000_000


class Harness:
    """A shard whose writes always succeed: each result's records are kept (as the log would),
    replayed, and its ``on_success`` run; marker jobs wait in the shard's outbox until
    ``deliver_markers``."""

    def __init__(self, config: TransactionConfig | None = None) -> None:
        self.config = config or TransactionConfig(max_timeout_ms=60_000, id_expiration_ms=3_600_000)
        self.shard = TransactionShard(self.config)
        self.now = T0
        self.written: list[list] = []
        self.next_pid = 1000

    def run(self, result):
        if result.records:
            self.written.append(list(result.records))
            self.shard.replay_records(result.records, self.now)
        if result.on_success is not None:
            result.on_success(self.now)
        return result.response

    def init(self, tid: str, timeout: int = 10_000, **kw):
        result = self.shard.init_producer_id(tid, timeout, self.now, **kw)
        if result.response is NEED_PRODUCER_ID:
            self.next_pid += 1
            result = self.shard.init_producer_id(tid, timeout, self.now,
                                                 new_producer_id=self.next_pid, **kw)
        return self.run(result)

    def add(self, tid, pid, epoch, *partitions):
        return self.run(self.shard.add_partitions(tid, pid, epoch, partitions, self.now))

    def end(self, tid, pid, epoch, commit):
        return self.run(self.shard.end_txn(tid, pid, epoch, commit, self.now))

    def deliver_markers(self) -> int:
        jobs, self.shard.outbox = self.shard.outbox, []
        for job in jobs:
            self.run(self.shard.complete(job, self.now))
        return len(jobs)

    def advance(self, ms: int) -> None:
        self.now += ms
        for result in self.shard.poll(self.now):
            self.run(result)

    def state(self, tid: str) -> TransactionMetadata | None:
        return self.shard.transactions.get(tid)

    def reloaded(self) -> TransactionShard:
        """A fresh shard loaded from the written records, as bytes, through the loader."""
        fresh = TransactionShard(self.config)
        buffers = [encode_records(records, self.now) for records in self.written]
        replay_batches(fresh.batch_replayer(self.now), buffers)
        fresh.loaded(self.now)
        return fresh


def test_a_new_transactional_id_gets_a_producer_id_and_epoch_0():
    h = Harness()
    assert h.shard.init_producer_id("t", 10_000, h.now).response is NEED_PRODUCER_ID
    answer = h.init("t")
    assert answer == InitProducerIdAnswer(E.none, 1001, 0)
    [[record]] = h.written
    assert record.key == TransactionLogKey("t")
    assert record.value.state is S.EMPTY and record.value.producer_epoch == 0
    assert record.value.value().partitions is None  # Kafka writes no partitions for Empty


def test_a_second_init_bumps_the_epoch_and_the_old_producer_is_fenced():
    h = Harness()
    h.init("t")
    assert h.init("t") == InitProducerIdAnswer(E.none, 1001, 1)
    assert h.add("t", 1001, 0, ("a", 0)) == E.producer_fenced
    assert h.end("t", 1001, 0, True) == E.producer_fenced
    assert h.add("t", 1001, 1, ("a", 0)) == E.none


@pytest.mark.parametrize("timeout", [0, -1, 60_001])
def test_a_timeout_out_of_bounds_is_invalid(timeout):
    h = Harness()
    assert h.init("t", timeout) == InitProducerIdAnswer(E.invalid_transaction_timeout)
    assert h.written == []


def test_an_empty_transactional_id_is_an_invalid_request():
    h = Harness()
    assert h.init("") == InitProducerIdAnswer(E.invalid_request)


def test_commit_prepare_then_markers_then_complete():
    h = Harness()
    h.init("t")
    assert h.add("t", 1001, 0, ("a", 0), ("b", 1)) == E.none
    m = h.state("t")
    assert m.state is S.ONGOING and m.start_ms == T0 and m.partitions == {("a", 0), ("b", 1)}
    assert h.add("t", 1001, 0, ("a", 0)) == E.none
    assert len(h.written) == 2  # nothing new: nothing written
    h.now += 5
    assert h.end("t", 1001, 0, True) == E.none
    assert h.state("t").state is S.PREPARE_COMMIT
    [job] = h.shard.outbox
    assert job.commit and job.partitions == {("a", 0), ("b", 1)} and job.producer_epoch == 0
    # the producer may not begin again until the markers are written
    assert h.add("t", 1001, 0, ("a", 0)) == E.concurrent_transactions
    assert h.end("t", 1001, 0, True) == E.concurrent_transactions
    assert h.end("t", 1001, 0, False) == E.invalid_txn_state
    assert h.init("t") == InitProducerIdAnswer(E.concurrent_transactions)
    h.deliver_markers()
    m = h.state("t")
    assert m.state is S.COMPLETE_COMMIT and m.partitions == frozenset()
    assert h.end("t", 1001, 0, True) == E.none  # a retry of the commit
    assert h.end("t", 1001, 0, False) == E.invalid_txn_state


def test_abort():
    h = Harness()
    h.init("t")
    h.add("t", 1001, 0, ("a", 0))
    assert h.end("t", 1001, 0, False) == E.none
    assert h.state("t").state is S.PREPARE_ABORT
    assert not h.shard.outbox[0].commit
    h.deliver_markers()
    assert h.state("t").state is S.COMPLETE_ABORT
    assert h.end("t", 1001, 0, False) == E.none
    assert h.end("t", 1001, 0, True) == E.invalid_txn_state


def test_end_txn_errors():
    h = Harness()
    assert h.end("t", 1, 0, True) == E.invalid_producer_id_mapping
    h.init("t")
    assert h.end("t", 1001, 0, True) == E.invalid_txn_state  # Empty: nothing to end
    assert h.end("t", 999, 0, True) == E.invalid_producer_id_mapping
    assert h.add("t", 999, 0, ("a", 0)) == E.invalid_producer_id_mapping
    assert h.add("u", 1001, 0, ("a", 0)) == E.invalid_producer_id_mapping


def test_init_while_ongoing_aborts_with_a_bumped_epoch_first():
    h = Harness()
    h.init("t")
    h.add("t", 1001, 0, ("a", 0))
    assert h.init("t") == InitProducerIdAnswer(E.concurrent_transactions)
    m = h.state("t")
    assert m.state is S.PREPARE_ABORT and m.producer_epoch == 1  # the zombie is fenced
    [job] = h.shard.outbox
    assert not job.commit and job.producer_epoch == 1
    assert h.init("t") == InitProducerIdAnswer(E.concurrent_transactions)  # markers pending
    h.deliver_markers()
    assert h.init("t") == InitProducerIdAnswer(E.none, 1001, 2)
    assert h.end("t", 1001, 0, False) == E.producer_fenced


def test_kip_360_bump_with_the_current_id_and_epoch_and_its_retry():
    h = Harness()
    h.init("t")
    assert h.init("t", expected_producer_id=1001, expected_epoch=0) == InitProducerIdAnswer(E.none, 1001, 1)
    # the answer was lost: the same request again gets the same epoch
    assert h.init("t", expected_producer_id=1001, expected_epoch=0) == InitProducerIdAnswer(E.none, 1001, 1)
    # a stale epoch, or another producer id, is fenced
    assert h.init("t", expected_producer_id=1001, expected_epoch=7) == InitProducerIdAnswer(E.producer_fenced)
    assert h.init("t", expected_producer_id=55, expected_epoch=1) == InitProducerIdAnswer(E.producer_fenced)
    # a new producer (no id given) fences the recovering one
    assert h.init("t") == InitProducerIdAnswer(E.none, 1001, 2)
    assert h.init("t", expected_producer_id=1001, expected_epoch=1) == InitProducerIdAnswer(E.producer_fenced)


def test_an_exhausted_epoch_gets_a_new_producer_id():
    h = Harness()
    h.init("t")
    m = h.state("t")
    exhausted = TransactionMetadata("t", 1001, 32766, 10_000, S.EMPTY, last_update_ms=h.now)
    h.shard.replay(TransactionLogKey("t"), exhausted, h.now)
    answer = h.init("t")
    assert answer == InitProducerIdAnswer(E.none, 1002, 0)
    assert h.state("t").previous_producer_id == 1001
    assert m.producer_id == 1001


def test_an_open_transaction_is_aborted_at_its_timeout_and_its_producer_fenced():
    h = Harness()
    h.init("t", timeout=10_000)
    h.add("t", 1001, 0, ("a", 0))
    h.advance(9_999)
    assert h.state("t").state is S.ONGOING
    h.advance(1)
    m = h.state("t")
    assert m.state is S.PREPARE_ABORT and m.producer_epoch == 1
    h.deliver_markers()
    assert h.state("t").state is S.COMPLETE_ABORT
    assert h.end("t", 1001, 0, True) == E.producer_fenced
    assert h.add("t", 1001, 0, ("a", 0)) == E.producer_fenced


def test_the_timeout_runs_from_the_start_of_the_transaction():
    h = Harness()
    h.init("t", timeout=10_000)
    h.add("t", 1001, 0, ("a", 0))
    h.advance(6_000)
    h.add("t", 1001, 0, ("b", 0))  # more partitions: the transaction's start stays
    h.advance(4_000)
    assert h.state("t").state is S.PREPARE_ABORT


def test_an_idle_transactional_id_expires_with_a_tombstone():
    h = Harness()
    h.init("t")
    h.advance(3_599_999)
    assert h.state("t") is not None
    h.advance(1)
    assert h.state("t") is None
    assert h.written[-1][0].value is None
    # an open transaction does not expire
    h.init("u")
    h.add("u", 1002, 0, ("a", 0))
    h.now += 10 ** 9  # (its timeout aborts it first; no tombstone while it is not complete)
    for result in h.shard.poll(h.now):
        h.run(result)
    assert h.state("u").state is S.PREPARE_ABORT


def test_the_table_of_valid_previous_states_is_kafkas():
    assert VALID_PREVIOUS[S.PREPARE_COMMIT] == {S.ONGOING}
    assert VALID_PREVIOUS[S.PREPARE_ABORT] == {S.ONGOING, S.PREPARE_EPOCH_FENCE}
    assert VALID_PREVIOUS[S.COMPLETE_COMMIT] == {S.PREPARE_COMMIT}
    assert VALID_PREVIOUS[S.COMPLETE_ABORT] == {S.PREPARE_ABORT}
    assert VALID_PREVIOUS[S.DEAD] == {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}
    assert VALID_PREVIOUS[S.PREPARE_EPOCH_FENCE] == {S.ONGOING}
    assert VALID_PREVIOUS[S.ONGOING] == {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}
    assert VALID_PREVIOUS[S.EMPTY] == {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}
    with pytest.raises(InvalidTransition):
        check_transition(S.EMPTY, S.PREPARE_COMMIT)
    assert [s.value for s in S] == list(range(8))  # Kafka's TransactionStatus ids


def test_a_prepared_transaction_sends_its_markers_again_when_loaded():
    h = Harness()
    h.init("t")
    h.add("t", 1001, 0, ("a", 0))
    h.end("t", 1001, 0, True)
    h.shard.outbox.clear()  # the coordinator died before its markers were written
    fresh = h.reloaded()
    [job] = fresh.outbox
    assert job.commit and job.partitions == {("a", 0)}
    h.shard = fresh
    h.deliver_markers()
    assert h.state("t").state is S.COMPLETE_COMMIT


def test_a_failed_write_is_rolled_back():
    h = Harness()
    h.init("t")
    before = h.state("t")
    result = h.shard.add_partitions("t", 1001, 0, [("a", 0)], h.now)
    h.shard.replay_records(result.records, h.now, end=2)
    assert h.state("t").state is S.ONGOING
    restore = h.shard.roll_back(2)
    h.shard.replay_records(restore, h.now)
    assert h.state("t") == before


def test_nothing_is_answered_from_a_write_not_yet_committed():
    """Kafka's pending transition: while the write adding ("a", 0) waits for replication, a
    verification, the same AddPartitions again, EndTxn and InitProducerId answer
    CONCURRENT_TRANSACTIONS; rolled back, the partition is not in the transaction."""
    h = PendingHarness()
    h.init("t")
    h.commit_all()
    assert h.add("t", 1001, 0, ("a", 0)) == E.none  # written, not committed
    assert h.shard.verify_partitions("t", 1001, 0, [("a", 0)]) == {
        ("a", 0): E.concurrent_transactions}
    assert h.add("t", 1001, 0, ("a", 0)) == E.concurrent_transactions
    assert h.end("t", 1001, 0, True) == E.concurrent_transactions
    assert h.init("t").error == E.concurrent_transactions
    assert h.shard.verify_partitions("u", 1001, 0, [("a", 0)]) == {
        ("a", 0): E.invalid_producer_id_mapping}  # another id: answered at once
    h.fail_from(0)  # the write is lost: the leadership moved before it was replicated
    assert h.shard.verify_partitions("t", 1001, 0, [("a", 0)]) == {
        ("a", 0): E.transaction_abortable}
    assert h.add("t", 1001, 0, ("a", 0)) == E.none
    h.commit_all()
    assert h.shard.verify_partitions("t", 1001, 0, [("a", 0)]) == {("a", 0): E.none}
    assert h.add("t", 1001, 0, ("a", 0)) == E.none  # nothing new, committed: nothing written
    assert not h.waiting


# --- properties ------------------------------------------------------------------------------

IDS = ["a", "b", "c"]
PARTITIONS = [("x", 0), ("x", 1), ("y", 0)]

ops = st.one_of(
    st.tuples(st.just("init"), st.sampled_from(IDS), st.sampled_from([1_000, 5_000, 70_000])),
    st.tuples(st.just("init360"), st.sampled_from(IDS), st.integers(-1, 3)),
    st.tuples(st.just("add"), st.sampled_from(IDS), st.lists(st.sampled_from(PARTITIONS),
                                                             min_size=1, max_size=3)),
    st.tuples(st.just("stale_add"), st.sampled_from(IDS), st.just(None)),
    st.tuples(st.just("end"), st.sampled_from(IDS), st.booleans()),
    st.tuples(st.just("markers"), st.just(None), st.just(None)),
    st.tuples(st.just("advance"), st.just(None), st.integers(0, 6_000)),
)


@settings(max_examples=examples(150), deadline=None)
@given(st.lists(ops, min_size=10, max_size=80))
def test_random_operations_keep_kafkas_rules_and_replay_to_the_same_state(steps):
    h = Harness(TransactionConfig(max_timeout_ms=60_000, id_expiration_ms=20_000))
    h.init(IDS[0])  # (one id known from the start: the others are made by the steps)
    epochs: dict[str, tuple[int, int]] = {}
    for kind, tid, arg in steps:
        before = dict(h.shard.transactions)
        n_written = len(h.written)
        m = h.state(tid) if tid else None
        if kind == "init":
            answer = h.init(tid, arg)
            if arg > 60_000:
                assert answer.error == E.invalid_transaction_timeout
            elif m is None:
                assert answer.error == E.none and answer.producer_epoch == 0
            elif m.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT, S.ONGOING):
                assert answer.error == E.concurrent_transactions
            else:
                assert answer.error == E.none
        elif kind == "init360":
            if m is not None:
                h.init(tid, 5_000, expected_producer_id=m.producer_id,
                       expected_epoch=m.producer_epoch + arg)
        elif kind == "add" and m is not None:
            code = h.add(tid, m.producer_id, m.producer_epoch, *arg)
            if m.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                assert code == E.concurrent_transactions
            else:
                assert code == E.none
                assert set(arg) <= h.state(tid).partitions
        elif kind == "stale_add" and m is not None and m.producer_epoch > 0:
            assert h.add(tid, m.producer_id, m.producer_epoch - 1, PARTITIONS[0]) == E.producer_fenced
        elif kind == "end" and m is not None:
            code = h.end(tid, m.producer_id, m.producer_epoch, arg)
            if m.state is S.ONGOING:
                assert code == E.none
        elif kind == "markers":
            h.deliver_markers()
        elif kind == "advance":
            h.advance(arg)
        # every step is one Kafka allows, epochs of a producer id never go back, and only an
        # operation that wrote changed the state
        for t, new in h.shard.transactions.items():
            old = before.get(t)
            if old is None or old == new:
                continue
            assert len(h.written) > n_written
            if old.state is S.ONGOING and new.state is S.PREPARE_ABORT \
                    and new.producer_epoch > old.producer_epoch:
                pass  # Ongoing -> PrepareEpochFence -> PrepareAbort in one write
            else:
                check_transition(old.state, new.state)
            if new.producer_id == old.producer_id:
                assert new.producer_epoch >= old.producer_epoch
            if new.state is S.ONGOING:
                assert new.partitions and new.start_ms >= 0
            if new.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
                assert not new.partitions
        for t, m2 in h.shard.transactions.items():
            epochs[t] = (m2.producer_id, m2.producer_epoch)
    # loading what was written gives the same state (but the unwritten last epoch, as Kafka)
    fresh = h.reloaded()
    assert set(fresh.transactions) == set(h.shard.transactions)
    for t, m in h.shard.transactions.items():
        assert metadata_equal(fresh.transactions[t], m), t
    assert fresh.next_deadline() == h.shard.next_deadline()
    # the transactions left prepared have their markers owed again by the loaded shard
    assert {j.transactional_id for j in fresh.outbox} == {
        t for t, m in h.shard.transactions.items()
        if m.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT)}


class PendingHarness(Harness):
    """Writes wait to be committed (as in a cluster): each is replayed with its end offset, and
    then either committed, or rolled back with every later one, the old values written back."""

    def __init__(self, config=None) -> None:
        super().__init__(config)
        self.offset = 0
        self.waiting: list[tuple[int, object]] = []  # (end, result)

    def run(self, result):
        if result.records:
            self.written.append(list(result.records))
            self.offset += len(result.records)
            self.shard.replay_records(result.records, self.now, self.offset)
            self.waiting.append((self.offset, result))
        return result.response

    def commit_all(self) -> None:
        if self.waiting:
            self.shard.committed(self.waiting[-1][0])
            for _, result in self.waiting:
                if result.on_success is not None:
                    result.on_success(self.now)
            self.waiting = []

    def fail_from(self, i: int) -> None:
        if i >= len(self.waiting):
            return
        restore = self.shard.roll_back(self.waiting[i][0])
        self.waiting = self.waiting[:i]
        if restore:
            self.shard.replay_records(restore, self.now)
            self.written.append(restore)
            self.offset += len(restore)


pending_ops = st.one_of(ops, st.tuples(st.just("commit"), st.just(None), st.just(None)),
                        st.tuples(st.just("fail"), st.just(None), st.integers(0, 5)),
                        st.tuples(st.just("verify"), st.sampled_from(IDS),
                                  st.sampled_from(PARTITIONS)))


@settings(max_examples=examples(150), deadline=None)
@given(st.lists(pending_ops, min_size=10, max_size=80))
def test_writes_rolled_back_leave_the_state_their_log_says(steps):
    """Whatever is rolled back, the state served is what the log, loaded again, gives."""
    h = PendingHarness(TransactionConfig(max_timeout_ms=60_000, id_expiration_ms=20_000))
    h.init(IDS[0])
    h.commit_all()
    committed: dict[str, TransactionMetadata] = dict(h.shard.transactions)
    for kind, tid, arg in steps:
        m = h.state(tid) if tid else None
        if kind == "init":
            h.init(tid, arg)
        elif kind == "init360" and m is not None:
            h.init(tid, 5_000, expected_producer_id=m.producer_id, expected_epoch=m.producer_epoch + arg)
        elif kind == "add" and m is not None:
            h.add(tid, m.producer_id, m.producer_epoch, *arg)
        elif kind == "end" and m is not None:
            h.end(tid, m.producer_id, m.producer_epoch, arg)
        elif kind == "markers":
            h.deliver_markers()
        elif kind == "advance":
            h.advance(arg)
        elif kind == "commit":
            h.commit_all()
            committed = dict(h.shard.transactions)
        elif kind == "verify" and m is not None:
            # a partition verified as in the transaction is in it as committed (a marker is
            # owed to it whatever happens to the writes still waiting)
            answer = h.shard.verify_partitions(tid, m.producer_id, m.producer_epoch, [arg])
            if answer[arg] == E.none:
                c = committed.get(tid)
                assert c is not None and arg in c.partitions and c.state is S.ONGOING
                assert (c.producer_id, c.producer_epoch) == (m.producer_id, m.producer_epoch)
        elif kind == "fail":
            h.fail_from(arg)
            if not h.waiting:  # everything after the last commit undone: the committed state
                assert set(h.shard.transactions) == set(committed)
                for t, cm in committed.items():
                    assert metadata_equal(h.shard.transactions[t], cm)
    fresh = h.reloaded()
    assert set(fresh.transactions) == set(h.shard.transactions)
    for t, m in h.shard.transactions.items():
        assert metadata_equal(fresh.transactions[t], m), t
