"""ACLs as Kafka's ZooKeeper mode keeps them (sans-I/O: paths and bytes).

One znode per resource pattern holds all of its ACLs, LITERAL ones under
/kafka-acl/<ResourceType>/<name>, PREFIXED ones under /kafka-acl-extended/prefixed/<ResourceType>/<name>,
as {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow","operation":"Read","host":"*"}]}.
A change to one is announced by a sequential node acl_changes_<seq>: under /kafka-acl-changes
(LITERAL, data "TOPIC:<name>") or /kafka-acl-extended-changes (PREFIXED, data
{"version":1,"resourceType":"TOPIC","name":"<name>","patternType":"PREFIXED"}); every broker
watches both and reads the resource again.
"""

from __future__ import annotations

import json

from ..security.acls import Operation, PatternType, Permission, ResourceType

ACLS = "/kafka-acl"
EXTENDED_ACLS = "/kafka-acl-extended"
PREFIXED_ACLS = f"{EXTENDED_ACLS}/prefixed"
ACL_CHANGES = "/kafka-acl-changes"
EXTENDED_ACL_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
PATHS = (ACLS, PREFIXED_ACLS, ACL_CHANGES, EXTENDED_ACL_CHANGES)

_Entry = tuple[str, str, Operation, Permission]


def _camel(name: str) -> str:
    return "".join(w.capitalize() for w in name.split("_"))


def lookup(enum, text: str):
    """An enum member by Kafka's spellings: TRANSACTIONAL_ID, TransactionalId, transactionalid."""
    wanted = text.replace("_", "").lower()
    for member in enum:
        if member.name.replace("_", "").lower() == wanted:
            return member
    raise ValueError(f"unknown {enum.__name__} {text!r}")


def type_dir(rtype: ResourceType) -> str:
    return _camel(rtype.name)  # Topic, Group, Cluster, TransactionalId


def resource_path(rtype: ResourceType, pattern: PatternType, name: str) -> str:
    root = ACLS if pattern == PatternType.LITERAL else PREFIXED_ACLS
    return f"{root}/{type_dir(rtype)}/{name}"


def encode_acls(entries) -> bytes:
    return json.dumps({"version": 1, "acls": [
        {"principal": p, "permissionType": _camel(perm.name), "operation": _camel(op.name), "host": h}
        for p, h, op, perm in sorted(entries)]}, separators=(",", ":")).encode()


def decode_acls(data: bytes | None) -> set[_Entry]:
    if not data:
        return set()
    return {(str(a["principal"]), str(a["host"]), lookup(Operation, a["operation"]),
             lookup(Permission, a["permissionType"])) for a in json.loads(data)["acls"]}


def change_node(rtype: ResourceType, pattern: PatternType, name: str) -> tuple[str, bytes]:
    """(the path prefix of the sequential node, its data) announcing a change of the resource."""
    if pattern == PatternType.LITERAL:
        return f"{ACL_CHANGES}/{CHANGE_PREFIX}", f"{rtype.name}:{name}".encode()
    return f"{EXTENDED_ACL_CHANGES}/{CHANGE_PREFIX}", json.dumps(
        {"version": 1, "resourceType": rtype.name, "name": name, "patternType": pattern.name},
        separators=(",", ":")).encode()


def decode_change(changes_dir: str, data: bytes) -> tuple[ResourceType, PatternType, str]:
    if changes_dir == ACL_CHANGES:
        rtype, _, name = data.decode().partition(":")
        return lookup(ResourceType, rtype), PatternType.LITERAL, name
    event = json.loads(data)
    return (lookup(ResourceType, event["resourceType"]), lookup(PatternType, event["patternType"]),
            str(event["name"]))
