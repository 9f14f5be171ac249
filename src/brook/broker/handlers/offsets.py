"""Offset APIs: OffsetCommit, OffsetFetch, OffsetDelete and DeleteGroups, run on the group's
shard of the runtime (broker.groups) by the offsets manager (``brook.coordinator.offsets``) next
to the classic coordinator.

A commit's offsets are written as one batch, so a commit is all or nothing, and it is answered
only after the append. OffsetFetch takes one group (v1-7) or several (v8+); a group whose
partition is loading gets COORDINATOR_LOAD_IN_PROGRESS.
"""

from __future__ import annotations

from functools import partial
from operator import itemgetter

from kio.schema.errors import ErrorCode

from ...coordinator.classic import Record, Result
from ...coordinator.group import GroupState
from ...coordinator.offsets import CommitPartition, CommitTopic, OffsetCommit
from ...coordinator.records import GroupMetadataKey
from ...protocol.group_responses import (
    offset_commit_response,
    offset_fetch_groups_response,
    offset_fetch_response,
)
from ...protocol.messages import make, response_class, response_module
from ..group_runtime import CoordinatorError, CoordinatorNotAvailable, offset_commit_append_error
from . import Api, RawResponse
from .common import NO_THROTTLE, ms

OFFSET_COMMIT = 8
OFFSET_FETCH = 9
DELETE_GROUPS = 42
OFFSET_DELETE = 47

NO_OFFSET = -1
NO_EPOCH = -1


def _runtime(broker):
    if broker.groups is None or not broker.ensure_offsets_topic():
        raise CoordinatorNotAvailable("the offsets topic is not available")
    return broker.groups


def _raw(frame: bytes) -> RawResponse:
    """A response the hand encoders of ``protocol.group_responses`` wrote: the hot answers of
    the coordinator skip kio's generic writer."""
    return RawResponse([frame], len(frame))


# --- OffsetCommit ---------------------------------------------------------------------------


def commit_request(body, version: int) -> OffsetCommit:
    """The coordinator's OffsetCommit for a request body of ``version`` (2-9)."""
    epochs = version >= 6  # committed_leader_epoch is in v6+
    return OffsetCommit(
        body.group_id,
        tuple(CommitTopic(t.name, tuple(
            CommitPartition(p.partition_index, p.committed_offset,
                            p.committed_leader_epoch if epochs else NO_EPOCH, p.committed_metadata)
            for p in t.partitions)) for t in body.topics),
        body.generation_id_or_member_epoch,
        body.member_id,
        body.group_instance_id if version >= 7 else None,
        ms(body.retention_time) if version <= 4 else -1,  # retention_time is in v2-4
        version,
    )


_partition_of = itemgetter(0)  # CommitPartition.partition


def known_partitions(broker, request: OffsetCommit) -> tuple[OffsetCommit, list]:
    """The request without the partitions the broker does not have, and
    UNKNOWN_TOPIC_OR_PARTITION for those, as Kafka answers them before its coordinator sees
    the request (offsets of a deleted topic must not come back with a consumer's next commit)."""
    kept: list[CommitTopic] | None = None
    unknown: list = []
    topics = request.topics
    for i, topic in enumerate(topics):
        tm = broker.metadata.get(topic.name)
        count = tm.partitions if tm is not None else 0
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


def _commit(broker, request: OffsetCommit, shard, now: int) -> Result:
    # Checked when the operation runs, in the shard's order: a topic deleted meanwhile counts.
    request, unknown = known_partitions(broker, request)
    if not request.topics:
        return Result(response=unknown)
    core = shard.core
    committed = shard.offsets.commit(request, core.groups.get(request.group_id), now)
    if committed.records:
        core.commit_heartbeat(request.group_id, request.member_id, now)
    return Result(records=committed.records,
                  response=unknown + committed.errors if unknown else committed.errors)


async def handle_offset_commit(broker, request, connection):
    version = request.api_version
    req = commit_request(request.body, version)
    try:
        errors = await _runtime(broker).run(req.group_id, partial(_commit, broker, req),
                                            append_error=offset_commit_append_error)
    except CoordinatorError as exc:
        errors = [(t.name, p.partition, exc.code) for t in req.topics for p in t.partitions]
    by_topic: dict[str, list] = {}
    for topic, partition, code in errors:
        by_topic.setdefault(topic, []).append((partition, code))
    return _raw(offset_commit_response(version, request.correlation_id, by_topic.items()))


# --- OffsetFetch ----------------------------------------------------------------------------


def _fetch(shard, group_id: str, topics):
    """[(topic, [(partition, offset, leader epoch, metadata, error)])] for ``topics`` (None:
    all)."""
    out: dict[str, list] = {}
    for f in shard.offsets.fetch(group_id, topics):
        out.setdefault(f.topic, []).append(
            (f.partition, f.offset, f.leader_epoch, f.metadata, ErrorCode.none))
    return list(out.items())


async def fetch_group(broker, group_id: str, topics):
    """(error, topics) for one group; ``topics`` as (name, partitions) pairs or None."""
    try:
        runtime = _runtime(broker)
        shard = runtime.shard_for(group_id)
        return ErrorCode.none, await runtime.read(shard, lambda s, now: _fetch(s, group_id, topics))
    except CoordinatorError as exc:
        return exc.code, None


def _topics_of(requested):
    if requested is None:
        return None
    return [(t.name, list(t.partition_indexes)) for t in requested]


async def handle_offset_fetch(broker, request, connection):
    body, version = request.body, request.api_version
    if version >= 8:
        groups = []
        for g in body.groups:
            code, topics = await fetch_group(broker, g.group_id, _topics_of(g.topics))
            groups.append((g.group_id, topics or [], code))
        return _raw(offset_fetch_groups_response(version, request.correlation_id, groups))
    requested = _topics_of(body.topics)
    code, topics = await fetch_group(broker, body.group_id, requested)
    if code != ErrorCode.none and version < 2:
        # v1 has no top-level error: each partition asked for carries it.
        topics = [(t, [(p, NO_OFFSET, NO_EPOCH, "", code) for p in ps]) for t, ps in requested or []]
    return _raw(offset_fetch_response(version, request.correlation_id, topics or [], code))


# --- DeleteGroups ---------------------------------------------------------------------------


def _delete_group(shard, group_id: str, now: int) -> Result:
    """Kafka's rules: only a group without members; tombstones for its offsets and metadata."""
    group = shard.core.groups.get(group_id)
    if group is None or group.is_in(GroupState.DEAD):
        if not shard.offsets.has_offsets(group_id):
            return Result(response=ErrorCode.group_id_not_found)
    elif not group.is_in(GroupState.EMPTY):
        return Result(response=ErrorCode.non_empty_group)
    records = shard.offsets.delete_group(group_id)
    if group is not None:
        records.append(Record(GroupMetadataKey(group_id), None))
    return Result(records=records, response=ErrorCode.none)


async def handle_delete_groups(broker, request, connection):
    body, version = request.body, request.api_version
    mod = response_module(DELETE_GROUPS, version)
    results = []
    for group_id in body.groups_names:
        try:
            code = await _runtime(broker).run(group_id, lambda s, now: _delete_group(s, group_id, now))
        except CoordinatorError as exc:
            code = exc.code
        results.append(make(mod.DeletableGroupResult, group_id=group_id, error_code=code))
    return make(response_class(DELETE_GROUPS, version), throttle_time=NO_THROTTLE,
                results=tuple(results))


# --- OffsetDelete ---------------------------------------------------------------------------


def _delete_offsets(shard, group_id: str, topics, now: int) -> Result:
    group = shard.core.groups.get(group_id)
    deleted = shard.offsets.delete_offsets(group_id, topics, group)
    return Result(records=list(deleted.records), response=(deleted.error, deleted.errors))


async def handle_offset_delete(broker, request, connection):
    body, version = request.body, request.api_version
    mod = response_module(OFFSET_DELETE, version)
    topics = [(t.name, [p.partition_index for p in t.partitions]) for t in body.topics]
    try:
        code, errors = await _runtime(broker).run(
            body.group_id, lambda s, now: _delete_offsets(s, body.group_id, topics, now))
    except CoordinatorError as exc:
        code, errors = exc.code, []
    by_topic: dict[str, list] = {}
    for topic, partition, err in errors:
        by_topic.setdefault(topic, []).append(
            make(mod.OffsetDeleteResponsePartition, partition_index=partition, error_code=err))
    return make(response_class(OFFSET_DELETE, version), throttle_time=NO_THROTTLE, error_code=code,
                topics=tuple(make(mod.OffsetDeleteResponseTopic, name=t, partitions=tuple(ps))
                             for t, ps in by_topic.items()))


APIS = [
    Api(OFFSET_COMMIT, "OffsetCommit", 2, 9, handle_offset_commit),
    Api(OFFSET_FETCH, "OffsetFetch", 1, 9, handle_offset_fetch),
    Api(DELETE_GROUPS, "DeleteGroups", 0, 2, handle_delete_groups),
    Api(OFFSET_DELETE, "OffsetDelete", 0, 0, handle_offset_delete),
]
