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
from dataclasses import dataclass

from ...records.varint import encode_uvarint as _uvarint

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
            return _decode_offset_commit_value(data)
        return _decode_group_metadata_value(data)
    except (struct.error, _Corrupt, UnicodeDecodeError) as e:
        name = "OffsetCommitValue" if kind is OffsetCommitKey else "GroupMetadataValue"
        raise CorruptOffsetsRecordError(f"bad {name}: {e}") from None


def _decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    (version,) = _unpack_h(data, 0)
    if version == 3:  # what Kafka writes: the hot path of loading, first
        offset, epoch, n = _unpack_qih(data, 2)
        if n < 0:
            raise _Corrupt("metadata is null")
        p = 16 + n
        metadata = data[16:p].decode()
        (commit,) = _unpack_q(data, p)
        return _offset_commit_value(offset, epoch, metadata, commit, -1)
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
    if version >= _FLEXIBLE_VALUE_VERSION:  # later versions are read as 4: see above
        offset, epoch = _unpack_qi(data, 2)
        metadata, p = _compact_string(data, 14, "metadata")
        (commit,) = _unpack_q(data, p)
        _skip_tagged_fields(data, p + 8)
        return _offset_commit_value(offset, epoch, metadata, commit, -1)
    raise _Corrupt(f"negative version {version}")


def _decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    """Every version: the classic encoding (0-3) and the flexible one (4 and later) differ only
    in how strings, bytes and counts are framed and in the tagged fields after each struct."""
    (version,) = _unpack_h(data, 0)
    if version < 0:
        raise _Corrupt(f"negative version {version}")
    flex = version >= _FLEXIBLE_VALUE_VERSION
    string = _compact_string if flex else _string_at
    nullable = _compact_nullable_string if flex else _nullable_string_at
    blob = _compact_bytes if flex else _bytes_at
    protocol_type, p = string(data, 2, "protocol_type")
    (generation,) = _unpack_i(data, p)
    protocol, p = nullable(data, p + 4)
    leader, p = nullable(data, p)
    state_ts = -1
    if version >= 2:
        (state_ts,) = _unpack_q(data, p)
        p += 8
    if flex:
        count, p = _uvarint_at(data, p)
        count = _int32(count - 1)
    else:
        (count,) = _unpack_i(data, p)
        p += 4
    if count < 0:
        raise _Corrupt("members is null")
    if count > len(data) - p:
        raise _Corrupt(f"{count} members in {len(data) - p} bytes")
    members = []
    for _ in range(count):
        member_id, p = string(data, p, "member_id")
        instance_id = None
        if version >= 3:
            instance_id, p = nullable(data, p)
        client_id, p = string(data, p, "client_id")
        client_host, p = string(data, p, "client_host")
        if version >= 1:
            rebalance_timeout, session_timeout = _unpack_ii(data, p)
            p += 8
        else:
            (session_timeout,) = _unpack_i(data, p)
            rebalance_timeout = session_timeout
            p += 4
        subscription, p = blob(data, p, "subscription")
        assignment, p = blob(data, p, "assignment")
        if flex:
            p = _skip_tagged_fields(data, p)
        members.append(MemberMetadata(member_id, instance_id, client_id, client_host,
                                      rebalance_timeout, session_timeout, subscription, assignment))
    if flex:
        _skip_tagged_fields(data, p)
    return GroupMetadataValue(protocol_type, generation, protocol, leader, state_ts, tuple(members))


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
