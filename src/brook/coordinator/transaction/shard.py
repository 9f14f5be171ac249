"""The transactions of one partition of ``__transaction_state``: the transaction coordinator's
shard on the common runtime (``brook.coordinator.common.runtime``).

Handlers return, replay mutates. Each operation (InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn, a marker round finished, a timer) reads a transactional id's
``TransactionMetadata`` and returns a ``CoordinatorResult`` whose one record is the id's next
metadata (``CoordinatorRecord(TransactionLogKey, TransactionMetadata)``, written as Kafka's
TransactionLogValue, a tombstone when the id expires) and the answer; ``replay`` is the only code
that changes the state, for live writes and at a load alike.

Markers. Once a PrepareCommit or PrepareAbort is committed (``on_success``), and for every
transaction found in one of them when the partition is loaded, the shard hands a
``MarkerJob`` to its ``markers`` sink (``brook.coordinator.transaction.markers``), which writes
the markers to the transaction's partitions and then runs ``complete`` here, writing
CompleteCommit or CompleteAbort. EndTxn is answered once the Prepare record is committed, as in
Kafka; the producer's next transaction gets CONCURRENT_TRANSACTIONS until the markers are done.

Timers (on the runtime's clock): an Ongoing transaction is aborted by the coordinator
``timeout_ms`` after it started (its epoch bumped, fencing the producer, as Kafka does); an id
idle in Empty, CompleteCommit or CompleteAbort for ``transactional.id.expiration.ms`` is
removed with a tombstone.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from kio.schema.errors import ErrorCode

from ..common.loader import Skipped, Unreadable
from ..common.result import CoordinatorRecord, CoordinatorResult
from ..common.timer import Timers
from ...records.batch import decode_records
from .metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    InvalidTransition,
    TransactionMetadata,
    TransactionState,
    epoch_exhausted,
)
from .schemas import TransactionLogKey, UnknownKey, decode_key, decode_value

__all__ = ["InitProducerIdAnswer", "MarkerJob", "NEED_PRODUCER_ID", "TransactionConfig",
           "TransactionShard"]

S = TransactionState
E = ErrorCode


@dataclass(frozen=True)
class TransactionConfig:
    """Kafka's keys: transaction.max.timeout.ms, transactional.id.expiration.ms."""

    max_timeout_ms: int = 900_000
    id_expiration_ms: int = 604_800_000


@dataclass(frozen=True)
class InitProducerIdAnswer:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


class _NeedProducerId:
    """InitProducerId's answer when it needs a new producer id (a new transactional id, or an
    exhausted epoch) and was given none: the caller allocates one and runs it again with it."""

    def __repr__(self) -> str:
        return "NEED_PRODUCER_ID"


NEED_PRODUCER_ID = _NeedProducerId()


@dataclass(frozen=True)
class MarkerJob:
    """Markers to write: COMMIT (``commit``) or ABORT for ``producer_id``/``producer_epoch`` on
    ``partitions``; then ``complete`` on the shard of ``transactional_id``."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: frozenset[tuple[str, int]]


def _answer(error: ErrorCode) -> CoordinatorResult:
    return CoordinatorResult(response=error)


class TransactionShard:
    def __init__(self, config: TransactionConfig | None = None,
                 markers: Callable[[MarkerJob], None] | None = None) -> None:
        self.config = config or TransactionConfig()
        #: Where marker jobs go (None: kept in ``outbox``, the tests' way).
        self.markers = markers
        self.outbox: list[MarkerJob] = []
        self.transactions: dict[str, TransactionMetadata] = {}
        self.timers: Timers[CoordinatorResult] = Timers()
        #: Writes not yet committed: (offset after them, {id: what it was before}).
        self._undo: deque[tuple[int, dict[str, TransactionMetadata | None]]] = deque()
        self._loading = False

    # --- the runtime's Shard interface ------------------------------------------------------

    def batch_replayer(self, now: int) -> _Replayer:
        self._loading = True
        return _Replayer(self, now)

    def replay_records(self, records: Iterable, now: int, end: int | None = None,
                       producer_id: int = -1) -> None:
        undo: dict[str, TransactionMetadata | None] = {}
        for record in records:
            tid = record.key.transactional_id
            if end is not None and tid not in undo:
                undo[tid] = self.transactions.get(tid)
            self.replay(record.key, record.value, now)
        if end is not None:
            self._undo.append((end, undo))

    def _in_flight(self, tid: str) -> bool:
        """Whether a write of ``tid`` is not committed yet (Kafka's pending transition): what
        this shard holds of the id may still be rolled back, or lost with the partition's
        leadership, so a request on it answers CONCURRENT_TRANSACTIONS (retried by clients)
        rather than from it (a verification that found a partition "in" a transaction whose
        write was then lost let offsets be written that no marker would ever end)."""
        return any(tid in undo for _, undo in self._undo)

    def committed(self, offset: int) -> None:
        while self._undo and self._undo[0][0] <= offset:
            self._undo.popleft()

    def roll_back(self, end: int) -> list[CoordinatorRecord]:
        restored: dict[str, TransactionMetadata | None] = {}
        while self._undo and self._undo[-1][0] >= end:
            _, undo = self._undo.pop()
            restored.update(undo)  # the earlier write's old value wins
        return [CoordinatorRecord(TransactionLogKey(tid), old) for tid, old in restored.items()]

    def loaded(self, now: int) -> CoordinatorResult:
        """Loaded: the markers of every transaction in PrepareCommit or PrepareAbort are
        written again (the previous coordinator may have died before it finished)."""
        self._loading = False
        for m in self.transactions.values():
            if m.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                self._send_markers(m)
        return CoordinatorResult()

    def next_deadline(self) -> int | None:
        return self.timers.next_deadline()

    def poll(self, now: int) -> list[CoordinatorResult]:
        return self.timers.expire(now)

    # --- replay: the one place the state changes ---------------------------------------------

    def replay(self, key: TransactionLogKey, value, now: int) -> None:
        """Apply one record: ``value`` is a ``TransactionMetadata`` (live), a
        ``TransactionLogValue`` (loaded) or None (a tombstone)."""
        tid = key.transactional_id
        if value is None:
            self.transactions.pop(tid, None)
            self.timers.cancel(f"timeout-{tid}")
            self.timers.cancel(f"expire-{tid}")
            return
        if type(value) is not TransactionMetadata:
            value = TransactionMetadata.from_value(tid, value)
        self.transactions[tid] = value
        self._schedule(value)

    def _schedule(self, m: TransactionMetadata) -> None:
        tid = m.transactional_id
        if m.state is S.ONGOING:
            self.timers.schedule(f"timeout-{tid}", m.start_ms + m.timeout_ms,
                                 lambda now: self._timed_out(tid, now))
        else:
            self.timers.cancel(f"timeout-{tid}")
        if m.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            self.timers.schedule(f"expire-{tid}", m.last_update_ms + self.config.id_expiration_ms,
                                 lambda now: self._expire(tid, now))
        else:
            self.timers.cancel(f"expire-{tid}")

    # --- writes ----------------------------------------------------------------------------

    def _write(self, m: TransactionMetadata | None, tid: str, response=None) -> CoordinatorResult:
        return CoordinatorResult([CoordinatorRecord(TransactionLogKey(tid), m)], response)

    def _send_markers(self, m: TransactionMetadata) -> None:
        job = MarkerJob(m.transactional_id, m.producer_id, m.producer_epoch,
                        m.state is S.PREPARE_COMMIT, m.partitions)
        if self.markers is None:
            self.outbox.append(job)
        else:
            self.markers(job)

    def _prepare(self, m: TransactionMetadata, response) -> CoordinatorResult:
        """Write ``m`` (PrepareCommit or PrepareAbort); its markers go out once committed."""
        result = self._write(m, m.transactional_id, response)

        def written(now: int):
            current = self.transactions.get(m.transactional_id)
            if current is not None and current.state is m.state \
                    and current.producer_epoch == m.producer_epoch:
                self._send_markers(current)
            return ()

        result.on_success = written
        return result

    # --- InitProducerId ----------------------------------------------------------------------

    def init_producer_id(self, tid: str, timeout_ms: int, now: int, *,
                         expected_producer_id: int = NO_PRODUCER_ID,
                         expected_epoch: int = NO_PRODUCER_EPOCH,
                         new_producer_id: int | None = None) -> CoordinatorResult:
        """InitProducerId with a transactional id; answers ``NEED_PRODUCER_ID`` (writing
        nothing) when it needs a new producer id and ``new_producer_id`` is None.
        ``expected_*``: KIP-360's current producer id and epoch (-1: none given)."""
        def fail(error):
            return CoordinatorResult(response=InitProducerIdAnswer(error))

        if not tid:
            return fail(E.invalid_request)
        if timeout_ms <= 0 or timeout_ms > self.config.max_timeout_ms:
            return fail(E.invalid_transaction_timeout)
        if self._in_flight(tid):
            return fail(E.concurrent_transactions)
        expected = expected_producer_id != NO_PRODUCER_ID
        m = self.transactions.get(tid)
        if m is None:
            if new_producer_id is None:
                return CoordinatorResult(response=NEED_PRODUCER_ID)
            m = TransactionMetadata(tid, new_producer_id, NO_PRODUCER_EPOCH, timeout_ms, S.EMPTY,
                                    last_update_ms=now)
            fresh = True
        else:
            fresh = False
        if expected and not (
                m.producer_epoch == NO_PRODUCER_EPOCH
                or expected_producer_id == m.producer_id
                or (expected_producer_id == m.previous_producer_id
                    and epoch_exhausted(expected_epoch))):
            return fail(E.producer_fenced)
        if m.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return fail(E.concurrent_transactions)
        if m.state is S.ONGOING:
            # Abort the open transaction first, its producer fenced by the bumped epoch; the
            # client retries (CONCURRENT_TRANSACTIONS) and gets a second bump (Kafka's way).
            fence = m.to(S.PREPARE_EPOCH_FENCE, now, producer_epoch=m.producer_epoch
                         if epoch_exhausted(m.producer_epoch) else m.producer_epoch + 1)
            return self._prepare(fence.to(S.PREPARE_ABORT, now),
                                 InitProducerIdAnswer(E.concurrent_transactions))
        if m.state not in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            return fail(E.concurrent_transactions)
        if epoch_exhausted(m.producer_epoch) and not fresh:
            if new_producer_id is None:
                return CoordinatorResult(response=NEED_PRODUCER_ID)
            # A new producer id: the old one's epochs are used up.
            nxt = m.to(S.EMPTY, now, producer_id=new_producer_id, producer_epoch=0,
                       previous_producer_id=m.producer_id,
                       last_producer_epoch=m.producer_epoch if expected else NO_PRODUCER_EPOCH,
                       timeout_ms=timeout_ms, partitions=frozenset(), start_ms=-1)
        else:
            bumped = m.producer_epoch + 1
            if not expected:
                epoch, last = bumped, NO_PRODUCER_EPOCH  # a new producer: fences the old
            elif m.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == m.producer_epoch:
                epoch, last = bumped, m.producer_epoch  # KIP-360: recovering, bump
            elif expected_epoch == m.last_producer_epoch:
                epoch, last = m.producer_epoch, m.last_producer_epoch  # a retry of a bump
            else:
                return fail(E.producer_fenced)
            nxt = m.to(S.EMPTY, now, producer_epoch=epoch, last_producer_epoch=last,
                       timeout_ms=timeout_ms, partitions=frozenset(), start_ms=-1)
        return self._write(nxt, tid, InitProducerIdAnswer(E.none, nxt.producer_id,
                                                          nxt.producer_epoch))

    # --- AddPartitionsToTxn, AddOffsetsToTxn ---------------------------------------------------

    def _check_producer(self, tid: str, producer_id: int,
                        epoch: int) -> ErrorCode | TransactionMetadata:
        m = self.transactions.get(tid)
        if m is None or m.producer_id != producer_id:
            return E.invalid_producer_id_mapping
        if m.producer_epoch != epoch:
            return E.producer_fenced
        return m

    def add_partitions(self, tid: str, producer_id: int, epoch: int,
                       partitions: Iterable[tuple[str, int]], now: int) -> CoordinatorResult:
        """AddPartitionsToTxn (and AddOffsetsToTxn with the group's offsets partition): the
        answer is one error code for all of them."""
        if not tid:
            return _answer(E.invalid_request)
        m = self._check_producer(tid, producer_id, epoch)
        if type(m) is not TransactionMetadata:
            return _answer(m)
        if self._in_flight(tid) or m.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return _answer(E.concurrent_transactions)
        added = frozenset(partitions)
        if m.state is S.ONGOING and added <= m.partitions:
            return _answer(E.none)  # nothing new: nothing written
        try:
            if m.state is S.ONGOING:
                nxt = m.to(S.ONGOING, now, partitions=m.partitions | added)
            else:
                nxt = m.to(S.ONGOING, now, partitions=added, start_ms=now)
        except InvalidTransition:
            return _answer(E.invalid_txn_state)
        return self._write(nxt, tid, E.none)

    def verify_partitions(self, tid: str, producer_id: int, epoch: int,
                          partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        """AddPartitionsToTxn v4's verify_only (KIP-890), as Kafka 3.9's coordinator answers
        it: an unknown producer, a fenced epoch, a write of the id not committed yet, or
        markers still being written for the id answer every partition alike; else each partition NONE if it is in the transaction
        and TRANSACTION_ABORTABLE if it is not (the leader passes that on to older producers
        as INVALID_TXN_STATE)."""
        wanted = tuple(partitions)
        m = self._check_producer(tid, producer_id, epoch)
        if type(m) is not TransactionMetadata:
            return dict.fromkeys(wanted, m)
        if self._in_flight(tid) or m.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return dict.fromkeys(wanted, E.concurrent_transactions)
        return {tp: E.none if tp in m.partitions else E.transaction_abortable for tp in wanted}

    # --- EndTxn --------------------------------------------------------------------------------

    def end_txn(self, tid: str, producer_id: int, epoch: int, commit: bool, now: int,
                from_client: bool = True) -> CoordinatorResult:
        if not tid:
            return _answer(E.invalid_request)
        m = self.transactions.get(tid)
        if m is None or m.producer_id != producer_id:
            return _answer(E.invalid_producer_id_mapping)
        if (from_client and epoch != m.producer_epoch) or epoch < m.producer_epoch:
            return _answer(E.producer_fenced)
        if self._in_flight(tid):
            return _answer(E.concurrent_transactions)
        state = m.state
        if state is S.ONGOING:
            return self._prepare(m.to(S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, now),
                                 E.none)
        if state is S.COMPLETE_COMMIT:
            return _answer(E.none if commit else E.invalid_txn_state)
        if state is S.COMPLETE_ABORT:
            return _answer(E.invalid_txn_state if commit else E.none)
        if state is S.PREPARE_COMMIT:
            return _answer(E.concurrent_transactions if commit else E.invalid_txn_state)
        if state is S.PREPARE_ABORT:
            return _answer(E.invalid_txn_state if commit else E.concurrent_transactions)
        return _answer(E.invalid_txn_state)  # Empty (nothing to end), Dead

    def complete(self, job: MarkerJob, now: int) -> CoordinatorResult:
        """Every marker of ``job`` is written: CompleteCommit or CompleteAbort (nothing when the
        transaction moved on meanwhile, e.g. it was loaded again and its markers re-sent)."""
        m = self.transactions.get(job.transactional_id)
        want = S.PREPARE_COMMIT if job.commit else S.PREPARE_ABORT
        if m is None or m.state is not want or m.producer_id != job.producer_id \
                or m.producer_epoch != job.producer_epoch:
            return _answer(E.none)
        done = m.to(S.COMPLETE_COMMIT if job.commit else S.COMPLETE_ABORT, now,
                    partitions=frozenset())
        return self._write(done, m.transactional_id, E.none)

    # --- timers ----------------------------------------------------------------------------

    def _timed_out(self, tid: str, now: int) -> CoordinatorResult:
        """Kafka's abortTimedOutTransactions for one id: the epoch bumped (fencing the
        producer), then aborted like EndTxn(abort)."""
        m = self.transactions.get(tid)
        if m is None or m.state is not S.ONGOING or m.start_ms + m.timeout_ms > now:
            return CoordinatorResult()
        fenced = m.to(S.PREPARE_EPOCH_FENCE, now, producer_epoch=m.producer_epoch
                      if epoch_exhausted(m.producer_epoch) else m.producer_epoch + 1,
                      last_producer_epoch=NO_PRODUCER_EPOCH)
        return self._prepare(fenced.to(S.PREPARE_ABORT, now), None)

    def _expire(self, tid: str, now: int) -> CoordinatorResult:
        m = self.transactions.get(tid)
        if m is None or m.state not in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT) \
                or m.last_update_ms + self.config.id_expiration_ms > now:
            return CoordinatorResult()
        m.to(S.DEAD, now)  # (checks the step)
        return self._write(None, tid)

    # --- reads -----------------------------------------------------------------------------

    def describe(self, tid: str) -> TransactionMetadata | None:
        return self.transactions.get(tid)

    def list_transactions(self, states: frozenset[TransactionState], producer_ids: frozenset[int],
                          min_duration_ms: int, now: int) -> list[TransactionMetadata]:
        """ListTransactions: the ids in one of ``states`` (any when empty), of one of
        ``producer_ids`` (any when empty), whose transaction has run ``min_duration_ms`` or
        more (any when negative; KIP-994, as Kafka counts from the start timestamp)."""
        return [m for m in self.transactions.values()
                if m.state is not S.DEAD
                and (not states or m.state in states)
                and (not producer_ids or m.producer_id in producer_ids)
                and (min_duration_ms < 0 or now - m.start_ms >= min_duration_ms)]


class _Replayer:
    """The loader's ``BatchReplayer``: each record decoded with Kafka's schemas and replayed."""

    def __init__(self, shard: TransactionShard, now: int) -> None:
        self.shard, self.now = shard, now

    def replay_batch(self, body: bytes, start: int, stop: int, count: int, base_offset: int,
                     skipped: Skipped) -> None:
        try:
            records = decode_records(memoryview(body)[start:stop], count, base_offset, 0)
        except Exception as exc:
            skipped.unreadable.append(Unreadable(base_offset, count, f"cannot be read: {exc}"))
            return
        for i, r in enumerate(records):
            try:
                key = decode_key(r.key)
                if type(key) is UnknownKey:
                    skipped.unknown[key.version] += 1
                    continue
                value = decode_value(r.value)
                if value is not None:
                    TransactionState(value.status)  # a status Kafka does not have: unreadable
                self.shard.replay(key, value, self.now)
            except Exception as exc:
                skipped.unreadable.append(Unreadable(base_offset + i, 1,
                                                     f"cannot be replayed: {exc!r}"))


def metadata_equal(a: TransactionMetadata | None, b: TransactionMetadata | None) -> bool:
    """Equal but for ``last_producer_epoch``, which is not written (Kafka's neither)."""
    if a is None or b is None:
        return a is b
    return replace(a, last_producer_epoch=-1) == replace(b, last_producer_epoch=-1)
