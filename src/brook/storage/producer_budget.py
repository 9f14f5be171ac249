"""A broker-wide bound on idempotent producer state (`producer.id.max.count`).

Every partition keeps an entry per producer id that wrote to it, and a producer id is
whatever a Produce request says: without a bound, made-up ids fill memory and snapshots
(1,000,000 of them took 390 MiB). The budget counts the entries of every partition's
`ProducerStateManager` in one least-recently-written order; past the bound the entry
written longest ago is forgotten, exactly as if it had expired (`producer.id.expiration.ms`):
that producer's next batch is taken at any sequence (KIP-360) and a retry of a batch
written before the eviction is no longer recognised as a duplicate.

Sans-I/O, like the state it bounds: no clock, no files.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    from .producer_state import ProducerStateManager

log = logging.getLogger(__name__)

DEFAULT_PRODUCER_ID_MAX_COUNT = 200_000  # entries (a producer id in a partition), ~400 B each


class ProducerIdBudget:
    def __init__(self, max_count: int = DEFAULT_PRODUCER_ID_MAX_COUNT) -> None:
        if max_count < 1:
            raise ValueError("producer.id.max.count must be at least 1")
        self.max_count = max_count
        self.evicted = 0  # entries forgotten for the bound, ever (a metric)
        # (manager, producer id) in the order they were last written, oldest first.
        self._order: OrderedDict[tuple[ProducerStateManager, int], None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._order)

    def touched(self, manager: "ProducerStateManager", producer_ids: Iterable[int]) -> None:
        """`manager` just wrote (or loaded) these producers' entries: they are the newest.
        Then forget the oldest entries over the bound."""
        order = self._order
        for pid in producer_ids:
            key = (manager, pid)
            if key in order:
                order.move_to_end(key)
            else:
                order[key] = None
        over = len(order) - self.max_count
        if over > 0:
            for _ in range(over):
                (owner, pid), _ = order.popitem(last=False)
                owner.producers.pop(pid, None)
            if self.evicted // 10_000 != (self.evicted + over) // 10_000 or not self.evicted:
                log.warning("producer.id.max.count=%d reached: forgot the state of %d idle "
                            "producer id(s) (%d in all)", self.max_count, over, self.evicted + over)
            self.evicted += over

    def forget(self, manager: "ProducerStateManager", producer_ids: Iterable[int]) -> None:
        """`manager` dropped these entries itself (expiry, a snapshot replacing its state)."""
        for pid in producer_ids:
            self._order.pop((manager, pid), None)
