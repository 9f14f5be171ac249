"""A transactional id's state: Kafka's transaction states, their valid previous states, and the
metadata a ``__transaction_state`` record holds.

The state's ``id`` is what ``TransactionLogValue.TransactionStatus`` stores (Kafka's numbers).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

from .schemas import TransactionLogValue

__all__ = ["TransactionMetadata", "TransactionState", "VALID_PREVIOUS", "NO_PRODUCER_ID",
           "NO_PRODUCER_EPOCH", "epoch_exhausted", "InvalidTransition"]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
#: Short.MaxValue: an epoch that may not be bumped (Kafka keeps the last for its fencing bump).
_MAX_EPOCH = 32767


def epoch_exhausted(epoch: int) -> bool:
    """Whether ``epoch`` leaves no room for the bump a fence or an abort needs (Kafka's
    ``isEpochExhausted``): a new producer id is given instead."""
    return epoch >= _MAX_EPOCH - 1


class TransactionState(enum.Enum):
    #: No transaction is open; the producer id and epoch are the id's.
    EMPTY = 0
    #: Partitions have been added: a transaction is open, its timeout running.
    ONGOING = 1
    #: EndTxn(commit) was written: the markers are being written to the partitions.
    PREPARE_COMMIT = 2
    #: EndTxn(abort), a fence or a timeout was written: abort markers are being written.
    PREPARE_ABORT = 3
    #: Every commit marker is written; the next transaction may begin.
    COMPLETE_COMMIT = 4
    #: Every abort marker is written; the next transaction may begin.
    COMPLETE_ABORT = 5
    #: The id expired (transactional.id.expiration.ms): a tombstone follows.
    DEAD = 6
    #: An open transaction is being aborted to fence its producer (InitProducerId while
    #: Ongoing, or a timeout): a step in memory only, what is written is PrepareAbort with the
    #: bumped epoch.
    PREPARE_EPOCH_FENCE = 7

    @property
    def display(self) -> str:
        return "".join(w.capitalize() for w in self.name.split("_"))


S = TransactionState

#: Kafka's table of valid previous states.
VALID_PREVIOUS: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}

#: The states a transactional id can be written in (PrepareEpochFence never is; Dead is written
#: as a tombstone).
WRITTEN = frozenset(S) - {S.PREPARE_EPOCH_FENCE, S.DEAD}


class InvalidTransition(Exception):
    pass


def check_transition(old: TransactionState, new: TransactionState) -> None:
    if old not in VALID_PREVIOUS[new]:
        raise InvalidTransition(f"no transition from {old.display} to {new.display}")


@dataclass(frozen=True)
class TransactionMetadata:
    """What the coordinator knows of one transactional id (immutable: an operation makes the
    next one, and the record written says it).

    ``last_producer_epoch`` is the epoch before the last bump (Kafka's lastProducerEpoch: a
    KIP-360 retry of a bump that succeeded gets the same answer); like Kafka, brook does not
    write it, so it is -1 after a load. ``previous_producer_id`` is the producer id before the
    last rotation (an exhausted epoch)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TransactionState
    partitions: frozenset[tuple[str, int]] = field(default_factory=frozenset)
    start_ms: int = -1
    last_update_ms: int = -1
    previous_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH

    def to(self, state: TransactionState, now: int, **changes) -> TransactionMetadata:
        """The metadata in ``state`` at ``now`` (InvalidTransition if Kafka refuses the step)."""
        check_transition(self.state, state)
        return replace(self, state=state, last_update_ms=now, **changes)

    def value(self) -> TransactionLogValue:
        """The record value Kafka writes for it."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(self.partitions):
            by_topic.setdefault(topic, []).append(partition)
        partitions = None if self.state is S.EMPTY else tuple(
            (t, tuple(ps)) for t, ps in by_topic.items())
        return TransactionLogValue(
            producer_id=self.producer_id, producer_epoch=self.producer_epoch,
            timeout_ms=self.timeout_ms, status=self.state.value, partitions=partitions,
            last_update_ms=self.last_update_ms, start_ms=self.start_ms,
            previous_producer_id=self.previous_producer_id)

    @classmethod
    def from_value(cls, transactional_id: str, v: TransactionLogValue,
                   last_producer_epoch: int = NO_PRODUCER_EPOCH) -> TransactionMetadata:
        state = TransactionState(v.status)
        partitions = frozenset((t, p) for t, ps in (v.partitions or ()) for p in ps)
        return cls(transactional_id, v.producer_id, v.producer_epoch, v.timeout_ms, state,
                   partitions, v.start_ms, v.last_update_ms, v.previous_producer_id,
                   last_producer_epoch)
