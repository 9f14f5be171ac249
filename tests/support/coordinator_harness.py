"""One fake-clock harness for the sans-I/O coordinator: the runtime's part in miniature.

An operation's result is "appended" to a list (``log``, one (key, value) pair per log record),
replayed into the shard unless the operation applied it itself, then its ``on_success`` runs and
its replies are delivered into ``replies``; or, when the test says the append fails, nothing is
appended, the request's and the parked replies' keys are answered None, and ``on_failure``'s
result is run in turn. ``advance(ms)`` moves the clock and runs what the shard's timers return.
"""

from __future__ import annotations

import dataclasses
import itertools

from kio.schema.errors import ErrorCode

from brook.clock import FakeClock
from brook.coordinator.common.result import CoordinatorRecord, CoordinatorResult, record_pairs
from brook.coordinator.group.classic import GroupConfig
from brook.coordinator.group.offsets import OffsetsConfig
from brook.coordinator.group.shard import CoordinatorShard


def counting_member_ids():
    """Member ids ``<instance or client>-<n>``, n counting from 1: predictable in assertions."""
    ids = itertools.count(1)
    return lambda client, instance: f"{instance or client}-{next(ids)}"


class CoordinatorHarness:
    def __init__(self, start_ms: int = 0, group_config: GroupConfig | None = None,
                 offsets_config: OffsetsConfig | None = None, shard: CoordinatorShard | None = None):
        self.clock = FakeClock(start_ms)
        self.shard = shard or CoordinatorShard(group_config or GroupConfig(), offsets_config,
                                               new_member_id=counting_member_ids())
        self.log: list[CoordinatorRecord] = []
        self.replies: dict[str, object] = {}
        #: (key, reply) of every delivery, in order (None: the append failed)
        self.deliveries: list[tuple[str, object | None]] = []

    @property
    def now(self) -> int:
        return self.clock.milliseconds()

    def run(self, result: CoordinatorResult, fail: ErrorCode | None = None
            ) -> CoordinatorResult:
        """Write ``result`` as the runtime would (the append failing with ``fail`` when given,
        if it has records); returns it with ``completions`` as delivered (those its success
        returned included). Deliveries go to ``replies`` (None: failed)."""
        now = self.now
        if fail is not None and result.records:
            keys = [c.key for c in result.completions]
            if result.parked is not None:
                keys.append(result.parked)
            after = result.failed(fail, now)
            for key in keys:
                self.replies[key] = None
                self.deliveries.append((key, None))
            self.run(after)
            return result
        if result.records:
            self.log += [CoordinatorRecord(k, v) for k, v in record_pairs(result.records)]
            if result.replay:
                self.shard.replay_records(result.records, now)
        delivered = list(result.completions)
        if result.on_success is not None:
            delivered += result.on_success(now) or ()
        for c in delivered:
            self.replies[c.key] = c.response
            self.deliveries.append((c.key, c.response))
        # What the runtime delivered for it, the write's own completions included.
        return dataclasses.replace(result, completions=delivered)

    def advance(self, ms: int) -> list[CoordinatorResult]:
        """Move the clock on and run what is due then."""
        self.clock.advance(ms)
        return [self.run(r) for r in self.shard.poll(self.now)]

    def reloaded(self) -> CoordinatorShard:
        """A fresh shard that replayed everything written so far, as a load does."""
        fresh = CoordinatorShard(self.shard.classic.config, self.shard.offsets.config)
        for record in self.log:
            fresh.replay(record.key, record.value, self.now)
        return fresh
