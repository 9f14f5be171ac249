"""Loading a coordinator's partition: its record batches read back and replayed into its shard.

The loader walks the batches as stored. Compressed ones are decompressed, and every record of
the batches that are not control batches is counted, skipped ones included, as Kafka counts
them. What the records mean is the coordinator's: each batch's records go to the
``BatchReplayer`` its shard gives for the load (``Shard.batch_replayer``), which decodes them
with the coordinator's formats and replays them through the same functions as live records.

Transactions, for a coordinator that writes transactional records (the group coordinator's
TxnOffsetCommit): a transactional batch goes to the replayer's ``replay_transactional_batch``
with its producer id, and a control batch's transaction marker to its ``replay_marker``, as the
live path replays them. A replayer without those methods (a coordinator that writes no
transactions) has transactional batches replayed as any, and control batches passed over.

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

from ...records.batch import CONTROL_BIT, HEADER_SIZE, LOG_OVERHEAD, TRANSACTIONAL_BIT
from ...records.compression import CODEC_MASK, codec_of, decompress
from ...records.control import read_marker

__all__ = ["BatchReplayer", "Skipped", "TransactionalReplayer", "Unreadable", "replay_batches"]

#: base offset, batch length, attributes, producer id, record count of a batch header
#: (``HEADER_STRUCT``'s)
_read_header = struct.Struct(">qi9xh20xq6xi").unpack_from


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


class TransactionalReplayer(BatchReplayer, Protocol):
    """A ``BatchReplayer`` of a coordinator that writes transactional records."""

    def replay_transactional_batch(self, body: bytes, start: int, stop: int, count: int,
                                   base_offset: int, producer_id: int,
                                   skipped: Skipped) -> None:
        """``replay_batch`` of a transactional batch of ``producer_id``."""

    def replay_marker(self, producer_id: int, committed: bool, offset: int) -> None:
        """The producer's transaction ended (committed or aborted) by the marker at
        ``offset``."""


def replay_batches(replayer: BatchReplayer, buffers: Iterable[bytes],
                   skipped: Skipped | None = None) -> int:
    """Replay buffers of whole record batches through ``replayer``; return how many records
    they held (every record of the non-control batches, skipped ones included, as Kafka
    counts). What is skipped is noted in ``skipped``."""
    skipped = Skipped() if skipped is None else skipped
    unreadable = skipped.unreadable
    replay_batch = replayer.replay_batch
    replay_transactional = getattr(replayer, "replay_transactional_batch", None)
    replay_marker = getattr(replayer, "replay_marker", None)
    count = 0
    for data in buffers:
        pos, end = 0, len(data)
        while pos < end:
            base_offset, size, attributes, producer_id, records = _read_header(data, pos)
            start = pos + HEADER_SIZE
            size += LOG_OVERHEAD
            if attributes & CONTROL_BIT:
                if replay_marker is not None:
                    _replay_marker(replay_marker, data, pos, base_offset, producer_id, unreadable)
                pos += size
                continue
            pos += size
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
            if attributes & TRANSACTIONAL_BIT and replay_transactional is not None:
                replay_transactional(body, start, stop, records, base_offset, producer_id,
                                     skipped)
            else:
                replay_batch(body, start, stop, records, base_offset, skipped)
    return count


def _replay_marker(replay_marker, data: bytes, pos: int, base_offset: int, producer_id: int,
                   unreadable: list[Unreadable]) -> None:
    """The marker of the control batch at ``pos``, replayed (an empty control batch, which the
    cleaner may leave, holds none)."""
    try:
        marker = read_marker(data, pos)
    except Exception as exc:
        unreadable.append(Unreadable(base_offset, 1, f"transaction marker cannot be read: {exc}"))
        return
    if marker is None:
        return
    try:
        replay_marker(producer_id, marker.committed, base_offset)
    except Exception as exc:  # a bug replaying it: the marker is skipped
        unreadable.append(Unreadable(base_offset, 1, f"cannot be replayed: {exc!r}"))
