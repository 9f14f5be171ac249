"""ListOffsets: earliest (-2), latest (-1), max timestamp (-3) or the first offset at or
after a timestamp, per partition."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from ...protocol.messages import make, response_class, response_module
from ...storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from ..errors import error_code_for
from . import Api
from .common import NO_THROTTLE

API_KEY = 2


async def handle(broker, request, connection):
    body = request.body
    version = request.api_version
    mod = response_module(API_KEY, version)
    topics = []
    for t in body.topics:
        parts = []
        for p in t.partitions:
            code, offset, ts, epoch = ErrorCode.none, -1, -1, -1
            partition = broker.partition(t.name, p.partition_index)
            if partition is None:
                code = ErrorCode.unknown_topic_or_partition
            elif broker.replicas is not None:  # a cluster: the partition's leader answers
                code = broker.replicas.leader_error(partition, getattr(p, "current_leader_epoch", -1))
            if partition is not None and code == ErrorCode.none:
                epoch = partition.leader_epoch
                try:
                    if p.timestamp == LATEST_TIMESTAMP:
                        offset = partition.high_watermark  # also the last stable offset here
                    elif p.timestamp == EARLIEST_TIMESTAMP:
                        offset = partition.log_start_offset
                    else:
                        found = partition.log.fetch_offset_by_timestamp(p.timestamp)
                        if found is not None:
                            offset, ts = found
                            offset = max(offset, partition.log_start_offset)
                except Exception as exc:
                    code = error_code_for(exc)
            parts.append(make(mod.ListOffsetsPartitionResponse, partition_index=p.partition_index,
                              error_code=code, timestamp=ts, offset=offset, leader_epoch=epoch))
        topics.append(make(mod.ListOffsetsTopicResponse, name=t.name, partitions=tuple(parts)))
    return make(response_class(API_KEY, version), throttle_time=NO_THROTTLE, topics=tuple(topics))


APIS = [Api(API_KEY, "ListOffsets", 1, 7, handle)]
