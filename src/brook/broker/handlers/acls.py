"""DescribeAcls, CreateAcls and DeleteAcls (KIP-140; PREFIXED patterns from v1, KIP-290):
the ACLs of brook's authorizer. Creating and deleting need Cluster Alter, describing Cluster
Describe; without an authorizer every one answers SECURITY_DISABLED, as Kafka does."""

from __future__ import annotations

import logging
from itertools import groupby

from kio.schema.errors import ErrorCode

from ...protocol.messages import make, response_class, response_module
from ...security.acls import AclBinding, AclFilter, Operation, PatternType, Permission, ResourceType
from ..auth import authz
from .api import Api
from .common import NO_THROTTLE

log = logging.getLogger(__name__)

DESCRIBE_KEY = 29
CREATE_KEY = 30
DELETE_KEY = 31

NO_AUTHORIZER = "No Authorizer is configured on the broker"


def _enum(cls, value):
    """A wire code as its enum; codes Kafka does not know are UNKNOWN (0)."""
    try:
        return cls(int(value))
    except ValueError:
        return cls(0)


def _filter(f, name_field: str = "resource_name_filter") -> AclFilter:
    return AclFilter(
        resource_type=_enum(ResourceType, f.resource_type_filter),
        name=getattr(f, name_field),
        pattern_type=_enum(PatternType, getattr(f, "pattern_type_filter", PatternType.LITERAL)),
        principal=f.principal_filter,
        host=f.host_filter,
        operation=_enum(Operation, f.operation),
        permission=_enum(Permission, f.permission_type))


def _resource_of(b: AclBinding):
    return b.resource_type, b.pattern_type, b.name


def _refusal(broker, connection, op: Operation) -> tuple[ErrorCode, str | None]:
    if not authz.cluster_allowed(broker, connection, op):
        return (ErrorCode.cluster_authorization_failed,
                f"Cluster authorization failed: {op.name} on the cluster is not allowed.")
    if broker.authorizer is None:
        return ErrorCode.security_disabled, NO_AUTHORIZER
    return ErrorCode.none, None


async def describe(broker, request, connection):
    v = request.api_version
    mod = response_module(DESCRIBE_KEY, v)
    code, msg = _refusal(broker, connection, Operation.DESCRIBE)
    resources = ()
    if code == ErrorCode.none:
        f = _filter(request.body)
        reason = f.invalid_reason()
        if reason is not None:
            code, msg = ErrorCode.invalid_request, reason
        else:
            found = broker.authorizer.matching(f)
            resources = tuple(
                make(mod.DescribeAclsResource, resource_type=rtype, resource_name=name, pattern_type=ptype,
                     acls=tuple(make(mod.AclDescription, principal=b.principal, host=b.host,
                                     operation=b.operation, permission_type=b.permission) for b in group))
                for (rtype, ptype, name), group in groupby(found, _resource_of))
    return make(response_class(DESCRIBE_KEY, v), throttle_time=NO_THROTTLE, error_code=code,
                error_message=msg, resources=resources)


async def create(broker, request, connection):
    v = request.api_version
    mod = response_module(CREATE_KEY, v)
    creations = request.body.creations
    code, msg = _refusal(broker, connection, Operation.ALTER)
    results: list[tuple[ErrorCode, str | None]] = [(code, msg)] * len(creations)
    if code == ErrorCode.none:
        valid = []
        for i, c in enumerate(creations):
            b = AclBinding(_enum(ResourceType, c.resource_type), c.resource_name,
                           _enum(PatternType, getattr(c, "resource_pattern_type", PatternType.LITERAL)),
                           c.principal, c.host, _enum(Operation, c.operation),
                           _enum(Permission, c.permission_type))
            reason = b.invalid_reason()
            if reason is None:
                valid.append(b)
            else:
                results[i] = (ErrorCode.invalid_request, reason)
        try:
            await broker.create_acls(valid)
        except Exception as exc:  # noqa: BLE001 - the journal or ZooKeeper failed: an answer
            log.warning("creating ACLs failed: %r", exc)
            results = [(ErrorCode.unknown_server_error, str(exc)) if r[0] == ErrorCode.none else r
                       for r in results]
    return make(response_class(CREATE_KEY, v), throttle_time=NO_THROTTLE, results=tuple(
        make(mod.AclCreationResult, error_code=c, error_message=m) for c, m in results))


async def delete(broker, request, connection):
    v = request.api_version
    mod = response_module(DELETE_KEY, v)
    filters = request.body.filters
    code, msg = _refusal(broker, connection, Operation.ALTER)
    outcome: list[tuple[ErrorCode, str | None, list[AclBinding]]] = [(code, msg, [])] * len(filters)
    if code == ErrorCode.none:
        parsed = [_filter(f) for f in filters]
        valid = [f for f in parsed if f.invalid_reason() is None]
        try:
            removed = iter(await broker.delete_acls(valid))
            outcome = [(ErrorCode.none, None, next(removed)) if f.invalid_reason() is None
                       else (ErrorCode.invalid_request, f.invalid_reason(), []) for f in parsed]
        except Exception as exc:  # noqa: BLE001 - as in create
            log.warning("deleting ACLs failed: %r", exc)
            outcome = [(ErrorCode.unknown_server_error, str(exc), [])] * len(filters)

    def matching(b: AclBinding):
        return make(mod.DeleteAclsMatchingAcl, error_code=ErrorCode.none, error_message=None,
                    resource_type=b.resource_type, resource_name=b.name, pattern_type=b.pattern_type,
                    principal=b.principal, host=b.host, operation=b.operation, permission_type=b.permission)

    return make(response_class(DELETE_KEY, v), throttle_time=NO_THROTTLE, filter_results=tuple(
        make(mod.DeleteAclsFilterResult, error_code=c, error_message=m,
             matching_acls=tuple(matching(b) for b in found)) for c, m, found in outcome))


APIS = [
    Api(DESCRIBE_KEY, "DescribeAcls", 0, 3, describe),
    Api(CREATE_KEY, "CreateAcls", 0, 3, create),
    Api(DELETE_KEY, "DeleteAcls", 0, 3, delete),
]
