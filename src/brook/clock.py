"""Time sources. Everything that waits or expires takes a clock, so tests use FakeClock."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def milliseconds(self) -> int:
        """Wall-clock time in milliseconds since the epoch."""


class SystemClock:
    def milliseconds(self) -> int:
        return time.time_ns() // 1_000_000


class FakeClock:
    """A clock that only moves when told to."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now = start_ms

    def milliseconds(self) -> int:
        return self._now

    def advance(self, ms: int) -> None:
        if ms < 0:
            raise ValueError("a clock does not go backwards")
        self._now += ms


SYSTEM_CLOCK = SystemClock()


class MonotonicWallClock:
    """Wall-clock milliseconds that move with the monotonic clock: the wall time when it was
    made, advanced by the monotonic time since.

    For what runs on timeouts (group sessions, rebalances, joins, fetch sessions): a step of the
    system clock, by an operator or NTP, moves none of their deadlines, where a clock stepped
    back an hour would otherwise keep a silent member in its group an hour longer. Timestamps
    it gives (commit times, when a group became Empty) are the wall time as it was at start plus
    the time elapsed, so a step of the system clock never expires an offset early either; they
    meet the system clock again at the next start."""

    def __init__(self, wall=time.time_ns, monotonic=time.monotonic_ns) -> None:
        self._monotonic = monotonic
        self._anchor_ms = wall() // 1_000_000
        self._start_ns = monotonic()

    def milliseconds(self) -> int:
        return self._anchor_ms + (self._monotonic() - self._start_ns) // 1_000_000
