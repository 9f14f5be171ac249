"""What a coordinator operation produces: the records it writes and the outcome of writing them.

An operation of a shard (a JoinGroup, an OffsetCommit, a timer) reads state and returns a
``CoordinatorResult``: the records to append to the shard's partition as one batch, the response,
the replies it completes that were parked earlier, and what happens once the append is known to
have succeeded or failed. The runtime appends, replays the records (unless the operation has
already applied them), then runs ``on_success`` and sends the response and completions; when the
append fails it answers with ``error_for(error)`` instead and runs ``on_failure``. Everything a
write's outcome decides is in this one object (Kafka's CoordinatorResult and its append future).

Words: a *log record* is a record of a batch (``brook.records``); a ``CoordinatorRecord`` is the
key and value objects of one log record of a coordinator's topic, and a *run* (``RecordRun``) is
many log records in a compact form of the coordinator's own (the group coordinator's
``CommitRun``: offset commits as rows of numbers).

Transactions: a *transactional write* (``CoordinatorResult.producer``, the group coordinator's
TxnOffsetCommit) is appended as one transactional batch of that producer, and its records are
replayed as the producer's, pending until its transaction ends; an ``EndTxnMarker``, alone in a
write, is the transaction marker a transaction coordinator asked for, appended as a control
batch and replayed by the shard like any record, so that a marker and the shard's own writes
reach the log and the shard in one order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from kio.schema.errors import ErrorCode

from ...storage.producer_state import UNVERIFIED

__all__ = [
    "Completion",
    "CoordinatorRecord",
    "CoordinatorResult",
    "EndTxnMarker",
    "TxnProducer",
    "RecordRun",
    "append_error",
    "record_count",
    "record_pairs",
]


@dataclass(frozen=True)
class CoordinatorRecord:
    """One record for a coordinator's topic: a key and a value object of the coordinator's
    formats (the group coordinator's ``schemas``); a value of None is a tombstone."""

    key: object
    value: object | None


class RecordRun(Protocol):
    """Many log records in a compact form of a coordinator's own, written as the records it
    stands for (the group coordinator's ``CommitRun``)."""

    def records(self) -> list[tuple[object, object | None]]:
        """The (key, value) of every record it stands for, in order."""


@dataclass(frozen=True)
class EndTxnMarker:
    """A transaction marker for the coordinator's partition: the producer's transaction ended,
    committed or aborted, as the transaction coordinator of ``coordinator_epoch`` decided. It
    stands for no key and value (``records()`` is empty): the writer appends it as a control
    batch (``brook.records.control``) and the shard replays it as the end of the producer's
    transaction."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    committed: bool

    def records(self) -> list[tuple[object, object | None]]:
        return []


class TxnProducer(NamedTuple):
    """The producer a transactional write is made for: its records are one batch with the
    transactional attribute, this producer id and epoch and no sequence, as Kafka's coordinator
    runtime writes them (the partition checks the epoch only, as for any coordinator append).
    ``guard``: the partition's verification of the producer's transaction (KIP-890,
    ``ProducerStateManager.start_verification``) that the batch must carry if it begins the
    transaction there; ``UNVERIFIED``: no verification."""

    producer_id: int
    producer_epoch: int
    guard: object = UNVERIFIED


def record_pairs(records: Iterable) -> Iterator[tuple[object, object | None]]:
    """(key, value) of every record in ``records`` (``CoordinatorRecord``s and runs), in
    order."""
    for record in records:
        if type(record) is CoordinatorRecord:
            yield record.key, record.value
        else:
            yield from record.records()


def record_count(records: list) -> int:
    """How many log records ``records`` (``CoordinatorRecord``s, runs and markers) make."""
    return sum(1 if type(r) is CoordinatorRecord or type(r) is EndTxnMarker else len(r.records())
               for r in records)


@dataclass(frozen=True)
class Completion:
    """The reply to a parked request: ``key`` is what the operation returned as ``parked``."""

    key: str
    response: object


# --- what a client is told when the records could not be written ------------------------------

#: The append's errors that send a client back to FindCoordinator, and the answer for each
#: (Kafka's table, the same for every coordinator's writes).
_RETRIABLE = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    # already an answer (a failure the runtime itself decided, e.g. the shard was unloaded)
    ErrorCode.coordinator_not_available: ErrorCode.coordinator_not_available,
    ErrorCode.not_coordinator: ErrorCode.not_coordinator,
}


def append_error(error: ErrorCode) -> ErrorCode:
    """Kafka's answer to a request whose records could not be appended with ``error`` (a
    coordinator may answer some errors otherwise: ``CoordinatorResult.error_for``)."""
    return _RETRIABLE.get(error, ErrorCode.unknown_server_error)


# --- the result ---------------------------------------------------------------------------------


@dataclass
class CoordinatorResult:
    #: To append as one batch: ``CoordinatorRecord``s and runs (``RecordRun``).
    records: list[CoordinatorRecord | RecordRun] = field(default_factory=list)
    response: object | None = None
    completions: list[Completion] = field(default_factory=list)
    #: When the response is parked: the key its completion will carry.
    parked: str | None = None
    #: Whether the runtime replays the records once appended. False when the operation has
    #: already applied them to its in-memory state (the classic group operations, as in Kafka).
    replay: bool = True
    #: Called with ``now`` once the records are written (appended and replayed, and on disk
    #: when the broker acknowledges only that): the effects that wait for the write, e.g. a
    #: group becoming Stable once its assignment is stored; returns more completions to deliver.
    on_success: Callable[[int], list[Completion]] | None = None
    #: Called with the client's answer (``error_for`` of the append's error) and ``now`` when the
    #: append failed: puts the state back on track; its result's records are appended (once,
    #: best effort) and its completions delivered. The request and every reply this result
    #: would have completed are answered with that error by the runtime.
    on_failure: Callable[[ErrorCode, int], CoordinatorResult] | None = None
    #: The table from the append's error to the client's answer.
    error_for: Callable[[ErrorCode], ErrorCode] = append_error
    #: A transactional write: the producer whose transactional batch the records are (None: a
    #: plain batch of the coordinator's).
    producer: TxnProducer | None = None

    def merge(self, other: CoordinatorResult) -> CoordinatorResult:
        """Add ``other``'s records and completions (and outcome hooks) to this result. Both must
        agree on ``replay``: a result is replayed wholly or not at all."""
        if other.records:
            if self.records and self.replay != other.replay:
                raise ValueError("cannot merge results that disagree on replaying their records")
            self.replay = other.replay
            self.records += other.records
        self.completions += other.completions
        self.on_success = _chain_success(self.on_success, other.on_success)
        self.on_failure = _chain_failure(self.on_failure, other.on_failure)
        return self

    def failed(self, error: ErrorCode, now: int) -> CoordinatorResult:
        """What the failed append of these records leads to, given the append's ``error``:
        the result of ``on_failure`` (empty when there is none)."""
        if self.on_failure is None:
            return CoordinatorResult()
        return self.on_failure(self.error_for(error), now)


def _chain_success(first, second):
    if first is None or second is None:
        return first or second

    def both(now: int) -> list[Completion]:
        return [*(first(now) or ()), *(second(now) or ())]

    return both


def _chain_failure(first, second):
    if first is None or second is None:
        return first or second

    def both(error: ErrorCode, now: int) -> CoordinatorResult:
        return first(error, now).merge(second(error, now))

    return both
