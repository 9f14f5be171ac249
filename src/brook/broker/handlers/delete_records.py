"""DeleteRecords: move partitions' log start offsets forward, as Kafka does for
`kafka-delete-records.sh`, `AdminClient.delete_records` and Kafka Streams' purging of
repartition topics.

Records below the new start become unreadable at once (Fetch answers OFFSET_OUT_OF_RANGE,
ListOffsets earliest returns the new start), and segments wholly below it are deleted by the
next retention pass. Per partition, as Kafka answers: offset -1 means the high watermark; an
offset past it or below -1 is OFFSET_OUT_OF_RANGE; internal topics are INVALID_TOPIC_EXCEPTION;
topics whose cleanup.policy lacks `delete` are POLICY_VIOLATION. The answer's low watermark
is the log start offset afterwards (it never moves back).
"""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from ...protocol.messages import make, response_class, response_module
from ..auth import authz
from .api import Api
from .common import NO_THROTTLE

log = logging.getLogger(__name__)

API_KEY = 21
TO_HIGH_WATERMARK = -1


async def handle(broker, request, connection):
    version = request.api_version
    mod = response_module(API_KEY, version)
    topics = []
    may = None if broker.authorizer is None else authz.allowed_names(
        broker, connection, authz.Op.DELETE, authz.TOPIC, (t.name for t in request.body.topics))
    for t in request.body.topics:
        tm = broker.metadata.get(t.name)
        results = []
        for p in t.partitions:
            if may is not None and t.name not in may:  # Topic Delete
                code, low = ErrorCode.topic_authorization_failed, -1
            else:
                code, low = _delete(broker, tm, t.name, p.partition_index, p.offset, connection)
            results.append(make(mod.DeleteRecordsPartitionResult, partition_index=p.partition_index,
                                low_watermark=low, error_code=code))
        topics.append(make(mod.DeleteRecordsTopicResult, name=t.name, partitions=tuple(results)))
    return make(response_class(API_KEY, version), throttle_time=NO_THROTTLE, topics=tuple(topics))


def _delete(broker, tm, topic: str, index: int, offset: int, connection) -> tuple[ErrorCode, int]:
    partition = broker.partition(topic, index)
    if tm is None or partition is None:
        return ErrorCode.unknown_topic_or_partition, -1
    if broker.replicas is not None and (code := broker.replicas.leader_error(partition)):
        return code, -1
    if tm.internal:
        return ErrorCode.invalid_topic_exception, -1
    lg = partition.log
    if not lg.config.delete:
        return ErrorCode.policy_violation, -1
    high_watermark = partition.high_watermark
    if offset == TO_HIGH_WATERMARK:
        offset = high_watermark
    if offset < 0 or offset > high_watermark:
        return ErrorCode.offset_out_of_range, -1
    before = lg.log_start_offset
    lg.increase_log_start_offset(offset)
    if lg.log_start_offset != before:
        log.info("records of %s-%d below %d deleted at the request of %s (log start offset was %d)",
                 topic, index, lg.log_start_offset, connection.peer, before)
    return ErrorCode.none, lg.log_start_offset


APIS = [Api(API_KEY, "DeleteRecords", 0, 2, handle)]
