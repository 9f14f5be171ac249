"""Topic administration: CreateTopics, DeleteTopics, CreatePartitions.

There is one broker, so a replication factor above 1 or an assignment naming another
broker is refused as Kafka refuses one it cannot place.
"""

from __future__ import annotations

import logging
import uuid

from kio.schema.errors import ErrorCode

from ...protocol.messages import make, response_class, response_module
from ..auth import authz
from ..errors import error_code_for
from ..metadata import INTERNAL_TOPICS, MetadataError
from ..zookeeper_calls import ZooKeeperUnavailable, in_zookeeper
from .api import Api
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
    """Each topic is checked, then the logs of those that pass are made in slices (the event
    loop serves others between them), then all are made known with one metadata write.
    A topic is created whole or not at all."""
    body = request.body
    version = request.api_version
    mod = response_module(19, version)
    validate_only = getattr(body, "validate_only", False)
    if broker.replicas is not None:
        return await _create_topics_in_cluster(broker, request, mod, validate_only, connection)
    seen: dict[str, int] = {}
    for t in body.topics:
        seen[t.name] = seen.get(t.name, 0) + 1
    plans = [_Plan(t) for t in body.topics]
    total = 0
    for plan in plans:
        _check_topic(broker, plan, seen)
        if broker.authorizer is not None:
            _authorize_creation(broker, connection, plan)
        if plan.code == ErrorCode.none:
            total += plan.partitions
    cap = broker.config.max_partitions_per_request
    reserved = []
    try:
        for plan in plans:
            if plan.code != ErrorCode.none:
                continue
            if total > cap:  # Kafka's controller refuses such an operation as a whole
                plan.refuse(ErrorCode.policy_violation,
                            f"the request asks for {total} partitions in all, more than "
                            f"max.partitions.per.request={cap}")
                continue
            try:
                broker.check_new_topic(plan.name, plan.partitions, plan.configs)
            except MetadataError as exc:
                plan.refuse(error_code_for(exc), str(exc))
                continue
            broker.reserve(plan.name, plan.partitions)  # the next topics' room counts these
            reserved.append(plan.name)
            if validate_only:
                plan.created = True
        if not validate_only:
            for plan in plans:
                if plan.code == ErrorCode.none:
                    try:
                        plan.logs = await broker.open_logs_in_slices(
                            plan.name, range(plan.partitions), broker.log_config_of(plan.configs))
                    except OSError as exc:  # e.g. out of file descriptors or disk space
                        plan.refuse(ErrorCode.kafka_storage_error, str(exc))
                        log.error("create topic %r failed: %s", plan.name, exc)
    except BaseException:  # cancelled: what was made goes
        for plan in plans:
            if plan.logs:
                broker.discard_logs(plan.name, range(len(plan.logs)))
        raise
    finally:
        for name in reserved:
            broker.release(name)
    if not validate_only:
        with broker.metadata.batch():  # durable, with one fsync, before the answer
            for plan in plans:
                if plan.code == ErrorCode.none:
                    try:
                        plan.tm = broker.register_topic(plan.name, plan.configs, plan.logs)
                        plan.created = True
                    except MetadataError as exc:
                        plan.refuse(error_code_for(exc), str(exc))
    results = [_result(broker, plan, version, mod) for plan in plans]
    return make(response_class(19, version), throttle_time=NO_THROTTLE, topics=tuple(results))


async def _create_topics_in_cluster(broker, request, mod, validate_only: bool, connection=None):
    """CreateTopics in a cluster: each topic written to ZooKeeper with its replica
    assignment; answered once the controller has given every partition a leader (or the
    request's timeout has passed, as Kafka answers: the topic exists all the same)."""
    from ..cluster_topics import TopicRefused, create_topic, wait_for_leaders
    body = request.body
    version = request.api_version
    results, created = [], []
    names = [t.name for t in body.topics]
    for t in body.topics:
        configs = {c.name: c.value for c in t.configs}
        explicit = {a.partition_index: tuple(a.broker_ids) for a in t.assignments} or None
        partitions = len(explicit) if explicit else (
            broker.config.num_partitions if t.num_partitions == -1 else t.num_partitions)
        code, text, topic_id = ErrorCode.none, None, None
        try:
            if names.count(t.name) > 1:
                raise TopicRefused(ErrorCode.invalid_request, f"topic {t.name!r} appears more than once")
            if broker.authorizer is not None and not authz.may_create_topic(broker, connection, t.name):
                raise TopicRefused(ErrorCode.topic_authorization_failed, "Authorization failed.")
            topic_id = await create_topic(broker, t.name, partitions, t.replication_factor, configs,
                                          explicit=explicit, validate_only=validate_only)
        except TopicRefused as exc:
            code, text = exc.code, str(exc)
            log.info("create topic %r refused: %s", t.name, text)
        else:
            created.append(t.name)
        rf = len(next(iter(explicit.values()))) if explicit else (
            broker.config.default_replication_factor if t.replication_factor == -1 else t.replication_factor)
        results.append(make(mod.CreatableTopicResult, name=t.name, topic_id=topic_id or ZERO_UUID,
                            error_code=code, error_message=text, topic_config_error_code=0,
                            num_partitions=partitions if code == ErrorCode.none else -1,
                            replication_factor=rf if code == ErrorCode.none else -1, configs=()))
    if created and not validate_only:
        from .common import ms
        await wait_for_leaders(broker, created, ms(body.timeout) / 1000)
    return make(response_class(19, version), throttle_time=NO_THROTTLE, topics=tuple(results))


async def _delete_topics_in_cluster(broker, request, mod, wanted, connection=None):
    """DeleteTopics in a cluster: each topic marked in /admin/delete_topics for the
    controller, answered once this broker's metadata no longer has it (or at the timeout)."""
    import asyncio

    from .common import ms
    cache = broker.replicas.cache
    version = request.api_version
    results, marked = [], []
    for name, topic_id in wanted:
        code, text = ErrorCode.none, None
        by_id = name is None
        if name is None:
            name = next((n for n, i in cache.topic_ids.items() if i == topic_id), None)
            if name is None:
                code, text = ErrorCode.unknown_topic_id, f"no topic with id {topic_id}"
        if code == ErrorCode.none:
            if not broker.config.delete_topic_enable:
                # TOPIC_DELETION_DISABLED came with v3: earlier versions get INVALID_REQUEST
                code = ErrorCode.topic_deletion_disabled if version >= 3 else ErrorCode.invalid_request
                text = "delete.topic.enable is false"
            elif (refusal := _delete_refusal(broker, connection, name, by_id)) is not None:
                code, name = refusal
            elif name not in cache.topics:
                code, text = ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist"
            elif name in INTERNAL_TOPICS:
                code, text = ErrorCode.invalid_request, f"internal topic {name!r} cannot be deleted"
            else:
                topic_id = cache.topic_ids.get(name)
                try:
                    zk = broker.cluster.client
                    await in_zookeeper(zk, zk.mark_for_deletion, name)
                    marked.append(name)
                except ZooKeeperUnavailable as exc:  # clients ask the next controller
                    code, text = ErrorCode.not_controller, str(exc)
        results.append(make(mod.DeletableTopicResult, name=name, topic_id=topic_id or ZERO_UUID,
                            error_code=code, error_message=text))
    if marked:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ms(request.body.timeout) / 1000
        while any(n in cache.topics for n in marked) and loop.time() < deadline:
            await asyncio.sleep(0.05)
    return make(response_class(20, request.api_version), throttle_time=NO_THROTTLE,
                responses=tuple(results))


class _Plan:
    """One topic of a CreateTopics request on its way."""

    def __init__(self, t) -> None:
        self.t = t
        self.name = t.name
        self.partitions = t.num_partitions
        self.configs = {c.name: c.value for c in t.configs}
        self.code, self.text = ErrorCode.none, None
        self.logs: list = []
        self.tm = None
        self.created = False
        self.configs_hidden = False  # no DescribeConfigs on the topic: its configs are not shown

    def refuse(self, code: ErrorCode, text: str) -> None:
        self.code, self.text = code, text
        log.info("create topic %r refused: %s", self.name, text)


def _check_topic(broker, plan: _Plan, seen: dict[str, int]) -> None:
    t = plan.t
    try:
        if seen[t.name] > 1:
            raise _Refused(ErrorCode.invalid_request, f"topic {t.name!r} appears more than once")
        _check_replication(broker, t.replication_factor, t.assignments)
        if t.assignments:
            if plan.partitions not in (-1, len(t.assignments)):
                raise _Refused(ErrorCode.invalid_request, "both numPartitions and assignments given")
            plan.partitions = len(t.assignments)
        elif plan.partitions == -1:
            plan.partitions = broker.config.num_partitions
    except _Refused as exc:
        plan.refuse(exc.code, str(exc))


def _authorize_creation(broker, connection, plan: _Plan) -> None:
    """Cluster Create or Topic Create; and DescribeConfigs on the topic to see its configs."""
    if plan.code == ErrorCode.none and not authz.may_create_topic(broker, connection, plan.name):
        plan.refuse(ErrorCode.topic_authorization_failed, "Authorization failed.")
    plan.configs_hidden = not authz.allowed(broker, connection, authz.Op.DESCRIBE_CONFIGS, authz.TOPIC,
                                            plan.name, log_denied=False)


def _result(broker, plan: _Plan, version: int, mod):
    described = ()
    if plan.created and version >= 5 and not plan.configs_hidden:
        described = tuple(
            make(mod.CreatableTopicConfigs, name=k, value=v, read_only=False,
                 config_source=CONFIG_SOURCE_DYNAMIC_TOPIC if k in plan.configs else CONFIG_SOURCE_DEFAULT,
                 is_sensitive=False)
            for k, v in sorted(broker.topic_config_values(plan.name, plan.configs).items()))
    return make(mod.CreatableTopicResult, name=plan.name,
                topic_id=plan.tm.topic_id if plan.tm is not None else ZERO_UUID,
                error_code=plan.code, error_message=plan.text,
                topic_config_error_code=ErrorCode.topic_authorization_failed if plan.configs_hidden else 0,
                num_partitions=plan.partitions if plan.created else -1,
                replication_factor=1 if plan.created else -1, configs=described)


async def delete_topics(broker, request, connection):
    body = request.body
    version = request.api_version
    mod = response_module(20, version)
    if version >= 6:
        wanted = [(t.name, t.topic_id) for t in body.topics]
    else:
        wanted = [(name, None) for name in body.topic_names]
    if broker.replicas is not None:
        return await _delete_topics_in_cluster(broker, request, mod, wanted, connection)
    results = []
    deleted = []
    for name, topic_id in wanted:
        code, text = ErrorCode.none, None
        by_id = name is None
        if name is None:
            tm = broker.metadata.by_id.get(topic_id)
            if tm is None:
                code, text = ErrorCode.unknown_topic_id, f"no topic with id {topic_id}"
            else:
                name = tm.name
        if code == ErrorCode.none:
            tm = broker.metadata.get(name)
            if not broker.config.delete_topic_enable:
                # TOPIC_DELETION_DISABLED came with v3: earlier versions get INVALID_REQUEST
                code = ErrorCode.topic_deletion_disabled if version >= 3 else ErrorCode.invalid_request
                text = "delete.topic.enable is false"
            elif (refusal := _delete_refusal(broker, connection, name, by_id)) is not None:
                code, name = refusal
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


def _delete_refusal(broker, connection, name: str, by_id: bool):
    """(TOPIC_AUTHORIZATION_FAILED, the name to answer) without Topic Delete, checked before
    anything tells whether the topic exists; a topic asked for by id is not named to a
    principal that may not Describe it."""
    if broker.authorizer is None or authz.allowed(broker, connection, authz.Op.DELETE, authz.TOPIC, name):
        return None
    if by_id and not authz.allowed(broker, connection, authz.Op.DESCRIBE, authz.TOPIC, name, log_denied=False):
        name = None
    return ErrorCode.topic_authorization_failed, name


async def create_partitions(broker, request, connection):
    body = request.body
    version = request.api_version
    mod = response_module(37, version)
    results = []
    for t in body.topics:
        code, text = ErrorCode.none, None
        if broker.authorizer is not None and not authz.allowed(broker, connection, authz.Op.ALTER,
                                                               authz.TOPIC, t.name):
            results.append(make(mod.CreatePartitionsTopicResult, name=t.name,
                                error_code=ErrorCode.topic_authorization_failed,
                                error_message="The topic authorization is failed."))
            continue
        if broker.replicas is not None:
            from ..cluster_topics import TopicRefused, add_partitions
            try:
                await add_partitions(broker, t.name, t.count,
                                     [tuple(a.broker_ids) for a in t.assignments or ()] or None,
                                     body.validate_only)
            except TopicRefused as exc:
                code, text = exc.code, str(exc)
            results.append(make(mod.CreatePartitionsTopicResult, name=t.name, error_code=code,
                                error_message=text))
            continue
        try:
            if t.assignments:
                _check_replication(broker, 1, t.assignments)
            tm = broker.metadata.get(t.name)
            cap = broker.config.max_partitions_per_request
            if tm is not None and t.count - tm.partitions > cap:
                raise _Refused(ErrorCode.policy_violation,
                               f"{t.count - tm.partitions} new partitions in one request, more than "
                               f"max.partitions.per.request={cap}")
            if tm is not None and t.assignments and len(t.assignments) != t.count - tm.partitions:
                raise _Refused(ErrorCode.invalid_replica_assignment,
                               f"{len(t.assignments)} assignments for {t.count - tm.partitions} new partitions")
            await broker.create_partitions(t.name, t.count, validate_only=body.validate_only)
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
    Api(19, "CreateTopics", 0, 7, create_topics),
    Api(20, "DeleteTopics", 0, 6, delete_topics),
    Api(37, "CreatePartitions", 0, 3, create_partitions),
]
