"""Transactional offset commits waiting for their transaction to end, sans-I/O (Kafka's
``pendingTransactionalOffsets`` and ``openTransactionsByGroup``).

A TxnOffsetCommit writes its offsets as a transactional batch of the producer's. Replaying one of
its records puts the offset here, under the producer id, and not among the committed offsets:
OffsetFetch does not answer it (with ``require_stable`` it answers UNSTABLE_OFFSET_COMMIT for the
partition). The producer's transaction marker on the partition ends them all: COMMIT moves them
to the committed offsets, ABORT drops them (``end``).

When plain and transactional commits of one partition mix, Kafka keeps whichever record is later
in the log (it compares record offsets), so that a compacted log, which keeps only the last
record of each partition, loads to the same answer. Records are replayed in log order, live and
when loading, so here a pending offset turns *stale* when a later record outdates it: a plain
commit of its partition, or another transaction's later pending offset of it being committed. A
stale offset is dropped at COMMIT. (``order`` counts replays, to tell which pending offset of two
producers came later.)

A tombstone of a partition (an offset deleted, expired, its group or topic deleted) removes its
pending offsets too; the transactions stay open for their groups until their markers.
"""

from __future__ import annotations

from .schemas import OffsetCommitValue

__all__ = ["PendingOffset", "PendingOffsets"]

#: (group, topic, partition)
Key = tuple[str, str, int]


class PendingOffset:
    """One pending offset: its value, when it was replayed, and whether a later record outdated
    it."""

    __slots__ = ("value", "order", "stale")

    def __init__(self, value: OffsetCommitValue, order: int) -> None:
        self.value = value
        self.order = order
        self.stale = False

    def __repr__(self) -> str:
        return f"PendingOffset({self.value!r}, order={self.order}, stale={self.stale})"


class _Transaction:
    """A producer's open transaction on this partition: its groups and pending offsets."""

    __slots__ = ("groups", "offsets")

    def __init__(self) -> None:
        self.groups: set[str] = set()
        self.offsets: dict[Key, PendingOffset] = {}


class PendingOffsets:
    """The pending transactional offsets of one ``__consumer_offsets`` partition."""

    __slots__ = ("_transactions", "_by_group", "_order")

    def __init__(self) -> None:
        self._transactions: dict[int, _Transaction] = {}
        #: group -> the producers with an open transaction that committed offsets of it
        self._by_group: dict[str, set[int]] = {}
        self._order = 0

    def __bool__(self) -> bool:
        return bool(self._transactions)

    # --- replay --------------------------------------------------------------------------------

    def add(self, producer_id: int, key: Key, value: OffsetCommitValue) -> None:
        """A transactional offset commit of ``producer_id`` was replayed."""
        txn = self._transactions.get(producer_id)
        if txn is None:
            txn = self._transactions[producer_id] = _Transaction()
        self._order += 1
        txn.offsets[key] = PendingOffset(value, self._order)
        group = key[0]
        txn.groups.add(group)
        self._by_group.setdefault(group, set()).add(producer_id)

    def outdated(self, key: Key, before: int | None = None) -> None:
        """A later record set ``key``'s committed offset: its pending offsets replayed before
        (before ``before``, when given) are stale."""
        producers = self._by_group.get(key[0])
        if not producers:
            return
        for producer_id in producers:
            pending = self._transactions[producer_id].offsets.get(key)
            if pending is not None and (before is None or pending.order < before):
                pending.stale = True

    def removed(self, key: Key) -> None:
        """A tombstone of ``key`` was replayed: its pending offsets go."""
        for producer_id in self._by_group.get(key[0], ()):
            self._transactions[producer_id].offsets.pop(key, None)

    def end(self, producer_id: int) -> dict[Key, PendingOffset]:
        """The producer's transaction ended (a marker): its pending offsets, in the order they
        were first replayed, no longer pending."""
        txn = self._transactions.pop(producer_id, None)
        if txn is None:
            return {}
        for group in txn.groups:
            producers = self._by_group[group]
            producers.discard(producer_id)
            if not producers:
                del self._by_group[group]
        return txn.offsets

    # --- reads ---------------------------------------------------------------------------------

    def has(self, group: str, topic: str, partition: int) -> bool:
        """Whether an open transaction has a pending offset of the partition."""
        producers = self._by_group.get(group)
        if not producers:
            return False
        key = (group, topic, partition)
        return any(key in self._transactions[p].offsets for p in producers)

    def has_open_transactions(self, group: str) -> bool:
        """Whether a transaction that committed offsets of ``group`` is still open."""
        return group in self._by_group

    def partitions(self, group: str) -> set[tuple[str, int]]:
        """(topic, partition) of every pending offset of ``group``."""
        found: set[tuple[str, int]] = set()
        for producer_id in self._by_group.get(group, ()):
            offsets = self._transactions[producer_id].offsets
            found.update((t, p) for g, t, p in offsets if g == group)
        return found

    def keys(self) -> set[Key]:
        """Every (group, topic, partition) with a pending offset."""
        return {key for txn in self._transactions.values() for key in txn.offsets}

    def state(self) -> dict[int, tuple[frozenset[str], dict[Key, tuple[OffsetCommitValue, bool]]]]:
        """producer id -> (the groups of its open transaction, key -> (value, stale)): what
        tests compare."""
        return {producer_id: (frozenset(txn.groups),
                              {k: (p.value, p.stale) for k, p in txn.offsets.items()})
                for producer_id, txn in self._transactions.items()}
