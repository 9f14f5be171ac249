"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics and brokers (a
broker's own dynamic configs, and the cluster-wide defaults under the empty broker name).
Configs are validated as a whole before any is stored."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from ...protocol.messages import make, response_class, response_module
from ..auth import authz
from ..errors import error_code_for
from ..metadata import MetadataError
from ..zookeeper_calls import ZooKeeperUnavailable, in_zookeeper
from .api import Api
from .. import config_defs as defs
from ..config_defs import SOURCE_DEFAULT, SOURCE_DYNAMIC_TOPIC
from ..dynamic_config import TOPIC_SYNONYMS, DynamicConfigError, Entry, Synonym
from .common import NO_THROTTLE

TOPIC = 2
BROKER = 4

LIST_KEYS = {"cleanup.policy", "follower.replication.throttled.replicas",
             "leader.replication.throttled.replicas"}
# Types of the topic keys with no broker-level synonym (the others take their synonym's).
_TOPIC_TYPES = {"follower.replication.throttled.replicas": defs.LIST,
                "leader.replication.throttled.replicas": defs.LIST,
                "remote.storage.enable": defs.BOOLEAN, "local.retention.ms": defs.LONG,
                "local.retention.bytes": defs.LONG, "segment.jitter.ms": defs.LONG}

BROKER_LIST_KEYS = frozenset(k for k, d in defs.KEYS.items() if d.type == defs.LIST)

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _topic_type(key: str) -> int:
    broker_keys = TOPIC_SYNONYMS.get(key)
    if broker_keys:
        return defs.config_type(broker_keys[0])
    return _TOPIC_TYPES.get(key, defs.STRING)


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def broker_id_of(broker, name: str) -> int | None:
    """The broker a broker resource names: None for the cluster-wide default (the empty
    name), else this broker's id; another broker's or no number is INVALID_REQUEST."""
    if not name:
        return None
    try:
        bid = int(name)
    except ValueError:
        raise _Refused(ErrorCode.invalid_request,
                       f"Broker id must be an integer, but it is: {name}") from None
    if bid != broker.broker_id:
        raise _Refused(ErrorCode.invalid_request,
                       f"Unexpected broker id, expected {broker.broker_id} or empty string, "
                       f"but received {name}")
    return bid


def _topic_entries(broker, name, configs, keys, include_synonyms) -> list[Entry]:
    values = broker.topic_config_values(name, configs)
    layers = broker.config_layers
    out = []
    for key in sorted(values):
        if keys is not None and key not in keys:
            continue
        inherited = layers.topic_synonyms(key)
        synonyms = ([Synonym(key, values[key], SOURCE_DYNAMIC_TOPIC)] if key in configs else []) \
            + inherited
        out.append(Entry(key, values[key], synonyms[0].source if synonyms else SOURCE_DEFAULT,
                         read_only=False, sensitive=False, type=_topic_type(key),
                         synonyms=tuple(synonyms) if include_synonyms else ()))
    return out


def _describe_resource(broker, resource, include_synonyms, include_docs, cluster_configs=None):
    keys = resource.configuration_keys
    keys = set(keys) if keys else None  # null or empty: every config (Kafka)
    if resource.resource_type == TOPIC:
        tm = broker.metadata.get(resource.resource_name)
        configs = cluster_configs if cluster_configs is not None else (tm.configs if tm else None)
        if configs is None:
            raise _Refused(ErrorCode.unknown_topic_or_partition,
                           f"topic {resource.resource_name!r} does not exist")
        return _topic_entries(broker, resource.resource_name, configs, keys, include_synonyms)
    if resource.resource_type == BROKER:
        layers = broker.config_layers
        if broker_id_of(broker, resource.resource_name) is None:
            return layers.describe_default(keys, with_synonyms=include_synonyms,
                                           with_docs=include_docs)
        return layers.describe_broker(keys, with_synonyms=include_synonyms, with_docs=include_docs)
    raise _Refused(ErrorCode.invalid_request,
                   f"resource type {resource.resource_type} is not supported")


BROKER_LOGGER = 8


def _refusal(broker, connection, resource, op: authz.Op) -> tuple[ErrorCode, str] | None:
    """A topic's configs need the operation on the topic, a broker's on the cluster."""
    if broker.authorizer is None:
        return None
    if resource.resource_type == TOPIC:
        if not authz.allowed(broker, connection, op, authz.TOPIC, resource.resource_name):
            return ErrorCode.topic_authorization_failed, f"Topic authorization failed: {op.name}"
    elif resource.resource_type in (BROKER, BROKER_LOGGER):
        if not authz.cluster_allowed(broker, connection, op):
            return ErrorCode.cluster_authorization_failed, f"Cluster authorization failed: {op.name}"
    return None


def _encode(mod, entry: Entry):
    synonyms = tuple(make(mod.DescribeConfigsSynonym, name=s.name, value=s.value, source=s.source)
                     for s in entry.synonyms)
    return make(mod.DescribeConfigsResourceResult, name=entry.name, value=entry.value,
                read_only=entry.read_only, config_source=entry.source,
                is_default=entry.source == SOURCE_DEFAULT, is_sensitive=entry.sensitive,
                synonyms=synonyms, config_type=entry.type, documentation=entry.doc)


async def describe_configs(broker, request, connection):
    body = request.body
    version = request.api_version
    mod = response_module(32, version)
    results = []
    for r in body.resources:
        refused = _refusal(broker, connection, r, authz.Op.DESCRIBE_CONFIGS)
        if refused is not None:
            results.append(make(mod.DescribeConfigsResult, error_code=refused[0], error_message=refused[1],
                                resource_type=r.resource_type, resource_name=r.resource_name, configs=()))
            continue
        try:
            configs = await _cluster_configs(broker, r)
            entries = _describe_resource(broker, r, getattr(body, "include_synonyms", False),
                                         getattr(body, "include_documentation", False), configs)
            code, text = ErrorCode.none, None
        except _Refused as exc:
            code, text, entries = exc.code, str(exc), ()
        except ZooKeeperUnavailable as exc:  # as Kafka's ZooKeeper mode answers it
            code, text, entries = ErrorCode.unknown_server_error, str(exc), ()
        results.append(make(mod.DescribeConfigsResult, error_code=code, error_message=text,
                            resource_type=r.resource_type, resource_name=r.resource_name,
                            configs=tuple(_encode(mod, e) for e in entries)))
    return make(response_class(32, version), throttle_time=NO_THROTTLE, results=tuple(results))


async def _cluster_configs(broker, resource) -> dict[str, str] | None:
    """In a cluster, a topic's configs as ZooKeeper has them (None: not a cluster topic)."""
    if broker.replicas is None or resource.resource_type != TOPIC \
            or resource.resource_name not in broker.replicas.cache.topics:
        return None
    zk = broker.cluster.client
    return await in_zookeeper(zk, zk.read_topic_config, resource.resource_name)


async def _alter_in_cluster(broker, resource, new_configs_of, validate_only):
    """A topic's configs written to ZooKeeper with a change notification; every broker
    holding the topic applies them when notified (Kafka's ZooKeeper mode)."""
    current = await _cluster_configs(broker, resource)
    if current is None:
        return ErrorCode.unknown_topic_or_partition, f"topic {resource.resource_name!r} does not exist"
    try:
        configs = new_configs_of(dict(current))
        from ..metadata import validate_topic_configs
        validate_topic_configs(dict(configs), broker.config.log_config)
    except MetadataError as exc:
        return error_code_for(exc), str(exc)
    except _BadOperation as exc:
        return ErrorCode.invalid_request, str(exc)
    if not validate_only:
        zk = broker.cluster.client
        await in_zookeeper(zk, zk.write_topic_config, resource.resource_name, configs)
    return ErrorCode.none, None


async def _alter_any(broker, resource, new_configs_of, validate_only):
    try:
        if resource.resource_type == BROKER:
            return await _alter_broker(broker, resource, new_configs_of, validate_only)
        if broker.replicas is not None and resource.resource_type == TOPIC:
            return await _alter_in_cluster(broker, resource, new_configs_of, validate_only)
    except ZooKeeperUnavailable as exc:  # as Kafka's ZooKeeper mode answers it
        return ErrorCode.unknown_server_error, str(exc)
    return _alter(broker, resource, new_configs_of, validate_only)


async def _alter_broker(broker, resource, new_configs_of, validate_only):
    """Dynamic broker configs: this broker's (its id) or the cluster-wide defaults (the empty
    name). The whole layer is checked with the rest of the configuration before anything is
    stored; then stored (the metadata, or ZooKeeper with a change notification in a cluster)
    and applied without a restart."""
    try:
        default = broker_id_of(broker, resource.resource_name) is None
    except _Refused as exc:
        return exc.code, str(exc)
    async with broker.config_lock:  # read, change, write: one alteration at a time
        zk = broker.cluster.client if broker.cluster is not None else None
        if zk is not None:
            current = await in_zookeeper(zk, zk.read_broker_config, None if default else broker.broker_id)
        else:
            layers = broker.config_layers
            current = layers.cluster_default if default else layers.per_broker
        what = "the cluster-wide broker defaults" if default else f"broker {broker.broker_id}"
        try:
            configs = new_configs_of(dict(current))
            if zk is None:
                broker.set_broker_configs(default, configs, validate_only=validate_only)
                return ErrorCode.none, None
            layers, cfg = broker.check_broker_configs(default, configs)
            if not validate_only:
                await in_zookeeper(zk, zk.write_broker_config, None if default else broker.broker_id,
                                   configs)
                broker.use_config(layers, cfg)  # here at once; the others when notified
        except DynamicConfigError as exc:
            return ErrorCode.invalid_config, f"Invalid config value for {what}: {exc}"
        except _BadOperation as exc:
            return ErrorCode.invalid_request, str(exc)
    return ErrorCode.none, None


def _alter(broker, resource, new_configs_of, validate_only):
    if resource.resource_type != TOPIC:
        return ErrorCode.invalid_request, ("AlterConfigs is only supported for topics and brokers, "
                                           f"but resource type is {resource.resource_type}")
    tm = broker.metadata.get(resource.resource_name)
    if tm is None:
        return ErrorCode.unknown_topic_or_partition, f"topic {resource.resource_name!r} does not exist"
    try:
        broker.set_topic_configs(tm.name, new_configs_of(dict(tm.configs)), validate_only=validate_only)
    except MetadataError as exc:
        return error_code_for(exc), str(exc)
    except _BadOperation as exc:
        return ErrorCode.invalid_request, str(exc)
    return ErrorCode.none, None


class _BadOperation(Exception):
    pass


async def alter_configs(broker, request, connection):
    body = request.body
    mod = response_module(33, request.api_version)
    results = []
    for r in body.resources:
        replacement = {c.name: c.value for c in r.configs if c.value is not None}
        code, text = _refusal(broker, connection, r, authz.Op.ALTER_CONFIGS) or await _alter_any(
            broker, r, lambda _old, rep=replacement: rep, body.validate_only)
        results.append(make(mod.AlterConfigsResourceResponse, error_code=code, error_message=text,
                            resource_type=r.resource_type, resource_name=r.resource_name))
    return make(response_class(33, request.api_version), throttle_time=NO_THROTTLE, responses=tuple(results))


def _incremental(ops, defaults: dict[str, str], list_keys=LIST_KEYS):
    def apply(configs: dict[str, str]) -> dict[str, str]:
        for op in ops:
            name, value = op.name, op.value
            if op.config_operation == SET:
                configs[name] = value
            elif op.config_operation == DELETE:
                configs.pop(name, None)
            elif op.config_operation in (APPEND, SUBTRACT):
                if name not in list_keys:
                    raise _BadOperation(f"{name} is not a list config")
                current = configs.get(name, defaults.get(name, ""))
                items = [i for i in (current or "").split(",") if i]
                for v in (value or "").split(","):
                    if op.config_operation == APPEND and v and v not in items:
                        items.append(v)
                    elif op.config_operation == SUBTRACT and v in items:
                        items.remove(v)
                configs[name] = ",".join(items)
            else:
                raise _BadOperation(f"unknown config operation {op.config_operation}")
        return configs
    return apply


async def incremental_alter_configs(broker, request, connection):
    body = request.body
    mod = response_module(44, request.api_version)
    results = []
    for r in body.resources:
        if r.resource_type == TOPIC:
            apply = _incremental(r.configs, broker.topic_config_values(r.resource_name, {}))
        else:  # a broker's list configs append to the layer's value, else Kafka's default
            apply = _incremental(r.configs, defs.defaults(), BROKER_LIST_KEYS)
        code, text = _refusal(broker, connection, r, authz.Op.ALTER_CONFIGS) or await _alter_any(
            broker, r, apply, body.validate_only)
        results.append(make(mod.AlterConfigsResourceResponse, error_code=code, error_message=text,
                            resource_type=r.resource_type, resource_name=r.resource_name))
    return make(response_class(44, request.api_version), throttle_time=NO_THROTTLE, responses=tuple(results))


APIS = [
    Api(32, "DescribeConfigs", 0, 4, describe_configs),
    Api(33, "AlterConfigs", 0, 2, alter_configs),
    Api(44, "IncrementalAlterConfigs", 0, 1, incremental_alter_configs),
]
