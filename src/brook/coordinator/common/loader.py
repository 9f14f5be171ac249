"""Loading a coordinator's partition: its record batches read back and replayed into its shard.

The loader walks the batches as stored. Control batches (transaction markers) are passed over,
compressed ones are decompressed, and every record of the others is counted, skipped ones
included, as Kafka counts them. What the records mean is the coordinator's: each batch's records
go to the ``BatchReplayer`` its shard gives for the load (``Shard.batch_replayer``), which
decodes them with the coordinator's formats and replays them through the same functions as live
records.

As in Kafka's coordinator loader, records of a type the coordinator does not know (a newer
Kafka's, a left-over of an aborted upgrade) are skipped and counted by type. A record that cannot
be decoded (or that the shard fails to replay) is skipped too, and reported with its offset: one
bad record must never make its partition unloadable, for what it coordinates would then be
unreachable at every restart. Only the coordinator writes its topic and every batch's CRC is
checked when it is appended and recovered, so such a record comes from a bug or from another
writer; what it held is lost either way, and the rest of the partition is served.
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Iterable
from typing import NamedTuple, Protocol

from ...records.batch import CONTROL_BIT, HEADER_SIZE, LOG_OVERHEAD
from ...records.compression import CODEC_MASK, codec_of, decompress

__all__ = ["BatchReplayer", "Skipped", "Unreadable", "replay_batches"]

#: base offset, batch length, attributes, record count of a batch header (``HEADER_STRUCT``'s)
_read_header = struct.Struct(">qi9xh34xi").unpack_from


class Unreadable(NamedTuple):
    """``count`` records from ``offset`` on that were skipped, and why."""

    offset: int
    count: int
    reason: str


class Skipped:
    """What a load passed over: records of types the coordinator does not know, counted by type
    (``unknown``), and the places that could not be decoded or replayed (``unreadable``)."""

    __slots__ = ("unknown", "unreadable")

    def __init__(self) -> None:
        self.unknown: Counter = Counter()
        self.unreadable: list[Unreadable] = []


class BatchReplayer(Protocol):
    def replay_batch(self, body: bytes, start: int, stop: int, count: int, base_offset: int,
                     skipped: Skipped) -> None:
        """Replay the ``count`` records of the batch at ``base_offset``, whose records are
        ``body[start:stop]`` (decompressed), into the shard; a record of a type it does not
        know, or one that cannot be decoded or replayed, is noted in ``skipped`` and passed
        over."""


def replay_batches(replayer: BatchReplayer, buffers: Iterable[bytes],
                   skipped: Skipped | None = None) -> int:
    """Replay buffers of whole record batches through ``replayer``; return how many records
    they held (every record of the non-control batches, skipped ones included, as Kafka
    counts). What is skipped is noted in ``skipped``."""
    skipped = Skipped() if skipped is None else skipped
    unreadable = skipped.unreadable
    replay_batch = replayer.replay_batch
    count = 0
    for data in buffers:
        pos, end = 0, len(data)
        while pos < end:
            base_offset, size, attributes, records = _read_header(data, pos)
            start = pos + HEADER_SIZE
            size += LOG_OVERHEAD
            pos += size
            if attributes & CONTROL_BIT:
                continue  # transaction markers: no coordinator writes transactional records yet
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
            replay_batch(body, start, stop, records, base_offset, skipped)
    return count
