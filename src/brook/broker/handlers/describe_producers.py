"""DescribeProducers (API 61, KIP-664): the producers a partition's producer state holds, for an
operator looking for a hanging transaction (`brook transactions describe-producers`,
`find-hanging`, and `abort --start-offset`, which finds the producer to abort here).

As Kafka 3.9 answers it: a topic whose name is invalid is INVALID_TOPIC_EXCEPTION, one the
principal may not Read TOPIC_AUTHORIZATION_FAILED (before its existence is looked at, so a
denied principal learns nothing), one that does not exist UNKNOWN_TOPIC_OR_PARTITION; then per
partition, any replica this broker holds answers (leader or follower: the tool may ask a given
broker), a partition that exists elsewhere is NOT_LEADER_OR_FOLLOWER, one that does not exist
UNKNOWN_TOPIC_OR_PARTITION."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from ...protocol.messages import make, response_class, response_module
from ..auth import authz
from ..metadata import InvalidTopicError, validate_topic_name
from .api import Api
from .common import NO_THROTTLE

API_KEY = 61


async def handle(broker, request, connection):
    version = request.api_version
    mod = response_module(API_KEY, version)
    names = [t.name for t in request.body.topics]
    readable = authz.allowed_names(broker, connection, authz.Op.READ, authz.TOPIC, names)
    topics = []
    for t in request.body.topics:
        error = _topic_error(broker, t.name, readable)
        topics.append(make(mod.TopicResponse, name=t.name, partitions=tuple(
            _partition(broker, mod, t.name, index, error) for index in t.partition_indexes)))
    return make(response_class(API_KEY, version), throttle_time=NO_THROTTLE, topics=tuple(topics))


def _topic_error(broker, name: str, readable: set[str]) -> ErrorCode | None:
    try:
        validate_topic_name(name)
    except InvalidTopicError:
        return ErrorCode.invalid_topic_exception
    if name not in readable:
        return ErrorCode.topic_authorization_failed
    if not broker.partition_exists(name, 0):  # (every topic has a partition 0)
        return ErrorCode.unknown_topic_or_partition
    return None


def _partition(broker, mod, topic: str, index: int, error: ErrorCode | None):
    partition = broker.partition(topic, index) if error is None else None
    if partition is None:
        if error is None:
            error = (ErrorCode.not_leader_or_follower if broker.partition_exists(topic, index)
                     else ErrorCode.unknown_topic_or_partition)
        return make(mod.PartitionResponse, partition_index=index, error_code=error,
                    error_message=None, active_producers=())
    producers = partition.log.producer_state.producers
    return make(mod.PartitionResponse, partition_index=index, error_code=ErrorCode.none,
                error_message=None, active_producers=tuple(
                    make(mod.ProducerState, producer_id=e.producer_id,
                         producer_epoch=e.producer_epoch, last_sequence=e.last_seq,
                         last_timestamp=e.last_timestamp, coordinator_epoch=e.coordinator_epoch,
                         current_txn_start_offset=e.current_txn_first_offset)
                    for _, e in sorted(producers.items())))


APIS = [Api(API_KEY, "DescribeProducers", 0, 0, handle)]
