"""The committed offsets of one ``__consumer_offsets`` partition, kept compact in memory.

A broker may hold millions of committed offsets; a dict of value objects per partition costs
several hundred bytes each. Here the offsets of one (group, topic) live in two ``bytearray``s
indexed by partition number: fixed-size rows of the value's numbers as an offset commit record
stores them (big-endian, so that the loader copies them from the log's bytes as they are)::

    offset (int64) | leader epoch (int32) | commit timestamp (int64)

20 bytes a partition, and a byte of flags a partition, in the other array. The flags say
whether the row holds an offset and whether it has extras: metadata (non-empty) and an explicit
expire timestamp (OffsetCommit v1) are rare and kept in a per-topic dict only for the rows that
have them. Topic names are interned, so thousands of groups consuming the same topics share one
string.

Partitions that would make the row array absurdly large (negative, or far beyond the rows the
topic has so far), and values that do not fit the row's fields, go to a small per-topic dict of
whole ``OffsetCommitValue`` objects instead. Whatever the storage, ``get`` gives back a value
equal to the one that was ``put``.

While a write is not yet committed (``brook.coordinator.group.uncommitted``), the cache can keep a
*journal*: set ``journal`` to a dict, and every change records, before it is made, what the
offset held (``TopicOffsets.saved``), once per offset, under ``(group, topic)`` and partition.
A commit to many partitions of a topic's rows is journaled as one copy of the rows it spans
(``RowsSnapshot``), shared by its partitions' entries: a value per partition would cost a
commit of 100 partitions a fifth more time on a cluster's coordinator.

This module is only storage: what a record means is decided in ``brook.coordinator.group.offsets``.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Iterable, Iterator

from brook.coordinator.group.expiry import offset_expires_at
from brook.coordinator.group.schemas import OffsetCommitValue

__all__ = ["OffsetsCache", "ROW", "RowsSnapshot", "Saved", "TopicOffsets", "saved_value"]

#: A row: offset, leader epoch, commit timestamp, big-endian (as in an offset commit value).
ROW = struct.Struct(">qiq")
_ROW_SIZE = ROW.size  # 20
_pack_row = ROW.pack_into
_unpack_row = ROW.unpack_from

_PRESENT = 1
_EXTRAS = 2  # metadata and/or expire timestamp in TopicOffsets.extras
_PLAIN_FLAGS = bytes([_PRESENT])
_EXTRAS_FLAGS = bytes([_PRESENT | _EXTRAS])

# A partition is stored in a row when it is below twice the rows the topic has plus this slack,
# so that committing partition 100000 of a topic does not allocate two megabytes for one offset.
_DENSE_SLACK = 64

_intern = sys.intern

#: Journaled in one ``RowsSnapshot``: a commit to at least this many partitions of a topic's
#: rows spanning at most four times as many.
_SNAPSHOT_MIN = 8


class RowsSnapshot:
    """What partitions ``first`` to ``first + len(flags) - 1`` of a topic's rows held: their
    flags and rows as bytes, and their extras and sparse values."""

    __slots__ = ("first", "flags", "rows", "extras", "sparse")

    def __init__(self, first: int, flags: bytes, rows: bytes, extras: dict | None,
                 sparse: dict | None) -> None:
        self.first, self.flags, self.rows = first, flags, rows
        self.extras, self.sparse = extras, sparse

    def value(self, partition: int) -> OffsetCommitValue | None:
        i = partition - self.first
        flags = self.flags[i]
        if not flags:
            return None if self.sparse is None else self.sparse.get(partition)
        offset, epoch, commit = _unpack_row(self.rows, i * _ROW_SIZE)
        metadata, expire = self.extras[partition] if flags & _EXTRAS else ("", -1)  # type: ignore[index]
        return OffsetCommitValue(offset, epoch, metadata, commit, expire)


#: What an offset held, as a journal keeps it: None (no offset), the three numbers of a plain
#: row (offset, leader epoch, commit timestamp: no metadata, no expire timestamp), the value,
#: or a ``RowsSnapshot`` of the rows around it.
Saved = OffsetCommitValue | tuple[int, int, int] | RowsSnapshot | None


def saved_value(saved: Saved, partition: int) -> OffsetCommitValue | None:
    """The value of ``partition`` a ``Saved`` stands for."""
    if saved is None or type(saved) is OffsetCommitValue:
        return saved
    if type(saved) is RowsSnapshot:
        return saved.value(partition)
    offset, epoch, commit = saved
    return OffsetCommitValue(offset, epoch, "", commit)


class TopicOffsets:
    """The offsets of one group for one topic."""

    __slots__ = ("rows", "flags", "extras", "sparse")

    def __init__(self) -> None:
        #: a row per partition (``ROW``), as many as ``flags`` has bytes
        self.rows = bytearray()
        #: a byte per partition: 0 (no offset in the row), _PRESENT, _PRESENT | _EXTRAS
        self.flags = bytearray()
        #: partition -> (metadata, expire timestamp), for rows flagged _EXTRAS.
        self.extras: dict[int, tuple[str, int]] | None = None
        #: partition -> value, for partitions (or values) that do not fit a row.
        self.sparse: dict[int, OffsetCommitValue] | None = None

    def get(self, partition: int) -> OffsetCommitValue | None:
        if 0 <= partition < len(self.flags):
            flags = self.flags[partition]
            if flags:
                offset, epoch, commit = _unpack_row(self.rows, partition * _ROW_SIZE)
                metadata, expire = "", -1
                if flags & _EXTRAS:
                    metadata, expire = self.extras[partition]  # type: ignore[index]
                return OffsetCommitValue(offset, epoch, metadata, commit, expire)
        if self.sparse is not None:
            return self.sparse.get(partition)
        return None

    def saved(self, partition: int) -> Saved:
        """What the partition holds, as a journal keeps it (``Saved``): a plain row as its
        numbers (a value object costs seven times as much to make, and a commit journals every
        partition it changes)."""
        if 0 <= partition < len(self.flags):
            flags = self.flags[partition]
            if flags == _PRESENT:
                return _unpack_row(self.rows, partition * _ROW_SIZE)
            if flags:
                return self.get(partition)
        if self.sparse is not None:
            return self.sparse.get(partition)
        return None

    def snapshot(self, first: int, end: int) -> RowsSnapshot:
        """What partitions ``first`` to ``end - 1`` (rows all of them) hold."""
        extras = sparse = None
        if self.extras is not None:
            extras = {p: e for p, e in self.extras.items() if first <= p < end}
        if self.sparse is not None:
            sparse = {p: v for p, v in self.sparse.items() if first <= p < end}
        return RowsSnapshot(first, bytes(self.flags[first:end]),
                            bytes(self.rows[first * _ROW_SIZE:end * _ROW_SIZE]), extras, sparse)

    def _grow(self, partition: int) -> bool:
        """Make ``partition`` a row if it may be one (see _DENSE_SLACK); whether it is."""
        n = len(self.flags)
        if partition < n:
            return partition >= 0
        if 0 <= partition < 2 * n + _DENSE_SLACK:
            self.rows.extend(bytes((partition + 1 - n) * _ROW_SIZE))
            self.flags.extend(bytes(partition + 1 - n))
            return True
        return False

    def put(self, partition: int, value: OffsetCommitValue) -> bool:
        """Store ``value``; True when the partition had no offset before."""
        if self._grow(partition):
            old = self.flags[partition]
            if old & _EXTRAS:
                del self.extras[partition]  # type: ignore[union-attr]
            metadata = value.metadata
            expire = value.expire_timestamp
            flags = _PRESENT
            if metadata or expire != -1:
                flags |= _EXTRAS
            try:
                _pack_row(self.rows, partition * _ROW_SIZE, value.offset, value.leader_epoch,
                          value.commit_timestamp)
            except struct.error:
                self.flags[partition] = 0  # a field out of range: the value goes to ``sparse``
            else:
                self.flags[partition] = flags
                if flags & _EXTRAS:
                    if self.extras is None:
                        self.extras = {}
                    self.extras[partition] = (metadata, expire)
                if self.sparse is not None and self.sparse.pop(partition, None) is not None:
                    self._drop_empty_sparse()
                    return False
                return not old
            was_row = bool(old)
        else:
            was_row = False
        if self.sparse is None:
            self.sparse = {}
        new = partition not in self.sparse and not was_row
        self.sparse[partition] = value
        return new

    def put_rows(self, values: Iterable[tuple[int, int, int, int]]) -> int:
        """``put`` of ``OffsetCommitValue(offset, leader_epoch, "", commit_timestamp)`` for each
        ``(partition, offset, leader_epoch, commit_timestamp)`` (int64, int32, int64 values, as
        decoded), in order; returns how many partitions had no offset before. The live path of
        plain commits: a row that exists, or one inside the rows of a topic without sparse
        values, is written in place; anything else goes through ``put``."""
        rows, flags = self.rows, self.flags
        n = len(flags)
        new = 0
        pack, size, present = _pack_row, _ROW_SIZE, _PRESENT
        dense = self.sparse is None
        for partition, offset, epoch, commit in values:
            if 0 <= partition < n:
                old = flags[partition]
                if old == present or (not old and dense):
                    pack(rows, partition * size, offset, epoch, commit)
                    if not old:
                        flags[partition] = present
                        new += 1
                    continue
            elif dense and 0 <= partition < 2 * n + _DENSE_SLACK:
                rows.extend(bytes((partition + 1 - n) * size))
                flags.extend(bytes(partition + 1 - n))
                n = partition + 1
                pack(rows, partition * size, offset, epoch, commit)
                flags[partition] = present
                new += 1
                continue
            new += self.put(partition, OffsetCommitValue(offset, epoch, "", commit))
            n = len(flags)
            dense = self.sparse is None
        return new

    def put_block(self, first: int, count: int, rows: bytes, metadata: str) -> int:
        """``put`` of ``OffsetCommitValue(offset, leader_epoch, metadata, commit_timestamp)``
        for partitions ``first`` to ``first + count - 1``, ``rows`` holding their ``ROW``s in
        turn (a ``CommitBlock``); returns how many partitions had no offset before. The
        loader's bulk path: when the partitions are rows (or would become rows one by one), the
        block's rows are copied in as they are and its flags set with one slice; anything else
        goes through ``put_rows`` or ``put``."""
        flags = self.flags
        end = first + count
        if (not metadata and first >= 0 and flags.count(_PRESENT, first, end) == count
                and len(rows) == count * _ROW_SIZE):
            # plain offsets over plain ones (a consumer's every commit but its first): rows only
            self.rows[first * _ROW_SIZE:end * _ROW_SIZE] = rows
            return 0
        n = len(flags)
        # Partitions from ``first`` on would become rows one by one (see ``_grow``) when the
        # first one would.
        if (self.sparse is None and 0 <= first < 2 * n + _DENSE_SLACK
                and len(rows) == count * _ROW_SIZE):
            old = flags[first:end]  # the flags of the block's partitions that are rows
            if metadata or not old.count(_PRESENT | _EXTRAS):
                if first > n:
                    self.rows.extend(bytes((first - n) * _ROW_SIZE))
                    flags.extend(bytes(first - n))
                self.rows[first * _ROW_SIZE:end * _ROW_SIZE] = rows
                if metadata:
                    flags[first:end] = _EXTRAS_FLAGS * count
                    extras = self.extras
                    if extras is None:
                        extras = self.extras = {}
                    extras.update(dict.fromkeys(range(first, end), (metadata, -1)))
                else:
                    flags[first:end] = _PLAIN_FLAGS * count
                return old.count(0) + count - len(old)
        values = ROW.iter_unpack(rows)
        if not metadata:
            return self.put_rows((p, *v) for p, v in zip(range(first, end), values))
        return sum(self.put(p, OffsetCommitValue(offset, epoch, metadata, commit))
                   for p, (offset, epoch, commit) in zip(range(first, end), values))

    def delete(self, partition: int) -> bool:
        """Remove the partition's offset; True when there was one."""
        found = False
        flags = self.flags
        if 0 <= partition < len(flags) and flags[partition]:
            if flags[partition] & _EXTRAS:
                del self.extras[partition]  # type: ignore[union-attr]
                if not self.extras:
                    self.extras = None
            flags[partition] = 0
            found = True
            # Keep the rows no longer than the last present one.
            end = len(flags)
            while end and not flags[end - 1]:
                end -= 1
            if end < len(flags):
                del flags[end:]
                del self.rows[end * _ROW_SIZE:]
        if self.sparse is not None and self.sparse.pop(partition, None) is not None:
            self._drop_empty_sparse()
            found = True
        return found

    def _drop_empty_sparse(self) -> None:
        if not self.sparse:
            self.sparse = None

    def __bool__(self) -> bool:
        return bool(self.flags) or bool(self.sparse)

    def items(self) -> Iterator[tuple[int, OffsetCommitValue]]:
        """(partition, value) for every offset, in partition order."""
        found: list[tuple[int, OffsetCommitValue]] = []
        extras = self.extras
        for partition, (flags, (offset, epoch, commit)) in enumerate(
                zip(self.flags, ROW.iter_unpack(self.rows))):
            if flags:
                metadata, expire = "", -1
                if flags & _EXTRAS:
                    metadata, expire = extras[partition]  # type: ignore[index]
                found.append((partition, OffsetCommitValue(offset, epoch, metadata, commit, expire)))
        if self.sparse:
            found.extend(self.sparse.items())
            found.sort(key=lambda item: item[0])
        return iter(found)

    def partitions(self) -> list[int]:
        return [partition for partition, _ in self.items()]

    def expired(self, now: int, base: int, retention: int) -> tuple[list[int], bool]:
        """The partitions whose offsets have expired at ``now``, and whether that is all of them,
        by ``expiry.offset_expires_at`` with ``base`` (a timestamp, or ``COMMIT_TIMESTAMP``).
        (The expiry scan reads the rows directly: building a value per offset would cost
        seconds a million.)"""
        expired: list[int] = []
        kept = False
        extras = self.extras
        expires_at = offset_expires_at
        partition = -1
        for flags, (_offset, _epoch, commit) in zip(self.flags, ROW.iter_unpack(self.rows)):
            partition += 1
            if not flags:
                continue
            expire = extras[partition][1] if flags & _EXTRAS else -1  # type: ignore[index]
            if now >= expires_at(base, commit, expire, retention):
                expired.append(partition)
            else:
                kept = True
        if self.sparse:
            for partition, value in sorted(self.sparse.items(), key=lambda item: item[0]):
                if now >= expires_at(base, value.commit_timestamp, value.expire_timestamp,
                                     retention):
                    expired.append(partition)
                else:
                    kept = True
            expired.sort()
        return expired, not kept


_TOPIC_OFFSETS_SIZE = sys.getsizeof(TopicOffsets())
# An extras entry: its (metadata, expire) tuple, the expire int and the partition int key.
_EXTRA_SIZE = sys.getsizeof((None, None)) + 2 * sys.getsizeof(2**40)
# A sparse entry: the value object and its ints.
_SPARSE_VALUE_SIZE = sys.getsizeof(OffsetCommitValue(0)) + 4 * sys.getsizeof(2**40)


class OffsetsCache:
    """group -> topic -> partition -> committed offset, compactly.

    ``put`` and ``delete`` are for the offsets manager's ``replay``; everything else reads.
    """

    __slots__ = ("_groups", "_count", "journal")

    def __init__(self) -> None:
        self._groups: dict[str, dict[str, TopicOffsets]] = {}
        self._count = 0
        #: While set: (group, topic) -> partition -> what the offset held before the first
        #: change made since (``Saved``); see the module's docstring.
        self.journal: dict[tuple[str, str], dict[int, Saved]] | None = None

    def _journal(self, group: str, topic: str, partitions: Iterable[int]) -> None:
        """Note what each of ``partitions`` holds, unless the journal has it already."""
        saved = self.journal.get((group, topic))  # type: ignore[union-attr]
        if saved is None:
            saved = self.journal[(group, topic)] = {}  # type: ignore[index]
        offsets = self._groups.get(group, {}).get(topic)
        for partition in partitions:
            if partition not in saved:
                saved[partition] = None if offsets is None else offsets.saved(partition)

    def __len__(self) -> int:
        """How many offsets are cached."""
        return self._count

    def get(self, group: str, topic: str, partition: int) -> OffsetCommitValue | None:
        topics = self._groups.get(group)
        if topics is None:
            return None
        offsets = topics.get(topic)
        if offsets is None:
            return None
        return offsets.get(partition)

    def put(self, group: str, topic: str, partition: int, value: OffsetCommitValue) -> None:
        if self.journal is not None:
            self._journal(group, topic, (partition,))
        topics = self._groups.get(group)
        if topics is None:
            topics = self._groups[_intern(group)] = {}
        offsets = topics.get(topic)
        if offsets is None:
            offsets = topics[_intern(topic)] = TopicOffsets()
        if offsets.put(partition, value):
            self._count += 1

    def put_rows(
        self, group: str, topic: str, rows: Iterable[tuple[int, int, int, int]]
    ) -> None:
        """``TopicOffsets.put_rows`` for the group's offsets of one topic."""
        topics = self._groups.get(group)
        if topics is None:
            topics = self._groups[_intern(group)] = {}
        offsets = topics.get(topic)
        if offsets is None:
            offsets = topics[_intern(topic)] = TopicOffsets()
        if self.journal is not None:  # the live path of a commit waiting for its replicas
            rows = rows if type(rows) is list else list(rows)
            saved = self.journal.get((group, topic))
            if saved is None:
                saved = self.journal[(group, topic)] = {}
            flags, data, n = offsets.flags, offsets.rows, len(offsets.flags)
            partitions = [row[0] for row in rows]
            if len(partitions) >= _SNAPSHOT_MIN:
                first, last = min(partitions), max(partitions)
            else:
                first, last = 0, n  # a few partitions: one by one
            if 0 <= first and last < n and last - first < 4 * len(partitions):
                if saved:
                    partitions = [p for p in partitions if p not in saved]
                saved.update(dict.fromkeys(partitions, offsets.snapshot(first, last + 1)))
            else:
                for partition in partitions:
                    if partition not in saved:  # a plain row's numbers, read in place
                        saved[partition] = (_unpack_row(data, partition * _ROW_SIZE)
                                            if 0 <= partition < n and flags[partition] == _PRESENT
                                            else offsets.saved(partition))
        self._count += offsets.put_rows(rows)
        if not offsets:  # no rows at all (an empty iterator)
            del topics[topic]
            if not topics:
                del self._groups[group]

    def put_blocks(self, blocks: Iterable[tuple[str, str, int, int, bytes, str]]) -> None:
        """``TopicOffsets.put_block`` for each ``CommitBlock`` (group, topic, first, count,
        rows, metadata), in order."""
        groups = self._groups
        for group, topic, first, count, rows, metadata in blocks:
            if self.journal is not None:
                self._journal(group, topic, range(first, first + count))
            topics = groups.get(group)
            if topics is None:
                topics = groups[_intern(group)] = {}
            offsets = topics.get(topic)
            if offsets is None:
                offsets = topics[_intern(topic)] = TopicOffsets()
            self._count += offsets.put_block(first, count, rows, metadata)

    def delete(self, group: str, topic: str, partition: int) -> bool:
        """Remove one offset (dropping a topic or group left with none); True if it existed."""
        if self.journal is not None:
            self._journal(group, topic, (partition,))
        topics = self._groups.get(group)
        if topics is None:
            return False
        offsets = topics.get(topic)
        if offsets is None or not offsets.delete(partition):
            return False
        self._count -= 1
        if not offsets:
            del topics[topic]
            if not topics:
                del self._groups[group]
        return True

    def has_group(self, group: str) -> bool:
        """Whether the group has any committed offset."""
        return group in self._groups

    def groups(self) -> list[str]:
        """The groups with committed offsets."""
        return list(self._groups)

    def topics(self, group: str) -> list[str]:
        """The topics the group has committed offsets for."""
        return list(self._groups.get(group, ()))

    def topic_offsets(self, group: str, topic: str) -> Iterator[tuple[int, OffsetCommitValue]]:
        """(partition, value) of the group's offsets for one topic, in partition order."""
        offsets = self._groups.get(group, {}).get(topic)
        return iter(()) if offsets is None else offsets.items()

    def expired(
        self, group: str, topic: str, now: int, base: int, retention: int
    ) -> tuple[list[int], bool]:
        """``TopicOffsets.expired`` for the group's offsets of one topic."""
        offsets = self._groups.get(group, {}).get(topic)
        return ([], True) if offsets is None else offsets.expired(now, base, retention)

    def group_offsets(self, group: str) -> Iterator[tuple[str, int, OffsetCommitValue]]:
        """(topic, partition, value) of all the group's offsets, topics in first-commit order."""
        for topic, offsets in list(self._groups.get(group, {}).items()):
            for partition, value in offsets.items():
                yield topic, partition, value

    def committed_offsets(self, group: str, topic: str) -> list[tuple[int, int]]:
        """(partition, offset) of the group's offsets for one topic, in partition order, without
        building a value per offset (the broker's metrics read every one at each scrape). It
        reads a copy of the arrays, so a reader on another thread never holds it; there, a
        partition whose offset moved between the rows and ``sparse`` meanwhile is read once
        (the ``sparse`` copy, taken last, wins)."""
        offsets = self._groups.get(group, {}).get(topic)
        if offsets is None:
            return []
        flags = bytes(offsets.flags)
        found = [(partition, offset) for partition, (present, (offset, _epoch, _commit))
                 in enumerate(zip(flags, ROW.iter_unpack(bytes(offsets.rows)))) if present]
        sparse = offsets.sparse
        if sparse:
            apart = dict(sparse)
            found = [item for item in found if item[0] not in apart]
            found.extend((partition, value.offset) for partition, value in apart.items())
            found.sort()
        return found

    def memory_bytes(self) -> int:
        """An estimate of the memory the cache holds: ``sys.getsizeof`` of its dicts, rows,
        extras, sparse values and strings (each distinct topic name once)."""
        size = sys.getsizeof(self._groups)
        names: dict[int, int] = {}
        for group, topics in self._groups.items():
            size += sys.getsizeof(group) + sys.getsizeof(topics)
            for topic, offsets in topics.items():
                names[id(topic)] = sys.getsizeof(topic)
                size += (_TOPIC_OFFSETS_SIZE + sys.getsizeof(offsets.rows)
                         + sys.getsizeof(offsets.flags))
                if offsets.extras:
                    size += sys.getsizeof(offsets.extras) + sum(
                        _EXTRA_SIZE + sys.getsizeof(m) for m, _ in offsets.extras.values()
                    )
                if offsets.sparse:
                    size += sys.getsizeof(offsets.sparse) + _SPARSE_VALUE_SIZE * len(
                        offsets.sparse
                    )
        return size + sum(names.values())

    def compact(self) -> None:
        """Give back the spare capacity the row arrays grew with (after loading a partition)."""
        for topics in self._groups.values():
            for offsets in topics.values():
                if offsets.flags:
                    offsets.rows = bytearray(offsets.rows)
                    offsets.flags = bytearray(offsets.flags)
