"""Loading a partition of ``__consumer_offsets``: its record batches replayed into a shard.

The batches are read as stored and decoded by a ``RecordsDecoder``: commits to consecutive
partitions go to the shard's ``replay_blocks`` (rows as the records' bytes, a batch like one
read before at once), other runs of plain offset commits to its ``replay_commits`` (rows of
numbers, no key or value objects), every other record to the same ``replay`` as live records.
As in Kafka's coordinator loader, records of a type brook does not know (newer Kafka's group
types, a left-over of an aborted upgrade) are skipped and counted by type.

A record that cannot be decoded (or that the shard fails to replay) is skipped too, and reported
with its offset: one bad record must never make its partition unloadable, for its groups would
then be unreachable at every restart. Only brook's coordinator writes the topic and every
batch's CRC is checked when it is appended and recovered, so such a record comes from a bug or
from another writer; what it held is lost either way, and the rest of the partition is served.
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Iterable
from typing import NamedTuple, Protocol

from ...records.batch import CONTROL_BIT, HEADER_SIZE, LOG_OVERHEAD
from ...records.compression import CODEC_MASK, codec_of, decompress
from ..group.batch_decoder import RecordsDecoder, UnreadableRecords
from ..group.schemas import UnknownKey
from ..group.commit_runs import CommitBlock, CommitRun

__all__ = ["ReplayTarget", "Unreadable", "replay_batches"]

#: base offset, batch length, attributes, record count of a batch header (``HEADER_STRUCT``'s)
_read_header = struct.Struct(">qi9xh34xi").unpack_from


class Unreadable(NamedTuple):
    """``count`` records from ``offset`` on that were skipped, and why."""

    offset: int
    count: int
    reason: str


class ReplayTarget(Protocol):
    def replay(self, key: object, value: object | None, now: int) -> None: ...

    def replay_commits(self, run: CommitRun, now: int) -> None: ...

    # and, optionally (a target without it is loaded without blocks):
    # def replay_blocks(self, blocks: list[CommitBlock], now: int) -> None: ...


def replay_batches(target: ReplayTarget, buffers: Iterable[bytes], now: int,
                   decoder: RecordsDecoder | None = None, unknown: Counter | None = None,
                   unreadable: list[Unreadable] | None = None, bulk: bool = True) -> int:
    """Replay buffers of whole record batches into ``target``; return how many records they
    held (every record of the non-control batches, skipped ones included, as Kafka counts).
    Record types brook does not read are counted in ``unknown`` (by type); records that cannot
    be decoded or replayed are listed in ``unreadable``; both are skipped. With ``bulk`` (and a
    target that has ``replay_blocks``), commits to consecutive partitions are read and replayed
    as ``CommitBlock``s, a batch like one read before at once (``RecordsDecoder``); without,
    as runs and single records only (the reference the tests hold the bulk path equal to)."""
    decoder = decoder or RecordsDecoder()
    unknown = Counter() if unknown is None else unknown
    unreadable = [] if unreadable is None else unreadable
    replay, replay_commits = target.replay, target.replay_commits
    replay_blocks = getattr(target, "replay_blocks", None) if bulk else None
    bulk = replay_blocks is not None
    known_blocks = decoder.known_blocks
    count = 0
    for data in buffers:
        pos, end = 0, len(data)
        while pos < end:
            base_offset, size, attributes, records = _read_header(data, pos)
            start = pos + HEADER_SIZE
            size += LOG_OVERHEAD
            pos += size
            if attributes & CONTROL_BIT:
                continue  # transaction markers: brook writes no transactional offsets
            count += records
            if attributes & CODEC_MASK:
                try:
                    body = decompress(codec_of(attributes), data[start:pos])
                except Exception as exc:
                    unreadable.append(Unreadable(base_offset, records,
                                                 f"cannot decompress: {exc}"))
                    continue
                start, stop = 0, len(body)
            else:
                body, stop = data, min(pos, end)
            if bulk:
                blocks = known_blocks(body, records, start, stop - start)
                if blocks is not None:
                    try:
                        replay_blocks(blocks, now)
                    except Exception as exc:  # a bug replaying them: the records are skipped
                        unreadable.append(Unreadable(base_offset, records,
                                                     f"cannot be replayed: {exc!r}"))
                    continue
            if start or stop != len(body):
                body = body[start:stop]
            for item in decoder.decode(body, records, True, bulk, templates=False):
                kind = type(item)
                try:
                    if kind is CommitBlock:
                        replay_blocks((item,), now)  # type: ignore[misc]
                    elif kind is CommitRun:
                        replay_commits(item, now)
                    elif kind is UnreadableRecords:
                        unreadable.append(Unreadable(base_offset + item.index, item.count,
                                                     item.reason))
                    elif type(item.key) is UnknownKey:
                        unknown[item.key.version] += 1
                    else:
                        replay(item.key, item.value, now)
                except Exception as exc:  # a bug replaying it: the record is skipped
                    at = (base_offset if kind is CommitRun or kind is CommitBlock
                          else base_offset + item.index)
                    unreadable.append(Unreadable(at, 1, f"cannot be replayed: {exc!r}"))
    return count
