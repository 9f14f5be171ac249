"""`dump-log --offsets-decoder`: the records of `__consumer_offsets` as readable commits, group
metadata and tombstones, decoded by brook.coordinator.group.schemas (Kafka's formats).

Members of `consumer` groups have their subscription and assignment decoded with Kafka's
ConsumerProtocol schemas (kio); other protocols' bytes are shown by size. The records of KIP-848
consumer groups (types 3-8, brook.coordinator.group.consumer_schemas) are shown field by field,
topics by id.
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from typing import Any

from kio.schema.consumer_protocol_assignment.v0 import ConsumerProtocolAssignment
from kio.schema.consumer_protocol_subscription.v0 import ConsumerProtocolSubscription
from kio.serial import entity_reader

from ..coordinator.group.consumer_schemas import CONSUMER_GROUP_KEYS, decode_key, decode_value
from ..coordinator.group.schemas import (CorruptOffsetsRecordError, GroupMetadataKey,
                                         OffsetCommitKey, UnknownKey)

_read_subscription = entity_reader(ConsumerProtocolSubscription)
_read_assignment = entity_reader(ConsumerProtocolAssignment)


def _consumer_protocol(reader, data: bytes):
    """A ConsumerProtocol struct: a version, then a body whose version 0 prefixes the others."""
    if len(data) < 2:
        return None
    try:
        value, _ = reader(data, 2)
    except Exception:  # kio raises several types for bad bytes; all mean "not decodable"
        return None
    return value


def subscription_topics(data: bytes) -> list[str] | None:
    value = _consumer_protocol(_read_subscription, data)
    return None if value is None or value.topics is None else list(value.topics)


def assignment_partitions(data: bytes) -> dict[str, list[int]] | None:
    value = _consumer_protocol(_read_assignment, data)
    if value is None:
        return None
    out: dict[str, list[int]] = {}
    for tp in value.assigned_partitions:
        out.setdefault(tp.topic, []).extend(int(p) for p in tp.partitions)
    return out


def decode(key: bytes | None, value: bytes | None) -> dict[str, Any]:
    """One record of the offsets topic as plain values; `type` says what it is."""
    try:
        k = decode_key(key)
        if isinstance(k, UnknownKey):
            return {"type": "unknown", "record_type": k.version}
        v = decode_value(k, value)
    except CorruptOffsetsRecordError as exc:
        return {"type": "corrupt", "error": str(exc)}
    if type(k) in CONSUMER_GROUP_KEYS:
        return _consumer_group_record(k, v)
    if isinstance(k, OffsetCommitKey):
        out: dict[str, Any] = {"type": "offset_commit", "group": k.group, "topic": k.topic,
                               "partition": k.partition}
        if v is None:
            out["tombstone"] = True
        else:
            out.update(offset=v.offset, leader_epoch=v.leader_epoch, metadata=v.metadata,
                       commit_timestamp=v.commit_timestamp, expire_timestamp=v.expire_timestamp)
        return out
    assert isinstance(k, GroupMetadataKey)
    out = {"type": "group_metadata", "group": k.group}
    if v is None:
        out["tombstone"] = True
        return out
    consumer = v.protocol_type == "consumer"
    members = []
    for m in v.members:
        member: dict[str, Any] = {
            "member_id": m.member_id, "group_instance_id": m.group_instance_id,
            "client_id": m.client_id, "client_host": m.client_host,
            "session_timeout": m.session_timeout, "rebalance_timeout": m.rebalance_timeout,
        }
        subscription = subscription_topics(m.subscription) if consumer else None
        assignment = assignment_partitions(m.assignment) if consumer else None
        member["subscription"] = (subscription if subscription is not None
                                  else f"{len(m.subscription)} bytes")
        member["assignment"] = (assignment if assignment is not None
                                else f"{len(m.assignment)} bytes")
        members.append(member)
    out.update(protocol_type=v.protocol_type, generation=v.generation, protocol=v.protocol,
               leader=v.leader, current_state_timestamp=v.current_state_timestamp,
               members=members)
    return out


def _consumer_group_record(key, value) -> dict[str, Any]:
    """A KIP-848 record: its type from the key's name (consumer_group_member_metadata, ...),
    the key's fields, then the value's (topic ids as text, partitions as lists)."""
    kind = re.sub(r"(?<!^)(?=[A-Z])", "_", type(key).__name__.removesuffix("Key")).lower()
    out: dict[str, Any] = {"type": kind, **dataclasses.asdict(key)}
    if value is None:
        out["tombstone"] = True
    else:
        out.update({f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)})
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, uuid.UUID):
        return str(value)
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, bytes):
        return f"{len(value)} bytes"
    return value


def unreadable(d: dict[str, Any]) -> str | None:
    """The line of a record a coordinator's decoder could not read (this one's and
    transaction_log_decoder's), None for one it read."""
    if d["type"] == "unknown":
        return f"unknown record type {d['record_type']}"
    if d["type"] == "corrupt":  # the coordinator's loader skips it, and logs its offset
        return f"corrupt (skipped when the coordinator loads): {d['error']}"
    return None


def describe(d: dict[str, Any]) -> str:
    """One line of text for a decoded record."""
    kind = d["type"]
    if kind in ("unknown", "corrupt"):
        return unreadable(d)
    if kind.startswith("consumer_group_"):
        return kind + "".join(f" {k}={v}" if k != "tombstone" else " tombstone"
                              for k, v in d.items() if k != "type")
    if kind == "offset_commit":
        head = f"offset_commit group={d['group']} topic={d['topic']} partition={d['partition']}"
        if d.get("tombstone"):
            return f"{head} tombstone"
        return (f"{head} offset={d['offset']} leader_epoch={d['leader_epoch']} "
                f"metadata={d['metadata']!r} commit_timestamp={d['commit_timestamp']} "
                f"expire_timestamp={d['expire_timestamp']}")
    head = f"group_metadata group={d['group']}"
    if d.get("tombstone"):
        return f"{head} tombstone"
    members = "; ".join(
        f"{m['member_id']} client_id={m['client_id']} host={m['client_host']} "
        f"session_timeout={m['session_timeout']} rebalance_timeout={m['rebalance_timeout']} "
        f"subscription={_subscription_text(m['subscription'])} "
        f"assignment={_assignment_text(m['assignment'])}"
        for m in d["members"])
    return (f"{head} protocol_type={d['protocol_type']} generation={d['generation']} "
            f"protocol={d['protocol']} leader={d['leader']} "
            f"current_state_timestamp={d['current_state_timestamp']} members=[{members}]")


def _subscription_text(value: Any) -> str:
    return ",".join(value) if isinstance(value, list) else str(value)


def _assignment_text(value: Any) -> str:
    if not isinstance(value, dict):
        return str(value)
    return " ".join(f"{t}({','.join(map(str, sorted(ps)))})" for t, ps in sorted(value.items()))
