"""OffsetFetch: committed offsets of one group (v1-7) or several (v8+), read in the order of the
group's shard of the runtime, COORDINATOR_LOAD_IN_PROGRESS while that shard loads.

Until the runtime has an offsets manager no offset can be committed through brook, so every
partition asked for answers "no committed offset" (-1) and "all partitions" answers none.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from ...protocol.messages import make, response_class, response_module
from ..group_runtime import CoordinatorError, CoordinatorNotAvailable
from . import Api
from .common import NO_THROTTLE

OFFSET_FETCH = 9

NO_OFFSET = -1
NO_EPOCH = -1


def _fetch(shard, group_id: str, topics):
    """[(topic, [(partition, offset, leader epoch, metadata)])] for ``topics`` (None: all)."""
    offsets = shard.offsets
    if topics is None:
        if offsets is None:
            return []
        by_topic: dict[str, list] = {}
        for topic, partition, value in offsets.group_offsets(group_id):
            by_topic.setdefault(topic, []).append(
                (partition, value.offset, value.leader_epoch, value.metadata))
        return sorted((t, sorted(ps)) for t, ps in by_topic.items())
    out = []
    for topic, partitions in topics:
        rows = []
        for p in partitions:
            value = None if offsets is None else offsets.get(group_id, topic, p)
            if value is None:
                rows.append((p, NO_OFFSET, NO_EPOCH, ""))
            else:
                rows.append((p, value.offset, value.leader_epoch, value.metadata))
        out.append((topic, rows))
    return out


async def fetch_group(broker, group_id: str, topics):
    """(error, topics) for one group; ``topics`` as (name, partitions) pairs or None."""
    try:
        if broker.groups is None or not broker.ensure_offsets_topic():
            raise CoordinatorNotAvailable()
        shard = broker.groups.shard_for(group_id)
        return ErrorCode.none, await broker.groups.read(shard, lambda s, now: _fetch(s, group_id, topics))
    except CoordinatorError as exc:
        return exc.code, None


def _topics_of(requested):
    if requested is None:
        return None
    return [(t.name, list(t.partition_indexes)) for t in requested]


async def handle_offset_fetch(broker, request, connection):
    body, version = request.body, request.api_version
    mod = response_module(OFFSET_FETCH, version)
    cls = response_class(OFFSET_FETCH, version)
    if version >= 8:
        groups = []
        for g in body.groups:
            code, topics = await fetch_group(broker, g.group_id, _topics_of(g.topics))
            groups.append(make(mod.OffsetFetchResponseGroup, group_id=g.group_id, error_code=code,
                               topics=_entities(mod.OffsetFetchResponseTopics,
                                                mod.OffsetFetchResponsePartitions, topics or [])))
        return make(cls, throttle_time=NO_THROTTLE, groups=tuple(groups))
    requested = _topics_of(body.topics)
    code, topics = await fetch_group(broker, body.group_id, requested)
    if code != ErrorCode.none and version < 2:
        # v1 has no top-level error: each partition asked for carries it.
        topics = [(t, [(p, NO_OFFSET, NO_EPOCH, "", code) for p in ps]) for t, ps in requested or []]
    return make(cls, throttle_time=NO_THROTTLE, error_code=code,
                topics=_entities(mod.OffsetFetchResponseTopic, mod.OffsetFetchResponsePartition,
                                 topics or []))


def _entities(topic_cls, partition_cls, topics):
    return tuple(
        make(topic_cls, name=name, partitions=tuple(
            make(partition_cls, partition_index=row[0], committed_offset=row[1],
                 committed_leader_epoch=row[2], metadata=row[3],
                 error_code=row[4] if len(row) > 4 else ErrorCode.none)
            for row in rows))
        for name, rows in topics)


APIS = [Api(OFFSET_FETCH, "OffsetFetch", 1, 9, handle_offset_fetch)]
