"""`brook acls`: ACLs (kafka-acls.sh --list / --add / --remove, with its option names), through
DescribeAcls, CreateAcls and DeleteAcls. The broker needs an authorizer (authorizer.class.name)
and this command's principal Cluster Alter (adding, removing) or Describe (listing)."""

from __future__ import annotations

from typing import Optional

import typer

from . import output
from .errors import CliError
from .options import bootstrap_option, timeout_option
from .output import Format, output_option

app = typer.Typer(no_args_is_help=True, help="ACLs: list, add and remove them.")

CLUSTER_NAME = "kafka-cluster"


def _resources(topic: list[str], group: list[str], cluster: bool, transactional_id: list[str],
               required: bool) -> list[tuple[str, str]]:
    """(confluent's resource type name, resource name) of the options given."""
    found = ([("TOPIC", t) for t in topic] + [("GROUP", g) for g in group]
             + [("TRANSACTIONAL_ID", t) for t in transactional_id]
             + ([("BROKER", CLUSTER_NAME)] if cluster else []))
    if required and not found:
        raise CliError("name a resource: --topic, --group, --cluster or --transactional-id", code=2)
    return found


def _operation(name: str):
    """An operation in Kafka's spelling (Read, IdempotentWrite) or confluent's (IDEMPOTENT_WRITE)."""
    from confluent_kafka.admin import AclOperation

    wanted = name.replace("_", "").replace("-", "").lower()
    for op in AclOperation:
        if op.name.replace("_", "").lower() == wanted and op.name != "UNKNOWN":
            return op
    raise CliError(f"unknown operation {name!r}", code=2)


def _pattern(name: str, allowed: tuple[str, ...]):
    from confluent_kafka.admin import ResourcePatternType

    if name.upper() not in allowed:
        raise CliError(f"--resource-pattern-type must be one of {', '.join(allowed)}", code=2)
    return ResourcePatternType[name.upper()]


def _kafka_name(enum_value) -> str:
    """READ -> Read, IDEMPOTENT_WRITE -> IdempotentWrite, BROKER -> Cluster (as kafka-acls shows)."""
    if enum_value.name == "BROKER":
        return "Cluster"
    return "".join(w.capitalize() for w in enum_value.name.split("_"))


def binding_rows(bindings) -> list[tuple]:
    return sorted((_kafka_name(b.restype), b.name, b.resource_pattern_type.name, b.principal, b.host,
                   _kafka_name(b.operation), b.permission_type.name) for b in bindings)


COLUMNS = ["RESOURCE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"]


def _show(rows: list[tuple], fmt: Format) -> None:
    if fmt == Format.json:
        output.print_json([dict(zip([c.lower() for c in COLUMNS], r)) for r in rows])
    else:
        output.table(COLUMNS, rows)


def _filters(resources, pattern, principals, hosts, operations, permission):
    from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, ResourceType

    out = []
    for rtype, name in resources or [("ANY", None)]:
        for principal in principals or [None]:
            for host in hosts or [None]:
                for op in operations or [AclOperation.ANY]:
                    out.append(AclBindingFilter(ResourceType[rtype], name, pattern, principal, host, op,
                                                permission or AclPermissionType.ANY))
    return out


topic_option = typer.Option([], "--topic", help="A topic (repeatable; * for every topic).")
group_option = typer.Option([], "--group", help="A consumer group (repeatable; * for every group).")
cluster_option = typer.Option(False, "--cluster", help="The cluster.")
txn_option = typer.Option([], "--transactional-id", help="A transactional id (repeatable).")
OPERATIONS_HELP = ("Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                   "AlterConfigs, IdempotentWrite, All (repeatable).")
PRODUCER_OPERATIONS = ("WRITE", "DESCRIBE", "CREATE")  # on the topics (kafka-acls.sh --producer)
CONSUMER_OPERATIONS = ("READ", "DESCRIBE")  # on the topics, and Read on the groups (--consumer)


@app.command("list")
def list_acls(
    topic: list[str] = topic_option, group: list[str] = group_option, cluster: bool = cluster_option,
    transactional_id: list[str] = txn_option,
    resource_pattern_type: str = typer.Option(
        "ANY", "--resource-pattern-type",
        help="ANY, MATCH (what applies to the named resource), LITERAL or PREFIXED."),
    principal: Optional[str] = typer.Option(None, "--principal", help="Only this principal's (User:alice)."),
    bootstrap: Optional[str] = bootstrap_option(), timeout: Optional[float] = timeout_option(),
    fmt: Format = output_option(),
) -> None:
    """The ACLs, of every resource or of those named."""
    from .client import Cluster

    c = Cluster(bootstrap, timeout)
    pattern = _pattern(resource_pattern_type, ("ANY", "MATCH", "LITERAL", "PREFIXED"))
    filters = _filters(_resources(topic, group, cluster, transactional_id, False), pattern,
                       [principal] if principal else [], [], [], None)
    _show(acl_rows(c, filters), fmt)


def acl_rows(c, filters=None) -> list[tuple]:
    """The ACLs matching `filters` (default: every ACL) as rows of COLUMNS; the broker's
    refusal (no authorizer, not allowed) as a CliError."""
    from confluent_kafka.admin import ResourcePatternType

    from .client import _addresses
    from .wire import describe_acls

    if filters is None:
        filters = _filters([], ResourcePatternType.ANY, [], [], [], None)
    host, port = _addresses(c.bootstrap)[0]
    found = []
    for f in filters:
        try:
            found.extend(describe_acls(host, port, f, c.timeout, c.security))
        except CliError as exc:
            raise CliError(f"cannot list ACLs: {exc.message}") from None
    return binding_rows(set(found))


def _client_operations(topic: list[str], group: list[str], producer: bool, consumer: bool):
    """(resource, operation) pairs of --producer and --consumer."""
    if not topic:
        raise CliError("--producer and --consumer need --topic", code=2)
    topics = _resources(topic, [], False, [], True)
    wanted = [(r, op) for r in topics for op in PRODUCER_OPERATIONS] if producer else []
    if consumer:
        wanted += [(r, op) for r in topics for op in CONSUMER_OPERATIONS]
        wanted += [(r, "READ") for r in _resources([], group, False, [], False)]
    return [(r, _operation(op)) for r, op in dict.fromkeys(wanted)]


@app.command("add")
def add(
    allow_principal: list[str] = typer.Option([], "--allow-principal",
                                              help="Principal to allow (User:alice)."),
    deny_principal: list[str] = typer.Option([], "--deny-principal", help="Principal to deny."),
    allow_host: list[str] = typer.Option([], "--allow-host",
                                         help="Host the allowed principals come from (default *)."),
    deny_host: list[str] = typer.Option([], "--deny-host",
                                        help="Host the denied principals come from (default *)."),
    operation: list[str] = typer.Option([], "--operation", help=OPERATIONS_HELP),
    topic: list[str] = topic_option, group: list[str] = group_option, cluster: bool = cluster_option,
    transactional_id: list[str] = txn_option,
    resource_pattern_type: str = typer.Option("LITERAL", "--resource-pattern-type",
                                              help="LITERAL or PREFIXED."),
    producer: bool = typer.Option(False, "--producer", help="What a producer needs: Write, Describe "
                                  "and Create on the topics (kafka-acls.sh's convenience)."),
    consumer: bool = typer.Option(False, "--consumer", help="What a consumer needs: Read and "
                                  "Describe on the topics, Read on the groups."),
    bootstrap: Optional[str] = bootstrap_option(), timeout: Optional[float] = timeout_option(),
) -> None:
    """Add ACLs: each principal, host and operation on each resource named (or, with
    --producer / --consumer, the operations those clients need on them)."""
    from confluent_kafka.admin import AclBinding, AclPermissionType, ResourceType

    from .client import Cluster

    if not allow_principal and not deny_principal:
        raise CliError("give --allow-principal or --deny-principal", code=2)
    pattern = _pattern(resource_pattern_type, ("LITERAL", "PREFIXED"))
    if producer or consumer:
        if operation:
            raise CliError("--producer and --consumer choose the operations: no --operation with them",
                           code=2)
        pairs = _client_operations(topic, group, producer, consumer)
    else:
        if not operation:
            raise CliError("give --operation", code=2)
        resources = _resources(topic, group, cluster, transactional_id, True)
        pairs = [(r, _operation(o)) for r in resources for o in operation]
    who = ((AclPermissionType.ALLOW, allow_principal, allow_host or ["*"]),
           (AclPermissionType.DENY, deny_principal, deny_host or ["*"]))
    bindings = [AclBinding(ResourceType[rtype], name, pattern, principal, host, op, permission)
                for permission, principals, hosts in who for principal in principals
                for host in hosts for (rtype, name), op in pairs]
    create_acls(Cluster(bootstrap, timeout), bindings)
    output.note(f"added {len(bindings)} ACL(s)")
    _show(binding_rows(bindings), Format.table)


def create_acls(c, bindings) -> None:
    """CreateAcls of confluent AclBindings; the first refusal as a CliError."""
    for binding, f in c.admin.create_acls(bindings, request_timeout=c.timeout).items():
        c.wait(f, f"cannot add the ACL {binding_text(binding)}")


def delete_acls(c, filters) -> list[tuple]:
    """DeleteAcls of confluent AclBindingFilters: the ACLs removed, as rows of COLUMNS."""
    removed = []
    for f, fut in c.admin.delete_acls(filters, request_timeout=c.timeout).items():
        removed.extend(c.wait(fut, "cannot remove ACLs"))
    return binding_rows(set(removed))


def binding_text(b) -> str:
    return (f"{b.permission_type.name} {b.principal} {_kafka_name(b.operation)} on "
            f"{_kafka_name(b.restype)} {b.name} ({b.resource_pattern_type.name}) from {b.host}")


RESOURCE_TYPES = {"topic": "TOPIC", "group": "GROUP", "cluster": "BROKER", "broker": "BROKER",
                  "transactionalid": "TRANSACTIONAL_ID", "any": "ANY"}


def resource_type(name: str, allow_any: bool = False):
    """A resource type in Kafka's spelling (Topic, Cluster, TransactionalId) or confluent's."""
    from confluent_kafka.admin import ResourceType

    key = RESOURCE_TYPES.get(name.replace("_", "").replace("-", "").lower())
    if key is None or (key == "ANY" and not allow_any):
        raise CliError(f"unknown resource type {name!r} (Topic, Group, Cluster or "
                       "TransactionalId)", code=2)
    return ResourceType[key]


def permission_type(name: str, allow_any: bool = False):
    from confluent_kafka.admin import AclPermissionType

    key = name.upper()
    if key not in (("ALLOW", "DENY", "ANY") if allow_any else ("ALLOW", "DENY")):
        raise CliError(f"the permission is ALLOW or DENY, not {name!r}", code=2)
    return AclPermissionType[key]


def acl_binding(resource: str, name: str, principal: str, operation: str, permission: str = "ALLOW",
                host: str = "*", pattern: str = "LITERAL"):
    """One ACL from its parts as a person types them (Topic, orders, User:alice, Read)."""
    from confluent_kafka.admin import AclBinding

    rtype = resource_type(resource)
    if rtype.name == "BROKER":
        name = name or CLUSTER_NAME
    if not name:
        raise CliError("name the resource (a topic, a group, a transactional id; * for every one)",
                       code=2)
    if ":" not in principal or not principal.split(":", 1)[1]:
        raise CliError(f"a principal is TYPE:NAME (User:alice), not {principal!r}", code=2)
    op = _operation(operation)
    if op.name == "ANY":
        raise CliError("choose an operation (All for every one)", code=2)
    return AclBinding(rtype, name, _pattern(pattern, ("LITERAL", "PREFIXED")), principal,
                      host or "*", op, permission_type(permission))


def acl_filter(resource: str = "ANY", name: str | None = None, principal: str | None = None,
               operation: str = "ANY", permission: str = "ANY", host: str | None = None,
               pattern: str = "ANY"):
    """An ACL filter from its parts; empty parts match anything."""
    from confluent_kafka.admin import AclBindingFilter

    return AclBindingFilter(resource_type(resource or "ANY", allow_any=True), name or None,
                            _pattern(pattern or "ANY", ("ANY", "MATCH", "LITERAL", "PREFIXED")),
                            principal or None, host or None, _operation(operation or "ANY"),
                            permission_type(permission or "ANY", allow_any=True))


@app.command("remove")
def remove(
    allow_principal: list[str] = typer.Option([], "--allow-principal",
                                              help="Only ALLOW ACLs of this principal."),
    deny_principal: list[str] = typer.Option([], "--deny-principal",
                                             help="Only DENY ACLs of this principal."),
    operation: list[str] = typer.Option([], "--operation",
                                        help="Only ACLs of this operation (repeatable)."),
    topic: list[str] = topic_option, group: list[str] = group_option, cluster: bool = cluster_option,
    transactional_id: list[str] = txn_option,
    resource_pattern_type: str = typer.Option("LITERAL", "--resource-pattern-type",
                                              help="LITERAL, PREFIXED, ANY or MATCH."),
    bootstrap: Optional[str] = bootstrap_option(), timeout: Optional[float] = timeout_option(),
) -> None:
    """Remove the ACLs of the resources named (all of theirs, or only those of the principals
    and operations given)."""
    from confluent_kafka.admin import AclPermissionType

    from .client import Cluster

    resources = _resources(topic, group, cluster, transactional_id, True)
    pattern = _pattern(resource_pattern_type, ("ANY", "MATCH", "LITERAL", "PREFIXED"))
    ops = [_operation(o) for o in operation]
    filters = []
    if not allow_principal and not deny_principal:
        filters = _filters(resources, pattern, [], [], ops, None)
    for permission, principals in ((AclPermissionType.ALLOW, allow_principal),
                                   (AclPermissionType.DENY, deny_principal)):
        if principals:
            filters += _filters(resources, pattern, principals, [], ops, permission)
    removed = delete_acls(Cluster(bootstrap, timeout), filters)
    output.note(f"removed {len(removed)} ACL(s)")
    _show(removed, Format.table)
