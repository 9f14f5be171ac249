"""One Kafka request over a blocking connection (brook.client's), for the API confluent-kafka's Python client does not
expose: OffsetDelete (KIP-496), which `brook groups delete-offsets` needs. Entities are kio's,
as everywhere in brook; everything else goes through confluent-kafka (client.py)."""

from __future__ import annotations

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from ..client.connection import BrokerConnection, KafkaClientError
from ..protocol.messages import request_class
from . import options
from .errors import CliError

OFFSET_DELETE = 47


def request(host: str, port: int, body, timeout: float, security=None,
            response_cls: type | None = None):
    """Send `body` (a kio request entity) to host:port and return the response entity (read as
    `response_cls` when given), over TLS and SASL when `security` (a ClientSecurity; default:
    --command-config's) says so."""
    try:
        connection = BrokerConnection(host, port, timeout, client_id="brook-cli",
                                      security=options.security() if security is None
                                      else security)
    except KafkaClientError as exc:
        raise CliError(str(exc)) from exc
    try:
        return connection.request(body, response_cls=response_cls)
    except KafkaClientError as exc:
        raise CliError(str(exc)) from exc
    except Exception as exc:  # noqa: BLE001 - an answer that cannot be read: a message
        name = type(body).__name__.removesuffix("Request")
        raise CliError(f"{host}:{port} answered {name} v{type(body).__version__} with what "
                       f"cannot be read ({type(exc).__name__}): the broker may not support "
                       "it") from exc
    finally:
        connection.close()


def offset_delete(host: str, port: int, group_id: str, topics: dict[str, list[int]],
                  timeout: float, security=None
                  ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
    """OffsetDelete v0 to the group's coordinator: the group-level error and one per partition."""
    cls = request_class(OFFSET_DELETE, 0)
    mod = load_payload_module(OFFSET_DELETE, 0, EntityType.request)
    body = cls(group_id=group_id, topics=tuple(
        mod.OffsetDeleteRequestTopic(name=topic, partitions=tuple(
            mod.OffsetDeleteRequestPartition(partition_index=p) for p in partitions))
        for topic, partitions in sorted(topics.items())))
    response = request(host, port, body, timeout, security)
    errors = {(t.name, p.partition_index): p.error_code
              for t in response.topics for p in t.partitions}
    return response.error_code, errors


CONSUMER_GROUP_DESCRIBE = 69


def consumer_group_describe(host: str, port: int, group_id: str, timeout: float, security=None):
    """ConsumerGroupDescribe v0 (KIP-848) to the group's coordinator: (state, group epoch,
    target assignment epoch, {member id: member epoch}), or None when it is not a consumer
    group there (confluent-kafka's Python client shows neither the epochs nor the states
    Assigning and Reconciling)."""
    response = request(host, port, request_class(CONSUMER_GROUP_DESCRIBE, 0)(
        group_ids=(group_id,), include_authorized_operations=False), timeout, security)
    g = response.groups[0]
    if g.error_code != ErrorCode.none:
        return None
    return (g.group_state, g.group_epoch, g.assignment_epoch,
            {m.member_id: m.member_epoch for m in g.members})


DESCRIBE_CLUSTER = 60


def describe_cluster(host: str, port: int, timeout: float, security=None):
    """DescribeCluster v0 (KIP-700): the broker's view of the cluster, its live brokers and the
    controller. (confluent-kafka's describe_cluster asks Metadata instead, whose brokers are
    those holding partitions, not every live one.)"""
    response = request(host, port, request_class(DESCRIBE_CLUSTER, 0)(
        include_cluster_authorized_operations=False), timeout, security)
    if response.error_code != ErrorCode.none:
        raise CliError(f"cannot describe the cluster: {response.error_code.name}"
                       + (f": {response.error_message}" if response.error_message else ""))
    return response


ALTER_REASSIGNMENTS = 45
LIST_REASSIGNMENTS = 46


def alter_reassignments(host: str, port: int, targets: dict[tuple[str, int], list[int] | None],
                        timeout: float) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
    """AlterPartitionReassignments v0 to the controller: each partition's error."""
    from datetime import timedelta
    cls = request_class(ALTER_REASSIGNMENTS, 0)
    mod = load_payload_module(ALTER_REASSIGNMENTS, 0, EntityType.request)
    topics: dict[str, list] = {}
    for (topic, p), replicas in sorted(targets.items()):
        topics.setdefault(topic, []).append(mod.ReassignablePartition(
            partition_index=p, replicas=None if replicas is None else tuple(replicas)))
    response = request(host, port, cls(timeout=timedelta(seconds=timeout), topics=tuple(
        mod.ReassignableTopic(name=t, partitions=tuple(ps)) for t, ps in topics.items())), timeout)
    if response.error_code != ErrorCode.none:
        raise CliError(f"cannot reassign: {response.error_code.name}")
    return {(t.name, p.partition_index): (p.error_code, p.error_message)
            for t in response.responses for p in t.partitions}


def list_reassignments(host: str, port: int, timeout: float):
    """ListPartitionReassignments v0 to the controller: {(topic, partition): (replicas, adding,
    removing)}."""
    from datetime import timedelta
    response = request(host, port, request_class(LIST_REASSIGNMENTS, 0)(
        timeout=timedelta(seconds=timeout), topics=None), timeout)
    if response.error_code != ErrorCode.none:
        raise CliError(f"cannot list reassignments: {response.error_code.name}")
    return {(t.name, p.partition_index): (list(p.replicas), list(p.adding_replicas), list(p.removing_replicas))
            for t in response.topics for p in t.partitions}


DESCRIBE_CONFIGS = 32
INCREMENTAL_ALTER_CONFIGS = 44
BROKER_RESOURCE = 4
SOURCES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
           3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG",
           6: "DYNAMIC_BROKER_LOGGER_CONFIG"}


def describe_broker_configs(host: str, port: int, name: str, timeout: float, security=None):
    """DescribeConfigs v4 of a broker resource (`name` a broker id, or "" for the cluster-wide
    dynamic defaults, which confluent-kafka's ConfigResource cannot name), with synonyms."""
    cls = request_class(DESCRIBE_CONFIGS, 4)
    mod = load_payload_module(DESCRIBE_CONFIGS, 4, EntityType.request)
    response = request(host, port, cls(resources=(mod.DescribeConfigsResource(
        resource_type=BROKER_RESOURCE, resource_name=name, configuration_keys=None),),
        include_synonyms=True, include_documentation=False), timeout, security)
    (result,) = response.results
    if result.error_code != ErrorCode.none:
        raise CliError(f"{result.error_code.name}"
                       + (f": {result.error_message}" if result.error_message else ""))
    return result.configs


def alter_broker_configs(host: str, port: int, name: str, ops: list[tuple[str, int, str | None]],
                         timeout: float) -> None:
    """IncrementalAlterConfigs v1 of a broker resource: (key, operation, value) each."""
    cls = request_class(INCREMENTAL_ALTER_CONFIGS, 1)
    mod = load_payload_module(INCREMENTAL_ALTER_CONFIGS, 1, EntityType.request)
    response = request(host, port, cls(resources=(mod.AlterConfigsResource(
        resource_type=BROKER_RESOURCE, resource_name=name, configs=tuple(
            mod.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops)),),
        validate_only=False), timeout)
    (result,) = response.responses
    if result.error_code != ErrorCode.none:
        raise CliError(f"{result.error_code.name}"
                       + (f": {result.error_message}" if result.error_message else ""))


DESCRIBE_LOG_DIRS = 35


def describe_log_dirs(host: str, port: int, topics: dict[str, list[int]] | None, timeout: float,
                      security=None) -> dict[tuple[str, int], int]:
    """DescribeLogDirs v1 to one broker: the size in bytes of each partition it holds (of
    `topics`, or of every partition for None), summed over its log dirs."""
    cls = request_class(DESCRIBE_LOG_DIRS, 1)
    mod = load_payload_module(DESCRIBE_LOG_DIRS, 1, EntityType.request)
    asked = None if topics is None else tuple(
        mod.DescribableLogDirTopic(topic=t, partitions=tuple(ps)) for t, ps in sorted(topics.items()))
    response = request(host, port, cls(topics=asked), timeout, security)
    if getattr(response, "error_code", ErrorCode.none) != ErrorCode.none:
        raise CliError(f"cannot describe the log dirs of {host}:{port}: {response.error_code.name}")
    sizes: dict[tuple[str, int], int] = {}
    for result in response.results:
        if result.error_code != ErrorCode.none:
            continue  # a dir that cannot be read holds no size to show
        for topic in result.topics:
            for p in topic.partitions:
                if not p.is_future_key:
                    key = (topic.name, p.partition_index)
                    sizes[key] = sizes.get(key, 0) + p.partition_size
    return sizes


DESCRIBE_SCRAM_USERS = 50
SCRAM_MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}


def describe_scram_users(host: str, port: int, timeout: float,
                         security=None) -> list[tuple[str, str, int]]:
    """DescribeUserScramCredentials v0 of every user: (user, mechanism, iterations), never a
    salt or a key. (confluent-kafka 2.16's describe_user_scram_credentials crashes the process
    when the broker refuses the request, as it does a user without Cluster Describe.)"""
    response = request(host, port, request_class(DESCRIBE_SCRAM_USERS, 0)(users=None), timeout,
                       security)
    if response.error_code != ErrorCode.none:
        raise CliError(f"cannot list users: {response.error_code.name.upper()}"
                       + (f": {response.error_message}" if response.error_message else ""))
    return sorted((r.user, SCRAM_MECHANISMS.get(int(i.mechanism), str(i.mechanism)),
                   int(i.iterations))
                  for r in response.results if r.error_code == ErrorCode.none
                  for i in r.credential_infos)


DESCRIBE_ACLS = 29


def describe_acls(host: str, port: int, f, timeout: float, security=None) -> list:
    """DescribeAcls v1 of a confluent-kafka AclBindingFilter: the matching AclBindings.
    (confluent-kafka 2.16's describe_acls answers a refused request, or a cluster without an
    authorizer, with no ACLs instead of the broker's error.)"""
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType,
                                       ResourcePatternType, ResourceType)
    from kio.static.primitive import i8

    response = request(host, port, request_class(DESCRIBE_ACLS, 1)(
        resource_type_filter=i8(f.restype.value), resource_name_filter=f.name,
        pattern_type_filter=i8(f.resource_pattern_type.value), principal_filter=f.principal,
        host_filter=f.host, operation=i8(f.operation.value),
        permission_type=i8(f.permission_type.value)), timeout, security)
    if response.error_code != ErrorCode.none:
        raise CliError(f"{response.error_code.name.upper()}"
                       + (f": {response.error_message}" if response.error_message else ""))
    return [AclBinding(ResourceType(int(r.resource_type)), r.resource_name,
                       ResourcePatternType(int(r.pattern_type)), a.principal, a.host,
                       AclOperation(int(a.operation)), AclPermissionType(int(a.permission_type)))
            for r in response.resources for a in r.acls]


METADATA = 3


def topic_metadata(host: str, port: int, timeout: float, security=None,
                   topics: list[str] | None = None) -> list[dict]:
    """Metadata v12 of every topic (or of `topics`), as plain values sorted by name: {"topic",
    "internal", "error", "partitions": [{"partition", "leader", "replicas", "isr"}]}."""
    mod = load_payload_module(METADATA, 12, EntityType.request)
    asked = None if topics is None else tuple(
        mod.MetadataRequestTopic(topic_id=None, name=t) for t in topics)
    response = request(host, port, request_class(METADATA, 12)(
        topics=asked, allow_auto_topic_creation=False,
        include_topic_authorized_operations=False), timeout, security)
    return sorted(({
        "topic": t.name, "internal": bool(t.is_internal),
        "error": None if t.error_code == ErrorCode.none else t.error_code.name.upper(),
        "partitions": sorted(({"partition": int(p.partition_index), "leader": int(p.leader_id),
                               "replicas": [int(r) for r in p.replica_nodes],
                               "isr": [int(r) for r in p.isr_nodes]} for p in t.partitions),
                             key=lambda p: p["partition"]),
    } for t in response.topics if t.name is not None), key=lambda t: t["topic"])


FIND_COORDINATOR, DESCRIBE_GROUPS, OFFSET_FETCH = 10, 15, 9


GROUP_KEY, TRANSACTION_KEY = 0, 1  # FindCoordinator's key types


def find_group_coordinators(host: str, port: int, groups: list[str], timeout: float,
                            security=None) -> dict[str, tuple[int, str, int] | str]:
    """FindCoordinator v4 (KIP-699) of many groups in one request: each group's coordinator
    (id, host, port), or the error name when it has none now."""
    return find_coordinators(host, port, GROUP_KEY, groups, timeout, security)


def find_coordinators(host: str, port: int, key_type: int, keys: list[str], timeout: float,
                      security=None) -> dict[str, tuple[int, str, int] | str]:
    """FindCoordinator v4 of many keys of one type (groups, transactional ids) in one request:
    each key's coordinator (id, host, port), or the error name when it has none now."""
    from kio.static.primitive import i8

    response = request(host, port, request_class(FIND_COORDINATOR, 4)(
        key_type=i8(key_type), coordinator_keys=tuple(keys)), timeout, security)
    return {c.key: (int(c.node_id), c.host, int(c.port)) if c.error_code == ErrorCode.none
            else c.error_code.name.upper() for c in response.coordinators}


def describe_groups(host: str, port: int, groups: list[str], timeout: float,
                    security=None) -> list:
    """DescribeGroups v5 of the groups a coordinator has, in one request: kio's
    DescribedGroup entities (state, protocol type and name, members and their assignments)."""
    response = request(host, port, request_class(DESCRIBE_GROUPS, 5)(
        groups=tuple(groups), include_authorized_operations=False), timeout, security)
    return list(response.groups)


def fetch_group_offsets(host: str, port: int, groups: list[str], timeout: float,
                        security=None) -> dict[str, dict[tuple[str, int], int] | str]:
    """OffsetFetch v8 (KIP-709) of many groups of one coordinator in one request: each group's
    committed offsets {(topic, partition): offset}, or the error name of a group refused."""
    mod = load_payload_module(OFFSET_FETCH, 8, EntityType.request)
    response = request(host, port, request_class(OFFSET_FETCH, 8)(
        groups=tuple(mod.OffsetFetchRequestGroup(group_id=g, topics=None) for g in groups),
        require_stable=False), timeout, security)
    out: dict[str, dict[tuple[str, int], int] | str] = {}
    for g in response.groups:
        if g.error_code != ErrorCode.none:
            out[g.group_id] = g.error_code.name.upper()
            continue
        out[g.group_id] = {(t.name, int(p.partition_index)): int(p.committed_offset)
                           for t in g.topics for p in t.partitions
                           if p.error_code == ErrorCode.none and p.committed_offset >= 0}
    return out
