"""The group coordinator's part of loading a partition of ``__consumer_offsets``: the records of
each batch decoded and replayed into the shard.

The loader (``brook.coordinator.common.loader``) walks the partition's batches and hands each
one's records, decompressed, to a ``GroupBatchReplayer``, which decodes them with a
``RecordsDecoder``: commits to consecutive partitions go to the shard's ``replay_blocks`` (rows
as the records' bytes, a batch like one read before at once), other runs of plain offset commits
to its ``replay_commits`` (rows of numbers, no key or value objects), every other record to the
same ``replay`` as live records. Records of a type brook does not know (newer Kafka's group
types) are counted by type, and records that cannot be decoded or replayed are reported with
their offsets; both are skipped.

A transactional batch (a TxnOffsetCommit's) is decoded record by record and replayed with its
producer id, and a transaction marker goes to the shard's ``replay_marker``: the functions the
live path replays them with.
"""

from __future__ import annotations

from typing import Protocol

from ..common.loader import Skipped, Unreadable
from .batch_decoder import RecordsDecoder, UnreadableRecords
from .commit_runs import CommitBlock, CommitRun
from .schemas import UnknownKey

__all__ = ["GroupBatchReplayer", "ReplayTarget"]


class ReplayTarget(Protocol):
    def replay(self, key: object, value: object | None, now: int, producer_id: int = -1
               ) -> None: ...

    def replay_commits(self, run: CommitRun, now: int) -> None: ...

    def replay_marker(self, producer_id: int, committed: bool, now: int) -> None: ...

    # and, optionally (a target without it is loaded without blocks):
    # def replay_blocks(self, blocks: list[CommitBlock], now: int) -> None: ...


class GroupBatchReplayer:
    """Replays batches of ``__consumer_offsets`` into ``target``, at ``now``, for one load
    (``decoder`` remembers the batches it has read). With ``bulk`` (and a target that has
    ``replay_blocks``), commits to consecutive partitions are read and replayed as
    ``CommitBlock``s, a batch like one read before at once (``RecordsDecoder``); without, as
    runs and single records only (the reference the tests hold the bulk path equal to)."""

    __slots__ = ("now", "decoder", "_replay", "_replay_commits", "_replay_blocks",
                 "_replay_marker")

    def __init__(self, target: ReplayTarget, now: int, decoder: RecordsDecoder | None = None,
                 bulk: bool = True) -> None:
        self.now = now
        self.decoder = decoder or RecordsDecoder()
        self._replay, self._replay_commits = target.replay, target.replay_commits
        self._replay_blocks = getattr(target, "replay_blocks", None) if bulk else None
        self._replay_marker = target.replay_marker

    def replay_marker(self, producer_id: int, committed: bool, offset: int) -> None:
        self._replay_marker(producer_id, committed, self.now)

    def replay_transactional_batch(self, body: bytes, start: int, stop: int, count: int,
                                   base_offset: int, producer_id: int,
                                   skipped: Skipped) -> None:
        """The records of a transactional batch of ``producer_id``, replayed as its: pending
        offsets (a batch of TxnOffsetCommit is small and rare: no bulk reading)."""
        if start or stop != len(body):
            body = body[start:stop]
        replay, now = self._replay, self.now
        for item in self.decoder.decode(body, count, True, False, templates=False):
            kind = type(item)
            if kind is UnreadableRecords:
                skipped.unreadable.append(Unreadable(base_offset + item.index, item.count,
                                                     item.reason))
                continue
            try:
                if kind is CommitRun:
                    for key, value in item.records():
                        replay(key, value, now, producer_id)
                elif type(item.key) is UnknownKey:
                    skipped.unknown[item.key.version] += 1
                else:
                    replay(item.key, item.value, now, producer_id)
            except Exception as exc:  # a bug replaying it: the record is skipped
                at = base_offset if kind is CommitRun else base_offset + item.index
                skipped.unreadable.append(Unreadable(at, 1, f"cannot be replayed: {exc!r}"))

    def replay_batch(self, body: bytes, start: int, stop: int, count: int, base_offset: int,
                     skipped: Skipped) -> None:
        now = self.now
        replay_blocks = self._replay_blocks
        bulk = replay_blocks is not None
        if bulk:
            blocks = self.decoder.known_blocks(body, count, start, stop - start)
            if blocks is not None:
                try:
                    replay_blocks(blocks, now)
                except Exception as exc:  # a bug replaying them: the records are skipped
                    skipped.unreadable.append(Unreadable(base_offset, count,
                                                         f"cannot be replayed: {exc!r}"))
                return
        if start or stop != len(body):
            body = body[start:stop]
        replay, replay_commits = self._replay, self._replay_commits
        unknown, unreadable = skipped.unknown, skipped.unreadable
        for item in self.decoder.decode(body, count, True, bulk, templates=False):
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
