"""A broker-wide bound on idempotent producer state (`producer.id.max.count`).

Every partition keeps an entry per producer id that wrote to it, and a producer id is
whatever a Produce request says: without a bound, made-up ids fill memory and snapshots
(1,000,000 of them took 390 MiB). The budget counts the entries of every partition's
`ProducerStateManager` in one least-recently-written order; past the bound the entry
written longest ago is forgotten, exactly as if it had expired (`producer.id.expiration.ms`):
that producer's next batch is taken at any sequence (KIP-360) and a retry of a batch
written before the eviction is no longer recognised as a duplicate.

An entry whose producer has a transaction open on the partition is never forgotten (it does
not expire either): the bound may then be passed by as many such entries.

So an entry written in the last `ACTIVE_PRODUCER_MS` is never forgotten to make room: its
producer may still be retrying a batch (a producer retries for at most its
`delivery.timeout.ms`, two minutes by default). A client's batch of a producer id new to a
partition is refused while the bound is reached by such entries (`ProducerIdBudgetFullError`,
answered REQUEST_TIMED_OUT so clients retry). A flood of made-up ids then slows new producers
for a while but can never make an active producer's retry be written twice.

Sans-I/O, like the state it bounds: times are passed in, no files.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any, Iterable, Protocol

log = logging.getLogger(__name__)

DEFAULT_PRODUCER_ID_MAX_COUNT = 200_000  # entries (a producer id in a partition), ~400 B each
ACTIVE_PRODUCER_MS = 5 * 60 * 1000  # more than the producers' default delivery.timeout.ms


class ProducerTable(Protocol):
    """What the budget knows of a partition's `ProducerStateManager`: its entries by id."""

    producers: dict[int, Any]


class ProducerIdBudgetFullError(Exception):
    """producer.id.max.count is reached by producers written to recently: a new one waits."""


class ProducerIdBudget:
    def __init__(self, max_count: int = DEFAULT_PRODUCER_ID_MAX_COUNT) -> None:
        if max_count < 1:
            raise ValueError("producer.id.max.count must be at least 1")
        self.max_count = max_count
        self.evicted = 0  # entries forgotten for the bound, ever (a metric)
        self.refused = 0  # batches of new producer ids refused while full, ever (a metric)
        # (manager, producer id) -> when last written (ms), oldest first.
        self._order: OrderedDict[tuple[ProducerTable, int], int] = OrderedDict()

    def __len__(self) -> int:
        return len(self._order)

    def admit(self, new: int, now_ms: int) -> None:
        """Room for `new` entries written by a client at `now_ms`: raises
        ProducerIdBudgetFullError if making it would forget an entry written in the last
        ACTIVE_PRODUCER_MS."""
        over = len(self._order) + new - self.max_count
        if over <= 0:
            return
        for i, written in enumerate(self._order.values()):
            if i == over:
                return
            if now_ms - written < ACTIVE_PRODUCER_MS:
                self.refused += 1
                if self.refused % 10_000 == 1:
                    log.warning("producer.id.max.count=%d reached by producers active in the last "
                                "%d s: batches of new producer ids are refused (%d so far)",
                                self.max_count, ACTIVE_PRODUCER_MS // 1000, self.refused)
                raise ProducerIdBudgetFullError(
                    f"producer.id.max.count={self.max_count} reached by producers active in the "
                    f"last {ACTIVE_PRODUCER_MS // 1000} s; retry later")

    def touched(self, manager: ProducerTable, producer_ids: Iterable[int],
                now_ms: int = 0) -> None:
        """`manager` just wrote (or loaded) these producers' entries at `now_ms`: they are the
        newest. Then forget the oldest entries over the bound."""
        order = self._order
        for pid in producer_ids:
            key = (manager, pid)
            if key in order:
                order.move_to_end(key)
            order[key] = now_ms
        over = len(order) - self.max_count
        if over > 0:
            forgotten = 0
            for _ in range(len(order)):
                if len(order) <= self.max_count:
                    break
                (owner, pid), written = order.popitem(last=False)
                if getattr(owner.producers.get(pid), "current_txn_first_offset", -1) >= 0:
                    # A producer with a transaction open is never forgotten (nor expires): its
                    # marker must find it, or the last stable offset would stay there.
                    order[(owner, pid)] = written
                    continue
                owner.producers.pop(pid, None)
                forgotten += 1
            if self.evicted // 10_000 != (self.evicted + forgotten) // 10_000 or not self.evicted:
                log.warning("producer.id.max.count=%d reached: forgot the state of %d idle "
                            "producer id(s) (%d in all)", self.max_count, forgotten,
                            self.evicted + forgotten)
            self.evicted += forgotten

    def forget(self, manager: ProducerTable, producer_ids: Iterable[int]) -> None:
        """`manager` dropped these entries itself (expiry, a snapshot replacing its state)."""
        for pid in producer_ids:
            self._order.pop((manager, pid), None)
