"""Reading the broker's state for a scrape on the broker's event loop, in short slices.

The HTTP server answers scrapes on threads of its own; the state they read (partitions,
groups, committed offsets) belongs to the event loop. `LoopReader` has the loop do the
reading, a slice at a time, while the scrape's thread waits.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable, Generator
from time import perf_counter
from typing import TypeVar

log = logging.getLogger(__package__)

T = TypeVar("T")

#: The longest the event loop reads for a scrape before it serves its clients again, and how
#: long it serves them before it reads on. (The pause is a timer, not a place in the queue of
#: ready callbacks: a request's steps from one callback to the next all get their turn in it,
#: where a slice queued right behind each of them would double its wait at every step.)
SLICE_SECONDS = 0.001
PAUSE_SECONDS = 0.001
#: How long a scrape waits for the event loop to run the next slice of its reading before it
#: reads from its own thread instead (a loop stalled that long has worse problems; the scrape
#: still answers). A busy loop that keeps running slices is waited for.
LOOP_WAIT_SECONDS = 5.0
#: How often a waiting scrape looks whether the loop still runs and still reads.
_POLL_SECONDS = 0.1


class LoopReader:
    """Runs a scrape's reads of the broker's state on the broker's event loop.

    A read is a *walk*: a generator that yields at short intervals (after a partition, a
    group, an offsets partition) and returns what it read. Called from another thread while
    `loop` runs (it is set when the metrics start serving), `read` has the loop run the walk in
    slices of `slice_seconds`, one callback each, `pause_seconds` apart, and waits. So the loop
    serves its clients between slices, the scrape's thread does not compete with it for the
    interpreter lock meanwhile, and every value is read as the event loop left it (within a
    step, the same instant: a group's committed offsets and the partitions' high watermarks).

    Without a running loop, or called on the loop itself, `read` runs the walk on the calling
    thread at once; so it does when the loop stops running while a read waits for it (nothing
    changes the state any more), and when the loop has run no slice for `wait_seconds` (a
    stalled loop: logged). Walks are written to be safe off the loop too (copies of dicts
    before they are walked, the coordinator's offsets read from copies, the logs' immutable
    segment tuples), though not instantaneous.
    """

    slice_seconds = SLICE_SECONDS
    pause_seconds = PAUSE_SECONDS
    wait_seconds = LOOP_WAIT_SECONDS

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None

    def read(self, walk: Callable[[], Generator[None, None, T]]) -> T:
        """What `walk()` returns; an exception of the walk is raised here."""
        loop = self.loop
        if loop is not None and loop.is_running() and running_loop() is not loop:
            done: concurrent.futures.Future = concurrent.futures.Future()
            slices = [0]  # counted by the loop
            try:
                loop.call_soon_threadsafe(self._step, loop, walk(), done, slices)
            except RuntimeError:  # the loop was closed meanwhile
                pass
            else:
                stalled = self._wait(loop, done, slices)
                if not done.cancel():  # it finished after all
                    return done.result()
                if stalled:
                    log.warning("the event loop has not read for the metrics for %.0f s; "
                                "reading them from the scrape's thread", self.wait_seconds)
        steps = walk()
        while True:
            try:
                next(steps)
            except StopIteration as stop:
                return stop.value

    def _wait(self, loop, done: concurrent.futures.Future, slices: list[int]) -> bool:
        """Wait for `done` while the loop runs slices; False when the loop stopped running,
        True when it ran none for `wait_seconds`. (Returns when `done` is done, too.)"""
        seen, since = slices[0], time.monotonic()
        while True:
            try:
                done.result(min(_POLL_SECONDS, self.wait_seconds))
            except BaseException:  # noqa: BLE001 - a timeout, or the walk's: `read` raises it
                pass
            if done.done() or not loop.is_running():
                return False
            now = time.monotonic()
            if slices[0] != seen:
                seen, since = slices[0], now
            elif now - since >= self.wait_seconds:
                return True

    def _step(self, loop, steps, done: concurrent.futures.Future, slices: list[int]) -> None:
        """One slice of a walk, on the event loop."""
        if done.cancelled():  # the scrape stopped waiting
            steps.close()
            return
        slices[0] += 1
        clock = perf_counter
        deadline = clock() + self.slice_seconds
        try:
            while True:
                next(steps)
                if clock() >= deadline:
                    break
        except StopIteration as stop:
            _settle(done.set_result, stop.value)
        except Exception as exc:  # noqa: BLE001 - raised in the scrape's thread
            _settle(done.set_exception, exc)
        except BaseException as exc:  # KeyboardInterrupt, SystemExit: the loop's too
            _settle(done.set_exception, exc)
            raise
        else:
            loop.call_later(self.pause_seconds, self._step, loop, steps, done, slices)


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread, if any."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _settle(setter, value) -> None:
    try:
        setter(value)
    except concurrent.futures.InvalidStateError:  # cancelled: the scrape stopped waiting
        pass
