"""The keys and values of ``__transaction_state``, byte-compatible with Apache Kafka.

Every record has a key and a value, each starting with a big-endian int16 version, laid out as
Kafka's message schemas ``TransactionLogKey`` and ``TransactionLogValue`` say:

* ``TransactionLogKey`` version 0: the transactional id (int16-length string). Any other key
  version is a record type this coordinator does not know (``UnknownKey``), skipped at a load.
* ``TransactionLogValue`` version 0 (classic encoding: int16-length strings, int32-length
  arrays, a null array as length -1) and version 1, the first *flexible* one (unsigned varint
  lengths plus one, tagged fields after every struct). Version 1 has three tagged fields:
  ``PreviousProducerId`` (tag 0, default -1), ``NextProducerId`` (tag 1, default -1) and
  ``ClientTransactionVersion`` (tag 2, default 0), written only when not their default, as
  Kafka's generated writers do.

A null value is a tombstone: the transactional id expired. ``TransactionPartitions`` is null for
a transaction in Empty (Kafka writes no partitions then), an array otherwise, one entry per topic
with its partition ids. brook writes key version 0 and value version 1; it reads both value
versions and, as Kafka's readers do since KIP-915, any newer value version with version 1's
layout (unknown tagged fields skipped). Nothing but ``CorruptTransactionRecordError`` escapes the
decoders on bad bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ...records.varint import encode_uvarint as _uvarint

__all__ = [
    "CorruptTransactionRecordError",
    "TransactionLogKey",
    "TransactionLogValue",
    "UnknownKey",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "KEY_VERSION",
    "VALUE_WRITE_VERSION",
]

KEY_VERSION = 0
VALUE_WRITE_VERSION = 1
_FLEXIBLE = 1

_MAX_STRING_LENGTH = 0x7FFF


class CorruptTransactionRecordError(Exception):
    """A key or value of ``__transaction_state`` that cannot be decoded."""


@dataclass(frozen=True, slots=True)
class TransactionLogKey:
    transactional_id: str


@dataclass(frozen=True, slots=True)
class TransactionLogValue:
    """A transactional id's state. ``partitions`` is a tuple of (topic, (partition ids...)), or
    None (written as a null array, as for a transaction in Empty); ``status`` is the state's
    id (``brook.coordinator.transaction.metadata.TransactionState``)."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: int
    partitions: tuple[tuple[str, tuple[int, ...]], ...] | None
    last_update_ms: int
    start_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0


@dataclass(frozen=True, slots=True)
class UnknownKey:
    """A key of a record type (key version) this coordinator does not read."""

    version: int


# --- encoding ---------------------------------------------------------------------------------

_S_H = struct.Struct(">h")
_S_I = struct.Struct(">i")
_pack_h, _pack_i = _S_H.pack, _S_I.pack
_pack_qhib = struct.Struct(">qhib").pack
_pack_qq = struct.Struct(">qq").pack
_S_Q = struct.Struct(">q")


def _string(s: str, flexible: bool) -> bytes:
    b = s.encode("utf-8")
    if len(b) > _MAX_STRING_LENGTH:
        raise ValueError("a string of more than 32767 bytes of UTF-8 does not fit Kafka's string")
    return (_uvarint(len(b) + 1) if flexible else _pack_h(len(b))) + b


def encode_key(key: TransactionLogKey) -> bytes:
    if type(key) is not TransactionLogKey:
        raise TypeError(f"not a __transaction_state key: {key!r}")
    return _pack_h(KEY_VERSION) + _string(key.transactional_id, False)


def encode_value(value: TransactionLogValue | None,
                 version: int = VALUE_WRITE_VERSION) -> bytes | None:
    """The value's bytes (None for a tombstone), as ``version`` 0 or 1 (the default)."""
    if value is None:
        return None
    if type(value) is not TransactionLogValue:
        raise TypeError(f"not a __transaction_state value: {value!r}")
    if version not in (0, 1):
        raise ValueError(f"TransactionLogValue has no version {version}")
    flexible = version >= _FLEXIBLE
    v = value
    try:
        out = [_pack_h(version),
               _pack_qhib(v.producer_id, v.producer_epoch, v.timeout_ms, v.status)]
        if v.partitions is None:
            out.append(b"\x00" if flexible else _pack_i(-1))
        else:
            out.append(_uvarint(len(v.partitions) + 1) if flexible else _pack_i(len(v.partitions)))
            for topic, ids in v.partitions:
                out.append(_string(topic, flexible))
                out.append(_uvarint(len(ids) + 1) if flexible else _pack_i(len(ids)))
                out.append(struct.pack(f">{len(ids)}i", *ids))
                if flexible:
                    out.append(b"\x00")  # the partition entry's tagged fields: none
        out.append(_pack_qq(v.last_update_ms, v.start_ms))
        if flexible:
            tags = []
            if v.previous_producer_id != -1:
                tags.append((0, _S_Q.pack(v.previous_producer_id)))
            if v.next_producer_id != -1:
                tags.append((1, _S_Q.pack(v.next_producer_id)))
            if v.client_transaction_version != 0:
                tags.append((2, _pack_h(v.client_transaction_version)))
            out.append(_uvarint(len(tags)))
            for tag, data in tags:
                out += (_uvarint(tag), _uvarint(len(data)), data)
    except struct.error as exc:
        raise ValueError(f"{value!r} does not fit its schema: {exc}") from None
    return b"".join(out)


# --- decoding ---------------------------------------------------------------------------------


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptTransactionRecordError("truncated")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def unpack(self, s: struct.Struct):
        return s.unpack(self.take(s.size))

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            if shift > 28:
                raise CorruptTransactionRecordError("unsigned varint too long")
            b = self.take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7

    def string(self, flexible: bool) -> str:
        if flexible:
            n = self.uvarint() - 1
        else:
            n = self.unpack(_S_H)[0]
        if n < 0:
            raise CorruptTransactionRecordError("a null string where none is allowed")
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptTransactionRecordError(f"invalid UTF-8: {exc}") from None

    def array_length(self, flexible: bool) -> int:
        """The length of an array, -1 for null."""
        n = self.uvarint() - 1 if flexible else self.unpack(_S_I)[0]
        if n < -1 or n > len(self.data):
            raise CorruptTransactionRecordError(f"impossible array length {n}")
        return n

    def tagged_fields(self) -> dict[int, bytes]:
        fields = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            fields[tag] = self.take(self.uvarint())
        return fields


def decode_key(data: bytes) -> TransactionLogKey | UnknownKey:
    try:
        r = _Reader(bytes(data))
        version = r.unpack(_S_H)[0]
        if version != KEY_VERSION:
            return UnknownKey(version)
        return TransactionLogKey(r.string(False))
    except struct.error as exc:
        raise CorruptTransactionRecordError(str(exc)) from None


_S_HEAD = struct.Struct(">qhib")
_S_QQ = struct.Struct(">qq")


def decode_value(data: bytes | None) -> TransactionLogValue | None:
    if data is None:
        return None
    try:
        r = _Reader(bytes(data))
        version = r.unpack(_S_H)[0]
        if version < 0:
            raise CorruptTransactionRecordError(f"negative value version {version}")
        flexible = version >= _FLEXIBLE
        producer_id, epoch, timeout, status = r.unpack(_S_HEAD)
        n = r.array_length(flexible)
        partitions = None
        if n >= 0:
            entries = []
            for _ in range(n):
                topic = r.string(flexible)
                count = r.array_length(flexible)
                if count < 0:
                    raise CorruptTransactionRecordError("null partition ids")
                ids = struct.unpack(f">{count}i", r.take(4 * count))
                if flexible:
                    r.tagged_fields()
                entries.append((topic, ids))
            partitions = tuple(entries)
        last_update, start = r.unpack(_S_QQ)
        previous = nxt = -1
        client_version = 0
        if flexible:
            tags = r.tagged_fields()
            if 0 in tags:
                previous = _S_Q.unpack(tags[0])[0]
            if 1 in tags:
                nxt = _S_Q.unpack(tags[1])[0]
            if 2 in tags:
                client_version = _S_H.unpack(tags[2])[0]
        return TransactionLogValue(producer_id, epoch, timeout, status, partitions, last_update,
                                   start, previous, nxt, client_version)
    except struct.error as exc:
        raise CorruptTransactionRecordError(str(exc)) from None
