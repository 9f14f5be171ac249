"""The group coordinator of one ``__consumer_offsets`` partition, sans-I/O (Kafka's
GroupCoordinatorShard).

A shard owns the two managers of its partition: the classic groups (``ClassicGroupCoordinator``:
the group state machine, joins, syncs, heartbeats, sessions) and the committed offsets
(``OffsetsManager``: commits, fetches, deletion, expiry). It routes every record to the manager
that owns its type when replaying, and offers the operations the API handlers need, each taking
``now`` and returning a ``CoordinatorResult`` (writes) or an answer (reads). Rules that involve
both managers live here: deleting a group, a commit keeping a member's session alive, which
commits a deleted topic may still take.

The runtime (``brook.coordinator.common.runtime``) runs these operations one at a time per shard,
appends their records, and replays them through ``replay`` / ``replay_commits``, the same two
functions that load the partition. Transactions take the same path: a TxnOffsetCommit's records
are the producer's transactional batch, replayed with its producer id (pending offsets), and a
transaction marker for the partition is an operation of the shard too
(``complete_transaction``), appended and replayed in turn with the shard's other writes by
``replay_marker``, which the loader calls for the markers it reads. A write replayed before it
is committed (a cluster's, until the high watermark passes it) keeps what it replaced of the
committed offsets until the runtime calls ``committed`` or ``roll_back``
(``brook.coordinator.group.uncommitted``); OffsetFetch answers the committed offsets meanwhile.
The consumer groups such a write changed are copied before it, and put back by ``roll_back``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Iterable
from operator import itemgetter
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from ...storage.producer_state import UNVERIFIED
from ..common.result import CoordinatorRecord, CoordinatorResult, EndTxnMarker, TxnProducer
from .classic import (
    ClassicGroupCoordinator,
    GroupConfig,
    Heartbeat,
    JoinGroup,
    JoinGroupResponse,
    LeaveGroup,
    SyncGroup,
    random_member_id,
)
from .classic_group import ClassicGroup, GroupState
from .commit_runs import CommitBlock, CommitRun
from .consumer import (
    ClassicMembers,
    ConsumerGroupConfig,
    ConsumerGroupCoordinator,
    ConsumerHeartbeat,
    ConsumerHeartbeatResponse,
    TopicsImage,
)
from .consumer_group import ConsumerGroup
from .consumer_group import replay as replay_consumer
from .consumer_schemas import CONSUMER_GROUP_KEYS
from .loader import GroupBatchReplayer
from .migration import (
    MalformedProtocol,
    classic_group_of,
    consumer_group_records,
    group_records,
    tombstones,
)
from .offsets import (
    CommitTopic,
    FetchedOffset,
    OffsetCommit,
    OffsetsConfig,
    OffsetsManager,
    TxnOffsetCommit,
    offset_commit_append_error,
    txn_offset_commit_append_error,
)
from .schemas import GroupMetadataKey, OffsetCommitKey

__all__ = ["CoordinatorShard", "DescribedGroup", "DescribedMember", "ListedGroup"]

S = GroupState


class ListedGroup(NamedTuple):
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"  # or "consumer" (KIP-848)


class DescribedMember(NamedTuple):
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


class DescribedGroup(NamedTuple):
    """Kafka's summary of a group (DescribeGroups): the protocol and the members' metadata and
    assignments only while it is Stable; an unknown group is Dead with nothing else."""

    state: str
    protocol_type: str
    protocol: str
    members: tuple[DescribedMember, ...]
    #: GROUP_ID_NOT_FOUND for a KIP-848 consumer group (ConsumerGroupDescribe describes it)
    error: ErrorCode = ErrorCode.none
    message: str | None = None


_partition_of = itemgetter(0)  # CommitPartition.partition


class CoordinatorShard:
    """The groups and committed offsets of one ``__consumer_offsets`` partition."""

    def __init__(
        self,
        group_config: GroupConfig | None = None,
        offsets_config: OffsetsConfig | None = None,
        *,
        classic: ClassicGroupCoordinator | None = None,
        new_member_id: Callable[[str, str | None], str] = random_member_id,
        consumer_config: ConsumerGroupConfig | None = None,
    ) -> None:
        self.classic = classic or ClassicGroupCoordinator(group_config, new_member_id)
        self.offsets = OffsetsManager(offsets_config, self.classic.groups)
        self.consumer = ConsumerGroupCoordinator(consumer_config)
        self.offsets.consumer_subscriptions = self.consumer.subscribed_topics
        self.offsets.empty_consumer_groups = lambda: [
            g for g, group in self.consumer.groups.items() if not group.members]
        self.offsets.consumer_group_tombstones = self.consumer.delete_records
        self.classic_members = ClassicMembers(self.consumer)
        #: the consumer groups as they were before each uncommitted write that changed them:
        #: (end, {group id: the group before, None if there was none}), oldest first
        self._consumer_undo: deque[tuple[int, dict[str, ConsumerGroup | None]]] = deque()
        self.consumer.downgrade = self._downgrade

    @property
    def groups(self) -> dict[str, ClassicGroup]:
        """The partition's groups by id (read-only for callers)."""
        return self.classic.groups

    # --- replay: live and loading alike ---------------------------------------------------

    def replay(self, key: object, value: object | None, now: int, producer_id: int = -1) -> None:
        """Apply one record to the manager of its type (an offset commit also tells the classic
        groups that a simple consumer's group exists). ``producer_id``: the producer whose
        transactional batch the record is in (its offsets are pending), -1 for none."""
        kind = type(key)
        if kind is OffsetCommitKey:
            self.offsets.replay(key, value, now, producer_id)
            if key.group not in self.consumer.groups:  # type: ignore[attr-defined]
                self.classic.replay(key, value, now)
        elif kind is GroupMetadataKey:
            self.classic.replay(key, value, now)
        elif kind in CONSUMER_GROUP_KEYS:
            self.consumer.replay(key, value)
            if value is not None:
                self._drop_shadowed_classic(key.group)  # type: ignore[attr-defined]

    def _drop_shadowed_classic(self, group_id: str) -> None:
        """A consumer group's id is not also a classic group's: the empty classic group a
        commit made of it (a simple consumer's, derived state, no record) goes."""
        classic = self.classic.groups.get(group_id)
        if classic is not None and classic.is_in(S.EMPTY) and not classic.members:
            del self.classic.groups[group_id]

    def replay_marker(self, producer_id: int, committed: bool, now: int) -> None:
        """Apply a transaction marker: the producer's pending offsets are committed or
        dropped."""
        self.offsets.replay_marker(producer_id, committed)

    def replay_commits(self, run: CommitRun, now: int) -> None:
        """Apply a run of plain offset commits (see ``CommitRun``)."""
        rows = run.rows if type(run.rows) is list else list(run.rows)
        self.offsets.replay_commits(run.group, run.topic, rows, now)
        if run.group not in self.consumer.groups:
            self.classic.replay_commits(run.group, run.topic, rows, now)

    def replay_blocks(self, blocks: list[CommitBlock], now: int) -> None:
        """Apply ``CommitBlock``s (offset commits to consecutive partitions, the loader's bulk
        reading), in order."""
        self.offsets.replay_blocks(blocks, now)
        self.classic.replay_blocks(blocks, now)

    def batch_replayer(self, now: int) -> GroupBatchReplayer:
        """What replays the partition's batches into this shard while it loads (the
        ``BatchReplayer`` of ``brook.coordinator.common.loader``)."""
        return GroupBatchReplayer(self, now)

    def replay_records(self, records: Iterable, now: int, end: int | None = None,
                       producer_id: int = -1) -> None:
        """Apply records just appended (``CoordinatorRecord``s, ``CommitRun``s, an
        ``EndTxnMarker``), in order; ``producer_id`` is the producer of a transactional write.
        With ``end`` (the offset after them) they are not committed yet: what they replace of
        the committed offsets is kept until ``committed`` or ``roll_back``."""
        if end is not None:
            self.offsets.begin_write()
            before = {}
            for record in records:
                if type(record) is CoordinatorRecord and type(record.key) in CONSUMER_GROUP_KEYS:
                    gid = record.key.group  # type: ignore[attr-defined]
                    if gid not in before:
                        group = self.consumer.groups.get(gid)
                        before[gid] = group.copy() if group is not None else None
            if before:
                self._consumer_undo.append((end, before))
        try:
            for record in records:
                kind = type(record)
                if kind is CoordinatorRecord:
                    self.replay(record.key, record.value, now, producer_id)
                elif kind is EndTxnMarker:
                    self.replay_marker(record.producer_id, record.committed, now)
                elif producer_id >= 0:  # a run in a transactional batch: record by record
                    for key, value in record.records():
                        self.replay(key, value, now, producer_id)
                else:
                    self.replay_commits(record, now)
        finally:
            if end is not None:
                self.offsets.end_write(end)

    def committed(self, offset: int) -> None:
        """The high watermark reached ``offset``: the writes that end there or before are
        committed."""
        self.offsets.committed(offset)
        undo = self._consumer_undo
        while undo and undo[0][0] <= offset:
            undo.popleft()

    def roll_back(self, end: int) -> list[CoordinatorRecord]:
        """The write ending at ``end`` failed: the offsets and the consumer groups it and every
        later uncommitted write changed go back to what they were, as records to replay and
        write (a consumer group: tombstones of what it is now, then the records of what it
        was; classic groups are not rolled back)."""
        records = self.offsets.roll_back(end)
        restored: dict[str, ConsumerGroup | None] = {}
        undo = self._consumer_undo
        while undo and undo[-1][0] >= end:
            restored.update(undo.pop()[1])  # an earlier write's group wins
        for gid, group in restored.items():
            now = self.consumer.groups.get(gid)
            if now is not None:
                records += tombstones(now)
            if group is not None:
                records += group_records(group)
        return records

    def loaded(self, now: int) -> CoordinatorResult:
        """The partition is loaded: members get session deadlines, the cache gives back the
        memory it grew with."""
        result = self.classic.loaded(now)
        for group_id in self.consumer.groups:  # the bulk replay of commits made them
            self._drop_shadowed_classic(group_id)
        self.consumer.loaded(now)
        self.offsets.loaded()
        return result

    # --- timers ---------------------------------------------------------------------------

    def next_deadline(self) -> int | None:
        """The earliest deadline of the managers' timers (None: none)."""
        deadlines = [d for d in (self.classic.timers.next_deadline(),
                                 self.consumer.timers.next_deadline(),
                                 self.offsets.next_deadline()) if d is not None]
        return min(deadlines) if deadlines else None

    def poll(self, now: int) -> list[CoordinatorResult]:
        """What is due at ``now``, as separate writes: the groups' timers (sessions, join and
        sync deadlines), then the offsets' expiry check."""
        return [self.classic.poll(now), *self.consumer.poll(now), self.offsets.poll(now)]

    # --- the classic group protocol -------------------------------------------------------

    def join_group(self, request: JoinGroup, now: int,
                   topics: Callable[[], TopicsImage] | None = None) -> CoordinatorResult:
        """A JoinGroup; to a consumer group with members it joins as a classic member of it
        (``topics()``: the broker's topics, for its subscription)."""
        consumer = self.consumer.groups.get(request.group_id)
        if consumer is not None and consumer.members:
            return self.classic_members.join(request, topics() if topics else {}, now)
        if consumer is None:
            return self.classic.join_group(request, now)
        # An empty consumer group becomes a classic group, its offsets kept (Kafka's offline
        # downgrade): its records' tombstones go first. The classic operations apply their own
        # state (their records are not replayed), so the tombstones are applied here too.
        tombstones = self.consumer.delete_records(request.group_id)
        result = self.classic.join_group(request, now)
        if not result.replay or not result.records:
            for record in tombstones:
                self.consumer.replay(record.key, record.value)
            result.replay = False
        result.records[:0] = tombstones
        return result

    def sync_group(self, request: SyncGroup, now: int) -> CoordinatorResult:
        if self._in_consumer_group(request.group_id):
            return self.classic_members.sync(request, now)
        return self.classic.sync_group(request, now)

    def heartbeat(self, request: Heartbeat, now: int) -> CoordinatorResult:
        if self._in_consumer_group(request.group_id):
            return self.classic_members.heartbeat(request, now)
        return self.classic.heartbeat(request, now)

    def leave_group(self, request: LeaveGroup, now: int) -> CoordinatorResult:
        if self._in_consumer_group(request.group_id):
            return self.classic_members.leave(request, now)
        return self.classic.leave_group(request, now)

    def _in_consumer_group(self, group_id: str) -> bool:
        group = self.consumer.groups.get(group_id)
        return group is not None and bool(group.members)

    # --- online migration (group.consumer.migration.policy) -------------------------------

    def _upgrade_records(self, group_id: str,
                         topics: TopicsImage) -> list[CoordinatorRecord] | None:
        """The records converting the classic group ``group_id`` (with members) into a
        consumer group; None when it may not be converted (Kafka's ``validateOnlineUpgrade``,
        and a member's embedded protocol that cannot be read)."""
        classic = self.classic.groups.get(group_id)
        if (classic is None or not self.consumer.config.upgrade_enabled
                or classic.is_in(S.DEAD) or classic.protocol_type != "consumer"
                or len(classic.members) > self.consumer.config.max_size):
            return None
        try:
            return consumer_group_records(classic, topics)
        except MalformedProtocol:
            return None

    def _downgrade(self, group_id: str, fence: list[CoordinatorRecord],
                   now: int) -> CoordinatorResult | None:
        """After ``fence`` (the records removing a member): when the members left all speak
        the classic protocol, the group becomes a classic group (Kafka's
        ``convertToClassicGroup``), which prepares a rebalance. Applied here, as the classic
        operations apply their state; the result is not replayed."""
        group = self.consumer.groups.get(group_id)
        if group is None or not self.consumer.config.downgrade_enabled:
            return None
        after = {group_id: group.copy()}
        for r in fence:
            replay_consumer(after, r.key, r.value)
        rest = after[group_id]
        if not rest.members or any(m.classic is None for m in rest.members.values()):
            return None
        # as Kafka: the whole group tombstoned (the leaving member with it), no epoch bump;
        # the classic group at the group epoch, without the leaving member
        records = tombstones(group)
        classic = classic_group_of(rest, group.group_epoch, now)
        records.append(CoordinatorRecord(GroupMetadataKey(group_id), classic.to_metadata_value()))
        for r in records[:-1]:
            self.consumer.replay(r.key, r.value)
        for member_id in group.members:
            self.consumer.cancel_timers(group_id, member_id)
        self.classic.groups[group_id] = classic
        result = self.classic.adopt(classic, now)
        result.records[:0] = records
        result.replay = False
        return result

    # --- the consumer group protocol (KIP-848) --------------------------------------------

    def consumer_group_heartbeat(self, request: ConsumerHeartbeat, topics: TopicsImage,
                                 now: int) -> CoordinatorResult:
        """A ConsumerGroupHeartbeat (``ConsumerHeartbeatResponse``). A classic group with
        members keeps its id (GROUP_ID_NOT_FOUND); an empty one, a simple consumer's, becomes
        the consumer group, its metadata tombstoned, as Kafka converts it."""
        group_id = request.group_id
        classic = self.classic.groups.get(group_id)
        converts = (classic is not None and group_id not in self.consumer.groups
                    and classic.is_in(S.EMPTY) and not classic.members)
        in_use = classic is not None and group_id not in self.consumer.groups and not converts
        if in_use and request.member_epoch == 0:  # online upgrade
            upgrade = self._upgrade_records(group_id, topics)
            if upgrade is not None:
                result = self.consumer.heartbeat(request, topics, now, upgrade=upgrade)
                response = result.response
                if (type(response) is ConsumerHeartbeatResponse
                        and response.error == ErrorCode.none):
                    # the classic members waiting in a rebalance rejoin (the consumer group)
                    result.completions += self.classic.fail_parked(
                        classic, ErrorCode.rebalance_in_progress)
                    self.classic.cancel_timers(classic)
                    return result
        result = self.consumer.heartbeat(request, topics, now, classic_group_exists=in_use)
        response = result.response
        if (converts and result.records and type(response) is ConsumerHeartbeatResponse
                and response.error == ErrorCode.none):
            result.records.insert(0, CoordinatorRecord(GroupMetadataKey(group_id), None))
        return result

    def consumer_groups(self) -> dict[str, ConsumerGroup]:
        """The partition's consumer groups by id (read-only for callers)."""
        return self.consumer.groups

    # --- offsets --------------------------------------------------------------------------

    def commit_offsets(self, request: OffsetCommit, now: int,
                       partition_count: Callable[[str], int] | None = None) -> CoordinatorResult:
        """An OffsetCommit; the response is (topic, partition, error) for every partition.

        ``partition_count(topic)`` says how many partitions a topic has (0: none): partitions
        the broker does not have get UNKNOWN_TOPIC_OR_PARTITION and the rest is committed, as
        Kafka answers them before its coordinator sees the request (a consumer still at work
        must not put back the offsets of a deleted topic). It is asked when the operation
        runs, in the shard's order, so a deletion queued before the commit counts."""
        unknown: list = []
        if partition_count is not None:
            request, unknown = _known_partitions(request, partition_count)
            if not request.topics:
                return CoordinatorResult(response=unknown)
        if request.group_id in self.consumer.groups:
            error = self.consumer.validate_commit(request.group_id, request.member_id,
                                                  request.generation)
            if error is not ErrorCode.none:
                return CoordinatorResult(response=unknown + [
                    (t.name, p.partition, error) for t in request.topics for p in t.partitions])
            # validated: committed as a group-less commit (the offsets are the same records)
            request = request._replace(generation=-1, member_id="", group_instance_id=None)
        committed = self.offsets.commit(request, self.classic.groups.get(request.group_id), now)
        if committed.records:
            self.classic.commit_heartbeat(request.group_id, request.member_id, now)
        return CoordinatorResult(records=committed.records,
                                 response=unknown + committed.errors if unknown else committed.errors,
                                 error_for=offset_commit_append_error)

    def commit_transactional_offsets(self, request: TxnOffsetCommit, now: int,
                                     partition_count: Callable[[str], int] | None = None,
                                     guard: object = UNVERIFIED) -> CoordinatorResult:
        """A TxnOffsetCommit; the response is (topic, partition, error) for every partition.
        The records are the producer's transactional batch, carrying ``guard`` (the partition's
        verification of the transaction, see ``TxnProducer``): pending until its marker.
        Unknown partitions as for ``commit_offsets``."""
        unknown: list = []
        if partition_count is not None:
            request, unknown = _known_partitions(request, partition_count)
            if not request.topics:
                return CoordinatorResult(response=unknown)
        if request.group_id in self.consumer.groups:
            error = self.consumer.validate_commit(request.group_id, request.member_id,
                                                  request.generation, transactional=True)
            if error is not ErrorCode.none:
                return CoordinatorResult(response=unknown + [
                    (t.name, p.partition, error) for t in request.topics for p in t.partitions])
            request = request._replace(generation=-1, member_id="", group_instance_id=None)
        committed = self.offsets.commit_transactional(
            request, self.classic.groups.get(request.group_id), now)
        return CoordinatorResult(records=committed.records, response=unknown + committed.errors,
                                 error_for=txn_offset_commit_append_error,
                                 producer=TxnProducer(request.producer_id, request.producer_epoch,
                                                      guard))

    def complete_transaction(self, marker: EndTxnMarker, now: int) -> CoordinatorResult:
        """Write a transaction coordinator's marker on this partition (WriteTxnMarkers): the
        producer's pending offsets are committed or dropped when it is replayed. The answer is
        NONE, or the append's own error (the partition refuses a marker of an older producer
        or coordinator epoch), which the transaction coordinator acts on."""
        return CoordinatorResult(records=[marker], response=ErrorCode.none, error_for=_as_is)

    def fetch_offsets(self, group_id: str, topics: Iterable[tuple[str, Iterable[int]]] | None,
                      require_stable: bool = False) -> list[FetchedOffset]:
        """The group's committed offsets of ``topics`` ((name, partitions) pairs; None: all);
        with ``require_stable``, UNSTABLE_OFFSET_COMMIT for those a transaction is about to
        commit."""
        return self.offsets.fetch(group_id, topics, require_stable)

    def delete_offsets(self, group_id: str, topics: Iterable[tuple[str, Iterable[int]]],
                       now: int) -> CoordinatorResult:
        """An OffsetDelete; the response is (group error, [(topic, partition, error)])."""
        deleted = self.offsets.delete_offsets(group_id, topics, self.classic.groups.get(group_id))
        return CoordinatorResult(records=list(deleted.records),
                                 response=(deleted.error, deleted.errors))

    def delete_topics(self, topics: Collection[str], now: int) -> CoordinatorResult:
        """Tombstones for every group's committed offsets of these deleted topics; the response
        is how many."""
        records = self.offsets.delete_topics(frozenset(topics))
        return CoordinatorResult(records=records, response=len(records))

    def delete_offsets_of_missing_topics(self, exists: Callable[[str], bool],
                                         now: int) -> CoordinatorResult:
        """Tombstones for every group's committed offsets of topics that do not exist (deleted
        while this partition was not loaded, or before a crash let their tombstones be
        written); the response is how many."""
        cache = self.offsets.cache
        missing = {t for g in cache.groups() for t in cache.topics(g) if not exists(t)}
        missing.update(t for _, t, _ in self.offsets.pending.keys() if not exists(t))
        return self.delete_topics(missing, now)

    # --- groups as a whole ----------------------------------------------------------------

    def delete_group(self, group_id: str, now: int) -> CoordinatorResult:
        """A DeleteGroups of one group, with Kafka's rules: only a group without members;
        tombstones for its offsets and its metadata. The response is the group's error."""
        consumer = self.consumer.groups.get(group_id)
        if consumer is not None:
            if consumer.members:
                return CoordinatorResult(response=ErrorCode.non_empty_group)
            records = self.offsets.delete_group(group_id)
            records += self.consumer.delete_records(group_id)
            return CoordinatorResult(records=records, response=ErrorCode.none)
        group = self.classic.groups.get(group_id)
        if group is None or group.is_in(S.DEAD):
            if not self.offsets.has_offsets(group_id):
                return CoordinatorResult(response=ErrorCode.group_id_not_found)
        elif not group.is_in(S.EMPTY):
            return CoordinatorResult(response=ErrorCode.non_empty_group)
        records = self.offsets.delete_group(group_id)
        if group is not None:
            records.append(CoordinatorRecord(GroupMetadataKey(group_id), None))
        return CoordinatorResult(records=records, response=ErrorCode.none)

    def list_groups(self, states: Collection[str] = ()) -> list[ListedGroup]:
        """The partition's groups (simple consumers' too), those in ``states`` (lower-case
        state names) when given."""
        listed = []
        for g in self.classic.groups.values():
            state = str(g.state)
            if states and state.lower() not in states:
                continue
            listed.append(ListedGroup(g.group_id, g.protocol_type or "", state))
        for c in self.consumer.groups.values():
            state = str(c.state)
            if states and state.lower() not in states:
                continue
            listed.append(ListedGroup(c.group_id, "consumer", state, "consumer"))
        return listed

    def describe_group(self, group_id: str) -> DescribedGroup:
        if group_id in self.consumer.groups:  # Kafka 4 answers as for no group, with a word
            return DescribedGroup(str(S.DEAD), "", "", (), ErrorCode.group_id_not_found,
                                  f"Group {group_id} is not a classic group.")
        group = self.classic.groups.get(group_id)
        if group is None:
            return DescribedGroup(str(S.DEAD), "", "", ())
        stable = group.is_in(S.STABLE)
        members = tuple(
            DescribedMember(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                            m.metadata(group.protocol) if stable and group.protocol else b"",
                            m.assignment if stable else b"")
            for m in group.members.values())
        return DescribedGroup(str(group.state), group.protocol_type or "",
                              (group.protocol or "") if stable else "", members)


def _as_is(error: ErrorCode) -> ErrorCode:
    return error


def _known_partitions(request, partition_count: Callable[[str], int]) -> tuple[object, list]:
    """The request without the partitions the broker does not have, and
    UNKNOWN_TOPIC_OR_PARTITION for those."""
    kept: list[CommitTopic] | None = None
    unknown: list = []
    topics = request.topics
    for i, topic in enumerate(topics):
        count = partition_count(topic.name)
        indexes = list(map(_partition_of, topic.partitions))  # C-level: the hot path
        if not indexes or (min(indexes) >= 0 and max(indexes) < count):
            if kept is not None:
                kept.append(topic)
            continue
        if kept is None:
            kept = list(topics[:i])
        ok = tuple(p for p in topic.partitions if 0 <= p.partition < count)
        unknown += [(topic.name, p.partition, ErrorCode.unknown_topic_or_partition)
                    for p in topic.partitions if not 0 <= p.partition < count]
        if ok:
            kept.append(CommitTopic(topic.name, ok))
    if kept is None:
        return request, unknown
    return request._replace(topics=tuple(kept)), unknown
