"""Committed offsets of the groups of one ``__consumer_offsets`` partition, sans-I/O.

``OffsetsManager`` answers OffsetCommit, OffsetFetch, OffsetDelete and DeleteGroups (the offsets
part), and finds expired offsets (KIP-211). Handlers never change state; they return the records
to append (``CoordinatorRecord``: ``OffsetCommitKey`` with an ``OffsetCommitValue``, or None
for a tombstone) and the answer. The runtime appends the records as one batch, then replays them;
loading a partition replays its records through the same functions. Offset commits without
metadata or expire timestamp, nearly all of them, are written and replayed as ``CommitRun``s
(one group and topic, a row of numbers per partition), the shape the loader reads them back in:
``replay_commits`` applies a run, ``replay`` a single record. The offsets themselves live in an
``OffsetsCache`` (compact rows, see ``brook.coordinator.group.offsets_cache``).

Writes and reads see different states in a cluster. Operations that write (a commit validated
against its group, expiry, deletion) work on the latest state, every record applied; OffsetFetch
answers the *committed* view, without what writes not yet replicated changed. A write the
runtime replays before it is committed is bracketed by ``begin_write`` and ``end_write(end)``,
which keep what it replaced (``brook.coordinator.group.uncommitted``) until ``committed(offset)`` or
``roll_back(end)``.

The group a request names is passed in (a ``ClassicGroup`` from the classic coordinator, or None
when it has none): commits are validated against it as Kafka's classic coordinator does, and its
state, protocol type and members' subscriptions decide what expires and what may be deleted.
Offsets do not need a group: a "simple" consumer (generation -1, no member id) commits to a group
that has no metadata, and its offsets expire from their commit timestamps.

Transactional commits (TxnOffsetCommit, KIP-98 and KIP-447) are written as a transactional batch of
the producer's and replayed with its producer id into the pending offsets
(``brook.coordinator.group.pending``), which OffsetFetch does not answer; the producer's marker,
replayed by ``replay_marker``, commits them into the cache or drops them. An offset with a
pending transactional offset does not expire, and a group with an open transaction is not
removed by the expiry; deleting offsets, a group or a topic deletes the pending ones too.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from kio.schema.consumer_protocol_subscription.v0 import ConsumerProtocolSubscription
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from ..common.result import CoordinatorRecord, CoordinatorResult, append_error
from .classic_group import ClassicGroup, GroupState
from .commit_runs import CommitBlock, CommitRun
from .expiry import CONSUMER_PROTOCOL_TYPE, expiry_base
from .offsets_cache import OffsetsCache
from .pending import PendingOffsets
from .schemas import GroupMetadataKey, OffsetCommitKey, OffsetCommitValue
from .uncommitted import Uncommitted

__all__ = [
    "CommitPartition",
    "CommitResult",
    "CommitTopic",
    "CONSUMER_PROTOCOL_TYPE",
    "DeleteOffsetsResult",
    "ExpireResult",
    "FetchedOffset",
    "OffsetCommit",
    "OffsetsConfig",
    "OffsetsManager",
    "TxnOffsetCommit",
    "is_subscribed_to_topic",
    "offset_commit_append_error",
    "subscribed_topics",
    "txn_offset_commit_append_error",
]

S = GroupState


#: OffsetCommit's "use the broker's retention" and "use the time of the commit" sentinels.
DEFAULT_RETENTION_TIME = -1
DEFAULT_TIMESTAMP = -1

#: OffsetCommit's first version answering GROUP_ID_NOT_FOUND for a commit with a generation to a
#: group that does not exist (earlier versions get ILLEGAL_GENERATION).
GROUP_ID_NOT_FOUND_VERSION = 9

#: The append's errors that say the batch is too large.
_TOO_LARGE = (ErrorCode.message_too_large, ErrorCode.record_list_too_large,
              ErrorCode.invalid_fetch_size)


def offset_commit_append_error(error: ErrorCode) -> ErrorCode:
    """Kafka's answer to an OffsetCommit whose records could not be appended with ``error``:
    too large a batch is INVALID_COMMIT_OFFSET_SIZE, the rest as for any coordinator's write
    (``append_error``)."""
    if error in _TOO_LARGE:
        return ErrorCode.invalid_commit_offset_size
    return append_error(error)


#: What the partition's producer state refuses a transactional batch with: answered as it is, as
#: Kafka answers a TxnOffsetCommit (a fenced producer learns it is fenced).
_PRODUCER_ERRORS = (ErrorCode.invalid_producer_epoch, ErrorCode.producer_fenced,
                    ErrorCode.invalid_txn_state, ErrorCode.transaction_coordinator_fenced,
                    ErrorCode.invalid_producer_id_mapping)


def txn_offset_commit_append_error(error: ErrorCode) -> ErrorCode:
    """Kafka's answer to a TxnOffsetCommit whose records could not be appended with ``error``:
    the producer's own errors as they are, the rest as for an OffsetCommit."""
    if error in _PRODUCER_ERRORS:
        return error
    return offset_commit_append_error(error)


@dataclass(frozen=True)
class OffsetsConfig:
    """The broker settings the offsets manager obeys (Kafka's keys and defaults)."""

    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    offsets_retention_minutes: int = 10_080  # offsets.retention.minutes (7 days)
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000

    @classmethod
    def from_broker(cls, config: object) -> OffsetsConfig:
        """Take the three settings from a broker config that has them under the same names."""
        return cls(
            offset_metadata_max_bytes=getattr(config, "offset_metadata_max_bytes"),
            offsets_retention_minutes=getattr(config, "offsets_retention_minutes"),
            offsets_retention_check_interval_ms=getattr(
                config, "offsets_retention_check_interval_ms"
            ),
        )


# --- requests and answers -------------------------------------------------------------------


class CommitPartition(NamedTuple):
    partition: int
    offset: int
    leader_epoch: int = -1
    #: None (a null in the request) is stored as "".
    metadata: str | None = ""
    #: OffsetCommit v1 only: the client's commit time; -1 means the time of the commit.
    commit_timestamp: int = DEFAULT_TIMESTAMP


class CommitTopic(NamedTuple):
    name: str
    partitions: tuple[CommitPartition, ...]


class OffsetCommit(NamedTuple):
    group_id: str
    topics: tuple[CommitTopic, ...]
    generation: int = -1
    member_id: str = ""
    group_instance_id: str | None = None
    #: OffsetCommit v2-v4: how long to keep these offsets; -1 means the broker's retention.
    retention_time_ms: int = DEFAULT_RETENTION_TIME
    version: int = 9


class TxnOffsetCommit(NamedTuple):
    """A TxnOffsetCommit: offsets committed in the producer's transaction. The generation,
    member id and instance id (v3+, KIP-447) fence a consumer that is no longer the group's."""

    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    topics: tuple[CommitTopic, ...]
    generation: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class CommitResult(NamedTuple):
    #: The records of the accepted partitions, in request order, to be appended as one batch:
    #: a ``CommitRun`` for each run of consecutive partitions of a topic committed without
    #: metadata or expire timestamp, a ``CoordinatorRecord`` for any other.
    records: list[CoordinatorRecord | CommitRun]
    #: (topic, partition, error) for every partition of the request, in request order.
    errors: list[tuple[str, int, ErrorCode]]


class FetchedOffset(NamedTuple):
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str
    #: UNSTABLE_OFFSET_COMMIT when asked for stable offsets and a transaction is pending
    error: ErrorCode = ErrorCode.none


class DeleteOffsetsResult(NamedTuple):
    #: The group-level error; when not NONE there are no records and no partition errors.
    error: ErrorCode
    records: list[CoordinatorRecord]
    #: (topic, partition, error) for every partition of the request, in request order.
    errors: list[tuple[str, int, ErrorCode]]


class ExpireResult(NamedTuple):
    #: Tombstones for the expired offsets.
    records: list[CoordinatorRecord]
    #: Empty groups with no offsets left once these records are applied: the caller writes
    #: their metadata tombstones (the groups become Dead).
    dead_groups: list[str]


# --- subscriptions --------------------------------------------------------------------------

_read_subscription = entity_reader(ConsumerProtocolSubscription)


def _subscription_topics(metadata: bytes) -> list[str] | None:
    """The topics of a ConsumerProtocol Subscription (a version, then a body of which version 0
    is the prefix of every later one), or None when the bytes are not one."""
    if len(metadata) < 2:
        return None
    try:
        subscription, _ = _read_subscription(metadata, 2)
    except Exception:  # kio raises several types for bad bytes; all mean the same
        return None
    topics = subscription.topics
    return None if topics is None else list(topics)


def subscribed_topics(group: ClassicGroup) -> frozenset[str] | None:
    """The topics a consumer group's members subscribe to: empty for a consumer group without
    members; None when not known (the group is not of the consumer protocol type, has no
    protocol yet, or a member's metadata cannot be parsed)."""
    if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
        return None
    if not group.members:
        return frozenset()
    if group.protocol is None:
        return None
    topics: set[str] = set()
    for member in group.members.values():
        try:
            metadata = member.metadata(group.protocol)
        except KeyError:
            return None
        found = _subscription_topics(metadata)
        if found is None:
            return None
        topics.update(found)
    return frozenset(topics)


def is_subscribed_to_topic(group: ClassicGroup | None, topic: str) -> bool:
    """Whether the group consumes ``topic``. When its subscriptions are not known, a consumer
    group counts as subscribed to everything and any other group to nothing."""
    if group is None:
        return False
    topics = subscribed_topics(group)
    if topics is None:
        return group.protocol_type == CONSUMER_PROTOCOL_TYPE
    return topic in topics


def _tombstone(group_id: str, topic: str, partition: int) -> CoordinatorRecord:
    return CoordinatorRecord(OffsetCommitKey(group_id, topic, partition), None)


def _refused(request: OffsetCommit | TxnOffsetCommit, error: ErrorCode) -> CommitResult:
    """A commit refused as a whole: ``error`` for every partition, no record."""
    return CommitResult([], [(t.name, p.partition, error)
                             for t in request.topics for p in t.partitions])


def _java_length(s: str) -> int:
    """The length Java's String.length() gives: UTF-16 code units, as Kafka measures metadata."""
    if s.isascii():
        return len(s)
    return len(s.encode("utf-16-le")) // 2


# --- the manager ----------------------------------------------------------------------------


class OffsetsManager:
    """The committed offsets of one ``__consumer_offsets`` partition.

    ``groups`` is the classic coordinator's map of the partition's groups (read, never changed);
    it is what the periodic expiry of ``poll`` looks groups up in.
    """

    def __init__(
        self,
        config: OffsetsConfig | None = None,
        groups: Mapping[str, ClassicGroup] | None = None,
    ) -> None:
        self.config = config or OffsetsConfig()
        self.cache = OffsetsCache()
        #: The transactional offsets whose transaction has not ended.
        self.pending = PendingOffsets()
        #: The undo records of the writes applied but not yet committed.
        self.uncommitted = Uncommitted()
        self.groups: Mapping[str, ClassicGroup] = {} if groups is None else groups
        #: The topics a consumer group of KIP-848 subscribes to (None: no such group), whose
        #: offsets are kept while it does, as Kafka keeps them; the shard sets it.
        self.consumer_subscriptions: Callable[[str], Collection[str] | None] = lambda g: None
        #: The empty consumer groups, and the tombstones that delete one (Kafka deletes an empty
        #: group once its offsets have all expired); the shard sets them.
        self.empty_consumer_groups: Callable[[], Iterable[str]] = lambda: ()
        self.consumer_group_tombstones: Callable[[str], list[CoordinatorRecord]] = lambda g: []
        self._next_expiry: int | None = None

    # --- replay: the only place offsets change --------------------------------------------

    def replay(self, key: object, value: object | None, now: int | None = None,
               producer_id: int = -1) -> None:
        """Apply one record of the partition: an offset commit stores its value (replacing the
        partition's), a tombstone removes it (and the partition's pending offsets). An offset
        commit of a transactional batch (``producer_id`` is its producer's) is pending until
        the producer's marker. Records of other types are not the offsets'. (``now`` is
        accepted so that the runtime calls every core's replay alike; unused.)"""
        if type(key) is not OffsetCommitKey:
            return
        if value is None:
            self.cache.delete(key.group, key.topic, key.partition)
            if self.pending:
                self.pending.removed((key.group, key.topic, key.partition))
            return
        assert type(value) is OffsetCommitValue
        if producer_id >= 0:
            self.pending.add(producer_id, (key.group, key.topic, key.partition), value)
            return
        self.cache.put(key.group, key.topic, key.partition, value)
        if self.pending:
            self.pending.outdated((key.group, key.topic, key.partition))

    def replay_marker(self, producer_id: int, committed: bool) -> None:
        """The producer's transaction ended on this partition: its pending offsets are
        committed (those no later record outdated) or dropped.

        What a marker commits is never rolled back (``uncommitted`` forgets it): the
        transaction was decided before its marker was written, and a marker whose write failed
        is written again by its coordinator, so the offsets are served as soon as the marker is
        appended; a rollback putting back what they replaced would lose them for good."""
        ended = self.pending.end(producer_id)
        if not committed or not ended:
            return
        cache = self.cache
        journal, cache.journal = cache.journal, None
        moved = []
        try:
            for key, pending in ended.items():
                if pending.stale:
                    continue
                self.pending.outdated(key, before=pending.order)
                cache.put(*key, pending.value)
                moved.append(key)
        finally:
            cache.journal = journal
        self.uncommitted.forget(moved, journal)

    def replay_commits(
        self,
        group: str,
        topic: str,
        rows: Iterable[tuple[int, int, int, int]],
        now: int | None = None,
    ) -> None:
        """``replay`` of a run of offset commits of one group and topic (the loader's
        ``CommitRun``): each ``(partition, offset, leader_epoch, commit_timestamp)`` is the record
        ``OffsetCommitKey(group, topic, partition)`` with
        ``OffsetCommitValue(offset, leader_epoch, "", commit_timestamp)``, applied in order."""
        if self.pending.has_open_transactions(group):
            rows = list(rows)
            for row in rows:
                self.pending.outdated((group, topic, row[0]))
        self.cache.put_rows(group, topic, rows)

    def replay_blocks(self, blocks: Iterable[CommitBlock], now: int | None = None) -> None:
        """``replay`` of the records of ``CommitBlock``s (offset commits to consecutive
        partitions of one group and topic, the loader's bulk reading), in order."""
        pending = self.pending
        if pending:
            blocks = list(blocks)
            for group, topic, first, count, *_ in blocks:
                if pending.has_open_transactions(group):
                    for partition in range(first, first + count):
                        pending.outdated((group, topic, partition))
        self.cache.put_blocks(blocks)

    def loaded(self) -> None:
        """The partition is loaded: give back the memory the cache grew with."""
        self.cache.compact()

    # --- writes not yet committed ------------------------------------------------------------

    def begin_write(self) -> None:
        """The records replayed from now until ``end_write`` are one write, not yet committed:
        what they replace is kept."""
        self.cache.journal = {}

    def end_write(self, end: int) -> None:
        """The write begun ends at offset ``end`` (the offset after its records)."""
        journal, self.cache.journal = self.cache.journal, None
        if journal:
            self.uncommitted.add(end, journal)

    def committed(self, offset: int) -> None:
        """The high watermark reached ``offset``: the writes ending there or before are
        committed."""
        if self.uncommitted.writes:
            self.uncommitted.committed(offset)

    def roll_back(self, end: int) -> list[CoordinatorRecord]:
        """The write ending at ``end`` failed: records putting back what it and every later
        uncommitted write replaced (an offset commit of the old value, or a tombstone where
        there was none), to be replayed and written as any others."""
        return [CoordinatorRecord(OffsetCommitKey(group, topic, partition), value)
                for (group, topic, partition), value in self.uncommitted.roll_back(end).items()]

    # --- figures for the broker's metrics ---------------------------------------------------

    @property
    def cached_offsets(self) -> int:
        """How many committed offsets the cache holds (read-only; constant time)."""
        return len(self.cache)

    def cache_bytes(self) -> int:
        """An estimate of the cache's memory in bytes: its containers and rows, the group ids
        and the topic names it holds (counted once each, as they are interned). It walks every
        (group, topic), so it costs about a millisecond per 20,000 of them."""
        return self.cache.memory_bytes()

    # --- OffsetCommit ----------------------------------------------------------------------

    def validate_commit(self, request: OffsetCommit | TxnOffsetCommit,
                        group: ClassicGroup | None) -> ErrorCode:
        """The group-level answer to a commit, as Kafka's classic coordinator gives it. A
        transactional commit (KIP-447) is fenced by its generation, member id and instance id
        alike, but needs neither (a producer of a client older than KIP-447 sends none), and
        the group's rebalance does not hold it back."""
        generation = request.generation
        transactional = type(request) is TxnOffsetCommit
        if group is None:
            if generation < 0:
                return ErrorCode.none  # a simple consumer: no group management, no group
            if not transactional and request.version >= GROUP_ID_NOT_FOUND_VERSION:
                return ErrorCode.group_id_not_found
            return ErrorCode.illegal_generation
        if group.is_in(S.DEAD):
            return ErrorCode.coordinator_not_available
        if generation < 0 and group.is_in(S.EMPTY):
            return ErrorCode.none
        if generation >= 0 or request.member_id or request.group_instance_id is not None:
            error = group.validate_member(request.member_id, request.group_instance_id)
            if error is not ErrorCode.none:
                return error
            if generation != group.generation:
                return ErrorCode.illegal_generation
        elif not transactional and not group.is_in(S.EMPTY):
            # No member id and no generation (OffsetCommit v0): only while the group is empty.
            return ErrorCode.unknown_member_id
        if not transactional and group.is_in(S.COMPLETING_REBALANCE):
            # A member of the new generation that has not synced yet: let it finish the rebalance.
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def commit(self, request: OffsetCommit, group: ClassicGroup | None, now: int) -> CommitResult:
        """Answer an OffsetCommit: a record for each partition whose metadata fits (``CommitRun``
        rows for most, see ``CommitResult``), and the error of every partition (the group-level
        error for all of them when the commit is refused).

        The caller reschedules the member's heartbeat when the commit is accepted while the group
        is Stable or PreparingRebalance (a commit keeps a classic member's session alive)."""
        error = self.validate_commit(request, group)
        if error is not ErrorCode.none:
            return _refused(request, error)
        expire = (
            -1
            if request.retention_time_ms == DEFAULT_RETENTION_TIME
            else now + request.retention_time_ms
        )
        max_metadata = self.config.offset_metadata_max_bytes
        group_id = request.group_id
        records: list[CoordinatorRecord | CommitRun] = []
        errors: list[tuple[str, int, ErrorCode]] = []
        for name, partitions in request.topics:
            rows: list[tuple[int, int, int, int]] | None = None  # the topic's current run
            for partition, offset, leader_epoch, metadata, commit_ts in partitions:
                if metadata is None:
                    metadata = ""
                if _java_length(metadata) > max_metadata:
                    errors.append((name, partition, ErrorCode.offset_metadata_too_large))
                    continue
                errors.append((name, partition, ErrorCode.none))
                if commit_ts == DEFAULT_TIMESTAMP:
                    commit_ts = now
                if metadata or expire != -1:
                    records.append(
                        CoordinatorRecord(
                            OffsetCommitKey(group_id, name, partition),
                            OffsetCommitValue(offset, leader_epoch, metadata, commit_ts, expire),
                        )
                    )
                    rows = None
                    continue
                if rows is None:
                    rows = []
                    records.append(CommitRun(group_id, name, rows))
                rows.append((partition, offset, leader_epoch, commit_ts))
        return CommitResult(records, errors)

    def commit_transactional(self, request: TxnOffsetCommit, group: ClassicGroup | None,
                             now: int) -> CommitResult:
        """Answer a TxnOffsetCommit: a record for each partition whose metadata fits, committed
        at ``now``, to be written as the producer's transactional batch, and the error of every
        partition (the group-level error for all of them when the commit is refused)."""
        error = self.validate_commit(request, group)
        if error is not ErrorCode.none:
            return _refused(request, error)
        max_metadata = self.config.offset_metadata_max_bytes
        records: list[CoordinatorRecord | CommitRun] = []
        errors: list[tuple[str, int, ErrorCode]] = []
        for name, partitions in request.topics:
            for partition, offset, leader_epoch, metadata, _ in partitions:
                metadata = metadata or ""
                if _java_length(metadata) > max_metadata:
                    errors.append((name, partition, ErrorCode.offset_metadata_too_large))
                    continue
                errors.append((name, partition, ErrorCode.none))
                records.append(CoordinatorRecord(
                    OffsetCommitKey(request.group_id, name, partition),
                    OffsetCommitValue(offset, leader_epoch, metadata, now)))
        return CommitResult(records, errors)

    # --- OffsetFetch -----------------------------------------------------------------------

    def fetch(
        self, group_id: str, topics: Iterable[tuple[str, Iterable[int]]] | None = None,
        require_stable: bool = False,
    ) -> list[FetchedOffset]:
        """The committed offsets of the given (topic, partitions), in request order, with offset
        and leader epoch -1 and empty metadata where there is none; with ``topics`` None, every
        offset the group has, by topic (in first-commit order) and partition. Offsets that
        writes not yet committed changed are answered as they were before those writes. With
        ``require_stable`` (OffsetFetch v7+, KIP-447), a partition that an open transaction
        has a pending offset of is answered UNSTABLE_OFFSET_COMMIT, without an offset."""
        fetched = self._fetch(group_id, topics)
        if require_stable and self.pending.has_open_transactions(group_id):
            unstable = self.pending.partitions(group_id)
            fetched = [FetchedOffset(f.topic, f.partition, -1, -1, "",
                                     ErrorCode.unstable_offset_commit)
                       if (f.topic, f.partition) in unstable else f for f in fetched]
        return fetched

    def _fetch(
        self, group_id: str, topics: Iterable[tuple[str, Iterable[int]]] | None
    ) -> list[FetchedOffset]:
        if self.uncommitted.changes(group_id):
            return self._fetch_committed(group_id, topics)
        cache = self.cache
        if topics is None:
            return [
                FetchedOffset(topic, partition, v.offset, v.leader_epoch, v.metadata)
                for topic, partition, v in cache.group_offsets(group_id)
            ]
        fetched = []
        for topic, partitions in topics:
            for partition in partitions:
                v = cache.get(group_id, topic, partition)
                if v is None:
                    fetched.append(FetchedOffset(topic, partition, -1, -1, ""))
                else:
                    fetched.append(
                        FetchedOffset(topic, partition, v.offset, v.leader_epoch, v.metadata)
                    )
        return fetched

    def _fetch_committed(
        self, group_id: str, topics: Iterable[tuple[str, Iterable[int]]] | None
    ) -> list[FetchedOffset]:
        """``fetch`` of a group that uncommitted writes changed: their committed values over
        the cache's."""
        committed = self.uncommitted.committed_values(group_id)
        cache = self.cache
        if topics is None:
            by_topic: dict[str, dict[int, OffsetCommitValue | None]] = {}
            for topic, partition, value in cache.group_offsets(group_id):
                by_topic.setdefault(topic, {})[partition] = value
            for (topic, partition), value in committed.items():
                by_topic.setdefault(topic, {})[partition] = value
            return [FetchedOffset(topic, partition, v.offset, v.leader_epoch, v.metadata)
                    for topic, values in by_topic.items()
                    for partition, v in sorted(values.items()) if v is not None]
        fetched = []
        for topic, partitions in topics:
            for partition in partitions:
                if (topic, partition) in committed:
                    v = committed[(topic, partition)]
                else:
                    v = cache.get(group_id, topic, partition)
                if v is None:
                    fetched.append(FetchedOffset(topic, partition, -1, -1, ""))
                else:
                    fetched.append(
                        FetchedOffset(topic, partition, v.offset, v.leader_epoch, v.metadata)
                    )
        return fetched

    def has_offsets(self, group_id: str) -> bool:
        return self.cache.has_group(group_id)

    def get(self, group_id: str, topic: str, partition: int) -> OffsetCommitValue | None:
        """The committed value of one partition, or None."""
        return self.cache.get(group_id, topic, partition)

    def group_offsets(self, group_id: str) -> Iterator[tuple[str, int, OffsetCommitValue]]:
        """(topic, partition, value) of every offset of the group."""
        return self.cache.group_offsets(group_id)

    # --- DeleteGroups and OffsetDelete -----------------------------------------------------

    def delete_group(self, group_id: str) -> list[CoordinatorRecord]:
        """Tombstones for every offset of the group, pending ones included (the caller adds the
        metadata tombstone)."""
        records = [
            _tombstone(group_id, topic, partition)
            for topic, partition, _ in self.cache.group_offsets(group_id)
        ]
        cache = self.cache
        records += [_tombstone(group_id, topic, partition)
                    for topic, partition in sorted(self.pending.partitions(group_id))
                    if cache.get(group_id, topic, partition) is None]
        return records

    def delete_offsets(
        self,
        group_id: str,
        topics: Iterable[tuple[str, Iterable[int]]],
        group: ClassicGroup | None,
    ) -> DeleteOffsetsResult:
        """Answer an OffsetDelete (KIP-496): tombstones for the committed offsets of topics the
        group does not subscribe to; GROUP_SUBSCRIBED_TO_TOPIC for the partitions of topics it
        does. A group with members may delete offsets only if it is a consumer group
        (NON_EMPTY_GROUP otherwise); an unknown group is GROUP_ID_NOT_FOUND unless it has
        offsets (a simple consumer's)."""
        if group is None:
            if not self.cache.has_group(group_id):
                return DeleteOffsetsResult(ErrorCode.group_id_not_found, [], [])
        elif group.is_in(S.DEAD):
            return DeleteOffsetsResult(ErrorCode.group_id_not_found, [], [])
        elif not group.is_in(S.EMPTY) and group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return DeleteOffsetsResult(ErrorCode.non_empty_group, [], [])
        subscribed = None if group is None else subscribed_topics(group)
        consumer = group is not None and group.protocol_type == CONSUMER_PROTOCOL_TYPE
        records: list[CoordinatorRecord] = []
        errors: list[tuple[str, int, ErrorCode]] = []
        for topic, partitions in topics:
            is_subscribed = consumer if subscribed is None else topic in subscribed
            for partition in partitions:
                if is_subscribed:
                    errors.append((topic, partition, ErrorCode.group_subscribed_to_topic))
                    continue
                errors.append((topic, partition, ErrorCode.none))
                if (self.cache.get(group_id, topic, partition) is not None
                        or self.pending.has(group_id, topic, partition)):
                    records.append(_tombstone(group_id, topic, partition))
        return DeleteOffsetsResult(ErrorCode.none, records, errors)

    def delete_topics(self, topics: Collection[str]) -> list[CoordinatorRecord]:
        """Tombstones for every group's committed offsets of these topics, which were deleted:
        Kafka removes them with the topic, so that a topic created again under the same name
        does not start its groups at the old topic's offsets. (An Empty group left without
        offsets is then removed by the next expiry check, as one whose offsets expired.)"""
        cache = self.cache
        records: list[CoordinatorRecord] = []
        for group_id in cache.groups():
            for topic in cache.topics(group_id):
                if topic in topics:
                    records += [_tombstone(group_id, topic, partition)
                                for partition, _ in cache.topic_offsets(group_id, topic)]
        if self.pending:
            records += [_tombstone(*key) for key in sorted(self.pending.keys())
                        if key[1] in topics and cache.get(*key) is None]
        return records

    # --- expiry (KIP-211) ------------------------------------------------------------------

    def expire(self, now: int, groups: Mapping[str, ClassicGroup]) -> ExpireResult:
        """Tombstones for the offsets expired at ``now``, and the Empty groups left without
        offsets. ``groups`` are the classic groups of the partition (by id). Which offsets
        expire, and from when, is ``brook.coordinator.group.expiry``'s rule (KIP-211)."""
        retention = self.config.offsets_retention_ms
        cache = self.cache
        records: list[CoordinatorRecord] = []
        dead: list[str] = []
        empty_consumer = set(self.empty_consumer_groups())
        for group_id in [*cache.groups(), *(g for g in groups if not cache.has_group(g)),
                         *(g for g in empty_consumer if not cache.has_group(g))]:
            group = groups.get(group_id)
            consumer_topics = self.consumer_subscriptions(group_id) if group is None else None
            if consumer_topics is not None:  # from commit timestamps, but for subscribed topics
                state, protocol_type, state_ts = "Stable", CONSUMER_PROTOCOL_TYPE, -1
                subscribed = consumer_topics
            elif group is None:
                state, protocol_type, state_ts, subscribed = None, None, -1, None
            else:
                state, protocol_type = str(group.state), group.protocol_type
                state_ts = group.state_timestamp
                subscribed = (subscribed_topics(group) if group.is_in(S.STABLE)
                              and protocol_type == CONSUMER_PROTOCOL_TYPE else None)
            all_expired = True
            pending = self.pending.partitions(group_id) if self.pending else ()
            for topic in cache.topics(group_id):
                base = expiry_base(state, protocol_type, state_ts, subscribed, topic)
                if base is None:
                    all_expired = False
                    continue
                expired, every = cache.expired(group_id, topic, now, base, retention)
                if pending:  # an offset a transaction is about to replace stays
                    kept = [p for p in expired if (topic, p) in pending]
                    if kept:
                        expired = [p for p in expired if (topic, p) not in pending]
                        every = False
                records += [_tombstone(group_id, topic, p) for p in expired]
                if not every:
                    all_expired = False
            if (all_expired and group is not None and group.is_in(S.EMPTY)
                    and not self.pending.has_open_transactions(group_id)):
                dead.append(group_id)
            elif (all_expired and group_id in empty_consumer
                  and not self.pending.has_open_transactions(group_id)):
                records += self.consumer_group_tombstones(group_id)
        return ExpireResult(records, dead)

    # --- the periodic expiry task ----------------------------------------------------------

    def next_deadline(self) -> int | None:
        """When ``poll`` has work: the next expiry check (0 before the first poll, which only
        schedules the first check one ``offsets.retention.check.interval.ms`` later)."""
        return 0 if self._next_expiry is None else self._next_expiry

    def poll(self, now: int) -> CoordinatorResult:
        """Every ``offsets.retention.check.interval.ms``: tombstones for the expired offsets and
        for the metadata of the Empty groups they leave without offsets (which become Dead when
        the classic coordinator replays their tombstones)."""
        interval = self.config.offsets_retention_check_interval_ms
        if self._next_expiry is None:
            self._next_expiry = now + interval
            return CoordinatorResult()
        if now < self._next_expiry:
            return CoordinatorResult()
        self._next_expiry = now + interval
        expired = self.expire(now, self.groups)
        records = expired.records
        records += [CoordinatorRecord(GroupMetadataKey(g), None) for g in expired.dead_groups]
        return CoordinatorResult(records=records)
