"""Loading a partition of ``__consumer_offsets``: its record batches replayed into a shard.

The batches are read as stored and decoded by a ``RecordsDecoder``: runs of plain offset
commits go to the shard's ``replay_commits`` (rows of numbers, no key or value objects), every
other record to the same ``replay`` as live records. As in Kafka's coordinator loader, records
of a type brook does not know (newer Kafka's group types, a left-over of an aborted upgrade) are
skipped and counted, while a record that cannot be decoded, or that the shard fails to replay,
fails the load (``LoadFailed``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Protocol

from ..records.batch import CONTROL_BIT, HEADER_SIZE, HEADER_STRUCT, LOG_OVERHEAD
from ..records.compression import CODEC_MASK, codec_of, decompress
from .batch_decoder import RecordsDecoder
from .result import CommitRun
from .schemas import UnknownKey

__all__ = ["LoadFailed", "ReplayTarget", "replay_batches"]

_read_header = HEADER_STRUCT.unpack_from


class LoadFailed(Exception):
    """A partition of ``__consumer_offsets`` could not be loaded (a record that cannot be
    decoded or replayed); the message names the record's batch."""


class ReplayTarget(Protocol):
    def replay(self, key: object, value: object | None, now: int) -> None: ...

    def replay_commits(self, run: CommitRun, now: int) -> None: ...


def replay_batches(target: ReplayTarget, buffers: Iterable[bytes], now: int,
                   decoder: RecordsDecoder | None = None, unknown: Counter | None = None) -> int:
    """Replay buffers of whole record batches into ``target``; return how many records they
    held (every record of the non-control batches, skipped ones included, as Kafka counts).
    Raises ``LoadFailed`` at the first record that cannot be decoded or replayed. Record types
    brook does not read are counted in ``unknown`` (by type) and skipped."""
    decoder = decoder or RecordsDecoder()
    unknown = Counter() if unknown is None else unknown
    replay, replay_commits = target.replay, target.replay_commits
    count = 0
    for data in buffers:
        pos, end = 0, len(data)
        while pos < end:
            header = _read_header(data, pos)
            base_offset, attributes, records = header[0], header[5], header[12]
            size = header[1] + LOG_OVERHEAD
            body = data[pos + HEADER_SIZE:pos + size]
            pos += size
            if attributes & CONTROL_BIT:
                continue  # transaction markers: brook writes no transactional offsets
            try:
                if attributes & CODEC_MASK:
                    body = decompress(codec_of(attributes), body)
                for item in decoder.decode(body, records):
                    if type(item) is CommitRun:
                        replay_commits(item, now)
                    elif type(item.key) is UnknownKey:
                        unknown[item.key.version] += 1
                    else:
                        replay(item.key, item.value, now)
            except Exception as exc:
                raise LoadFailed(f"the batch at offset {base_offset}: {exc}") from exc
            count += records
    return count
