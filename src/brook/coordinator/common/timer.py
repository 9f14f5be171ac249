"""Keyed timers on an injected clock, sans-I/O.

A timer is a key, a deadline and a callback. Scheduling a key again replaces its timer, so
``heartbeat-<group>-<member>`` is simply rescheduled on every heartbeat. Nothing runs by
itself: the owner calls ``expire(now)`` (after a fake clock's ``advance``, or from the
runtime's loop) and gets back the callbacks that are due, earliest deadline first; what they
return (records and completions) is the owner's business.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Timers(Generic[T]):
    def __init__(self) -> None:
        self._deadlines: dict[str, tuple[int, int, Callable[[int], T]]] = {}
        self._heap: list[tuple[int, int, str]] = []
        self._seq = itertools.count()

    def schedule(self, key: str, deadline: int, callback: Callable[[int], T]) -> None:
        """Run ``callback(now)`` once ``now >= deadline``, replacing any timer with this key."""
        seq = next(self._seq)
        self._deadlines[key] = (deadline, seq, callback)
        heapq.heappush(self._heap, (deadline, seq, key))

    def cancel(self, key: str) -> bool:
        return self._deadlines.pop(key, None) is not None

    def deadline(self, key: str) -> int | None:
        entry = self._deadlines.get(key)
        return None if entry is None else entry[0]

    def __contains__(self, key: str) -> bool:
        return key in self._deadlines

    def keys(self) -> set[str]:
        return set(self._deadlines)

    def next_deadline(self) -> int | None:
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def expire(self, now: int) -> list[T]:
        """Run every timer due at ``now`` (including any a callback schedules that is already
        due), earliest first; return what they returned."""
        results = []
        while True:
            self._drop_stale()
            if not self._heap or self._heap[0][0] > now:
                return results
            _, _, key = heapq.heappop(self._heap)
            _, _, callback = self._deadlines.pop(key)
            results.append(callback(now))

    def _drop_stale(self) -> None:
        while self._heap:
            deadline, seq, key = self._heap[0]
            entry = self._deadlines.get(key)
            if entry is not None and entry[1] == seq:
                return
            heapq.heappop(self._heap)
