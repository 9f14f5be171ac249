"""Offset commits in compact forms: many records of ``__consumer_offsets`` without a key or value
object each.

A ``CommitRun`` is consecutive offset commits of one group and topic as rows of numbers: how an
OffsetCommit request's records are written (``batch_writer``) and replayed live, and how the
loader reads runs back (``batch_decoder``). A ``CommitBlock`` is the loader's bulk reading of
commits to consecutive partitions, their rows as the bytes the records hold. Both are runs in the
sense of ``brook.coordinator.common.result`` (``RecordRun``): ``records()`` gives the key and value
of each record they stand for.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import NamedTuple

from .schemas import OffsetCommitKey, OffsetCommitValue

__all__ = ["CommitBlock", "CommitRun"]


class CommitRun(NamedTuple):
    """Consecutive offset commits of one group and topic with a version 3 value without
    metadata: each row ``(partition, offset, leader_epoch, commit_timestamp)`` stands for the
    record ``OffsetCommitKey(group, topic, partition)`` with
    ``OffsetCommitValue(offset, leader_epoch, "", commit_timestamp)``. The loader's ``rows``
    is an iterator, to be consumed once, before it moves on; an offset commit's (the live
    path's, see ``OffsetsManager.commit``) is a list."""

    group: str
    topic: str
    rows: Iterable[tuple[int, int, int, int]]

    def records(self) -> list[tuple[OffsetCommitKey, OffsetCommitValue]]:
        """The (key, value) of every record of the run (consuming an iterator of rows)."""
        group, topic = self.group, self.topic
        return [
            (OffsetCommitKey(group, topic, partition), OffsetCommitValue(offset, epoch, "", commit))
            for partition, offset, epoch, commit in self.rows
        ]


class CommitBlock(NamedTuple):
    """Offset commits of one group and topic to consecutive partitions, with one metadata, as
    the loader reads them in bulk: record ``i`` (of ``count``, at least 1) stands for
    ``OffsetCommitKey(group, topic, first + i)`` with a version 3 value (no expire timestamp)
    whose offset, leader epoch and commit timestamp are the ``i``-th 20-byte row of ``rows``:
    ``>qiq``, as the value's bytes hold them (and as ``OffsetsCache`` stores them)."""

    group: str
    topic: str
    first: int
    count: int
    rows: bytes
    metadata: str = ""

    def records(self) -> list[tuple[OffsetCommitKey, OffsetCommitValue]]:
        """The (key, value) of every record of the block."""
        group, topic, first, metadata = self.group, self.topic, self.first, self.metadata
        return [
            (OffsetCommitKey(group, topic, first + i),
             OffsetCommitValue(offset, epoch, metadata, commit))
            for i, (offset, epoch, commit) in enumerate(_BLOCK_ROW.iter_unpack(self.rows))
        ]


_BLOCK_ROW = struct.Struct(">qiq")
