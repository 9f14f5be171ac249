"""What a coordinator operation produces: the records it writes and the outcome of writing them.

An operation of a shard (a JoinGroup, an OffsetCommit, a timer) reads state and returns a
``CoordinatorResult``: the ``__consumer_offsets`` records to append as one batch, the response,
the replies it completes that were parked earlier, and what happens once the append is known to
have succeeded or failed. The runtime appends, replays the records (unless the operation has
already applied them), then runs ``on_success`` and sends the response and completions; when the
append fails it answers with ``error_for(error)`` instead and runs ``on_failure``. Everything a
write's outcome decides is in this one object (Kafka's CoordinatorResult and its append future).

Words: a *log record* is a record of a batch (``brook.records``); a ``CoordinatorRecord`` is the
key and value objects of one log record of ``__consumer_offsets``, and a ``CommitRun`` is many
offset commits of one group and topic in compact rows (how the live path writes and the loader
reads them).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from ..group.schemas import OffsetCommitKey, OffsetCommitValue

__all__ = [
    "CommitBlock",
    "CommitRun",
    "Completion",
    "CoordinatorRecord",
    "CoordinatorResult",
    "group_append_error",
    "offset_commit_append_error",
    "record_count",
    "record_pairs",
]


@dataclass(frozen=True)
class CoordinatorRecord:
    """One record for ``__consumer_offsets``: a key and a value object of ``schemas``; a value
    of None is a tombstone."""

    key: object
    value: object | None


class CommitRun(NamedTuple):
    """Consecutive offset commits of one group and topic with a version 3 value without
    metadata: each row ``(partition, offset, leader_epoch, commit_timestamp)`` stands for the
    record ``OffsetCommitKey(group, topic, partition)`` with
    ``OffsetCommitValue(offset, leader_epoch, "", commit_timestamp)``. The loader's ``rows``
    is an iterator, to be consumed once, before it moves on; an offset commit's (the live
    path's, see ``OffsetsManager.commit``) is a list."""

    group: str
    topic: str
    rows: Iterable[tuple[int, int, int, int]]

    def records(self) -> list[tuple[OffsetCommitKey, OffsetCommitValue]]:
        """The (key, value) of every record of the run (consuming an iterator of rows)."""
        group, topic = self.group, self.topic
        return [
            (OffsetCommitKey(group, topic, partition), OffsetCommitValue(offset, epoch, "", commit))
            for partition, offset, epoch, commit in self.rows
        ]


class CommitBlock(NamedTuple):
    """Offset commits of one group and topic to consecutive partitions, with one metadata, as
    the loader reads them in bulk: record ``i`` (of ``count``, at least 1) stands for
    ``OffsetCommitKey(group, topic, first + i)`` with a version 3 value (no expire timestamp)
    whose offset, leader epoch and commit timestamp are the ``i``-th 20-byte row of ``rows``:
    ``>qiq``, as the value's bytes hold them (and as ``OffsetsCache`` stores them)."""

    group: str
    topic: str
    first: int
    count: int
    rows: bytes
    metadata: str = ""

    def records(self) -> list[tuple[OffsetCommitKey, OffsetCommitValue]]:
        """The (key, value) of every record of the block."""
        group, topic, first, metadata = self.group, self.topic, self.first, self.metadata
        return [
            (OffsetCommitKey(group, topic, first + i),
             OffsetCommitValue(offset, epoch, metadata, commit))
            for i, (offset, epoch, commit) in enumerate(_BLOCK_ROW.iter_unpack(self.rows))
        ]


_BLOCK_ROW = struct.Struct(">qiq")


def record_pairs(records: Iterable) -> Iterator[tuple[object, object | None]]:
    """(key, value) of every record in ``records`` (``CoordinatorRecord``s and ``CommitRun``s),
    in order."""
    for record in records:
        if type(record) is CommitRun:
            yield from record.records()
        else:
            yield record.key, record.value


def record_count(records: list) -> int:
    """How many log records ``records`` (``CoordinatorRecord``s and ``CommitRun``s) make."""
    return sum(len(r.rows) if type(r) is CommitRun else 1 for r in records)


@dataclass(frozen=True)
class Completion:
    """The reply to a parked request: ``key`` is what the operation returned as ``parked``."""

    key: str
    response: object


# --- what a client is told when the records could not be written ------------------------------

#: The append's errors that send a client back to FindCoordinator, and the answer for each
#: (Kafka's table for group metadata and offset commits alike).
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
_TOO_LARGE = (ErrorCode.message_too_large, ErrorCode.record_list_too_large,
              ErrorCode.invalid_fetch_size)


def group_append_error(error: ErrorCode) -> ErrorCode:
    """Kafka's answer to a group request whose records could not be appended with ``error``."""
    return _RETRIABLE.get(error, ErrorCode.unknown_server_error)


def offset_commit_append_error(error: ErrorCode) -> ErrorCode:
    """As ``group_append_error``, for offset commits: too large a batch is
    INVALID_COMMIT_OFFSET_SIZE."""
    if error in _TOO_LARGE:
        return ErrorCode.invalid_commit_offset_size
    return group_append_error(error)


# --- the result ---------------------------------------------------------------------------------


@dataclass
class CoordinatorResult:
    #: To append as one batch: ``CoordinatorRecord``s and ``CommitRun``s.
    records: list[CoordinatorRecord | CommitRun] = field(default_factory=list)
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
    error_for: Callable[[ErrorCode], ErrorCode] = group_append_error

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
