"""The keys and values of ``__consumer_offsets``, byte-compatible with Apache Kafka.

Every record of the offsets topic has a key and a value, each starting with a big-endian int16
version. The key's version doubles as the *record type*:

* key versions 0 and 1: ``OffsetCommitKey`` (group, topic, partition), same fields in both;
  its value is an ``OffsetCommitValue`` (versions 0-4).
* key version 2: ``GroupMetadataKey`` (group); its value is a ``GroupMetadataValue`` (0-4).
* any other key version: a record this coordinator does not know (newer Kafka stores KIP-848
  consumer groups, share groups and streams groups in the same topic under types 3 and up).
  ``decode_key`` returns an ``UnknownKey`` for it, which the loader skips, as Kafka does.

A null value is a tombstone. The layouts follow Kafka's message schemas (``OffsetCommitKey``,
``OffsetCommitValue``, ``GroupMetadataKey``, ``GroupMetadataValue``): versions below 4 use the
classic encoding (int16-prefixed strings, int32-prefixed bytes and arrays), version 4 of the
values is *flexible* (unsigned varint lengths plus one, tagged fields after every struct).

What brook writes is what Kafka writes: ``OffsetCommitKey`` version 1, ``GroupMetadataKey``
version 2, ``OffsetCommitValue`` version 3 (version 1 when the commit carries an explicit
expire timestamp, which drops the leader epoch as in Kafka) and ``GroupMetadataValue`` version 3.

Decoding is strict where Kafka's readers are (lengths, nulls) and tolerant where they are (bytes
after the last field are ignored, unknown tagged fields skipped, value versions above 4 read as
version 4). One deliberate difference: a string that is not valid UTF-8 is rejected, where Java
would substitute U+FFFD.
Nothing but ``CorruptOffsetsRecordError`` escapes the decoders on bad bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from ..records.crc import crc32c

from ..records.batch import HEADER_SIZE, HEADER_STRUCT, MAGIC_V2, decode_records
from ..records.errors import RecordsError
from ..records.varint import decode_varint, encode_varint
from ..records.varint import encode_uvarint as _uvarint

__all__ = [
    "CorruptOffsetsRecordError",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberMetadata",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "UnknownKey",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "OFFSET_COMMIT_KEY_VERSIONS",
    "GROUP_METADATA_KEY_VERSION",
    "OFFSET_COMMIT_VALUE_VERSIONS",
    "GROUP_METADATA_VALUE_VERSIONS",
]

OFFSET_COMMIT_KEY_VERSIONS = (0, 1)
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSIONS = (0, 1, 2, 3, 4)
GROUP_METADATA_VALUE_VERSIONS = (0, 1, 2, 3, 4)

# The versions Kafka writes today.
OFFSET_COMMIT_KEY_WRITE_VERSION = 1
OFFSET_COMMIT_VALUE_WRITE_VERSION = 3
OFFSET_COMMIT_VALUE_WITH_EXPIRY_VERSION = 1
GROUP_METADATA_VALUE_WRITE_VERSION = 3

# Values are flexible from version 4 on. Since KIP-915 Kafka only adds tagged fields to them,
# so that an older reader can read a newer value: its readers take any version above the highest
# they know with the layout of the highest (unknown tags skipped), and so do brook's. A negative
# version is corrupt (Kafka's classic coordinator rejected it too).
_FLEXIBLE_VALUE_VERSION = 4
_MAX_STRING_LENGTH = 0x7FFF


class CorruptOffsetsRecordError(Exception):
    """A key or value of ``__consumer_offsets`` that cannot be decoded: truncated, a negative
    value version, a null where none is allowed, an impossible length, or invalid UTF-8."""


# --------------------------------------------------------------------------------------------
# The records


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    """Key of a committed offset (record types 0 and 1)."""

    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    """A committed offset. ``-1`` means "none" for the epoch and both timestamps."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    """Key of a classic group's metadata (record type 2)."""

    group: str


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    """One member as stored in a ``GroupMetadataValue``; ``subscription`` is the member's
    metadata for the group's selected protocol, ``assignment`` what the leader gave it."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    """A classic group's stored state. ``protocol_type`` is ``""`` for a group without one;
    ``protocol`` and ``leader`` are None when the group has no members."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberMetadata, ...]


@dataclass(frozen=True, slots=True)
class UnknownKey:
    """A key whose record type (its version) this coordinator does not read. Kafka's loaders
    log such records and skip them ("a left over from an aborted upgrade"); so does brook's."""

    version: int


# --------------------------------------------------------------------------------------------
# Encoding

_S_H = struct.Struct(">h")
_S_I = struct.Struct(">i")
_S_Q = struct.Struct(">q")
_pack_h = _S_H.pack
_pack_i = _S_I.pack
_pack_q = _S_Q.pack
_pack_hqih = struct.Struct(">hqih").pack
_pack_hqh = struct.Struct(">hqh").pack
_pack_qq = struct.Struct(">qq").pack


def _utf8(s: str, name: str) -> bytes:
    if not isinstance(s, str):
        raise TypeError(f"{name} must be a str, not {type(s).__name__}")
    b = s.encode("utf-8")
    if len(b) > _MAX_STRING_LENGTH:
        raise ValueError(f"{name} is {len(b)} bytes of UTF-8, more than a Kafka string holds")
    return b


def _string(s: str, name: str, flexible: bool) -> bytes:
    b = _utf8(s, name)
    return (_uvarint(len(b) + 1) if flexible else _pack_h(len(b))) + b


def _nullable_string(s: str | None, name: str, flexible: bool) -> bytes:
    if s is None:
        return b"\x00" if flexible else b"\xff\xff"
    return _string(s, name, flexible)


def _bytes(b: bytes, name: str, flexible: bool) -> bytes:
    if not isinstance(b, (bytes, bytearray, memoryview)):
        raise TypeError(f"{name} must be bytes, not {type(b).__name__}")
    b = bytes(b)
    if len(b) > 0x7FFF_FFFE:
        raise ValueError(f"{name} is too long for a Kafka bytes field")
    return (_uvarint(len(b) + 1) if flexible else _pack_i(len(b))) + b


def encode_key(key: OffsetCommitKey | GroupMetadataKey, version: int | None = None) -> bytes:
    """The key's bytes: ``OffsetCommitKey`` as version 1 (or ``version`` 0, same fields),
    ``GroupMetadataKey`` as version 2, both as Kafka writes them."""
    try:
        if type(key) is OffsetCommitKey:
            if version is None:
                version = OFFSET_COMMIT_KEY_WRITE_VERSION
            elif version not in OFFSET_COMMIT_KEY_VERSIONS:
                raise ValueError(f"OffsetCommitKey has no version {version}")
            return b"".join(
                (
                    _pack_h(version),
                    _string(key.group, "group", False),
                    _string(key.topic, "topic", False),
                    _pack_i(key.partition),
                )
            )
        if type(key) is GroupMetadataKey:
            if version not in (None, GROUP_METADATA_KEY_VERSION):
                raise ValueError(f"GroupMetadataKey has no version {version}")
            return _pack_h(GROUP_METADATA_KEY_VERSION) + _string(key.group, "group", False)
    except struct.error as e:
        raise ValueError(f"{key!r} does not fit its schema: {e}") from None
    raise TypeError(f"not an __consumer_offsets key: {key!r}")


def encode_value(
    value: OffsetCommitValue | GroupMetadataValue | None, version: int | None = None
) -> bytes | None:
    """The value's bytes, or None for a tombstone (``value`` None).

    Without ``version``, the version Kafka writes: ``OffsetCommitValue`` version 3, or 1 when
    ``expire_timestamp`` is set (version 1 has no leader epoch); ``GroupMetadataValue`` version 3.
    With ``version``, that version; fields the version lacks are left out, as Kafka's writers
    leave out these (ignorable) fields.
    """
    if value is None:
        return None
    try:
        if type(value) is OffsetCommitValue:
            return _encode_offset_commit_value(value, version)
        if type(value) is GroupMetadataValue:
            return _encode_group_metadata_value(value, version)
    except struct.error as e:
        raise ValueError(f"{value!r} does not fit its schema: {e}") from None
    raise TypeError(f"not an __consumer_offsets value: {value!r}")


def _encode_offset_commit_value(v: OffsetCommitValue, version: int | None) -> bytes:
    if version is None:
        if v.expire_timestamp != -1:
            version = OFFSET_COMMIT_VALUE_WITH_EXPIRY_VERSION
        else:
            version = OFFSET_COMMIT_VALUE_WRITE_VERSION
    meta = _utf8(v.metadata, "metadata")
    if version == 3:
        head = _pack_hqih(3, v.offset, v.leader_epoch, len(meta))
        return b"".join((head, meta, _pack_q(v.commit_timestamp)))
    if version == 1:
        head = _pack_hqh(1, v.offset, len(meta))
        return b"".join((head, meta, _pack_qq(v.commit_timestamp, v.expire_timestamp)))
    if version in (0, 2):
        head = _pack_hqh(version, v.offset, len(meta))
        return b"".join((head, meta, _pack_q(v.commit_timestamp)))
    if version == 4:
        return b"".join(
            (
                _pack_h(4),
                _pack_q(v.offset),
                _pack_i(v.leader_epoch),
                _uvarint(len(meta) + 1),
                meta,
                _pack_q(v.commit_timestamp),
                b"\x00",  # no tagged fields
            )
        )
    raise ValueError(f"OffsetCommitValue has no version {version}")


def _encode_group_metadata_value(v: GroupMetadataValue, version: int | None) -> bytes:
    if version is None:
        version = GROUP_METADATA_VALUE_WRITE_VERSION
    if version not in GROUP_METADATA_VALUE_VERSIONS:
        raise ValueError(f"GroupMetadataValue has no version {version}")
    flex = version >= _FLEXIBLE_VALUE_VERSION
    parts = [
        _pack_h(version),
        _string(v.protocol_type, "protocol_type", flex),
        _pack_i(v.generation),
        _nullable_string(v.protocol, "protocol", flex),
        _nullable_string(v.leader, "leader", flex),
    ]
    if version >= 2:
        parts.append(_pack_q(v.current_state_timestamp))
    members = v.members
    parts.append(_uvarint(len(members) + 1) if flex else _pack_i(len(members)))
    for m in members:
        if type(m) is not MemberMetadata:
            raise TypeError(f"not a MemberMetadata: {m!r}")
        parts.append(_string(m.member_id, "member_id", flex))
        if version >= 3:
            parts.append(_nullable_string(m.group_instance_id, "group_instance_id", flex))
        parts.append(_string(m.client_id, "client_id", flex))
        parts.append(_string(m.client_host, "client_host", flex))
        if version >= 1:
            parts.append(_pack_i(m.rebalance_timeout))
        parts.append(_pack_i(m.session_timeout))
        parts.append(_bytes(m.subscription, "subscription", flex))
        parts.append(_bytes(m.assignment, "assignment", flex))
        if flex:
            parts.append(b"\x00")  # the member's tagged fields: none
    if flex:
        parts.append(b"\x00")  # the value's tagged fields: none
    return b"".join(parts)


# --------------------------------------------------------------------------------------------
# Decoding
#
# Bad bytes surface inside the decoders as struct.error (a fixed-size field runs past the end),
# UnicodeDecodeError, or _Corrupt raised by the checks below; the public functions turn all of
# them into CorruptOffsetsRecordError. Slices never raise, so every variable-length read either
# checks its end against the length or is followed by a fixed-size read that fails past the end.

_unpack_h = _S_H.unpack_from
_unpack_i = _S_I.unpack_from
_unpack_q = _S_Q.unpack_from
_unpack_qh = struct.Struct(">qh").unpack_from
_unpack_qi = struct.Struct(">qi").unpack_from
_unpack_qih = struct.Struct(">qih").unpack_from
_unpack_qq = struct.Struct(">qq").unpack_from
_unpack_ii = struct.Struct(">ii").unpack_from


class _Corrupt(Exception):
    pass


# The loader replays millions of offset commits, and a frozen dataclass's __init__ pays an
# object.__setattr__ call per field. The hot paths build OffsetCommitKey and OffsetCommitValue
# through their slot descriptors instead: the same objects (equal, hashable, immutable), in half
# the time.
_new = object.__new__
_set_key_group = OffsetCommitKey.group.__set__  # type: ignore[attr-defined]
_set_key_topic = OffsetCommitKey.topic.__set__  # type: ignore[attr-defined]
_set_key_partition = OffsetCommitKey.partition.__set__  # type: ignore[attr-defined]
_set_offset = OffsetCommitValue.offset.__set__  # type: ignore[attr-defined]
_set_leader_epoch = OffsetCommitValue.leader_epoch.__set__  # type: ignore[attr-defined]
_set_metadata = OffsetCommitValue.metadata.__set__  # type: ignore[attr-defined]
_set_commit_timestamp = OffsetCommitValue.commit_timestamp.__set__  # type: ignore[attr-defined]
_set_expire_timestamp = OffsetCommitValue.expire_timestamp.__set__  # type: ignore[attr-defined]


def _offset_commit_value(
    offset: int, leader_epoch: int, metadata: str, commit: int, expire: int
) -> OffsetCommitValue:
    v = _new(OffsetCommitValue)
    _set_offset(v, offset)
    _set_leader_epoch(v, leader_epoch)
    _set_metadata(v, metadata)
    _set_commit_timestamp(v, commit)
    _set_expire_timestamp(v, expire)
    return v


def _bytes_of(data: object) -> bytes:
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise TypeError(f"expected bytes, not {type(data).__name__}")


def decode_key(data: bytes) -> OffsetCommitKey | GroupMetadataKey | UnknownKey:
    """Decode a key. Record types other than 0-2 give an ``UnknownKey`` (to be skipped)."""
    if data is None:
        raise CorruptOffsetsRecordError("an __consumer_offsets record without a key")
    if type(data) is not bytes:
        data = _bytes_of(data)
    try:
        (version,) = _unpack_h(data, 0)
        if version == 0 or version == 1:
            (n,) = _unpack_h(data, 2)
            if n < 0:
                raise _Corrupt("group is null")
            p = 4 + n
            group = data[4:p].decode()
            (n,) = _unpack_h(data, p)
            if n < 0:
                raise _Corrupt("topic is null")
            q = p + 2 + n
            topic = data[p + 2 : q].decode()
            (partition,) = _unpack_i(data, q)
            k = _new(OffsetCommitKey)
            _set_key_group(k, group)
            _set_key_topic(k, topic)
            _set_key_partition(k, partition)
            return k
        if version == 2:
            (n,) = _unpack_h(data, 2)
            if n < 0:
                raise _Corrupt("group is null")
            p = 4 + n
            if p > len(data):
                raise _Corrupt("group runs past the end")
            return GroupMetadataKey(data[4:p].decode())
        return UnknownKey(version)
    except (struct.error, _Corrupt, UnicodeDecodeError) as e:
        raise CorruptOffsetsRecordError(f"bad __consumer_offsets key: {e}") from None


def decode_value(
    key: OffsetCommitKey | GroupMetadataKey, data: bytes | None
) -> OffsetCommitValue | GroupMetadataValue | None:
    """Decode the value of ``key``'s record; None (a tombstone) stays None.

    Fields a version lacks get the values Kafka's readers give them: leader epoch, expire
    timestamp and current state timestamp -1, group instance id None, and a version 0 member's
    rebalance timeout its session timeout.
    """
    kind = type(key)
    if kind is not OffsetCommitKey and kind is not GroupMetadataKey:
        raise TypeError(f"no value to decode for {key!r}; skip records with an UnknownKey")
    if data is None:
        return None
    if type(data) is not bytes:
        data = _bytes_of(data)
    try:
        if kind is OffsetCommitKey:
            (version,) = _unpack_h(data, 0)
            if version == 3:  # what Kafka writes: the loader's hot path, inlined
                offset, epoch, n = _unpack_qih(data, 2)
                if n < 0:
                    raise _Corrupt("metadata is null")
                p = 16 + n
                metadata = data[16:p].decode()
                (commit,) = _unpack_q(data, p)
                v = _new(OffsetCommitValue)
                _set_offset(v, offset)
                _set_leader_epoch(v, epoch)
                _set_metadata(v, metadata)
                _set_commit_timestamp(v, commit)
                _set_expire_timestamp(v, -1)
                return v
            return _decode_offset_commit_value(data, version)
        return _decode_group_metadata_value(data)
    except (struct.error, _Corrupt, UnicodeDecodeError) as e:
        name = "OffsetCommitValue" if kind is OffsetCommitKey else "GroupMetadataValue"
        raise CorruptOffsetsRecordError(f"bad {name}: {e}") from None


def _decode_offset_commit_value(data: bytes, version: int) -> OffsetCommitValue:
    """Versions other than 3 (which ``decode_value`` reads inline)."""
    if 0 <= version <= 2:
        offset, n = _unpack_qh(data, 2)
        if n < 0:
            raise _Corrupt("metadata is null")
        p = 12 + n
        metadata = data[12:p].decode()
        if version == 1:
            commit, expire = _unpack_qq(data, p)
            return _offset_commit_value(offset, -1, metadata, commit, expire)
        (commit,) = _unpack_q(data, p)
        return _offset_commit_value(offset, -1, metadata, commit, -1)
    if version >= 4:  # versions past 4 are read as 4: see _FLEXIBLE_VALUE_VERSION
        offset, epoch = _unpack_qi(data, 2)
        metadata, p = _compact_string(data, 14, "metadata")
        (commit,) = _unpack_q(data, p)
        _skip_tagged_fields(data, p + 8)
        return _offset_commit_value(offset, epoch, metadata, commit, -1)
    raise _Corrupt(f"negative version {version}")


def _decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    (version,) = _unpack_h(data, 0)
    if 0 <= version <= 3:
        protocol_type, p = _string_at(data, 2, "protocol_type")
        (generation,) = _unpack_i(data, p)
        protocol, p = _nullable_string_at(data, p + 4)
        leader, p = _nullable_string_at(data, p)
        if version >= 2:
            (state_ts,) = _unpack_q(data, p)
            p += 8
        else:
            state_ts = -1
        (count,) = _unpack_i(data, p)
        p += 4
        if count < 0:
            raise _Corrupt("members is null")
        if count > len(data) - p:
            raise _Corrupt(f"{count} members in {len(data) - p} bytes")
        members = []
        for _ in range(count):
            member_id, p = _string_at(data, p, "member_id")
            if version >= 3:
                instance_id, p = _nullable_string_at(data, p)
            else:
                instance_id = None
            client_id, p = _string_at(data, p, "client_id")
            client_host, p = _string_at(data, p, "client_host")
            if version >= 1:
                rebalance_timeout, session_timeout = _unpack_ii(data, p)
                p += 8
            else:
                (session_timeout,) = _unpack_i(data, p)
                rebalance_timeout = session_timeout
                p += 4
            subscription, p = _bytes_at(data, p, "subscription")
            assignment, p = _bytes_at(data, p, "assignment")
            members.append(
                MemberMetadata(
                    member_id,
                    instance_id,
                    client_id,
                    client_host,
                    rebalance_timeout,
                    session_timeout,
                    subscription,
                    assignment,
                )
            )
        return GroupMetadataValue(
            protocol_type, generation, protocol, leader, state_ts, tuple(members)
        )
    if version >= 4:  # versions past 4 are read as 4: see _FLEXIBLE_VALUE_VERSION
        protocol_type, p = _compact_string(data, 2, "protocol_type")
        (generation,) = _unpack_i(data, p)
        protocol, p = _compact_nullable_string(data, p + 4)
        leader, p = _compact_nullable_string(data, p)
        (state_ts,) = _unpack_q(data, p)
        count, p = _uvarint_at(data, p + 8)
        count = _int32(count - 1)
        if count < 0:
            raise _Corrupt("members is null")
        if count > len(data) - p:
            raise _Corrupt(f"{count} members in {len(data) - p} bytes")
        members = []
        for _ in range(count):
            member_id, p = _compact_string(data, p, "member_id")
            instance_id, p = _compact_nullable_string(data, p)
            client_id, p = _compact_string(data, p, "client_id")
            client_host, p = _compact_string(data, p, "client_host")
            rebalance_timeout, session_timeout = _unpack_ii(data, p)
            subscription, p = _compact_bytes(data, p + 8, "subscription")
            assignment, p = _compact_bytes(data, p, "assignment")
            p = _skip_tagged_fields(data, p)
            members.append(
                MemberMetadata(
                    member_id,
                    instance_id,
                    client_id,
                    client_host,
                    rebalance_timeout,
                    session_timeout,
                    subscription,
                    assignment,
                )
            )
        _skip_tagged_fields(data, p)
        return GroupMetadataValue(
            protocol_type, generation, protocol, leader, state_ts, tuple(members)
        )
    raise _Corrupt(f"negative version {version}")


def _take(data: bytes, p: int, n: int, name: str) -> tuple[bytes, int]:
    q = p + n
    if q > len(data):
        raise _Corrupt(f"{name} of {n} bytes runs past the end")
    return data[p:q], q


def _string_at(data: bytes, p: int, name: str) -> tuple[str, int]:
    (n,) = _unpack_h(data, p)
    if n < 0:
        raise _Corrupt(f"{name} is null")
    b, q = _take(data, p + 2, n, name)
    return b.decode(), q


def _nullable_string_at(data: bytes, p: int) -> tuple[str | None, int]:
    (n,) = _unpack_h(data, p)
    if n < 0:
        return None, p + 2
    b, q = _take(data, p + 2, n, "string")
    return b.decode(), q


def _bytes_at(data: bytes, p: int, name: str) -> tuple[bytes, int]:
    (n,) = _unpack_i(data, p)
    if n < 0:
        raise _Corrupt(f"{name} is null")
    return _take(data, p + 4, n, name)


def _int32(n: int) -> int:
    """Java int arithmetic: wrap to a signed 32-bit value."""
    n &= 0xFFFFFFFF
    return n - 0x1_0000_0000 if n & 0x8000_0000 else n


def _uvarint_at(data: bytes, p: int) -> tuple[int, int]:
    """An unsigned varint read as Kafka's ``readUnsignedVarint`` does: at most five bytes,
    the result a Java int (bits past 32 dropped, so it may come out negative)."""
    result = 0
    for shift in (0, 7, 14, 21):
        if p >= len(data):
            raise _Corrupt("varint runs past the end")
        b = data[p]
        p += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, p
    if p >= len(data):
        raise _Corrupt("varint runs past the end")
    b = data[p]
    if b >= 0x80:
        raise _Corrupt("varint longer than five bytes")
    return _int32(result | (b << 28)), p + 1


def _compact_length(data: bytes, p: int) -> tuple[int, int]:
    n, p = _uvarint_at(data, p)
    return _int32(n - 1), p


def _compact_string(data: bytes, p: int, name: str) -> tuple[str, int]:
    n, p = _compact_length(data, p)
    if n < 0:
        raise _Corrupt(f"{name} is null")
    if n > _MAX_STRING_LENGTH:
        raise _Corrupt(f"{name} has invalid length {n}")
    b, q = _take(data, p, n, name)
    return b.decode(), q


def _compact_nullable_string(data: bytes, p: int) -> tuple[str | None, int]:
    n, p = _compact_length(data, p)
    if n < 0:
        return None, p
    if n > _MAX_STRING_LENGTH:
        raise _Corrupt(f"string has invalid length {n}")
    b, q = _take(data, p, n, "string")
    return b.decode(), q


def _compact_bytes(data: bytes, p: int, name: str) -> tuple[bytes, int]:
    n, p = _compact_length(data, p)
    if n < 0:
        raise _Corrupt(f"{name} is null")
    return _take(data, p, n, name)


def _skip_tagged_fields(data: bytes, p: int) -> int:
    """Skip a tagged-field section. None of these schemas defines a tag, so every field is
    unknown and skipped, as Kafka's readers skip (and keep aside) unknown tags."""
    count, p = _uvarint_at(data, p)
    for _ in range(count):  # a count that is negative as a Java int reads as no fields
        _tag, p = _uvarint_at(data, p)
        size, p = _uvarint_at(data, p)
        if size < 0:
            raise _Corrupt(f"tagged field of negative size {size}")
        _, p = _take(data, p, size, "tagged field")
    return p


# --------------------------------------------------------------------------------------------
# Decoding whole record batches: the loader's path
#
# A partition of __consumer_offsets is mostly offset commits, written a request at a time: one
# batch holds one group's commits, topic after topic, each record with the key of version 1, the
# value of version 3 without metadata, and the batch's timestamp. Within a topic those records
# have the same length and the same bytes except for the record's offset delta, the partition,
# the offset, the leader epoch and the commit timestamp. ``RecordsDecoder`` finds such runs and
# reads the four numbers of every record with one precompiled ``struct`` format, without
# building a key, a value or a record object; any other record is decoded on its own with
# ``decode_key`` and ``decode_value``. Both give the same answer for the same bytes.
#
# A run is checked in three steps, all of them over whole byte strings: the first record is
# framed and decoded as any record is; every later record must have the same bytes as its
# predecessor outside the varying fields (the two records' bytes are XORed as big integers and
# masked); and every offset delta must be a varint of the same length as the first one's.


class CommitRun(NamedTuple):
    """Consecutive offset commits of one group and topic with a version 3 value without
    metadata: each row ``(partition, offset, leader_epoch, commit_timestamp)`` stands for the
    record ``OffsetCommitKey(group, topic, partition)`` with
    ``OffsetCommitValue(offset, leader_epoch, "", commit_timestamp)``. The decoder's ``rows``
    is an iterator, to be consumed once, before it moves on; an offset commit's (the live
    path's, see ``OffsetsManager.commit``) is a list."""

    group: str
    topic: str
    rows: Iterable[tuple[int, int, int, int]]

    def records(self) -> list[tuple[OffsetCommitKey, OffsetCommitValue]]:
        """The (key, value) of every record of the run (consuming an iterator of rows)."""
        group, topic = self.group, self.topic
        return [
            (OffsetCommitKey(group, topic, partition), OffsetCommitValue(offset, epoch, "", commit))
            for partition, offset, epoch, commit in self.rows
        ]


def record_pairs(records: Iterable) -> Iterator[tuple[object, object | None]]:
    """(key, value) of every record in ``records``: records (anything with a ``key`` and a
    ``value``, ``classic.Record``) and ``CommitRun``s, in order."""
    for record in records:
        if type(record) is CommitRun:
            yield from record.records()
        else:
            yield record.key, record.value


class DecodedRecord(NamedTuple):
    """A record decoded on its own, ``index`` its position in the batch. For an ``UnknownKey``
    the value is not read (it is None)."""

    index: int
    key: OffsetCommitKey | GroupMetadataKey | UnknownKey
    value: OffsetCommitValue | GroupMetadataValue | None


#: The value of a run record: version 3, offset, leader epoch, empty metadata, commit time.
_RUN_VALUE_SIZE = 24
# A varint's last byte is below 0x80, the others are not: _HIGH maps the others to ASCII.
_HIGH = bytes((b ^ 0x80) for b in range(256))


class _Shape(NamedTuple):
    """The layout of the records of a run (all of them the first one's size)."""

    lengths: tuple[int, int, int]  # offset delta position, key position, key size
    stride: int
    delta_at: int
    delta_size: int
    rows: struct.Struct  # the four numbers of a record
    mask: bytes  # 0xff over the bytes every record of a run shares with the others


class RecordsDecoder:
    """Decodes the records of ``__consumer_offsets`` batches, in log order.

    One decoder serves one load: it remembers the group and topic of the keys it has met (by
    their bytes) and the formats of run shapes, so that thousands of commit batches are read
    without decoding a group id twice.
    """

    def __init__(self) -> None:
        #: key bytes before the partition -> (group, topic), or None for keys no run has.
        self._prefixes: dict[bytes, tuple[str, str] | None] = {}
        self._shapes: dict[tuple[int, int, int], _Shape] = {}
        self._masks: dict[tuple[tuple[int, int, int], int], int] = {}

    def decode(self, body: bytes, count: int) -> Iterator[CommitRun | DecodedRecord]:
        """The ``count`` records of a batch's uncompressed records section, as runs of plain
        offset commits and single decoded records, in order. Raises
        ``CorruptOffsetsRecordError`` at bytes that cannot be read (after yielding what came
        before them), wherever ``brook.records``' decoder and ``decode_key``/``decode_value``
        would fail."""
        if type(body) is not bytes:
            body = _bytes_of(body)
        end = len(body)
        pos = 0
        index = 0
        from_bytes = int.from_bytes
        while index < count:
            try:
                rec_end, delta_at, key_at, key_len, value_at, value_len, plain = _frame(
                    body, pos, end
                )
            except (_Corrupt, RecordsError, IndexError) as e:
                raise CorruptOffsetsRecordError(f"record {index} of the batch: {e}") from None
            shape = None
            if plain and value_len == _RUN_VALUE_SIZE and key_len >= 10:
                shape = self._run_shape(body, pos, delta_at, key_at, key_len, value_at, rec_end)
            if shape is None:
                yield self._single(body, index, pos, rec_end)
                pos = rec_end
                index += 1
                continue
            stride = shape.stride
            n = min(count - index, (end - pos) // stride)
            prefix = body[key_at : key_at + key_len - 4]
            if n > 1:
                n = _run_bound(body, key_at, stride, prefix, n)
            run = body[pos : pos + n * stride]
            if n > 1:
                mask = self._mask(shape, n - 1)
                diff = (from_bytes(run[stride:], "big") ^ from_bytes(run[:-stride], "big")) & mask
                if diff:  # the first differing byte ends the run before its record
                    n = ((n - 1) * stride - (diff.bit_length() + 7) // 8) // stride + 1
                n = _same_delta_sizes(run, shape, n)
                if n * stride != len(run):
                    run = run[: n * stride]
            group, topic = self._prefixes[prefix]  # type: ignore[misc]
            yield CommitRun(group, topic, shape.rows.iter_unpack(run))
            pos += n * stride
            index += n
        if pos != end:
            raise CorruptOffsetsRecordError(f"{end - pos} bytes after the last record of a batch")

    def _single(self, body: bytes, index: int, pos: int, rec_end: int) -> DecodedRecord:
        """The record at ``pos`` on its own, framed by ``brook.records`` as any record is."""
        try:
            try:
                [record] = decode_records(body[pos:rec_end], 1, 0, 0)
            except RecordsError as e:
                raise CorruptOffsetsRecordError(str(e)) from None
            if record.key is None:
                raise CorruptOffsetsRecordError("a record without a key")
            key = decode_key(record.key)
            if type(key) is UnknownKey:
                return DecodedRecord(index, key, None)
            value = None if record.value is None else decode_value(key, record.value)
        except CorruptOffsetsRecordError as e:
            raise CorruptOffsetsRecordError(f"record {index} of the batch: {e}") from None
        return DecodedRecord(index, key, value)

    def _run_shape(
        self,
        body: bytes,
        pos: int,
        delta_at: int,
        key_at: int,
        key_len: int,
        value_at: int,
        rec_end: int,
    ) -> _Shape | None:
        """The shape of a run that starts with this record, or None when none can: the key must
        be an offset commit key ending with its partition, the value version 3 with empty
        metadata and nothing after the commit timestamp (``_frame`` checked the rest)."""
        if body[value_at : value_at + 2] != b"\x00\x03":
            return None
        if body[value_at + 14 : value_at + 16] != b"\x00\x00":
            return None
        prefix = body[key_at : key_at + key_len - 4]
        names = self._prefixes.get(prefix, False)
        if names is False:
            names = self._prefixes[prefix] = _run_key_names(body[key_at : key_at + key_len])
        if names is None:
            return None
        lengths = (delta_at - pos, key_at - pos, key_len)
        shape = self._shapes.get(lengths)
        if shape is None:
            shape = self._shapes[lengths] = _new_shape(
                lengths, rec_end - pos, _varint_size_at(body, delta_at)
            )
        return shape

    def _mask(self, shape: _Shape, n: int) -> int:
        """The mask of ``n`` records of the shape, as a big-endian integer."""
        k = (shape.lengths, n)
        mask = self._masks.get(k)
        if mask is None:
            mask = self._masks[k] = int.from_bytes(shape.mask * n, "big")
        return mask


def _new_shape(lengths: tuple[int, int, int], stride: int, delta_size: int) -> _Shape:
    # Record layout: length varint, attributes, timestamp delta varint, offset delta varint,
    # key length varint, key (its partition last), value length (one byte), value, header count.
    delta_at, key_at, key_len = lengths
    partition_at = key_at + key_len - 4
    value_at = key_at + key_len + 1
    mask = bytearray(b"\xff" * stride)
    mask[delta_at : delta_at + delta_size] = bytes(delta_size)
    mask[partition_at : partition_at + 4] = bytes(4)
    mask[value_at + 2 : value_at + 14] = bytes(12)  # offset, leader epoch
    mask[value_at + 16 : value_at + 24] = bytes(8)  # commit timestamp
    rows = struct.Struct(f">{partition_at}xi3xqi2xqx")
    return _Shape(lengths, stride, delta_at, delta_size, rows, bytes(mask))


def _run_bound(body: bytes, key_at: int, stride: int, prefix: bytes, n: int) -> int:
    """How many of the ``n`` records from the one whose key is at ``key_at`` may be in its run:
    every record of a run has the key's ``prefix`` (group and topic) where the first has it.
    A binary search, so a batch of several topics costs a few probes; never less than the run
    (the records of a run all match), perhaps more (other bytes may match by chance)."""
    if body.startswith(prefix, key_at + (n - 1) * stride):
        return n
    matches, misses = 0, n - 1
    while misses - matches > 1:
        mid = (matches + misses) // 2
        if body.startswith(prefix, key_at + mid * stride):
            matches = mid
        else:
            misses = mid
    return misses


def _same_delta_sizes(run: bytes, shape: _Shape, n: int) -> int:
    """How many of the first ``n`` records of ``run`` have an offset delta of the first one's
    size (the other varying fields have fixed sizes)."""
    stride, at, size = shape.stride, shape.delta_at, shape.delta_size
    end = n * stride
    last = run[at + size - 1 : end : stride]
    if last.isascii() and all(run[at + i : end : stride].translate(_HIGH).isascii()
                              for i in range(size - 1)):
        return n
    for k in range(1, n):
        r = k * stride + at
        if run[r + size - 1] >= 0x80 or any(run[r + i] < 0x80 for i in range(size - 1)):
            return k
    return n


def _run_key_names(key: bytes) -> tuple[str, str] | None:
    """(group, topic) of an offset commit key that ends with its partition, else None."""
    if key[:2] not in (b"\x00\x00", b"\x00\x01"):
        return None
    try:
        k = decode_key(key)
    except CorruptOffsetsRecordError:
        return None
    if type(k) is not OffsetCommitKey:
        return None
    if len(key) != 10 + len(k.group.encode()) + len(k.topic.encode()):
        return None  # bytes after the partition: not a run key
    return k.group, k.topic


def _varint_size_at(data: bytes, p: int) -> int:
    size = 1
    while data[p] & 0x80:
        p += 1
        size += 1
    return size


def _frame(body: bytes, pos: int, end: int) -> tuple[int, int, int, int, int, int, bool]:
    """The framing of the v2 record at ``pos``: (its end, offset delta position, key position,
    key length, value position, value length, plain), lengths -1 for null. ``plain`` says that
    the record could be in a run: a one-byte value length and no headers. One-byte varints, the
    common case, are read inline."""
    b = body[pos]
    if b < 0x80:
        length, p = (b >> 1) ^ -(b & 1), pos + 1
    else:
        length, p = decode_varint(body, pos)
    if length < 1:
        raise _Corrupt(f"invalid record length {length}")
    rec_end = p + length
    if rec_end > end:
        raise _Corrupt("record runs past the end of the batch")
    # attributes, timestamp delta, offset delta
    if body[p + 1] < 0x80:
        delta_at = p + 2
    else:
        _, delta_at = decode_varint(body, p + 1)
    if body[delta_at] < 0x80:
        p = delta_at + 1
    else:
        _, p = decode_varint(body, delta_at)
    b = body[p]
    if b < 0x80:
        key_len, key_at = (b >> 1) ^ -(b & 1), p + 1
    else:
        key_len, key_at = decode_varint(body, p)
    if key_len >= 0:
        p = key_at + key_len
    elif key_len == -1:
        p = key_at
    else:
        raise _Corrupt(f"invalid key length {key_len}")
    b = body[p]
    if b < 0x80:
        value_len, value_at = (b >> 1) ^ -(b & 1), p + 1
    else:
        value_len, value_at = decode_varint(body, p)
    plain = value_at == p + 1
    if value_len >= 0:
        p = value_at + value_len
    elif value_len == -1:
        p = value_at
    else:
        raise _Corrupt(f"invalid value length {value_len}")
    if p >= rec_end:
        raise _Corrupt("record fields run past its length")
    return rec_end, delta_at, key_at, key_len, value_at, value_len, (
        plain and p + 1 == rec_end and not body[p]
    )


# --------------------------------------------------------------------------------------------
# Writing a batch of plain offset commits: the live path's counterpart of the runs
#
# An OffsetCommit request becomes one batch of such records; written field by field through
# ``brook.records.encode_batch`` each costs several microseconds of varints. This writes the
# same bytes (the tests compare them with encode_batch's) with one struct per record: within a
# run every record has the same layout, only its offset delta's varint grows (one byte up to 63,
# two up to 8191).

# partition, value length (24, as a varint), then the value: version 3, offset, leader epoch,
# empty metadata, commit time; then the record's header count (0)
_pack_run_tail = struct.Struct(">iBhqihqB").pack
_RUN_TAIL_SIZE = 30
_pack_batch_header = HEADER_STRUCT.pack_into
_DELTAS = [encode_varint(i) for i in range(64)]  # one byte each


def encode_commit_batch(records, timestamp: int) -> bytes | None:
    """The record batch ``encode_batch`` writes for ``records`` (``CommitRun``s and
    ``classic.Record``s) at offsets 0, 1, ... and ``timestamp``, when every one is an offset
    commit whose value has no metadata and no expire timestamp (version 3); None when one is
    not, when there are none, or when a field does not fit."""
    parts = []
    heads: dict[tuple[str, str], tuple[bytes, int, bytes]] = {}
    i = 0
    try:
        for record in records:
            if type(record) is CommitRun:
                group, topic, rows = record
            else:
                key, value = record.key, record.value
                if (type(key) is not OffsetCommitKey or type(value) is not OffsetCommitValue
                        or value.metadata or value.expire_timestamp != -1):
                    return None
                group, topic = key.group, key.topic
                rows = ((key.partition, value.offset, value.leader_epoch, value.commit_timestamp),)
            names = (group, topic)
            head = heads.get(names)
            if head is None:
                # The key's length and its bytes before the partition: the same for the topic.
                prefix = b"".join((_pack_h(OFFSET_COMMIT_KEY_WRITE_VERSION),
                                   _string(group, "group", False), _string(topic, "topic", False)))
                key_head = encode_varint(len(prefix) + 4) + prefix
                size = 2 + len(key_head) + _RUN_TAIL_SIZE  # a record's bytes but its offset delta
                head = heads[names] = (key_head, size, encode_varint(size + 1))
            key_head, size, short_length = head
            for partition, offset, epoch, commit in rows:
                if i < 64:  # a one-byte offset delta
                    delta, length = _DELTAS[i], short_length
                else:
                    delta = encode_varint(i)
                    length = encode_varint(size + len(delta))
                parts.append(length)
                parts.append(b"\x00\x00")  # attributes, timestamp delta
                parts.append(delta)
                parts.append(key_head)
                parts.append(_pack_run_tail(partition, 0x30, 3, offset, epoch, 0, commit, 0))
                i += 1
    except (struct.error, ValueError, TypeError):
        return None
    if not i:
        return None
    section = b"".join(parts)
    out = bytearray(HEADER_SIZE + len(section))
    _pack_batch_header(out, 0, 0, HEADER_SIZE - 12 + len(section), -1, MAGIC_V2, 0, 0,
                       i - 1, timestamp, timestamp, -1, -1, -1, i)
    out[HEADER_SIZE:] = section
    _S_CRC.pack_into(out, 17, crc32c(memoryview(out)[21:]))
    return bytes(out)


_S_CRC = struct.Struct(">I")
