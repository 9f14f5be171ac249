"""ACL authorization with Apache Kafka's semantics, sans-I/O: bindings in, decisions out.

A binding says: <principal> from <host> is ALLOWed (or DENYed) <operation> on resources of a
type whose name equals (LITERAL), starts with (PREFIXED) the pattern's name, or any name
(LITERAL `*`). A request is allowed when the principal is a super user; else when no binding
of any principal matches the resource at all and `allow.everyone.if.no.acl.found` is set;
else when no DENY applies and an ALLOW does. A DENY names the operation itself (or All); an
ALLOW may also name an operation that implies the one asked for (Read, Write, Delete and
Alter imply Describe; AlterConfigs implies DescribeConfigs).

The codes of the enums are Kafka's wire codes (CreateAcls/DescribeAcls carry them).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from enum import IntEnum
from typing import Iterable, Iterator

WILDCARD = "*"  # a LITERAL name matching every resource, and the any-host value
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"  # the one name of the Cluster resource


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


Op = Operation
#: The operations each resource type has (what "authorized operations" may answer).
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[Operation, ...]] = {
    ResourceType.TOPIC: (Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER,
                         Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
    ResourceType.GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE),
    ResourceType.CLUSTER: (Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
                           Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Op.DESCRIBE, Op.WRITE),
    ResourceType.DELEGATION_TOKEN: (Op.DESCRIBE,),
    ResourceType.USER: (Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS),
}

#: Operation asked -> the operations whose ALLOW grants it (itself and All included).
_GRANTED_BY: dict[Operation, frozenset[Operation]] = {
    Op.DESCRIBE: frozenset({Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.ALL}),
    Op.DESCRIBE_CONFIGS: frozenset({Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.ALL}),
}


def granted_by(op: Operation) -> frozenset[Operation]:
    return _GRANTED_BY.get(op) or frozenset({op, Op.ALL})


def bitfield(ops: Iterable[Operation]) -> int:
    """Kafka's int32 of authorized operations: bit `code` set for each operation."""
    bits = 0
    for op in ops:
        bits |= 1 << int(op)
    return bits


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def to_json(self) -> dict:
        return {"resource_type": self.resource_type.name, "name": self.name,
                "pattern_type": self.pattern_type.name, "principal": self.principal,
                "host": self.host, "operation": self.operation.name,
                "permission": self.permission.name}

    @classmethod
    def from_json(cls, d: dict) -> "AclBinding":
        return cls(ResourceType[d["resource_type"]], str(d["name"]), PatternType[d["pattern_type"]],
                   str(d["principal"]), str(d["host"]), Operation[d["operation"]],
                   Permission[d["permission"]])

    def invalid_reason(self) -> str | None:
        """Why CreateAcls refuses this binding (INVALID_REQUEST), or None."""
        if self.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
            return f"Invalid resource type {self.resource_type.name}"
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            return f"Invalid pattern type {self.pattern_type.name}"
        if self.operation in (Op.UNKNOWN, Op.ANY):
            return f"Invalid operation {self.operation.name}"
        if self.permission not in (Permission.ALLOW, Permission.DENY):
            return f"Invalid permission type {self.permission.name}"
        if not self.name:
            return "Resource name must not be empty"
        if self.resource_type == ResourceType.CLUSTER and self.name != CLUSTER_NAME:
            return f"The Cluster resource has one name: {CLUSTER_NAME}"
        kind, colon, user = self.principal.partition(":")
        if not colon or not kind:
            return f"Principal {self.principal!r} is not of the form <type>:<name>"
        if not self.host:
            return "Host must not be empty (use * for any host)"
        return None

    def describe(self) -> str:
        return (f"{self.principal} is {self.permission.name} {self.operation.name} from host "
                f"{self.host} on {self.resource_type.name} {self.pattern_type.name} {self.name!r}")


@dataclass(frozen=True, slots=True)
class AclFilter:
    """DescribeAcls / DeleteAcls: None and ANY match everything; pattern type MATCH matches
    the bindings that would apply to a resource of that exact name."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def invalid_reason(self) -> str | None:
        for value in (self.resource_type, self.pattern_type, self.operation, self.permission):
            if value == 0:
                return f"Filter contains an UNKNOWN {type(value).__name__}"
        return None

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != b.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) \
                and self.pattern_type != b.pattern_type:
            return False
        if self.name is not None:
            if self.pattern_type != PatternType.MATCH:  # ANY, LITERAL, PREFIXED: the name itself
                if self.name != b.name:
                    return False
            elif b.pattern_type == PatternType.LITERAL:  # MATCH: what applies to that name
                if b.name != self.name and b.name != WILDCARD:
                    return False
            elif not self.name.startswith(b.name):
                return False
        return ((self.principal is None or self.principal == b.principal)
                and (self.host is None or self.host == b.host)
                and (self.operation == Op.ANY or self.operation == b.operation)
                and (self.permission == Permission.ANY or self.permission == b.permission))


def parse_super_users(value: str) -> frozenset[str]:
    """`super.users`: principals separated by semicolons (User:admin;User:broker)."""
    return frozenset(p.strip() for p in value.split(";") if p.strip())


_Entry = tuple[str, str, Operation, Permission]  # principal, host, operation, permission


class Authorizer:
    """The ACLs in memory, indexed by resource type then pattern, and the decisions on them.
    Changes come as calls (the broker persists them first); decisions read only."""

    def __init__(self, super_users: frozenset[str] = frozenset(), allow_if_no_acl: bool = False,
                 bindings: Iterable[AclBinding] = ()) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        # resource type -> name -> entries, one dict per pattern type
        self._literal: dict[ResourceType, dict[str, set[_Entry]]] = defaultdict(dict)
        self._prefixed: dict[ResourceType, dict[str, set[_Entry]]] = defaultdict(dict)
        for b in bindings:
            self.add(b)

    # ------------------------------------------------------------ changes

    def _table(self, pattern_type: PatternType) -> dict[ResourceType, dict[str, set[_Entry]]]:
        return self._literal if pattern_type == PatternType.LITERAL else self._prefixed

    def add(self, b: AclBinding) -> bool:
        """False if it was there already."""
        entries = self._table(b.pattern_type)[b.resource_type].setdefault(b.name, set())
        entry = (b.principal, b.host, b.operation, b.permission)
        if entry in entries:
            return False
        entries.add(entry)
        return True

    def remove(self, b: AclBinding) -> bool:
        by_name = self._table(b.pattern_type)[b.resource_type]
        entries = by_name.get(b.name)
        entry = (b.principal, b.host, b.operation, b.permission)
        if not entries or entry not in entries:
            return False
        entries.discard(entry)
        if not entries:
            del by_name[b.name]
        return True

    def set_resource(self, rtype: ResourceType, pattern_type: PatternType, name: str,
                     entries: Iterable[_Entry]) -> None:
        """A resource pattern's ACLs replaced by `entries` (principal, host, operation,
        permission): how a broker of a cluster takes them as ZooKeeper has them."""
        by_name = self._table(pattern_type)[rtype]
        entries = set(entries)
        if entries:
            by_name[name] = entries
        else:
            by_name.pop(name, None)

    def clear(self) -> None:
        self._literal.clear()
        self._prefixed.clear()

    def entries(self, rtype: ResourceType, pattern_type: PatternType, name: str) -> set[_Entry]:
        return set(self._table(pattern_type)[rtype].get(name, ()))

    def bindings(self) -> Iterator[AclBinding]:
        for pattern_type, table in ((PatternType.LITERAL, self._literal),
                                    (PatternType.PREFIXED, self._prefixed)):
            for rtype, by_name in table.items():
                for name, entries in by_name.items():
                    for principal, host, op, perm in entries:
                        yield AclBinding(rtype, name, pattern_type, principal, host, op, perm)

    def matching(self, f: AclFilter) -> list[AclBinding]:
        return sorted((b for b in self.bindings() if f.matches(b)), key=_order)

    # ------------------------------------------------------------ decisions

    def _entries_for(self, rtype: ResourceType, name: str) -> Iterator[_Entry]:
        """Every entry whose pattern covers the resource `name`."""
        literal = self._literal.get(rtype)
        if literal:
            yield from literal.get(name, ())
            if name != WILDCARD:
                yield from literal.get(WILDCARD, ())
        prefixed = self._prefixed.get(rtype)
        if prefixed:
            for prefix, entries in prefixed.items():
                if name.startswith(prefix):
                    yield from entries

    def authorize(self, principal: str, host: str, op: Operation, rtype: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        found = False
        allowed = False
        granting = granted_by(op)
        for acl_principal, acl_host, acl_op, perm in self._entries_for(rtype, name):
            found = True
            if acl_principal != principal and acl_principal != WILDCARD_PRINCIPAL:
                continue
            if acl_host != host and acl_host != WILDCARD:
                continue
            if perm == Permission.DENY:
                if acl_op == op or acl_op == Op.ALL:
                    return False  # DENY wins, whatever ALLOW exists
            elif acl_op in granting:
                allowed = True
        if not found:
            return self.allow_if_no_acl
        return allowed

    def authorized_operations(self, principal: str, host: str, rtype: ResourceType, name: str) -> int:
        return bitfield(op for op in SUPPORTED_OPERATIONS[rtype]
                        if self.authorize(principal, host, op, rtype, name))

    def authorize_any(self, principal: str, host: str, op: Operation, rtype: ResourceType) -> bool:
        """Whether the principal may do `op` on at least one resource of the type (Kafka's
        authorizeByResourceType): an ALLOW on some pattern that no DENY (of the wildcard, of
        the same name, or of a prefix of it) takes back."""
        if principal in self.super_users:
            return True
        if self.authorize(principal, host, op, rtype, "hardcode"):  # as Kafka probes it
            return True
        denied: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
        allowed: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
        wildcard_allow = False
        for b in self.bindings():
            if b.resource_type != rtype:
                continue
            if b.host not in (host, WILDCARD) or b.principal not in (principal, WILDCARD_PRINCIPAL):
                continue
            if b.operation not in (op, Op.ALL):
                continue
            if b.permission == Permission.DENY:
                if b.pattern_type == PatternType.LITERAL and b.name == WILDCARD:
                    return False
                denied[b.pattern_type].add(b.name)
            elif b.pattern_type == PatternType.LITERAL and b.name == WILDCARD:
                wildcard_allow = True
            else:
                allowed[b.pattern_type].add(b.name)
        if wildcard_allow:
            return True
        for pattern_type, names in allowed.items():
            for name in names:
                if pattern_type == PatternType.LITERAL and name in denied[PatternType.LITERAL]:
                    continue
                if any(name.startswith(prefix) for prefix in denied[PatternType.PREFIXED]):
                    continue
                return True
        return False


def _order(b: AclBinding) -> tuple:
    return (b.resource_type, b.pattern_type, b.name, b.principal, b.host, b.operation, b.permission)
