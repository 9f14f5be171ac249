"""The embedded ConsumerProtocol of classic consumer groups (a JoinGroup's subscription, a
SyncGroup's assignment), read and written for classic members inside a consumer group and for
the conversions between the two kinds of group (Kafka's ``ConsumerProtocol``).

Each struct is an int16 version, then a body; every version's body starts with version 0's
fields and later ones only append (owned partitions in 1, generation in 2, rack in 3), so a
version above 3 is read with version 3's layout."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kio.schema.consumer_protocol_assignment.v0 import ConsumerProtocolAssignment
from kio.schema.consumer_protocol_assignment.v0.data import TopicPartition as AssignedTopic
from kio.schema.consumer_protocol_subscription import v0, v1, v2, v3
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32

__all__ = ["PROTOCOL_TYPE", "Subscription", "decode_assignment", "decode_subscription",
           "encode_assignment", "protocol_version"]

PROTOCOL_TYPE = "consumer"

_SUBSCRIPTION_READERS = [entity_reader(v.ConsumerProtocolSubscription) for v in (v0, v1, v2, v3)]
_read_assignment = entity_reader(ConsumerProtocolAssignment)
_write_assignment = entity_writer(ConsumerProtocolAssignment)


class MalformedProtocol(ValueError):
    """Bytes that are not a ConsumerProtocol struct."""


@dataclass(frozen=True)
class Subscription:
    topics: tuple[str, ...]
    owned: dict[str, tuple[int, ...]]
    rack_id: str | None = None


def protocol_version(data: bytes) -> int:
    if len(data) < 2:
        raise MalformedProtocol("no version")
    return struct.unpack_from(">h", data)[0]


def decode_subscription(data: bytes) -> Subscription:
    version = protocol_version(data)
    if version < 0:
        raise MalformedProtocol(f"version {version}")
    try:
        value, _ = _SUBSCRIPTION_READERS[min(version, 3)](data, 2)
    except Exception as e:  # kio raises several types for bad bytes; all mean the same
        raise MalformedProtocol(str(e)) from None
    owned: dict[str, tuple[int, ...]] = {}
    for tp in getattr(value, "owned_partitions", ()):
        owned[tp.topic] = owned.get(tp.topic, ()) + tuple(int(p) for p in tp.partitions)
    return Subscription(tuple(value.topics), owned, getattr(value, "rack_id", None))


def decode_assignment(data: bytes) -> dict[str, tuple[int, ...]]:
    """The partitions by topic name (an empty assignment, b"", is none)."""
    if not data:
        return {}
    protocol_version(data)
    try:
        value, _ = _read_assignment(data, 2)
    except Exception as e:
        raise MalformedProtocol(str(e)) from None
    out: dict[str, tuple[int, ...]] = {}
    for tp in value.assigned_partitions:
        out[tp.topic] = out.get(tp.topic, ()) + tuple(int(p) for p in tp.partitions)
    return out


def encode_assignment(partitions: dict[str, tuple[int, ...]], version: int = 0) -> bytes:
    """An assignment in the member's own version (the body is the same in all of them)."""
    import io

    body = io.BytesIO()
    _write_assignment(body, ConsumerProtocolAssignment(assigned_partitions=tuple(
        AssignedTopic(topic=t, partitions=tuple(i32(p) for p in sorted(ps)))
        for t, ps in sorted(partitions.items()))))
    return struct.pack(">h", max(0, min(version, 3))) + body.getvalue()
