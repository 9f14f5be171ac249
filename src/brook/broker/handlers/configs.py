"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics (and describing the
broker). Topic overrides are validated as a whole before any is stored."""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from ...protocol.messages import make, response_class, response_module
from ..errors import error_code_for
from ..metadata import MetadataError
from . import Api
from .common import NO_THROTTLE

TOPIC = 2
BROKER = 4

SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5

TYPE_BOOLEAN, TYPE_STRING, TYPE_INT, TYPE_SHORT, TYPE_LONG, TYPE_DOUBLE, TYPE_LIST = 1, 2, 3, 4, 5, 6, 7
LIST_KEYS = {"cleanup.policy", "follower.replication.throttled.replicas",
             "leader.replication.throttled.replicas"}

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _type_of(key: str, value: str | None) -> int:
    if value is None:
        return TYPE_STRING
    if key in LIST_KEYS:
        return TYPE_LIST
    if value in ("true", "false"):
        return TYPE_BOOLEAN
    try:
        int(value)
        return TYPE_LONG
    except ValueError:
        pass
    try:
        float(value)
        return TYPE_DOUBLE
    except ValueError:
        return TYPE_STRING


def _describe_resource(broker, mod, version, resource, include_synonyms, cluster_configs=None):
    keys = resource.configuration_keys
    if resource.resource_type == TOPIC:
        tm = broker.metadata.get(resource.resource_name)
        configs = cluster_configs if cluster_configs is not None else (tm.configs if tm else None)
        if configs is None:
            return ErrorCode.unknown_topic_or_partition, f"topic {resource.resource_name!r} does not exist", ()
        values = broker.topic_config_values(resource.resource_name, configs)
        sources = {k: SOURCE_DYNAMIC_TOPIC if k in configs else SOURCE_DEFAULT for k in values}
    elif resource.resource_type == BROKER:
        if resource.resource_name not in ("", str(broker.broker_id)):
            return ErrorCode.invalid_request, f"no broker {resource.resource_name!r}", ()
        values = dict(broker.config.props)
        sources = {k: SOURCE_STATIC_BROKER for k in values}
    else:
        return ErrorCode.invalid_request, f"resource type {resource.resource_type} is not supported", ()
    entries = []
    for key in sorted(values):
        if keys is not None and key not in keys:
            continue
        value = values[key]
        synonyms = ()
        if include_synonyms:
            synonyms = (make(mod.DescribeConfigsSynonym, name=key, value=value, source=sources[key]),)
        entries.append(make(mod.DescribeConfigsResourceResult, name=key, value=value, read_only=False,
                            config_source=sources[key], is_default=sources[key] == SOURCE_DEFAULT,
                            is_sensitive=False, synonyms=synonyms, config_type=_type_of(key, value),
                            documentation=None))
    return ErrorCode.none, None, tuple(entries)


async def describe_configs(broker, request, connection):
    body = request.body
    version = request.api_version
    mod = response_module(32, version)
    results = []
    for r in body.resources:
        configs = await _cluster_configs(broker, r)
        code, text, entries = _describe_resource(broker, mod, version, r,
                                                 getattr(body, "include_synonyms", False), configs)
        results.append(make(mod.DescribeConfigsResult, error_code=code, error_message=text,
                            resource_type=r.resource_type, resource_name=r.resource_name, configs=entries))
    return make(response_class(32, version), throttle_time=NO_THROTTLE, results=tuple(results))


async def _cluster_configs(broker, resource) -> dict[str, str] | None:
    """In a cluster, a topic's configs as ZooKeeper has them (None: not a cluster topic)."""
    if broker.replicas is None or resource.resource_type != TOPIC \
            or resource.resource_name not in broker.replicas.cache.topics:
        return None
    return await asyncio.to_thread(broker.cluster.client.read_topic_config, resource.resource_name)


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
        await asyncio.to_thread(broker.cluster.client.write_topic_config, resource.resource_name, configs)
    return ErrorCode.none, None


async def _alter_any(broker, resource, new_configs_of, validate_only):
    if broker.replicas is not None and resource.resource_type == TOPIC:
        return await _alter_in_cluster(broker, resource, new_configs_of, validate_only)
    return _alter(broker, resource, new_configs_of, validate_only)


def _alter(broker, resource, new_configs_of, validate_only):
    if resource.resource_type != TOPIC:
        return ErrorCode.invalid_request, "only topic configs can be altered (broker configs are static)"
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
        code, text = await _alter_any(broker, r, lambda _old, rep=replacement: rep, body.validate_only)
        results.append(make(mod.AlterConfigsResourceResponse, error_code=code, error_message=text,
                            resource_type=r.resource_type, resource_name=r.resource_name))
    return make(response_class(33, request.api_version), throttle_time=NO_THROTTLE, responses=tuple(results))


def _incremental(ops, defaults: dict[str, str]):
    def apply(configs: dict[str, str]) -> dict[str, str]:
        for op in ops:
            name, value = op.name, op.value
            if op.config_operation == SET:
                configs[name] = value
            elif op.config_operation == DELETE:
                configs.pop(name, None)
            elif op.config_operation in (APPEND, SUBTRACT):
                if name not in LIST_KEYS:
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
        defaults = broker.topic_config_values(r.resource_name, {}) if r.resource_type == TOPIC else {}
        code, text = await _alter_any(broker, r, _incremental(r.configs, defaults), body.validate_only)
        results.append(make(mod.AlterConfigsResourceResponse, error_code=code, error_message=text,
                            resource_type=r.resource_type, resource_name=r.resource_name))
    return make(response_class(44, request.api_version), throttle_time=NO_THROTTLE, responses=tuple(results))


APIS = [
    Api(32, "DescribeConfigs", 1, 4, describe_configs),
    Api(33, "AlterConfigs", 0, 2, alter_configs),
    Api(44, "IncrementalAlterConfigs", 0, 1, incremental_alter_configs),
]
