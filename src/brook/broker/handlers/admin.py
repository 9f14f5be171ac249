"""Topic administration: CreateTopics, DeleteTopics, CreatePartitions.

There is one broker, so a replication factor above 1 or an assignment naming another
broker is refused as Kafka refuses one it cannot place.
"""

from __future__ import annotations

import logging
import uuid

from kio.schema.errors import ErrorCode

from ...protocol.messages import make, response_class, response_module
from ..errors import error_code_for
from ..metadata import MAX_PARTITIONS_PER_REQUEST, MetadataError
from . import Api
from .common import NO_THROTTLE

log = logging.getLogger(__name__)

ZERO_UUID = uuid.UUID(int=0)
CONFIG_SOURCE_DYNAMIC_TOPIC = 1
CONFIG_SOURCE_DEFAULT = 5


class _Refused(Exception):
    def __init__(self, code: ErrorCode, text: str) -> None:
        super().__init__(text)
        self.code = code


def _check_replication(broker, replication_factor: int, assignments) -> None:
    if replication_factor not in (-1, 1) and not assignments:
        raise _Refused(ErrorCode.invalid_replication_factor,
                       f"Replication factor: {replication_factor} larger than available brokers: 1.")
    for a in assignments or ():
        ids = tuple(getattr(a, "broker_ids", ()) or ())
        if ids != (broker.broker_id,):
            raise _Refused(ErrorCode.invalid_replica_assignment,
                           f"replica assignment {list(ids)} is not [{broker.broker_id}] on this single broker")


async def create_topics(broker, request, connection):
    body = request.body
    version = request.api_version
    mod = response_module(19, version)
    validate_only = getattr(body, "validate_only", False)
    results = []
    seen: dict[str, int] = {}
    for t in body.topics:
        seen[t.name] = seen.get(t.name, 0) + 1
    with broker.metadata.batch():  # durable, with one fsync, before the answer
        for t in body.topics:
            results.append(_create_topic(broker, t, seen, validate_only, version, mod))
    return make(response_class(19, version), throttle_time=NO_THROTTLE, topics=tuple(results))


def _create_topic(broker, t, seen: dict[str, int], validate_only: bool, version: int, mod):
    code, text, tm = ErrorCode.none, None, None
    partitions = t.num_partitions
    configs = {c.name: c.value for c in t.configs}
    try:
        if seen[t.name] > 1:
            raise _Refused(ErrorCode.invalid_request, f"topic {t.name!r} appears more than once")
        _check_replication(broker, t.replication_factor, t.assignments)
        if t.assignments:
            if partitions not in (-1, len(t.assignments)):
                raise _Refused(ErrorCode.invalid_request, "both numPartitions and assignments given")
            partitions = len(t.assignments)
        elif partitions == -1:
            partitions = broker.config.num_partitions
        if partitions > MAX_PARTITIONS_PER_REQUEST:
            raise _Refused(ErrorCode.policy_violation,
                           f"{partitions} partitions is more than {MAX_PARTITIONS_PER_REQUEST} in one request")
        tm = broker.create_topic(t.name, partitions, configs, validate_only=validate_only)
    except _Refused as exc:
        code, text = exc.code, str(exc)
    except MetadataError as exc:
        code, text = error_code_for(exc), str(exc)
    except OSError as exc:  # e.g. out of file descriptors or disk space
        code, text = ErrorCode.kafka_storage_error, str(exc)
        log.error("create topic %r failed: %s", t.name, exc)
    if code != ErrorCode.none:
        log.info("create topic %r refused: %s", t.name, text)
    described = ()
    if tm is not None and version >= 5:
        described = tuple(
            make(mod.CreatableTopicConfigs, name=k, value=v, read_only=False,
                 config_source=CONFIG_SOURCE_DYNAMIC_TOPIC if k in configs else CONFIG_SOURCE_DEFAULT,
                 is_sensitive=False)
            for k, v in sorted(broker.topic_config_values(t.name, configs).items()))
    return make(mod.CreatableTopicResult, name=t.name,
                topic_id=tm.topic_id if tm is not None else ZERO_UUID,
                error_code=code, error_message=text, topic_config_error_code=0,
                num_partitions=partitions if tm is not None else -1,
                replication_factor=1 if tm is not None else -1, configs=described)


async def delete_topics(broker, request, connection):
    body = request.body
    version = request.api_version
    mod = response_module(20, version)
    if version >= 6:
        wanted = [(t.name, t.topic_id) for t in body.topics]
    else:
        wanted = [(name, None) for name in body.topic_names]
    results = []
    deleted = []
    for name, topic_id in wanted:
        code, text = ErrorCode.none, None
        if name is None:
            tm = broker.metadata.by_id.get(topic_id)
            if tm is None:
                code, text = ErrorCode.unknown_topic_id, f"no topic with id {topic_id}"
            else:
                name = tm.name
        if code == ErrorCode.none:
            tm = broker.metadata.get(name)
            if not broker.config.delete_topic_enable:
                code, text = ErrorCode.topic_deletion_disabled, "delete.topic.enable is false"
            elif tm is None:
                code, text = ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist"
            elif tm.internal:
                code, text = ErrorCode.invalid_request, f"internal topic {name!r} cannot be deleted"
            else:
                topic_id = tm.topic_id
                try:
                    broker.delete_topic(name)
                except MetadataError as exc:
                    code, text = error_code_for(exc), str(exc)
                else:
                    deleted.append(name)
        results.append(make(mod.DeletableTopicResult, name=name, topic_id=topic_id or ZERO_UUID,
                            error_code=code, error_message=text))
    if deleted:
        # Groups' committed offsets go with the topic, as in Kafka; answered once written.
        await broker.complete_topic_deletions()
    return make(response_class(20, version), throttle_time=NO_THROTTLE, responses=tuple(results))


async def create_partitions(broker, request, connection):
    body = request.body
    version = request.api_version
    mod = response_module(37, version)
    results = []
    for t in body.topics:
        code, text = ErrorCode.none, None
        try:
            if t.assignments:
                _check_replication(broker, 1, t.assignments)
            tm = broker.metadata.get(t.name)
            if tm is not None and t.count - tm.partitions > MAX_PARTITIONS_PER_REQUEST:
                raise _Refused(ErrorCode.policy_violation,
                               f"more than {MAX_PARTITIONS_PER_REQUEST} new partitions in one request")
            if tm is not None and t.assignments and len(t.assignments) != t.count - tm.partitions:
                raise _Refused(ErrorCode.invalid_replica_assignment,
                               f"{len(t.assignments)} assignments for {t.count - tm.partitions} new partitions")
            broker.create_partitions(t.name, t.count, validate_only=body.validate_only)
        except _Refused as exc:
            code, text = exc.code, str(exc)
        except MetadataError as exc:
            code, text = error_code_for(exc), str(exc)
        except OSError as exc:
            code, text = ErrorCode.kafka_storage_error, str(exc)
            log.error("create partitions of %r failed: %s", t.name, exc)
        results.append(make(mod.CreatePartitionsTopicResult, name=t.name, error_code=code, error_message=text))
    return make(response_class(37, version), throttle_time=NO_THROTTLE, results=tuple(results))


APIS = [
    Api(19, "CreateTopics", 2, 7, create_topics),
    Api(20, "DeleteTopics", 1, 6, delete_topics),
    Api(37, "CreatePartitions", 0, 3, create_partitions),
]
