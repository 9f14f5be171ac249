"""Offset changes not yet committed, each with what it replaced: reads at the committed view,
and rollback when a write fails.

In a cluster a coordinator's write is answered once the high watermark of its
``__consumer_offsets`` partition passes its records (every in-sync replica has them). The shard
applies the records as soon as they are appended (one replay path, live and loading alike), so
the operations that follow are checked against them; but until the high watermark passes them
they are not *committed*: the wait may still fail (too few replicas, leadership lost, a
timeout), and then the client is told the write failed.

So each write appended but not yet committed leaves an *undo record*: the offset after its
records (``end``) and, for every offset it changed, what the offset held before it (a journal the cache keeps while the write is replayed, see
``OffsetsCache.journal``). With them:

- a read answers the committed view (``committed_values``): an offset that uncommitted writes
  changed reads as it was before the oldest of them; every other offset as the cache holds it;
- ``committed(offset)``: the high watermark reached ``offset``: the writes ending there or before
  are committed and their undo records dropped;
- ``roll_back(end)``: the write ending at ``end`` failed. It and every later uncommitted write
  (made on top of it) are undone: the values they replaced are returned, each offset's from the
  oldest write undone that changed it, for the caller to replay (and to write, so that the log
  says what the shard serves).

Kafka's group coordinator keeps its state in timeline structures with a snapshot per write for
the same purpose; brook keeps only the replaced values of the offsets, which is what its reads
need. Group membership is not kept this way: see docs/offsets-topic.md. Nor are transactions:
the offsets a transaction marker commits are set for good, and ``forget`` drops them from the
undo records (docs/transactions.md).
"""

from __future__ import annotations

from collections import deque

from .offsets_cache import Saved, saved_value
from .schemas import OffsetCommitValue

__all__ = ["Journal", "Uncommitted"]

#: (group, topic) -> partition -> what the offset held before the write (``Saved``).
Journal = dict[tuple[str, str], dict[int, Saved]]


class Uncommitted:
    """The undo records of a shard's uncommitted writes, oldest first: ``(end, saved, groups)``
    each, ``groups`` the groups whose offsets it changed. (Tuples and plain dicts: this is on
    every commit's path in a cluster.)"""

    __slots__ = ("writes", "_groups")

    def __init__(self) -> None:
        self.writes: deque[tuple[int, Journal, tuple[str, ...]]] = deque()
        #: group -> how many of ``writes`` changed its offsets
        self._groups: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.writes)

    def add(self, end: int, saved: Journal) -> None:
        """A write ending at ``end`` was applied, replacing ``saved``; nothing is kept for a
        write that changed no offset."""
        if not saved:
            return
        if len(saved) == 1:
            groups: tuple[str, ...] = (next(iter(saved))[0],)
        else:
            groups = tuple({group for group, _ in saved})
        self.writes.append((end, saved, groups))
        counts = self._groups
        for group in groups:
            counts[group] = counts.get(group, 0) + 1

    def committed(self, offset: int) -> None:
        """The writes ending at ``offset`` or before are committed."""
        writes = self.writes
        while writes and writes[0][0] <= offset:
            self._forget(writes.popleft()[2])

    def roll_back(self, end: int) -> dict[tuple[str, str, int], OffsetCommitValue | None]:
        """Undo the write ending at ``end`` and every later one: (group, topic, partition) ->
        the value to put back (None: no offset)."""
        writes = self.writes
        undone = []
        while writes and writes[-1][0] >= end:
            undone.append(writes.pop())
            self._forget(undone[-1][2])
        restore: dict[tuple[str, str, int], OffsetCommitValue | None] = {}
        for _, saved, _ in reversed(undone):  # oldest first: its saved values are the ones to keep
            for (group, topic), partitions in saved.items():
                for partition, value in partitions.items():
                    key = (group, topic, partition)
                    if key not in restore:
                        restore[key] = saved_value(value, partition)
        return restore

    def forget(self, keys: list[tuple[str, str, int]], journal: Journal | None = None) -> None:
        """``keys`` (group, topic, partition) were set for good (a transaction marker committed
        them): no undo record gives them back, nor does ``journal``, the write being replayed."""
        if not keys:
            return
        for saved in [w[1] for w in self.writes] + ([journal] if journal else []):
            for group, topic, partition in keys:
                partitions = saved.get((group, topic))
                if partitions is not None:
                    partitions.pop(partition, None)

    def changes(self, group: str) -> bool:
        """Whether an uncommitted write changed an offset of ``group``."""
        return group in self._groups

    def committed_values(self, group: str) -> dict[tuple[str, int], OffsetCommitValue | None]:
        """(topic, partition) -> the committed value (None: none) of each offset of ``group``
        that uncommitted writes changed."""
        values: dict[tuple[str, int], OffsetCommitValue | None] = {}
        for _, saved, groups in self.writes:
            if group not in groups:
                continue
            for (g, topic), partitions in saved.items():
                if g != group:
                    continue
                for partition, value in partitions.items():
                    if (topic, partition) not in values:
                        values[(topic, partition)] = saved_value(value, partition)
        return values

    def _forget(self, groups: tuple[str, ...]) -> None:
        counts = self._groups
        for group in groups:
            n = counts[group] - 1
            if n:
                counts[group] = n
            else:
                del counts[group]
