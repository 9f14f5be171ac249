"""Acknowledging only what is on disk: fsyncs shared by everything waiting (group commit).

With ``log.flush.before.ack=true`` a produce (acks 1 or all) and every write of the group
coordinator are answered only once their batches are fsynced. Appends go to the page cache as
always; each waiter then asks ``sync(logs)``. While an fsync round runs in a worker thread, new
waiters gather; the next round fsyncs every log any of them touched, once, and answers them all.
So under load one fsync per partition serves as many requests and connections as arrived during
the previous round, and a lone request pays one fsync.

The files of a round are fsynced in parallel, by a small pool of threads: the file system
commits concurrent fsyncs together (measured here: four files fsynced one after the other took
2.2 ms, in parallel 0.4 ms). The threads fsync duplicates of the segment and directory
descriptors, taken on the event loop:
the log may roll, delete or close segments meanwhile without the thread ever touching a reused
descriptor. A round covers what was appended before it started. The recovery point is left to
the flush policy: a crash recovers from it, and finds the fsynced batches whole (their CRCs hold).
"""

from __future__ import annotations

import asyncio
import logging
import os
import weakref
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

from ..storage.errors import KafkaStorageError

log = logging.getLogger(__name__)

#: Threads fsyncing the files of a round in parallel.
FSYNC_THREADS = 8


class GroupCommitter:
    def __init__(self) -> None:
        self._waiting: list[tuple[list, asyncio.Future]] = []
        self._round: asyncio.Task | None = None
        #: log -> its end offset as of the last round that fsynced it
        self._durable: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        #: fsync rounds run so far, and the waiters they answered (figures for tests and docs)
        self.rounds = 0
        self.answered = 0
        self._pool = ThreadPoolExecutor(FSYNC_THREADS, thread_name_prefix="brook-fsync")

    async def sync(self, logs: Iterable) -> None:
        """Until everything appended to ``logs`` so far is on disk; raises KafkaStorageError if
        an fsync fails."""
        await self.durable(logs)

    def durable(self, logs: Iterable) -> asyncio.Future:
        """``sync`` as a future (no coroutine or task of its own: the coordinator's answers
        wait on it with a callback)."""
        fut = asyncio.get_running_loop().create_future()
        self._waiting.append((list(logs), fut))
        if self._round is None:
            self._round = asyncio.create_task(self._rounds())
        return fut

    async def _rounds(self) -> None:
        try:
            while self._waiting:
                # One more turn of the event loop first: the requests other connections have
                # ready join this round instead of waiting for the next.
                await asyncio.sleep(0)
                batch, self._waiting = self._waiting, []
                logs = {id(lg): lg for logs, _ in batch for lg in logs}.values()
                error: BaseException | None = None
                try:
                    fds, ends = self._plan(logs)
                    loop = asyncio.get_running_loop()
                    done = await asyncio.gather(
                        *(loop.run_in_executor(self._pool, _fsync_close, fd) for fd in fds),
                        return_exceptions=True)
                    failed = [e for e in done if isinstance(e, BaseException)]
                    if failed:
                        raise failed[0]
                    self._durable.update(ends)
                except Exception as exc:
                    log.error("fsync before acknowledging failed: %s", exc)
                    error = exc if isinstance(exc, KafkaStorageError) else KafkaStorageError(str(exc))
                self.rounds += 1
                self.answered += len(batch)
                for _, fut in batch:
                    if fut.done():
                        continue
                    if error is None:
                        fut.set_result(None)
                    else:
                        fut.set_exception(error)
        finally:
            self._round = None

    def _plan(self, logs) -> tuple[list[int], dict]:
        """Duplicates of the descriptors to fsync (segments with data past what the last round
        made durable, and the log's directory when a segment was created since) and the end
        offsets they make durable."""
        fds: list[int] = []
        ends = {}
        try:
            for lg in logs:
                end = lg.log_end_offset
                durable = self._durable.get(lg)
                if durable is not None and end <= durable:
                    continue
                segments = lg.segments
                for seg in reversed(segments):  # those created since, and the one before
                    fds.append(seg.dup_fd())
                    if durable is not None and seg.base_offset <= durable:
                        break
                if durable is None or segments[-1].base_offset >= durable:
                    fds.append(os.open(lg.directory, os.O_RDONLY))  # its entry is new
                ends[lg] = end
        except BaseException:
            _close_all(fds)
            raise
        return fds, ends


def _fsync_close(fd: int) -> None:
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
