"""Offset APIs: OffsetCommit, OffsetFetch, OffsetDelete and DeleteGroups, run on the group's
shard (``brook.coordinator.group.shard``) through the coordinator runtime (``broker.coordinator``).

A commit's offsets are written as one batch, so a commit is all or nothing, and it is answered
only after the append. OffsetFetch takes one group (v0-7) or several (v8+); a group whose
partition is loading gets COORDINATOR_LOAD_IN_PROGRESS. With ``require_stable`` (v7+, KIP-447,
what a read_committed consumer asks), a partition whose offset a transaction has committed but
not yet ended is answered UNSTABLE_OFFSET_COMMIT, and the client asks again.

OffsetCommit v0 and OffsetFetch v0 go to the coordinator like the later versions: a Kafka 3.9
broker on ZooKeeper kept them in ZooKeeper (/consumers/<group>/offsets), apart from the offsets
of v1+, and a KRaft one refuses them; brook has one store of offsets, __consumer_offsets.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from ...coordinator.common.runtime import CoordinatorError, CoordinatorNotAvailable
from ...coordinator.group.offsets import (DEFAULT_RETENTION_TIME, DEFAULT_TIMESTAMP,
                                          CommitPartition, CommitTopic, OffsetCommit)
from ...protocol.group_responses import (
    offset_commit_response,
    offset_fetch_groups_response,
    offset_fetch_response,
)
from ...protocol.messages import make, response_class, response_module
from ..auth import authz
from .api import Api, Deferred, RawResponse
from .common import NO_THROTTLE, ms

OFFSET_COMMIT = 8
OFFSET_FETCH = 9
DELETE_GROUPS = 42
OFFSET_DELETE = 47

NO_OFFSET = -1
NO_EPOCH = -1


def _runtime(broker):
    if broker.coordinator is None or not broker.ensure_offsets_topic():
        raise CoordinatorNotAvailable("the offsets topic is not available")
    return broker.coordinator


def _raw(frame: bytes) -> RawResponse:
    """A response the hand encoders of ``protocol.group_responses`` wrote: the hot answers of
    the coordinator skip kio's generic writer."""
    return RawResponse([frame], len(frame))


# --- OffsetCommit ---------------------------------------------------------------------------


def commit_request(body, version: int) -> OffsetCommit:
    """The coordinator's OffsetCommit for a request body of ``version`` (0-9).

    v0 has no generation nor member id (a commit outside group management, which the
    coordinator accepts while the group has no members); v1 alone carries a commit timestamp
    per partition (-1: the time of the commit), and v2-v4 a retention time."""
    epochs = version >= 6  # committed_leader_epoch is in v6+
    timestamps = version == 1
    return OffsetCommit(
        body.group_id,
        tuple(CommitTopic(t.name, tuple(
            CommitPartition(p.partition_index, p.committed_offset,
                            p.committed_leader_epoch if epochs else NO_EPOCH, p.committed_metadata,
                            p.commit_timestamp if timestamps else DEFAULT_TIMESTAMP)
            for p in t.partitions)) for t in body.topics),
        body.generation_id_or_member_epoch if version >= 1 else -1,
        body.member_id if version >= 1 else "",
        body.group_instance_id if version >= 7 else None,
        ms(body.retention_time) if 2 <= version <= 4 else DEFAULT_RETENTION_TIME,
        version,
    )


async def handle_offset_commit(broker, request, connection):
    version = request.api_version
    req = commit_request(request.body, version)
    denied: list = []  # (topic, partition, error) of what the principal may not commit
    if broker.authorizer is not None:
        req, denied = _authorize_commit(broker, connection, req)
        if not req.topics:
            return _commit_answer(request, req, denied)
    try:
        runtime = _runtime(broker)
        done = runtime.submit(
            req.group_id, lambda shard, now: shard.commit_offsets(req, now, broker.partition_count))
    except CoordinatorError as exc:
        return _commit_answer(request, req, [(t.name, p.partition, exc.code)
                                             for t in req.topics for p in t.partitions] + denied)
    if done.done():  # answered at once: the hot path
        return _committed(done, request, req, denied)
    # log.flush.before.ack: the connection goes on while the commit waits for its fsync
    return Deferred(done, lambda d: _committed(d, request, req, denied))


def _authorize_commit(broker, connection, req: OffsetCommit) -> tuple[OffsetCommit, list]:
    """Group Read, else every partition is refused; then Topic Read for each topic. The
    commit keeps the topics it may commit, and the errors of the others."""
    if not authz.allowed(broker, connection, authz.Op.READ, authz.GROUP, req.group_id):
        return req._replace(topics=()), [(t.name, p.partition, ErrorCode.group_authorization_failed)
                                         for t in req.topics for p in t.partitions]
    may = authz.allowed_names(broker, connection, authz.Op.READ, authz.TOPIC, (t.name for t in req.topics))
    denied = [(t.name, p.partition, ErrorCode.topic_authorization_failed)
              for t in req.topics if t.name not in may for p in t.partitions]
    return req._replace(topics=tuple(t for t in req.topics if t.name in may)), denied


def _committed(done, request, req: OffsetCommit, denied: list = ()) -> RawResponse:
    """The answer of a commit whose operation has ended (it is never parked)."""
    exc = done.exception()
    if exc is None:
        errors = done.result()
    elif isinstance(exc, CoordinatorError):
        errors = [(t.name, p.partition, exc.code) for t in req.topics for p in t.partitions]
    else:
        raise exc
    return _commit_answer(request, req, list(errors) + list(denied))


def _commit_answer(request, req: OffsetCommit, errors) -> RawResponse:
    version = request.api_version
    by_topic: dict[str, list] = {}
    for topic, partition, code in errors:
        by_topic.setdefault(topic, []).append((partition, code))
    return _raw(offset_commit_response(version, request.correlation_id, by_topic.items()))


# --- OffsetFetch ----------------------------------------------------------------------------


def _by_topic(fetched) -> list:
    """[(topic, [(partition, offset, leader epoch, metadata, error)])] of fetched offsets."""
    out: dict[str, list] = {}
    for f in fetched:
        out.setdefault(f.topic, []).append(
            (f.partition, f.offset, f.leader_epoch, f.metadata, f.error))
    return list(out.items())


async def fetch_group(broker, group_id: str, topics, connection=None,
                      require_stable: bool = False, member: tuple[str | None, int] | None = None):
    """(error, topics) for one group; ``topics`` as (name, partitions) pairs or None. With
    ACLs: Group Describe, and only topics the principal may Describe (those asked for by
    name and refused answer TOPIC_AUTHORIZATION_FAILED; of all topics, the others are left out).
    With ``require_stable``, UNSTABLE_OFFSET_COMMIT for a partition with a pending
    transactional offset. ``member``: (member id, member epoch) of OffsetFetch v9+, checked
    against a consumer group's (STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID)."""
    checked = broker.authorizer is not None
    refused = []
    if checked:
        if not authz.allowed(broker, connection, authz.Op.DESCRIBE, authz.GROUP, group_id):
            return ErrorCode.group_authorization_failed, None
        if topics is not None:
            may = authz.describable_topics(broker, connection, (t for t, _ in topics))
            refused = [(t, [(p, NO_OFFSET, NO_EPOCH, "", ErrorCode.topic_authorization_failed) for p in ps])
                       for t, ps in topics if t not in may]
            topics = [(t, ps) for t, ps in topics if t in may]

    def read(shard, now):
        if member is not None and group_id in shard.consumer_groups():
            error = shard.consumer.validate_fetch(group_id, *member)
            if error != ErrorCode.none:
                return error, []
        return ErrorCode.none, shard.fetch_offsets(group_id, topics, require_stable)

    try:
        code, fetched = await _runtime(broker).read(group_id, read)
    except CoordinatorError as exc:
        return exc.code, None
    if code != ErrorCode.none:
        return code, None
    found = _by_topic(fetched)
    if checked and topics is None:
        may = authz.describable_topics(broker, connection, (t for t, _ in found), log_denied=False)
        found = [(t, ps) for t, ps in found if t in may]
    return ErrorCode.none, found + refused


def _topics_of(requested):
    if requested is None:
        return None
    return [(t.name, list(t.partition_indexes)) for t in requested]


async def handle_offset_fetch(broker, request, connection):
    body, version = request.body, request.api_version
    stable = version >= 7 and body.require_stable
    if version >= 8:
        groups = []
        for g in body.groups:
            member = (g.member_id, g.member_epoch) if version >= 9 else None
            code, topics = await fetch_group(broker, g.group_id, _topics_of(g.topics), connection,
                                             stable, member)
            groups.append((g.group_id, topics or [], code))
        return _raw(offset_fetch_groups_response(version, request.correlation_id, groups))
    requested = _topics_of(body.topics)
    code, topics = await fetch_group(broker, body.group_id, requested, connection, stable)
    if code != ErrorCode.none and version < 2:
        # v0-v1 have no top-level error: each partition asked for carries it.
        topics = [(t, [(p, NO_OFFSET, NO_EPOCH, "", code) for p in ps]) for t, ps in requested or []]
    return _raw(offset_fetch_response(version, request.correlation_id, topics or [], code))


# --- DeleteGroups ---------------------------------------------------------------------------


async def handle_delete_groups(broker, request, connection):
    body, version = request.body, request.api_version
    mod = response_module(DELETE_GROUPS, version)
    results = []
    for group_id in body.groups_names:
        if not authz.allowed(broker, connection, authz.Op.DELETE, authz.GROUP, group_id):
            results.append(make(mod.DeletableGroupResult, group_id=group_id,
                                error_code=ErrorCode.group_authorization_failed))
            continue
        try:
            code = await _runtime(broker).run(
                group_id, lambda shard, now: shard.delete_group(group_id, now))
        except CoordinatorError as exc:
            code = exc.code
        results.append(make(mod.DeletableGroupResult, group_id=group_id, error_code=code))
    return make(response_class(DELETE_GROUPS, version), throttle_time=NO_THROTTLE,
                results=tuple(results))


# --- OffsetDelete ---------------------------------------------------------------------------


async def handle_offset_delete(broker, request, connection):
    body, version = request.body, request.api_version
    mod = response_module(OFFSET_DELETE, version)
    topics = [(t.name, [p.partition_index for p in t.partitions]) for t in body.topics]
    denied = []
    if broker.authorizer is not None:  # Group Delete, then Read on each topic
        if not authz.allowed(broker, connection, authz.Op.DELETE, authz.GROUP, body.group_id):
            return make(response_class(OFFSET_DELETE, version), throttle_time=NO_THROTTLE,
                        error_code=ErrorCode.group_authorization_failed, topics=())
        may = authz.allowed_names(broker, connection, authz.Op.READ, authz.TOPIC, (t for t, _ in topics))
        denied = [(t, p, ErrorCode.topic_authorization_failed) for t, ps in topics if t not in may for p in ps]
        topics = [(t, ps) for t, ps in topics if t in may]
    try:
        code, errors = await _runtime(broker).run(
            body.group_id, lambda shard, now: shard.delete_offsets(body.group_id, topics, now))
    except CoordinatorError as exc:
        code, errors = exc.code, []
    errors = list(errors) + denied
    by_topic: dict[str, list] = {}
    for topic, partition, err in errors:
        by_topic.setdefault(topic, []).append(
            make(mod.OffsetDeleteResponsePartition, partition_index=partition, error_code=err))
    return make(response_class(OFFSET_DELETE, version), throttle_time=NO_THROTTLE, error_code=code,
                topics=tuple(make(mod.OffsetDeleteResponseTopic, name=t, partitions=tuple(ps))
                             for t, ps in by_topic.items()))


APIS = [
    Api(OFFSET_COMMIT, "OffsetCommit", 0, 9, handle_offset_commit),
    Api(OFFSET_FETCH, "OffsetFetch", 0, 9, handle_offset_fetch),
    Api(DELETE_GROUPS, "DeleteGroups", 0, 2, handle_delete_groups),
    Api(OFFSET_DELETE, "OffsetDelete", 0, 0, handle_offset_delete),
]
