"""The records of KIP-848 consumer groups in ``__consumer_offsets``, byte-compatible with Kafka.

Kafka stores a consumer group (the new protocol) as six record types beside the classic ones;
the key's version is the record type, as for the classic records (``schemas``):

=====  ==========================================  ===================================
type   key (group id, and a member id for 5, 7, 8)  value (version 0, flexible)
=====  ==========================================  ===================================
3      ConsumerGroupMetadataKey                     ConsumerGroupMetadataValue: the group epoch
4      ConsumerGroupPartitionMetadataKey            ConsumerGroupPartitionMetadataValue: the
                                                    subscribed topics' ids, names, partitions
5      ConsumerGroupMemberMetadataKey               ConsumerGroupMemberMetadataValue: a member's
                                                    subscription and client
6      ConsumerGroupTargetAssignmentMetadataKey     ...TargetAssignmentMetadataValue: the epoch
                                                    of the target assignment
7      ConsumerGroupTargetAssignmentMemberKey       ...TargetAssignmentMemberValue: a member's
                                                    target partitions
8      ConsumerGroupCurrentMemberAssignmentKey      ...CurrentMemberAssignmentValue: a member's
                                                    epochs, state, owned and revoking partitions
=====  ==========================================  ===================================

Keys use the classic encoding (int16-prefixed strings); values are flexible (compact strings and
arrays, a tagged-field section after every struct). A null value is a tombstone. The layouts are
those of Kafka 4.0's message schemas (``group-coordinator/src/main/resources/common/message/
ConsumerGroup*.json``); a tagged field brook does not know is skipped, as Kafka skips it, and a
value version above 0 is read with version 0's layout (Kafka only adds tagged fields to them).

``decode_key`` / ``decode_value`` / ``encode_key`` / ``encode_value`` here read and write every
record type of the topic: the classic ones go to ``schemas``.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from ...records.varint import encode_uvarint as _uvarint
from . import schemas
from .schemas import (
    CorruptOffsetsRecordError,
    GroupMetadataKey,
    OffsetCommitKey,
    UnknownKey,
    _compact_length,
    _compact_nullable_string,
    _compact_string,
    _Corrupt,
    _nullable_string,
    _skip_tagged_fields,
    _string,
    _take,
    _uvarint_at,
)

__all__ = [
    "ClassicMemberMetadata",
    "ConsumerGroupCurrentMemberAssignmentKey",
    "ConsumerGroupCurrentMemberAssignmentValue",
    "ConsumerGroupMemberMetadataKey",
    "ConsumerGroupMemberMetadataValue",
    "ConsumerGroupMetadataKey",
    "ConsumerGroupMetadataValue",
    "ConsumerGroupPartitionMetadataKey",
    "ConsumerGroupPartitionMetadataValue",
    "ConsumerGroupTargetAssignmentMemberKey",
    "ConsumerGroupTargetAssignmentMemberValue",
    "ConsumerGroupTargetAssignmentMetadataKey",
    "ConsumerGroupTargetAssignmentMetadataValue",
    "CONSUMER_GROUP_KEYS",
    "TopicMetadata",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
]

# A member's assignment, as stored: (topic id, sorted partitions) pairs.
TopicPartitions = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]


# --------------------------------------------------------------------------------------------
# Keys


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataKey:
    group: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberKey:
    group: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentKey:
    group: str
    member_id: str


# record type (the key's version) of each key class, and back
CONSUMER_GROUP_KEYS: dict[type, int] = {
    ConsumerGroupMetadataKey: 3,
    ConsumerGroupPartitionMetadataKey: 4,
    ConsumerGroupMemberMetadataKey: 5,
    ConsumerGroupTargetAssignmentMetadataKey: 6,
    ConsumerGroupTargetAssignmentMemberKey: 7,
    ConsumerGroupCurrentMemberAssignmentKey: 8,
}
_KEY_OF_TYPE = {v: k for k, v in CONSUMER_GROUP_KEYS.items()}
_MEMBER_KEYS = (ConsumerGroupMemberMetadataKey, ConsumerGroupTargetAssignmentMemberKey,
                ConsumerGroupCurrentMemberAssignmentKey)


# --------------------------------------------------------------------------------------------
# Values


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataValue:
    epoch: int


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """A subscribed topic as the group saw it; ``racks`` is Kafka's deprecated
    PartitionMetadata ((partition, racks) pairs), which brook writes empty."""

    topic_id: uuid.UUID
    topic_name: str
    num_partitions: int
    racks: tuple[tuple[int, tuple[str, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataValue:
    topics: tuple[TopicMetadata, ...]


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """A member that speaks the classic protocol inside a consumer group (tagged field 0)."""

    session_timeout_ms: int
    supported_protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic_member_metadata: ClassicMemberMetadata | None = None


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataValue:
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberValue:
    topic_partitions: TopicPartitions


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    """``state`` is Kafka's MemberState id (0 stable, 1 unrevoked partitions, 2 unreleased
    partitions, 3 unknown)."""

    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned_partitions: TopicPartitions
    partitions_pending_revocation: TopicPartitions


_VALUE_OF_KEY = {
    ConsumerGroupMetadataKey: ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey: ConsumerGroupPartitionMetadataValue,
    ConsumerGroupMemberMetadataKey: ConsumerGroupMemberMetadataValue,
    ConsumerGroupTargetAssignmentMetadataKey: ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey: ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupCurrentMemberAssignmentKey: ConsumerGroupCurrentMemberAssignmentValue,
}


# --------------------------------------------------------------------------------------------
# Encoding

_pack_h = struct.Struct(">h").pack
_pack_i = struct.Struct(">i").pack
_pack_b = struct.Struct(">b").pack
_NO_TAGS = b"\x00"


def _array(items, encode_one) -> bytes:
    return _uvarint(len(items) + 1) + b"".join(encode_one(x) for x in items)


def _uuid(u: uuid.UUID) -> bytes:
    if not isinstance(u, uuid.UUID):
        raise TypeError(f"a topic id must be a uuid.UUID, not {type(u).__name__}")
    return u.bytes


def _topic_partitions(tps: TopicPartitions) -> bytes:
    return _array(tps, lambda tp: _uuid(tp[0]) + _array(tp[1], _pack_i) + _NO_TAGS)


def encode_key(key: object) -> bytes:
    """The key's bytes, a consumer group's or a classic one's (``schemas.encode_key``)."""
    kind = type(key)
    record_type = CONSUMER_GROUP_KEYS.get(kind)
    if record_type is None:
        return schemas.encode_key(key)  # type: ignore[arg-type]
    parts = [_pack_h(record_type), _string(key.group, "group", False)]  # type: ignore[attr-defined]
    if kind in _MEMBER_KEYS:
        parts.append(_string(key.member_id, "member_id", False))  # type: ignore[attr-defined]
    return b"".join(parts)


def encode_value(value: object | None) -> bytes | None:
    """The value's bytes (version 0), None for a tombstone; classic values go to
    ``schemas.encode_value``."""
    if value is None:
        return None
    kind = type(value)
    try:
        if kind is ConsumerGroupMetadataValue:
            body = _pack_i(value.epoch)
        elif kind is ConsumerGroupTargetAssignmentMetadataValue:
            body = _pack_i(value.assignment_epoch)
        elif kind is ConsumerGroupPartitionMetadataValue:
            body = _array(value.topics, _topic_metadata)
        elif kind is ConsumerGroupMemberMetadataValue:
            return _pack_h(0) + _member_metadata(value)
        elif kind is ConsumerGroupTargetAssignmentMemberValue:
            body = _topic_partitions(value.topic_partitions)
        elif kind is ConsumerGroupCurrentMemberAssignmentValue:
            body = b"".join((_pack_i(value.member_epoch), _pack_i(value.previous_member_epoch),
                             _pack_b(value.state), _topic_partitions(value.assigned_partitions),
                             _topic_partitions(value.partitions_pending_revocation)))
        else:
            return schemas.encode_value(value)  # type: ignore[arg-type]
    except struct.error as e:
        raise ValueError(f"{value!r} does not fit its schema: {e}") from None
    return _pack_h(0) + body + _NO_TAGS


def _topic_metadata(t: TopicMetadata) -> bytes:
    racks = _array(t.racks, lambda pr: _pack_i(pr[0]) + _array(
        pr[1], lambda r: _string(r, "rack", True)) + _NO_TAGS)
    return b"".join((_uuid(t.topic_id), _string(t.topic_name, "topic_name", True),
                     _pack_i(t.num_partitions), racks, _NO_TAGS))


def _member_metadata(v: ConsumerGroupMemberMetadataValue) -> bytes:
    parts = [
        _nullable_string(v.instance_id, "instance_id", True),
        _nullable_string(v.rack_id, "rack_id", True),
        _string(v.client_id, "client_id", True),
        _string(v.client_host, "client_host", True),
        _array(v.subscribed_topic_names, lambda s: _string(s, "topic", True)),
        _nullable_string(v.subscribed_topic_regex, "subscribed_topic_regex", True),
        _pack_i(v.rebalance_timeout_ms),
        _nullable_string(v.server_assignor, "server_assignor", True),
    ]
    classic = v.classic_member_metadata
    if classic is None:  # the tagged field's default: left out
        parts.append(_NO_TAGS)
    else:
        field = b"".join((
            _pack_i(classic.session_timeout_ms),
            _array(classic.supported_protocols,
                   lambda p: _string(p[0], "name", True) + _uvarint(len(p[1]) + 1) + bytes(p[1])
                   + _NO_TAGS),
            _NO_TAGS,
        ))
        parts.append(b"\x01" + b"\x00" + _uvarint(len(field)) + field)  # one field, tag 0
    return b"".join(parts)


# --------------------------------------------------------------------------------------------
# Decoding

_unpack_h = struct.Struct(">h").unpack_from
_unpack_i = struct.Struct(">i").unpack_from
_unpack_b = struct.Struct(">b").unpack_from


def decode_key(data: bytes) -> object:
    """Decode any key of the topic: a consumer group's here, the rest by ``schemas``
    (``UnknownKey`` for record types neither knows: share and streams groups)."""
    key = schemas.decode_key(data)
    if type(key) is not UnknownKey:
        return key
    kind = _KEY_OF_TYPE.get(key.version)
    if kind is None:
        return key
    if type(data) is not bytes:
        data = bytes(data)
    try:
        group, p = _classic_string(data, 2, "group")
        if kind in _MEMBER_KEYS:
            member_id, _ = _classic_string(data, p, "member_id")
            return kind(group, member_id)
        return kind(group)
    except (struct.error, _Corrupt, UnicodeDecodeError) as e:
        raise CorruptOffsetsRecordError(f"bad {kind.__name__}: {e}") from None


def decode_value(key: object, data: bytes | None) -> object | None:
    """Decode the value of ``key``'s record (any record type); None stays None."""
    kind = type(key)
    if kind is OffsetCommitKey or kind is GroupMetadataKey:
        return schemas.decode_value(key, data)
    value_kind = _VALUE_OF_KEY.get(kind)
    if value_kind is None:
        raise TypeError(f"no value to decode for {key!r}")
    if data is None:
        return None
    if type(data) is not bytes:
        data = bytes(data)
    try:
        (version,) = _unpack_h(data, 0)
        if version < 0:
            raise _Corrupt(f"negative version {version}")
        return _VALUE_DECODERS[value_kind](data, 2)  # each reads its tagged fields too
    except (struct.error, _Corrupt, UnicodeDecodeError) as e:
        raise CorruptOffsetsRecordError(f"bad {value_kind.__name__}: {e}") from None


def _classic_string(data: bytes, p: int, name: str) -> tuple[str, int]:
    (n,) = _unpack_h(data, p)
    if n < 0:
        raise _Corrupt(f"{name} is null")
    b, q = _take(data, p + 2, n, name)
    return b.decode(), q


def _count(data: bytes, p: int, name: str) -> tuple[int, int]:
    n, p = _compact_length(data, p)
    if n < 0:
        raise _Corrupt(f"{name} is null")
    if n > len(data) - p:
        raise _Corrupt(f"{n} {name} in {len(data) - p} bytes")
    return n, p


def _read_uuid(data: bytes, p: int) -> tuple[uuid.UUID, int]:
    b, q = _take(data, p, 16, "topic id")
    return uuid.UUID(bytes=b), q


def _read_int32s(data: bytes, p: int, name: str) -> tuple[tuple[int, ...], int]:
    n, p = _count(data, p, name)
    out = struct.unpack_from(f">{n}i", data, p)
    return out, p + 4 * n


def _read_topic_partitions(data: bytes, p: int) -> tuple[TopicPartitions, int]:
    n, p = _count(data, p, "topics")
    out = []
    for _ in range(n):
        topic_id, p = _read_uuid(data, p)
        partitions, p = _read_int32s(data, p, "partitions")
        p = _skip_tagged_fields(data, p)
        out.append((topic_id, partitions))
    return tuple(out), p


def _read_strings(data: bytes, p: int, name: str) -> tuple[tuple[str, ...], int]:
    n, p = _count(data, p, name)
    out = []
    for _ in range(n):
        s, p = _compact_string(data, p, name)
        out.append(s)
    return tuple(out), p


def _epoch_value(data: bytes, p: int):
    (epoch,) = _unpack_i(data, p)
    _skip_tagged_fields(data, p + 4)
    return ConsumerGroupMetadataValue(epoch)


def _assignment_epoch_value(data: bytes, p: int):
    (epoch,) = _unpack_i(data, p)
    _skip_tagged_fields(data, p + 4)
    return ConsumerGroupTargetAssignmentMetadataValue(epoch)


def _partition_metadata_value(data: bytes, p: int):
    n, p = _count(data, p, "topics")
    topics = []
    for _ in range(n):
        topic_id, p = _read_uuid(data, p)
        name, p = _compact_string(data, p, "topic_name")
        (num_partitions,) = _unpack_i(data, p)
        m, p = _count(data, p + 4, "partition metadata")
        racks = []
        for _ in range(m):
            (partition,) = _unpack_i(data, p)
            names, p = _read_strings(data, p + 4, "racks")
            p = _skip_tagged_fields(data, p)
            racks.append((partition, names))
        p = _skip_tagged_fields(data, p)
        topics.append(TopicMetadata(topic_id, name, num_partitions, tuple(racks)))
    _skip_tagged_fields(data, p)
    return ConsumerGroupPartitionMetadataValue(tuple(topics))


def _member_metadata_value(data: bytes, p: int):
    instance_id, p = _compact_nullable_string(data, p)
    rack_id, p = _compact_nullable_string(data, p)
    client_id, p = _compact_string(data, p, "client_id")
    client_host, p = _compact_string(data, p, "client_host")
    topics, p = _read_strings(data, p, "subscribed_topic_names")
    regex, p = _compact_nullable_string(data, p)
    (rebalance_timeout,) = _unpack_i(data, p)
    assignor, p = _compact_nullable_string(data, p + 4)
    # the tagged fields: tag 0 is the classic member metadata, any other is skipped
    classic = None
    count, p = _uvarint_at(data, p)
    for _ in range(count):
        tag, p = _uvarint_at(data, p)
        size, p = _uvarint_at(data, p)
        if size < 0:
            raise _Corrupt(f"tagged field of negative size {size}")
        field, p = _take(data, p, size, "tagged field")
        if tag == 0:
            classic = _classic_member_metadata(field)
    return ConsumerGroupMemberMetadataValue(instance_id, rack_id, client_id, client_host,
                                            topics, regex, rebalance_timeout, assignor, classic)


def _classic_member_metadata(data: bytes) -> ClassicMemberMetadata:
    (session_timeout,) = _unpack_i(data, 0)
    n, p = _count(data, 4, "supported protocols")
    protocols = []
    for _ in range(n):
        name, p = _compact_string(data, p, "name")
        size, p = _compact_length(data, p)
        if size < 0:
            raise _Corrupt("metadata is null")
        metadata, p = _take(data, p, size, "metadata")
        p = _skip_tagged_fields(data, p)
        protocols.append((name, metadata))
    _skip_tagged_fields(data, p)
    return ClassicMemberMetadata(session_timeout, tuple(protocols))


def _target_member_value(data: bytes, p: int):
    tps, p = _read_topic_partitions(data, p)
    _skip_tagged_fields(data, p)
    return ConsumerGroupTargetAssignmentMemberValue(tps)


def _current_assignment_value(data: bytes, p: int):
    (epoch,) = _unpack_i(data, p)
    (previous,) = _unpack_i(data, p + 4)
    (state,) = _unpack_b(data, p + 8)
    assigned, p = _read_topic_partitions(data, p + 9)
    revoking, p = _read_topic_partitions(data, p)
    _skip_tagged_fields(data, p)
    return ConsumerGroupCurrentMemberAssignmentValue(epoch, previous, state, assigned, revoking)


_VALUE_DECODERS = {
    ConsumerGroupMetadataValue: _epoch_value,
    ConsumerGroupPartitionMetadataValue: _partition_metadata_value,
    ConsumerGroupMemberMetadataValue: _member_metadata_value,
    ConsumerGroupTargetAssignmentMetadataValue: _assignment_epoch_value,
    ConsumerGroupTargetAssignmentMemberValue: _target_member_value,
    ConsumerGroupCurrentMemberAssignmentValue: _current_assignment_value,
}
