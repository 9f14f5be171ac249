"""Idempotent and transactional producer state of one partition log, with Kafka's semantics.

For every producer id that wrote to the partition the state keeps its epoch, the metadata
of its last five batches (sequence range, offset range, max timestamp) and the timestamp of
its last write. A Produce from an idempotent producer (producer id >= 0, base sequence >= 0)
is checked against that state before it is written:

* a batch whose epoch and exact sequence range match a retained batch is a *duplicate* (a
  retry of a write that succeeded): it is not written again, and the answer carries the
  offsets it got the first time;
* an epoch older than the producer's is refused (`InvalidProducerEpochError`);
* a newer epoch must start at sequence 0, unless the producer is unknown here;
* within an epoch each batch must continue the sequence (`last + 1`, wrapping from
  2^31-1 to 0), else `OutOfOrderSequenceError`; an unknown producer (never seen, expired,
  or its data deleted) may start anywhere, as Kafka allows since KIP-360.

Transactions (KIP-98), as Kafka's ProducerAppendInfo keeps them:

* a producer's transactional batch (the transactional bit) when it has no open transaction
  on the partition starts one there: its first offset is the transaction's
  (`current_txn_first_offset`);
* verification (KIP-890 part 1): when the leader verifies, a client's batch that would begin
  a transaction must carry the guard of a verification started for its producer
  (`start_verification`, before the leader asked the transaction coordinator whether the
  partition is in the transaction) and still standing: any transactional batch or marker of
  the producer written meanwhile drops the guard, so a Produce delayed past its
  transaction's abort cannot begin a transaction nobody will end (INVALID_TXN_STATE). While
  a verification stands, a batch of a higher sequence than the lowest it was started with
  is out of order, as in Kafka (a lower sequence's retry must come first). A group
  coordinator's transactional batch (TxnOffsetCommit, no sequence) is verified the same way
  when it comes with a guard;
* a non-transactional batch of a producer with an open transaction is refused
  (`InvalidTxnStateError`, INVALID_TXN_STATE);
* a marker (a control batch holding an EndTransactionMarker: COMMIT or ABORT) ends the open
  transaction, if there is one: the plan names it (`CompletedTxn`) with the last stable
  offset once it ended (the first offset of the earliest transaction of another producer
  still open, or the marker's offset + 1), which the log writes to the aborted-transaction
  index for an ABORT. A marker's producer epoch is checked as a batch's, and its
  coordinator epoch must not be older than the last the producer's markers carried
  (`TransactionCoordinatorFencedError`). An empty control batch (the cleaner emptied it)
  changes nothing.

The transactions still open are kept in order of their first offsets (`ongoing`); those
ended by a marker the high watermark has not passed yet stay unstable
(`unreplicated`, pruned by `first_unstable_offset(high_watermark)`): the last stable offset
is the high watermark or, if lower, the first offset of the earliest of either.

The core is sans-I/O and follows "handlers return, replay mutates": `prepare` reads the
state and returns the updated entries (or the duplicate), the transactions begun and ended,
without changing anything; `apply` is the only code that changes it, for live appends and for
`replay` of batch headers (and markers) read back from the log at load time alike.

Snapshots let a restart skip most of that replay. A snapshot is a file
`<20-digit offset>.snapshot` in the log directory (Kafka's name) holding the state of every
batch below that offset, in brook's own format:

    version int16 (1) | crc uint32: CRC-32C of everything after it
    offset int64 (the offset in the file name) | producer count int32
    per producer, in producer id order:
        producer_id int64 | producer_epoch int16 | coordinator_epoch int32
        last_timestamp int64 | current_txn_first_offset int64 | batch count int8 (0..5)
        per batch, oldest first:
            first_seq int32 | last_seq int32 | first_offset int64 | last_offset int64
            max_timestamp int64

All big-endian. A file that is short, long, of an unknown version, or fails its CRC is
corrupt and is ignored (and removed) by the loader.
"""

from __future__ import annotations

import enum
import logging
import os
import struct
from dataclasses import dataclass, field
from typing import Iterable, Mapping, NamedTuple

from ..records.crc import crc32c

from ..records.batch import (CONTROL_BIT, NO_PRODUCER_EPOCH, NO_SEQUENCE, NO_TIMESTAMP,
                             TRANSACTIONAL_BIT)
from ..records.control import ABORT, COMMIT, NO_MARKER
from .errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from .producer_budget import ProducerIdBudget

log = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms (1 day)
INT32_MAX = 2**31 - 1

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1


class AppendOrigin(enum.Enum):
    """Who is appending, which decides how much is checked (Kafka's AppendOrigin)."""

    CLIENT = "client"  # Produce requests: everything is checked, duplicates are answered
    COORDINATOR = "coordinator"  # a coordinator writing its own records: epochs only
    REPLICATION = "replication"  # followers and replay of the log: nothing is checked


class ProducerBatch(NamedTuple):
    """The header fields of one batch that producer state needs (offsets as assigned), and
    for a control batch the marker its record holds (NO_MARKER: none, or not a control
    batch)."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    first_offset: int
    last_offset: int
    max_timestamp: int
    attributes: int = 0
    control_type: int = NO_MARKER  # records.control: ABORT or COMMIT
    coordinator_epoch: int = -1

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset - self.first_offset) & INT32_MAX

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)


class CompletedTxn(NamedTuple):
    """A transaction a marker ended (Kafka's CompletedTxn), with the last stable offset once
    it had ended (what the aborted-transaction index keeps)."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    aborted: bool
    last_stable_offset: int


class BatchMetadata(NamedTuple):
    """What is remembered of each of a producer's last batches."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    max_timestamp: int


@dataclass(frozen=True, slots=True)
class ProducerStateEntry:
    """The state of one producer id. Immutable: updates build a new entry."""

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: tuple[BatchMetadata, ...] = ()  # oldest first, at most NUM_BATCHES_TO_RETAIN
    last_timestamp: int = NO_TIMESTAMP
    coordinator_epoch: int = -1  # of the last marker
    current_txn_first_offset: int = -1  # of the open transaction; -1: none

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def first_seq(self) -> int:
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for meta in self.batches:
            if meta.first_seq == first_seq and meta.last_seq == last_seq:
                return meta
        return None

    def with_batch(self, batch: ProducerBatch, txn_first_offset: int) -> "ProducerStateEntry":
        """This entry after a data batch, within the transaction begun at `txn_first_offset`
        (-1: none) (a new epoch forgets the old epoch's batches)."""
        kept = self.batches if batch.producer_epoch == self.producer_epoch else ()
        meta = BatchMetadata(batch.base_sequence, batch.last_sequence, batch.first_offset,
                             batch.last_offset, batch.max_timestamp)
        return ProducerStateEntry(self.producer_id, batch.producer_epoch,
                                  (kept + (meta,))[-NUM_BATCHES_TO_RETAIN:], batch.max_timestamp,
                                  self.coordinator_epoch, txn_first_offset)

    def with_marker(self, batch: ProducerBatch) -> "ProducerStateEntry":
        """This entry after a marker: its epoch (a new one forgets the old epoch's batches)
        and coordinator epoch, no open transaction."""
        kept = self.batches if batch.producer_epoch == self.producer_epoch else ()
        return ProducerStateEntry(self.producer_id, batch.producer_epoch, kept, batch.max_timestamp,
                                  batch.coordinator_epoch, -1)


@dataclass(frozen=True, slots=True)
class ProducerAppendPlan:
    """What `prepare` decided: the entries to store once the batches are written, the
    transactions they begin ((first offset, producer id), in log order) and end, or the
    already-written batch that the append duplicates (then nothing is to be written)."""

    updates: Mapping[int, ProducerStateEntry] = field(default_factory=dict)
    duplicate: BatchMetadata | None = None
    now_ms: int = 0  # when the batches were appended (the budget's age of the entries)
    started: tuple[tuple[int, int], ...] = ()
    completed: tuple[CompletedTxn, ...] = ()
    #: producers whose verification the plan's transactional batches and markers end
    verified: frozenset[int] = frozenset()


#: `prepare(guard=UNVERIFIED)`: the append needs no verification (it is off, or the append is
#: not a leader's of a client's batches)
UNVERIFIED = object()


@dataclass(slots=True)
class Verification:
    """A verification of a producer's transaction started on this partition (Kafka's
    VerificationStateEntry): `guard` is what the append that follows must carry."""

    guard: object
    started_ms: int
    epoch: int
    lowest_sequence: int


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class ProducerStateManager:
    """The producer state of one partition log (Kafka's ProducerStateManager). Sans-I/O:
    snapshots are bytes, files are the log's business."""

    def __init__(self, producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
                 budget: "ProducerIdBudget | None" = None) -> None:
        self.producers: dict[int, ProducerStateEntry] = {}
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.budget = budget  # the broker-wide bound (producer.id.max.count), if any
        #: open transactions, first offset -> producer id, in offset order (a transaction
        #: begins at the log end, after every open one)
        self.ongoing: dict[int, int] = {}
        #: transactions ended by a marker the high watermark may not have passed yet,
        #: (first offset, marker offset)
        self.unreplicated: list[tuple[int, int]] = []
        #: producer id -> its verification in progress (KIP-890), in memory only as in Kafka
        self.verifications: dict[int, Verification] = {}

    def __len__(self) -> int:
        return len(self.producers)

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    # ------------------------------------------------------------ verification (KIP-890)

    def start_verification(self, producer_id: int, epoch: int, sequence: int,
                           now_ms: int) -> object | None:
        """The guard a client's batch beginning a transaction must carry, once the coordinator
        confirmed the partition is in the transaction; None when the producer has a
        transaction open here already (no verification needed). A verification already
        standing is reused, its lowest sequence lowered or its epoch moved on."""
        entry = self.producers.get(producer_id)
        if entry is not None and entry.current_txn_first_offset >= 0:
            return None
        v = self.verifications.get(producer_id)
        if v is None:
            v = self.verifications[producer_id] = Verification(object(), now_ms, epoch, sequence)
        elif epoch > v.epoch:
            v.epoch, v.lowest_sequence = epoch, sequence
        elif epoch == v.epoch and sequence < v.lowest_sequence:
            v.lowest_sequence = sequence
        return v.guard

    # ------------------------------------------------------------ check, then apply

    def prepare(self, batches: Iterable[ProducerBatch],
                origin: AppendOrigin = AppendOrigin.CLIENT, now_ms: int = 0,
                guard: object = UNVERIFIED) -> ProducerAppendPlan:
        """Check `batches` (in log order, offsets assigned) against the state; change nothing.

        Each batch is checked against the state including the earlier batches of the same
        call. Duplicates are looked for among batches already written, and, as in Kafka,
        one duplicate makes the whole append a duplicate. Batches without a producer id
        are skipped. Raises InvalidProducerEpochError, OutOfOrderSequenceError,
        InvalidTxnStateError or TransactionCoordinatorFencedError (not for REPLICATION, which
        takes what its leader wrote), and for a client's producer id new here
        ProducerIdBudgetFullError while the broker's bound is reached by active producers.
        `guard` (a client's append on a leader that verifies, or a group coordinator's
        TxnOffsetCommit): what `start_verification` returned, None if it was not called; a
        batch beginning a transaction needs the producer's standing verification's guard
        (InvalidTxnStateError).
        """
        producers = self.producers
        updates: dict[int, ProducerStateEntry] = {}
        started: list[tuple[int, int]] = []
        completed: list[CompletedTxn] = []
        verified: set[int] = set()
        client = origin is AppendOrigin.CLIENT
        check_epoch = origin is not AppendOrigin.REPLICATION
        for batch in batches:
            pid = batch.producer_id
            if pid < 0:
                continue
            if self.verifications and batch.attributes & TRANSACTIONAL_BIT \
                    and pid in self.verifications:
                verified.add(pid)
            current = producers.get(pid)
            control = batch.attributes & CONTROL_BIT
            if client and current is not None and not control:
                dup = current.find_duplicate(batch.producer_epoch, batch.base_sequence, batch.last_sequence)
                if dup is not None:
                    return ProducerAppendPlan({}, dup)
            entry = updates.get(pid)
            if entry is None:
                entry = current if current is not None else ProducerStateEntry(pid)
            if control:
                marker = batch.control_type
                if marker != ABORT and marker != COMMIT:
                    continue  # emptied by the cleaner (or no marker): nothing to apply
                if check_epoch:
                    _check_epoch(entry, batch)
                    if batch.coordinator_epoch < entry.coordinator_epoch:
                        raise TransactionCoordinatorFencedError(
                            f"producer {pid} at offset {batch.first_offset}: marker of "
                            f"coordinator epoch {batch.coordinator_epoch}, older than "
                            f"{entry.coordinator_epoch}")
                first = entry.current_txn_first_offset
                if first >= 0:  # a marker with no transaction open changes no offset
                    completed.append(CompletedTxn(
                        pid, first, batch.first_offset, marker == ABORT,
                        self._next_open_txn(pid, started, completed, batch.first_offset + 1)))
                updates[pid] = entry.with_marker(batch)
                continue
            if check_epoch:
                _check_epoch(entry, batch)
            verification = self.verifications.get(pid) if self.verifications else None
            if client:
                if verification is not None and batch.base_sequence > verification.lowest_sequence:
                    raise OutOfOrderSequenceError(
                        f"producer {pid} at offset {batch.first_offset}: sequence "
                        f"{batch.base_sequence} while its transaction is verified from sequence "
                        f"{verification.lowest_sequence}")
                _check_sequence(entry, batch)
            first = entry.current_txn_first_offset
            if batch.attributes & TRANSACTIONAL_BIT:
                if first < 0:  # begins a transaction
                    if check_epoch and guard is not UNVERIFIED and (
                            verification is None or verification.guard is not guard):
                        raise InvalidTxnStateError(
                            f"producer {pid} at offset {batch.first_offset}: the partition is "
                            f"not verified to be in its transaction")
                    first = batch.first_offset
                    started.append((first, pid))
            elif first >= 0 and check_epoch:
                raise InvalidTxnStateError(
                    f"producer {pid} at offset {batch.first_offset}: a non-transactional batch "
                    f"while its transaction from offset {first} is open")
            updates[pid] = entry.with_batch(batch, first)
        if client and self.budget is not None:
            new = sum(1 for pid in updates if pid not in producers)
            if new:
                self.budget.admit(new, now_ms)
        return ProducerAppendPlan(updates, now_ms=now_ms, started=tuple(started),
                                  completed=tuple(completed), verified=frozenset(verified))

    def _next_open_txn(self, pid: int, started: list[tuple[int, int]],
                       completed: list[CompletedTxn], otherwise: int) -> int:
        """The first offset of the earliest transaction of another producer still open at
        this point of a plan, else `otherwise` (Kafka's lastStableOffset(completedTxn))."""
        ended = {t.first_offset for t in completed}
        for first, owner in self.ongoing.items():
            if owner != pid and first not in ended:
                return first
        for first, owner in started:
            if owner != pid and first not in ended:
                return first
        return otherwise

    def apply(self, plan: ProducerAppendPlan) -> None:
        """Store what `prepare` returned, once the batches are in the log. The only code
        that changes producer state, live or on replay."""
        if plan.duplicate is None:
            self.producers.update(plan.updates)
            if plan.started or plan.completed:
                ongoing = self.ongoing
                for first, pid in plan.started:
                    ongoing[first] = pid  # after every open one: the order holds
                for txn in plan.completed:
                    ongoing.pop(txn.first_offset, None)
                    self.unreplicated.append((txn.first_offset, txn.last_offset))
            for pid in plan.verified:
                # a transaction begun or ended here since: the guard has served, or is stale
                self.verifications.pop(pid, None)
            if self.budget is not None:
                self.budget.touched(self, plan.updates, plan.now_ms)

    def replay(self, batches: Iterable[ProducerBatch], now_ms: int = 0) -> ProducerAppendPlan:
        """Rebuild state from batch headers read back from the log (nothing is checked);
        returns the plan applied."""
        plan = self.prepare(batches, AppendOrigin.REPLICATION, now_ms)
        self.apply(plan)
        return plan

    # ------------------------------------------------------------ transactions

    def first_unstable_offset(self, high_watermark: int | None = None) -> int | None:
        """The first offset of the earliest transaction that is open, or ended by a marker at
        or past `high_watermark` (those below it are forgotten here); None if there is none."""
        unreplicated = self.unreplicated
        if unreplicated and high_watermark is not None:
            unreplicated = self.unreplicated = [t for t in unreplicated if t[1] >= high_watermark]
        first = next(iter(self.ongoing), None)
        for txn_first, _ in unreplicated:
            if first is None or txn_first < first:
                first = txn_first
        return first

    def first_undecided_offset(self) -> int | None:
        """The first offset of the earliest open transaction (markers not looked at)."""
        return next(iter(self.ongoing), None)

    # ------------------------------------------------------------ expiry

    def is_expired(self, entry: ProducerStateEntry, now_ms: int) -> bool:
        return (entry.current_txn_first_offset < 0
                and now_ms - entry.last_timestamp >= self.producer_id_expiration_ms)

    def remove_expired_producers(self, now_ms: int) -> list[int]:
        """Forget producers idle for `producer.id.expiration.ms` (measured, as in Kafka, from
        the max timestamp of their last batch); return their ids."""
        expired = [pid for pid, e in self.producers.items() if self.is_expired(e, now_ms)]
        for pid in expired:
            del self.producers[pid]
        if self.verifications:  # a verification whose append never came
            self.verifications = {
                pid: v for pid, v in self.verifications.items()
                if now_ms - v.started_ms < self.producer_id_expiration_ms}
        if self.budget is not None:
            self.budget.forget(self, expired)
        return expired

    def last_data_offsets(self) -> dict[int, int]:
        """producer id -> last offset of its last batch, for every producer with one (the
        cleaner keeps those batches so the state can be rebuilt from the log)."""
        return {pid: e.last_data_offset for pid, e in self.producers.items() if e.batches}

    def last_marker_epochs(self) -> dict[int, int]:
        """producer id -> epoch, for every producer whose last record is a marker of a newer
        epoch than its batches' (the cleaner keeps that marker: it holds the epoch)."""
        return {pid: e.producer_epoch for pid, e in self.producers.items()
                if not e.batches and e.producer_epoch >= 0}

    def clear(self) -> None:
        if self.budget is not None:
            self.budget.forget(self, self.producers)
        self.producers.clear()
        self.ongoing.clear()
        self.unreplicated.clear()
        self.verifications.clear()

    # ------------------------------------------------------------ snapshots

    def snapshot(self, offset: int) -> bytes:
        """The state as snapshot bytes, for a file named after `offset`."""
        return encode_snapshot(offset, self.producers.values())

    def load_snapshot(self, data: bytes, offset: int, now_ms: int) -> None:
        """Replace the state by a snapshot's (expired producers are dropped).
        Raises CorruptSnapshotError."""
        entries = decode_snapshot(data, offset)
        self.clear()
        self.producers = {e.producer_id: e for e in entries if not self.is_expired(e, now_ms)}
        open_txns = sorted((e.current_txn_first_offset, e.producer_id)
                           for e in self.producers.values() if e.current_txn_first_offset >= 0)
        self.ongoing = dict(open_txns)
        if self.budget is not None:
            self.budget.touched(self, list(self.producers), now_ms)


def _check_epoch(entry: ProducerStateEntry, batch: ProducerBatch) -> None:
    if batch.producer_epoch < entry.producer_epoch:
        raise InvalidProducerEpochError(
            f"producer {batch.producer_id} at offset {batch.first_offset}: epoch "
            f"{batch.producer_epoch} is older than the current epoch {entry.producer_epoch}")


def _check_sequence(entry: ProducerStateEntry, batch: ProducerBatch) -> None:
    pid, epoch, first_seq = batch.producer_id, batch.producer_epoch, batch.base_sequence
    if entry.producer_epoch == NO_PRODUCER_EPOCH:
        return  # an unknown producer may start at any sequence (KIP-360)
    if epoch != entry.producer_epoch:
        if first_seq != 0:
            raise OutOfOrderSequenceError(
                f"producer {pid} at offset {batch.first_offset}: new epoch {epoch} starts at "
                f"sequence {first_seq}, not 0 (current epoch {entry.producer_epoch})")
    elif not in_sequence(entry.last_seq, first_seq):
        raise OutOfOrderSequenceError(
            f"producer {pid} at offset {batch.first_offset}: sequence {first_seq} does not "
            f"follow the last sequence {entry.last_seq} of epoch {epoch}")


# ---------------------------------------------------------------- snapshot format


class CorruptSnapshotError(Exception):
    """A snapshot file that cannot be trusted (torn, damaged, or of an unknown version)."""


_SNAP_HEAD = struct.Struct(">hI")  # version, crc
_SNAP_BODY_HEAD = struct.Struct(">qi")  # offset, producer count
_SNAP_PRODUCER = struct.Struct(">qhiqqb")
_SNAP_BATCH = struct.Struct(">iiqqq")


def encode_snapshot(offset: int, entries: Iterable[ProducerStateEntry]) -> bytes:
    entries = sorted(entries, key=lambda e: e.producer_id)
    parts = [_SNAP_BODY_HEAD.pack(offset, len(entries))]
    for e in entries:
        parts.append(_SNAP_PRODUCER.pack(e.producer_id, e.producer_epoch, e.coordinator_epoch,
                                         e.last_timestamp, e.current_txn_first_offset, len(e.batches)))
        parts.extend(_SNAP_BATCH.pack(*meta) for meta in e.batches)
    body = b"".join(parts)
    return _SNAP_HEAD.pack(SNAPSHOT_VERSION, crc32c(body)) + body


def decode_snapshot(data: bytes, offset: int | None = None) -> list[ProducerStateEntry]:
    """Parse snapshot bytes; `offset`, if given, must be the one the snapshot holds."""
    if len(data) < _SNAP_HEAD.size + _SNAP_BODY_HEAD.size:
        raise CorruptSnapshotError(f"{len(data)} bytes is too short for a snapshot")
    version, crc = _SNAP_HEAD.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"unknown snapshot version {version}")
    body = memoryview(data)[_SNAP_HEAD.size:]
    if crc32c(body) != crc:
        raise CorruptSnapshotError("snapshot CRC does not match")
    stored_offset, count = _SNAP_BODY_HEAD.unpack_from(body)
    if offset is not None and stored_offset != offset:
        raise CorruptSnapshotError(f"snapshot holds offset {stored_offset}, its name says {offset}")
    pos = _SNAP_BODY_HEAD.size
    entries = []
    try:
        for _ in range(count):
            pid, epoch, coord, last_ts, txn_first, n = _SNAP_PRODUCER.unpack_from(body, pos)
            pos += _SNAP_PRODUCER.size
            if not 0 <= n <= NUM_BATCHES_TO_RETAIN:
                raise CorruptSnapshotError(f"producer {pid} has {n} batches")
            batches = []
            for _ in range(n):
                batches.append(BatchMetadata(*_SNAP_BATCH.unpack_from(body, pos)))
                pos += _SNAP_BATCH.size
            entries.append(ProducerStateEntry(pid, epoch, tuple(batches), last_ts, coord, txn_first))
    except struct.error:
        raise CorruptSnapshotError("snapshot ends inside an entry") from None
    if pos != len(body):
        raise CorruptSnapshotError(f"{len(body) - pos} bytes after the last entry")
    return entries


# ---------------------------------------------------------------- snapshot files


def snapshot_file_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def list_snapshot_offsets(directory: str) -> list[int]:
    """Offsets of the snapshot files in `directory`, ascending."""
    out = []
    for name in os.listdir(directory):
        if name.endswith(SNAPSHOT_SUFFIX) and len(name) == 20 + len(SNAPSHOT_SUFFIX) and name[:20].isdigit():
            out.append(int(name[:20]))
    return sorted(out)


def write_snapshot_file(directory: str, offset: int, data: bytes, *, sync: bool) -> str:
    """Write a snapshot atomically (temporary file, then rename); return its path."""
    path = os.path.join(directory, snapshot_file_name(offset))
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return path


def delete_snapshot_file(directory: str, offset: int) -> None:
    try:
        os.unlink(os.path.join(directory, snapshot_file_name(offset)))
    except FileNotFoundError:
        pass


def remove_temporary_snapshot_files(directory: str) -> None:
    for name in os.listdir(directory):
        if name.endswith(SNAPSHOT_SUFFIX + ".tmp"):
            os.unlink(os.path.join(directory, name))
