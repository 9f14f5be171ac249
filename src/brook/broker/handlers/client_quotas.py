"""DescribeClientQuotas and AlterClientQuotas (KIP-546): the quotas of users and client ids,
kept in the broker's metadata (brook.broker.quotas.client_quotas has what they mean)."""

from __future__ import annotations

import dataclasses

from kio.schema.errors import ErrorCode

from ...protocol.messages import make, response_class, response_module
from ..auth import authz
from ..quotas import client_quotas as q
from ..zookeeper_calls import ZooKeeperUnavailable
from .api import Api
from .common import NO_THROTTLE

DESCRIBE_KEY = 48
ALTER_KEY = 49
_IP = "ip"  # Kafka's connection-rate entity: brook has none of those quotas


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _filters(components) -> list[tuple[str, int, str | None]]:
    """The request's filter, checked as Kafka checks it."""
    seen: set[str] = set()
    out = []
    for c in components:
        if not c.entity_type:
            raise _Refused(ErrorCode.invalid_request, "Invalid empty entity type.")
        if c.entity_type in seen:
            raise _Refused(ErrorCode.invalid_request,
                           f"Entity type {c.entity_type} cannot appear more than once in the filter.")
        seen.add(c.entity_type)
        if c.entity_type not in (*q.ENTITY_TYPES, _IP):
            raise _Refused(ErrorCode.unsupported_version, f"Unsupported entity type {c.entity_type}")
        if c.match_type == q.MATCH_EXACT and c.match is None:
            raise _Refused(ErrorCode.invalid_request, "MATCH_TYPE_EXACT needs a match string.")
        if c.match_type in (q.MATCH_DEFAULT, q.MATCH_SPECIFIED) and c.match is not None:
            raise _Refused(ErrorCode.invalid_request,
                           f"Match type {c.match_type} takes no match string.")
        if c.match_type not in (q.MATCH_EXACT, q.MATCH_DEFAULT, q.MATCH_SPECIFIED):
            raise _Refused(ErrorCode.invalid_request, f"Unknown match type {c.match_type}")
        out.append((c.entity_type, c.match_type, c.match))
    if _IP in seen and seen & set(q.ENTITY_TYPES):
        raise _Refused(ErrorCode.invalid_request, "Invalid entity filter component combination. "
                       "An ip filter component cannot be used with user or client-id ones.")
    return out


async def describe(broker, request, connection):
    v = request.api_version
    mod = response_module(DESCRIBE_KEY, v)
    cls = response_class(DESCRIBE_KEY, v)
    if broker.authorizer is not None and not authz.cluster_allowed(
            broker, connection, authz.Op.DESCRIBE_CONFIGS):
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.cluster_authorization_failed,
                    error_message=None, entries=None)
    try:
        filters = _filters(request.body.components)
    except _Refused as exc:
        return make(cls, throttle_time=NO_THROTTLE, error_code=exc.code, error_message=str(exc),
                    entries=None)
    if any(f[0] == _IP for f in filters):
        found = []  # no ip entity can be set here
    else:
        found = broker.quotas.describe(filters, request.body.strict)
    entries = tuple(
        make(mod.EntryData,
             entity=tuple(make(mod.EntityData, entity_type=t, entity_name=n)
                          for t, n in entity.components().items()),
             values=tuple(make(mod.ValueData, key=k, value=float(val)) for k, val in sorted(values.items())))
        for entity, values in found)
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                entries=entries)


def _alteration(entry, current: dict[q.Entity, dict[str, float]]) -> tuple[q.Entity, dict[str, float]]:
    """The entity of one entry and its values after the entry's operations; _Refused if
    Kafka would refuse it."""
    components: dict[str, str | None] = {}
    for e in entry.entity:
        if e.entity_type in components:
            raise _Refused(ErrorCode.invalid_request,
                           f"Invalid client quota entity, duplicate entity entry {e.entity_type}")
        if e.entity_type not in q.ENTITY_TYPES:
            raise _Refused(ErrorCode.invalid_request,
                           f"Unhandled client quota entity type: {e.entity_type}")
        if e.entity_name == "":
            raise _Refused(ErrorCode.invalid_request, f"Empty {e.entity_type} not supported")
        components[e.entity_type] = e.entity_name
    if not components:
        raise _Refused(ErrorCode.invalid_request, "Invalid empty client quota entity")
    entity = q.Entity.of(components)
    values = dict(current.get(entity, {}))
    keys: set[str] = set()
    for op in entry.ops:
        if op.key in keys:
            raise _Refused(ErrorCode.invalid_request, f"Duplicate quota key {op.key}")
        keys.add(op.key)
        if op.remove:
            values.pop(op.key, None)
            continue
        problem = q.validate_value(op.key, op.value)
        if problem is not None:
            raise _Refused(ErrorCode.invalid_request, problem)
        values[op.key] = float(op.value)
    return entity, values


async def alter(broker, request, connection):
    v = request.api_version
    mod = response_module(ALTER_KEY, v)
    current = broker.quotas.configs
    if broker.authorizer is not None and not authz.cluster_allowed(
            broker, connection, authz.Op.ALTER_CONFIGS):
        return make(response_class(ALTER_KEY, v), throttle_time=NO_THROTTLE, entries=tuple(
            make(mod.EntryData, error_code=ErrorCode.cluster_authorization_failed, error_message=None,
                 entity=tuple(make(mod.EntityData, entity_type=e.entity_type, entity_name=e.entity_name)
                              for e in entry.entity))
            for entry in request.body.entries))
    results = []
    changes: dict[q.Entity, dict[str, float]] = {}
    seen: set[q.Entity] = set()
    for entry in request.body.entries:
        code, message = ErrorCode.none, None
        try:
            entity, values = _alteration(entry, current)
            if entity in seen:
                raise _Refused(ErrorCode.invalid_request, "Ignoring duplicate entity")
            seen.add(entity)
            if values != current.get(entity, {}):
                changes[entity] = values
        except _Refused as exc:
            code, message = exc.code, str(exc)
        results.append(make(mod.EntryData, error_code=code, error_message=message,
                            entity=tuple(make(mod.EntityData, entity_type=e.entity_type,
                                              entity_name=e.entity_name) for e in entry.entity)))
    if changes and not request.body.validate_only:
        try:
            await broker.set_client_quotas(changes)
        except ZooKeeperUnavailable as exc:
            results = [dataclasses.replace(r, error_code=ErrorCode.unknown_server_error,
                                           error_message=str(exc))
                       if r.error_code == ErrorCode.none else r for r in results]
    return make(response_class(ALTER_KEY, v), throttle_time=NO_THROTTLE, entries=tuple(results))


APIS = [
    Api(DESCRIBE_KEY, "DescribeClientQuotas", 0, 1, describe),
    Api(ALTER_KEY, "AlterClientQuotas", 0, 1, alter),
]
