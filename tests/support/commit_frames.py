"""OffsetCommit v9 requests, and the answers to them read back from raw bytes (several frames
at once), for tests that pipeline commits on a socket of their own."""

from __future__ import annotations

import struct

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader

from brook.protocol.messages import make

OFFSET_COMMIT = 8


def commit(group: str, offset: int):
    cls = load_request_schema(OFFSET_COMMIT, 9)
    mod = __import__(cls.__module__, fromlist=["_"])
    return make(cls, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                group_instance_id=None, topics=(mod.OffsetCommitRequestTopic(
                    name="t", partitions=(mod.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=offset, committed_leader_epoch=-1,
                        committed_metadata=""),)),))


def answers(data: bytes) -> list[tuple[int, object]]:
    """(correlation id, OffsetCommit v9 answer) of every frame in ``data``."""
    cls = load_response_schema(OFFSET_COMMIT, 9)
    out, pos = [], 0
    while pos < len(data):
        size = struct.unpack_from(">i", data, pos)[0]
        body = data[pos + 4:pos + 4 + size]
        header, offset = entity_reader(cls.__header_schema__)(body, 0)
        out.append((header.correlation_id, entity_reader(cls)(body, offset)[0]))
        pos += 4 + size
    return out
