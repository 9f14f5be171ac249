"""The Fetch response, encoded by hand so record data never passes through Python.

The result is a list of pieces: `bytes` for the framing, and file regions (anything with
`fd`, `position`, `length`) for record batches, which the connection hands to `sendfile`.
Versions 0 to 16 are covered: a throttle time from 1, the last stable offset and aborted
transactions from 4, compact encodings and tagged fields from 12, topic ids in place of names
from 13. (Versions 0 to 3 carry legacy message sets, down-converted by the handler.)
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..records.varint import encode_uvarint as _uvarint

MIN_VERSION = 0
MAX_VERSION = 16
FLEXIBLE_FROM = 12
TOPIC_IDS_FROM = 13

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION_HEAD = struct.Struct(">ihq")  # index, error, high watermark
_I64 = struct.Struct(">q")
_ABORTED = struct.Struct(">qq")


@dataclass(slots=True)
class PartitionResult:
    partition: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted_transactions: list[tuple[int, int]] | None = None
    preferred_read_replica: int = -1
    records: Sequence[Any] = ()  # bytes and/or file regions, in order

    @property
    def records_size(self) -> int:
        return sum(len(r) if isinstance(r, (bytes, bytearray, memoryview)) else r.length
                   for r in self.records)


@dataclass(slots=True)
class TopicResult:
    name: str
    topic_id: uuid.UUID | None
    partitions: list[PartitionResult] = field(default_factory=list)


class _Pieces:
    """Accumulates small writes into one bytes piece until a region interrupts it."""

    def __init__(self) -> None:
        self.pieces: list[Any] = []
        self.buf = bytearray()
        self.size = 0

    def write(self, b: bytes) -> None:
        self.buf += b

    def region(self, r: Any) -> None:
        if isinstance(r, (bytes, bytearray, memoryview)):
            self.buf += r
            return
        if self.buf:
            self.pieces.append(bytes(self.buf))
            self.size += len(self.buf)
            self.buf = bytearray()
        self.pieces.append(r)
        self.size += r.length

    def finish(self) -> tuple[list[Any], int]:
        if self.buf:
            self.pieces.append(bytes(self.buf))
            self.size += len(self.buf)
            self.buf = bytearray()
        return self.pieces, self.size


def encode_fetch_response(version: int, correlation_id: int, topics: list[TopicResult], *,
                          throttle_time_ms: int = 0, error_code: int = 0,
                          session_id: int = 0) -> tuple[list[Any], int]:
    """The whole response frame as pieces (the first starts with the 4-byte size), and
    its total size including that prefix."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Fetch v{version} is not supported")
    flexible = version >= FLEXIBLE_FROM
    out = _Pieces()
    w = out.write

    def array_len(n: int) -> None:
        w(_uvarint(n + 1) if flexible else _I32.pack(n))

    w(b"\0\0\0\0")  # size, patched below
    w(_I32.pack(correlation_id))
    if flexible:
        w(b"\0")  # response header tagged fields
    if version >= 1:
        w(_I32.pack(throttle_time_ms))
    if version >= 7:
        w(_I16.pack(error_code))
        w(_I32.pack(session_id))
    array_len(len(topics))
    for t in topics:
        if version >= TOPIC_IDS_FROM:
            w((t.topic_id or uuid.UUID(int=0)).bytes)
        else:
            name = t.name.encode()
            w(_uvarint(len(name) + 1) if flexible else _I16.pack(len(name)))
            w(name)
        array_len(len(t.partitions))
        for p in t.partitions:
            w(_PARTITION_HEAD.pack(p.partition, p.error_code, p.high_watermark))
            if version >= 4:
                w(_I64.pack(p.last_stable_offset))
            if version >= 5:
                w(_I64.pack(p.log_start_offset))
            if version < 4:
                pass
            elif p.aborted_transactions is None:
                w(b"\0" if flexible else _I32.pack(-1))
            else:
                array_len(len(p.aborted_transactions))
                for producer_id, first_offset in p.aborted_transactions:
                    w(_ABORTED.pack(producer_id, first_offset))
                    if flexible:
                        w(b"\0")
            if version >= 11:
                w(_I32.pack(p.preferred_read_replica))
            size = p.records_size
            w(_uvarint(size + 1) if flexible else _I32.pack(size))
            for r in p.records:
                out.region(r)
            if flexible:
                w(b"\0")  # partition tagged fields
        if flexible:
            w(b"\0")  # topic tagged fields
    if flexible:
        w(b"\0")  # response tagged fields
    pieces, total = out.finish()
    first = bytearray(pieces[0])
    _I32.pack_into(first, 0, total - 4)
    pieces[0] = bytes(first)
    return pieces, total
