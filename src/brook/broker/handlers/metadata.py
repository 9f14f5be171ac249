"""Metadata: the broker, the cluster id and the topics with their partitions.

A topic asked for by name that does not exist is created when `auto.create.topics.enable`
and the request allow it (topic names Kafka would refuse get INVALID_TOPIC_EXCEPTION).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid

from kio.schema.errors import ErrorCode

from ...protocol.messages import encode_response, make, response_class, response_module
from ..auth import authz
from ..errors import error_code_for
from ...coordinator.group.partitioner import OFFSETS_TOPIC
from ...coordinator.transaction.partitioner import TRANSACTION_STATE_TOPIC
from ..metadata import INTERNAL_TOPICS, MetadataError
from .api import Api, RawResponse
from .common import INT32_MIN, NO_THROTTLE, InvalidRequest

log = logging.getLogger(__name__)

API_KEY = 3
ZERO_UUID = uuid.UUID(int=0)


def brokers_of(broker, mod, connection):
    """This broker alone, in a cluster too: it holds every partition it answers for, and
    listing brokers that do not (its partitions are not replicated yet) would send clients to
    them. For the same reason Metadata names this broker as the controller even when another
    is elected (DescribeCluster names that one): clients send CreateTopics and DeleteTopics to
    Metadata's controller (librdkafka does), and one they cannot reach would fail them."""
    listener = broker.advertised_listener(connection)
    return (make(mod.MetadataResponseBroker, node_id=broker.broker_id, host=listener.host,
                 port=listener.port, rack=broker.config.broker_rack),)


def topic_entry(broker, mod, version: int, name: str, error: ErrorCode = ErrorCode.none,
                topic_id: uuid.UUID | None = None):
    tm = broker.metadata.get(name) if error == ErrorCode.none else None
    partitions = ()
    if tm is not None:
        bid = broker.broker_id
        parts = []
        for i in range(tm.partitions):
            p = broker.partition(name, i)
            if p is None:  # its log could not be opened: the partition is offline
                parts.append(make(mod.MetadataResponsePartition, error_code=ErrorCode.kafka_storage_error,
                                  partition_index=i, leader_id=-1, leader_epoch=-1, replica_nodes=(bid,),
                                  isr_nodes=(), offline_replicas=(bid,)))
            else:
                parts.append(make(mod.MetadataResponsePartition, error_code=ErrorCode.none, partition_index=i,
                                  leader_id=bid, leader_epoch=p.leader_epoch, replica_nodes=(bid,),
                                  isr_nodes=(bid,), offline_replicas=()))
        partitions = tuple(parts)
        topic_id = tm.topic_id
    return make(mod.MetadataResponseTopic, error_code=error, name=name,
                topic_id=topic_id or ZERO_UUID, is_internal=bool(tm and tm.internal),
                partitions=partitions, topic_authorized_operations=INT32_MIN)


async def handle(broker, request, connection):
    """Answered from `broker.metadata_responses` when the same question was answered at the
    same metadata generation (same version, topics and listener)."""
    version = request.api_version
    if broker.replicas is not None:
        return await _build_in_cluster(broker, request, connection)
    key = _cache_key(request, connection) if broker.authorizer is None else None  # per principal
    generation = broker.metadata.generation
    cache = broker.metadata_responses
    if key is not None:
        frame = cache.get(key, generation, request.correlation_id)
        if frame is not None:
            return RawResponse([frame], len(frame))
    response = _build(broker, request, connection)
    if key is None or broker.metadata.generation != generation \
            or any(t.error_code != ErrorCode.none for t in response.topics):
        return response  # it auto-created a topic, or an error may be gone next time
    frame = encode_response(API_KEY, version, request.correlation_id, response)
    cache.put(key, generation, frame)
    return RawResponse([frame], len(frame))


def _cache_key(request, connection):
    """What the answer depends on besides the metadata; None for requests by topic id."""
    body = request.body
    requested = body.topics
    if requested is None:
        names = None
    else:
        names = []
        for t in requested:
            name = t if isinstance(t, str) else t.name
            if name is None or (getattr(t, "topic_id", None) or ZERO_UUID) != ZERO_UUID:
                return None
            names.append(name)
        names = tuple(names)
    return (request.api_version, names, getattr(body, "allow_auto_topic_creation", True),
            getattr(connection, "listener_name", None),
            getattr(body, "include_cluster_authorized_operations", False),
            getattr(body, "include_topic_authorized_operations", False))


def _build(broker, request, connection):
    body = request.body
    version = request.api_version
    mod = response_module(API_KEY, version)
    topics = []
    refused = []  # TOPIC_AUTHORIZATION_FAILED: named but not to be described (or created)
    checked = broker.authorizer is not None
    requested = body.topics
    if requested is None or (version == 0 and not requested):
        names = sorted(broker.metadata.topics)
        if checked:  # every topic: those it may not Describe are left out, silently
            may = authz.describable_topics(broker, connection, names, log_denied=False)
            names = [n for n in names if n in may]
        topics = [topic_entry(broker, mod, version, n) for n in names]
    else:
        allow = getattr(body, "allow_auto_topic_creation", True) and broker.config.auto_create_topics_enable
        for t in requested:
            name = t if isinstance(t, str) else t.name
            topic_id = getattr(t, "topic_id", None)
            if version < 12 and (name is None or (topic_id and topic_id != ZERO_UUID)):
                # Versions 10 and 11 carry a topic id field but do not support lookups by id.
                raise InvalidRequest(f"topic ids are not supported in Metadata v{version}: "
                                     f"a topic of name {name} and id {topic_id}")
            if name is None:
                tm = broker.metadata.by_id.get(topic_id) if topic_id else None
                if tm is None:
                    topics.append(topic_entry(broker, mod, version, None, ErrorCode.unknown_topic_id,
                                              topic_id))
                    continue
                name = tm.name
                if checked and not authz.allowed(broker, connection, authz.Op.DESCRIBE, authz.TOPIC, name):
                    # ids are not secret: answered with the id and without the name
                    refused.append(make(mod.MetadataResponseTopic,
                                        error_code=ErrorCode.topic_authorization_failed, name=None,
                                        topic_id=topic_id, is_internal=False, partitions=(),
                                        topic_authorized_operations=INT32_MIN))
                    continue
            elif checked and not authz.allowed(broker, connection, authz.Op.DESCRIBE, authz.TOPIC, name):
                # before anything that could tell whether it exists
                refused.append(_refused(mod, name))
                continue
            error = ErrorCode.none
            if broker.metadata.get(name) is None:
                if allow and checked and name not in INTERNAL_TOPICS \
                        and not authz.may_create_topic(broker, connection, name):
                    refused.append(_refused(mod, name))
                    continue
                if name == OFFSETS_TOPIC:  # made as the coordinator makes it, never as a plain topic
                    if not broker.ensure_offsets_topic():
                        error = ErrorCode.unknown_topic_or_partition
                elif name == TRANSACTION_STATE_TOPIC:  # likewise, the transaction coordinator's
                    if not broker.ensure_transaction_topic():
                        error = ErrorCode.unknown_topic_or_partition
                elif allow:
                    try:
                        broker.create_topic(name, broker.config.num_partitions)
                    except MetadataError as exc:
                        error = error_code_for(exc)
                else:
                    error = ErrorCode.unknown_topic_or_partition
            topics.append(topic_entry(broker, mod, version, name, error))
    topics, cluster_ops = _with_authorized_operations(broker, connection, body, version, topics)
    return make(response_class(API_KEY, version), throttle_time=NO_THROTTLE,
                brokers=brokers_of(broker, mod, connection), cluster_id=broker.metadata.cluster_id,
                controller_id=broker.broker_id, topics=tuple(topics + refused),
                cluster_authorized_operations=cluster_ops)


def _refused(mod, name: str):
    return make(mod.MetadataResponseTopic, error_code=ErrorCode.topic_authorization_failed, name=name,
                topic_id=ZERO_UUID, is_internal=name in INTERNAL_TOPICS, partitions=(),
                topic_authorized_operations=INT32_MIN)


def _with_authorized_operations(broker, connection, body, version: int, topics: list):
    """The topics with their authorized operations and the cluster's (Metadata v8+, when the
    request asks for them; the cluster's in v8-v10 only, and 0 without Cluster Describe)."""
    cluster_ops = INT32_MIN
    if version < 8:
        return topics, cluster_ops
    if version <= 10 and getattr(body, "include_cluster_authorized_operations", False):
        cluster_ops = (authz.authorized_operations(broker, connection, authz.CLUSTER, authz.CLUSTER_NAME)
                       if authz.cluster_allowed(broker, connection, authz.Op.DESCRIBE) else 0)
    if getattr(body, "include_topic_authorized_operations", False):
        topics = [dataclasses.replace(t, topic_authorized_operations=authz.authorized_operations(
            broker, connection, authz.TOPIC, t.name)) for t in topics]
    return topics, cluster_ops


async def _build_in_cluster(broker, request, connection):
    """Metadata in a cluster, from what the controller last told this broker: every live
    broker (at its endpoint for the listener the request came in on), each partition's leader,
    leader epoch, replicas, ISR and offline replicas, and the elected controller."""
    body = request.body
    version = request.api_version
    mod = response_module(API_KEY, version)
    cache = broker.replicas.cache
    listener = broker.advertised_listener(connection)
    requested = body.topics
    checked = broker.authorizer is not None
    refused = []
    if requested is None or (version == 0 and not requested):
        names = sorted(cache.topics)
        if checked:
            may = authz.describable_topics(broker, connection, names, log_denied=False)
            names = [n for n in names if n in may]
    else:
        names = []
        allow = getattr(body, "allow_auto_topic_creation", True) and broker.config.auto_create_topics_enable
        creating = []
        for t in requested:
            name = t if isinstance(t, str) else t.name
            if name is None:
                topic_id = getattr(t, "topic_id", None)
                name = next((n for n, i in cache.topic_ids.items() if i == topic_id), None)
                if name is None:
                    continue
            if checked and not authz.allowed(broker, connection, authz.Op.DESCRIBE, authz.TOPIC, name):
                refused.append(_refused(mod, name))
                continue
            if name not in cache.topics and allow and name not in INTERNAL_TOPICS:
                if checked and not authz.may_create_topic(broker, connection, name):
                    refused.append(_refused(mod, name))
                    continue
                creating.append(name)
            names.append(name)
        if creating:
            from ..cluster_topics import TopicRefused, create_topic, wait_for_leaders
            for name in creating:
                try:
                    await create_topic(broker, name, broker.config.num_partitions, -1, {})
                except TopicRefused as exc:
                    log.info("auto-creating topic %r refused: %s", name, exc)
            await wait_for_leaders(broker, creating, 0.5)
    topics = []
    for name in names:
        parts = cache.topics.get(name)
        if parts is None:
            topics.append(make(mod.MetadataResponseTopic, error_code=ErrorCode.unknown_topic_or_partition,
                               name=name, topic_id=ZERO_UUID, is_internal=name in INTERNAL_TOPICS,
                               partitions=(), topic_authorized_operations=INT32_MIN))
            continue
        entries = []
        for i, info in sorted(parts.items()):
            code = ErrorCode.none if info.leader >= 0 else ErrorCode.leader_not_available
            entries.append(make(mod.MetadataResponsePartition, error_code=code, partition_index=i,
                                leader_id=info.leader, leader_epoch=info.leader_epoch,
                                replica_nodes=info.replicas, isr_nodes=info.isr,
                                offline_replicas=info.offline))
        topics.append(make(mod.MetadataResponseTopic, error_code=ErrorCode.none, name=name,
                           topic_id=cache.topic_ids.get(name, ZERO_UUID),
                           is_internal=name in INTERNAL_TOPICS, partitions=tuple(entries),
                           topic_authorized_operations=INT32_MIN))
    brokers = []
    for b in sorted(cache.brokers.values(), key=lambda b: b.broker_id):
        address = b.endpoints.get(listener.name)
        if address is not None:
            brokers.append(make(mod.MetadataResponseBroker, node_id=b.broker_id, host=address[0],
                                port=address[1], rack=b.rack))
    topics, cluster_ops = _with_authorized_operations(broker, connection, body, version, topics)
    return make(response_class(API_KEY, version), throttle_time=NO_THROTTLE, brokers=tuple(brokers),
                cluster_id=broker.metadata.cluster_id, controller_id=broker.cluster.view.controller_id,
                topics=tuple(topics + refused), cluster_authorized_operations=cluster_ops)


APIS = [Api(API_KEY, "Metadata", 0, 12, handle)]
