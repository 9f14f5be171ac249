"""Writing the group coordinator's records as a record batch of ``__consumer_offsets``.

``encode_records`` writes any of them: keys and values serialized with Kafka's schemas
(``schemas``), batched by ``brook.coordinator.common.batch_writer``. Plain offset commits (a
version 3 value without metadata) have a faster path, the live counterpart of the loader's
runs: an OffsetCommit request becomes one batch of such records; written field by field through
``brook.records.encode_batch`` each costs several microseconds of varints. This writes the
same bytes (the tests compare them with encode_batch's) with one struct per record: within a
run every record has the same layout, only its offset delta's varint grows (one byte up to 63,
two up to 8191).
"""

from __future__ import annotations

import struct

from ...records.batch import HEADER_SIZE, HEADER_STRUCT, MAGIC_V2
from ...records.crc import crc32c
from ...records.varint import encode_varint
from ..common.batch_writer import encode_batches
from ..common.result import TxnProducer, record_pairs
from .commit_runs import CommitRun
from .schemas import (
    OFFSET_COMMIT_KEY_WRITE_VERSION,
    OffsetCommitKey,
    OffsetCommitValue,
    _pack_h,
    _string,
)
from .consumer_schemas import encode_key, encode_value  # every record type, classic ones too

__all__ = ["encode_commit_batch", "encode_records"]


def encode_records(records: list, now: int, base_offset: int = 0,
                   max_batch_bytes: int | None = None, producer: TxnProducer | None = None
                   ) -> bytes:
    """One record batch of ``CoordinatorRecord``s and ``CommitRun``s with Kafka's keys and
    values, timestamped ``now`` (the log assigns the offsets); past ``max_batch_bytes`` (the
    topic's max.message.bytes), several batches, each within it (``encode_batches``). With
    ``producer``, that producer's transactional batch (a TxnOffsetCommit's)."""
    if producer is None and base_offset == 0:
        batch = encode_commit_batch(records, now)  # the fast path
        if batch is not None and (max_batch_bytes is None or len(batch) <= max_batch_bytes):
            return batch
    pairs = [(encode_key(key), None if value is None else encode_value(value))
             for key, value in record_pairs(records)]
    return encode_batches(pairs, now, base_offset, max_batch_bytes, producer)


# partition, value length (24, as a varint), then the value: version 3, offset, leader epoch,
# empty metadata, commit time; then the record's header count (0)
_pack_run_tail = struct.Struct(">iBhqihqB").pack
_RUN_TAIL_SIZE = 30
_pack_batch_header = HEADER_STRUCT.pack_into
_DELTAS = [encode_varint(i) for i in range(64)]  # one byte each


def encode_commit_batch(records, timestamp: int) -> bytes | None:
    """The record batch ``encode_batch`` writes for ``records`` (``CommitRun``s and
    ``CoordinatorRecord``s) at offsets 0, 1, ... and ``timestamp``, when every one is an offset
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
