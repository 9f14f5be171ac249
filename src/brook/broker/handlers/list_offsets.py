"""ListOffsets: earliest (-2), latest (-1), max timestamp (-3) or the first offset at or
after a timestamp, per partition (v1+, KIP-79); v0's own meaning (up to ``max_num_offsets``
segment base offsets before a time, as Kafka 3.9 still answers it) in ``_legacy_offsets``.

A consumer sees the log up to its last fetchable offset, as Kafka answers it: the high
watermark, or with isolation_level read_committed (v2+) the last stable offset. Latest is that
offset, and a timestamp (or the max timestamp) found at or past it is not found (offset -1)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from ...protocol.messages import make, response_class, response_module
from ...storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP
from ..auth import authz
from ..errors import error_code_for
from .api import Api
from .common import NO_THROTTLE

API_KEY = 2


CONSUMER_REPLICA_ID = -1
READ_COMMITTED = 1

#: The first version (1+) that knows each special timestamp, as Kafka 3.9 has it: max
#: timestamp came with v7 (KIP-734), earliest local (-4) with v8, latest tiered (-5) with v9.
#: Another negative timestamp, or one the request's version does not know: UNSUPPORTED_VERSION.
TIMESTAMP_MIN_VERSION = {EARLIEST_TIMESTAMP: 1, LATEST_TIMESTAMP: 1, MAX_TIMESTAMP: 7, -4: 8, -5: 9}


def _legacy_offsets(partition, timestamp: int, max_num_offsets: int, from_consumer: bool) -> list[int]:
    """v0's answer: the log's offsets before ``timestamp``; a consumer sees none above the high
    watermark (the high watermark stands first instead, as Kafka answers)."""
    offsets = partition.log.legacy_offsets_before(timestamp, max_num_offsets)
    if from_consumer:
        hw = partition.high_watermark
        if any(o > hw for o in offsets):
            offsets = [hw] + [o for o in offsets if o <= hw]
    return offsets


async def handle(broker, request, connection):
    body = request.body
    version = request.api_version
    may = _describable(broker, connection, body)
    if version == 0:
        return _handle_v0(broker, body, may)
    mod = response_module(API_KEY, version)
    seen: dict[tuple[str, int], int] = {}
    for t in body.topics:
        for p in t.partitions:
            seen[t.name, p.partition_index] = seen.get((t.name, p.partition_index), 0) + 1
    # A consumer's latest is the high watermark; a replica's (or a debugging tool's, replica
    # id -2) the log end, as Kafka answers them.
    from_consumer = body.replica_id == CONSUMER_REPLICA_ID
    read_committed = getattr(body, "isolation_level", 0) == READ_COMMITTED
    topics = []
    for t in body.topics:
        parts = []
        for p in t.partitions:
            code, offset, ts, epoch = ErrorCode.none, -1, -1, -1
            partition = broker.partition(t.name, p.partition_index)
            if may is not None and t.name not in may:
                code, partition = ErrorCode.topic_authorization_failed, None
            elif seen[t.name, p.partition_index] > 1:
                code, partition = ErrorCode.invalid_request, None
            elif p.timestamp < 0 and version < TIMESTAMP_MIN_VERSION.get(p.timestamp, 1 << 15):
                code, partition = ErrorCode.unsupported_version, None
            elif partition is None:
                code = ErrorCode.unknown_topic_or_partition
            elif broker.replicas is not None:  # a cluster: the partition's leader answers
                code = broker.replicas.leader_error(partition, getattr(p, "current_leader_epoch", -1))
            if partition is not None and code == ErrorCode.none:
                epoch = partition.leader_epoch
                try:
                    if not from_consumer:
                        fetchable = partition.log_end_offset
                    elif read_committed:
                        fetchable = partition.last_stable_offset
                    else:
                        fetchable = partition.high_watermark
                    if p.timestamp == LATEST_TIMESTAMP:
                        offset = fetchable
                    elif p.timestamp == EARLIEST_TIMESTAMP:
                        offset = partition.log_start_offset
                    else:
                        found = partition.log.fetch_offset_by_timestamp(p.timestamp)
                        if found is not None and found[0] < fetchable:
                            offset, ts = found
                            offset = max(offset, partition.log_start_offset)
                except Exception as exc:
                    code = error_code_for(exc)
            parts.append(make(mod.ListOffsetsPartitionResponse, partition_index=p.partition_index,
                              error_code=code, timestamp=ts, offset=offset, leader_epoch=epoch))
        topics.append(make(mod.ListOffsetsTopicResponse, name=t.name, partitions=tuple(parts)))
    return make(response_class(API_KEY, version), throttle_time=NO_THROTTLE, topics=tuple(topics))


def _describable(broker, connection, body) -> set[str] | None:
    """The topics the principal may Describe (None: no authorizer, all)."""
    if broker.authorizer is None:
        return None
    return authz.describable_topics(broker, connection, (t.name for t in body.topics))


def _handle_v0(broker, body, may):
    mod = response_module(API_KEY, 0)
    from_consumer = body.replica_id == CONSUMER_REPLICA_ID
    topics = []
    for t in body.topics:
        parts = []
        for p in t.partitions:
            code, offsets = ErrorCode.none, []
            partition = broker.partition(t.name, p.partition_index)
            if may is not None and t.name not in may:
                code = ErrorCode.topic_authorization_failed
            elif p.timestamp < EARLIEST_TIMESTAMP:
                # v0 knows only latest (-1) and earliest (-2) among the negative timestamps
                code = ErrorCode.unsupported_version
            elif partition is None:
                code = ErrorCode.unknown_topic_or_partition
            elif broker.replicas is not None:
                code = broker.replicas.leader_error(partition, -1)
            if code == ErrorCode.none:
                try:
                    offsets = _legacy_offsets(partition, p.timestamp, p.max_num_offsets, from_consumer)
                except Exception as exc:
                    code = error_code_for(exc)
            parts.append(mod.ListOffsetsPartitionResponse(
                partition_index=p.partition_index, error_code=code, old_style_offsets=tuple(offsets)))
        topics.append(mod.ListOffsetsTopicResponse(name=t.name, partitions=tuple(parts)))
    return mod.ListOffsetsResponse(topics=tuple(topics))


APIS = [Api(API_KEY, "ListOffsets", 0, 7, handle)]
