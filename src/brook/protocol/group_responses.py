"""OffsetCommit, OffsetFetch and Heartbeat responses, encoded by hand.

An offset commit is the coordinator's most frequent request, and kio's generic writer spends
as long on a commit's answer of a hundred partitions as the coordinator spends on the commit.
These encoders write the same bytes (the tests hold them to kio's) straight from plain rows:
no entity objects are built. Each returns the whole frame: size prefix, header, body.

Versions: OffsetCommit 0-9 (flexible from 8), OffsetFetch 0-9 (flexible from 6, leader
epochs from 5, several groups from 8), Heartbeat 0-4 (flexible from 4).
"""

from __future__ import annotations

import struct
from typing import Iterable, Sequence

from ..records.varint import encode_uvarint

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I32_I32 = struct.Struct(">ii")  # size, correlation id
_COMMIT_PARTITION = struct.Struct(">ih")  # partition, error
_COMMIT_PARTITION_FLEX = struct.Struct(">ihB")  # partition, error, no tagged fields
_FETCH_PARTITION = struct.Struct(">iq")  # partition, offset
_FETCH_PARTITION_EPOCH = struct.Struct(">iqi")  # partition, offset, leader epoch
_ERROR = _I16
_ERROR_FLEX = struct.Struct(">hB")  # error, no tagged fields
# Whole Heartbeat frames: size, correlation id, [header tags], [throttle], error, [body tags]
_HEARTBEAT_V0 = struct.Struct(">iih")
_HEARTBEAT_V1 = struct.Struct(">iiih")
_HEARTBEAT_V4 = struct.Struct(">iiBihB")

NULL_STRING = b"\xff\xff"

OFFSET_COMMIT_VERSIONS = range(0, 10)
OFFSET_FETCH_VERSIONS = range(0, 10)
HEARTBEAT_VERSIONS = range(0, 5)

# Rows, shaped as the wire is:
#   OffsetCommit topics: (name, [(partition, error code)])
#   OffsetFetch topics: (name, [(partition, offset, leader epoch, metadata or None, error code)])
#   OffsetFetch v8+ groups: (group id, topics as above, error code)
CommitTopic = tuple[str, Sequence[tuple[int, int]]]
FetchTopic = tuple[str, Sequence[tuple[int, int, int, "str | None", int]]]
FetchGroup = tuple[str, Sequence[FetchTopic], int]


def _uvarint(n: int) -> bytes:
    return bytes((n,)) if n < 0x80 else encode_uvarint(n)


def _string(s: str, flexible: bool) -> bytes:
    b = s.encode()
    return (_uvarint(len(b) + 1) if flexible else _I16.pack(len(b))) + b


def _nullable_string(s: str | None, flexible: bool) -> bytes:
    if s is None:
        return b"\0" if flexible else NULL_STRING
    return _string(s, flexible)


def _array_len(n: int, flexible: bool) -> bytes:
    return _uvarint(n + 1) if flexible else _I32.pack(n)


def _frame(parts: list[bytes], correlation_id: int, flexible: bool) -> bytes:
    """Size prefix and response header (v1 when flexible: an empty tagged-field section) in
    front of the body's parts."""
    body = b"".join(parts)
    head = _I32_I32.pack(len(body) + 4 + flexible, correlation_id)
    return head + b"\0" + body if flexible else head + body


def _check(api: str, version: int, versions: range) -> None:
    if version not in versions:
        raise ValueError(f"{api} v{version} is not supported")


def offset_commit_response(version: int, correlation_id: int, topics: Iterable[CommitTopic],
                           throttle_time_ms: int = 0) -> bytes:
    _check("OffsetCommit", version, OFFSET_COMMIT_VERSIONS)
    flexible = version >= 8
    topics = list(topics)
    out = [_I32.pack(throttle_time_ms)] if version >= 3 else []
    out.append(_array_len(len(topics), flexible))
    pack = _COMMIT_PARTITION_FLEX.pack if flexible else _COMMIT_PARTITION.pack
    for name, partitions in topics:
        out.append(_string(name, flexible))
        out.append(_array_len(len(partitions), flexible))
        if flexible:
            out.extend([pack(p, code, 0) for p, code in partitions])
            out.append(b"\0")  # topic tagged fields
        else:
            out.extend([pack(p, code) for p, code in partitions])
    if flexible:
        out.append(b"\0")
    return _frame(out, correlation_id, flexible)


def _fetch_topics(out: list[bytes], topics: Sequence[FetchTopic], version: int,
                  flexible: bool) -> None:
    out.append(_array_len(len(topics), flexible))
    epochs = version >= 5
    error = _ERROR_FLEX.pack if flexible else _ERROR.pack
    for name, partitions in topics:
        out.append(_string(name, flexible))
        out.append(_array_len(len(partitions), flexible))
        for partition, offset, leader_epoch, metadata, code in partitions:
            out.append(_FETCH_PARTITION_EPOCH.pack(partition, offset, leader_epoch) if epochs
                       else _FETCH_PARTITION.pack(partition, offset))
            out.append(_nullable_string(metadata, flexible))
            out.append(error(code, 0) if flexible else error(code))
        if flexible:
            out.append(b"\0")


def offset_fetch_response(version: int, correlation_id: int, topics: Sequence[FetchTopic],
                          error_code: int = 0, throttle_time_ms: int = 0) -> bytes:
    """One group's answer, v0-7 (v0-v1 have no top-level error: `error_code` is not sent)."""
    if version >= 8:
        raise ValueError(f"OffsetFetch v{version} answers groups: offset_fetch_groups_response")
    _check("OffsetFetch", version, OFFSET_FETCH_VERSIONS)
    flexible = version >= 6
    out = [_I32.pack(throttle_time_ms)] if version >= 3 else []
    _fetch_topics(out, topics, version, flexible)
    if version >= 2:
        out.append(_I16.pack(error_code))
    if flexible:
        out.append(b"\0")
    return _frame(out, correlation_id, flexible)


def offset_fetch_groups_response(version: int, correlation_id: int, groups: Sequence[FetchGroup],
                                 throttle_time_ms: int = 0) -> bytes:
    """v8+: one answer per group asked for."""
    if version < 8:
        raise ValueError(f"OffsetFetch v{version} answers one group: offset_fetch_response")
    _check("OffsetFetch", version, OFFSET_FETCH_VERSIONS)
    out = [_I32.pack(throttle_time_ms), _array_len(len(groups), True)]
    for group_id, topics, error_code in groups:
        out.append(_string(group_id, True))
        _fetch_topics(out, topics, version, True)
        out.append(_ERROR_FLEX.pack(error_code, 0))
    out.append(b"\0")
    return _frame(out, correlation_id, True)


def heartbeat_response(version: int, correlation_id: int, error_code: int,
                       throttle_time_ms: int = 0) -> bytes:
    _check("Heartbeat", version, HEARTBEAT_VERSIONS)
    if version == 0:
        return _HEARTBEAT_V0.pack(6, correlation_id, error_code)
    if version < 4:
        return _HEARTBEAT_V1.pack(10, correlation_id, throttle_time_ms, error_code)
    return _HEARTBEAT_V4.pack(12, correlation_id, 0, throttle_time_ms, error_code, 0)
