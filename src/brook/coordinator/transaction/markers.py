"""Writing a transaction's markers, and finishing the transaction once they are written.

The coordinator talks to the partitions through one narrow interface, ``MarkerWriter``: "write
COMMIT (or ABORT) for this producer id and epoch on these partitions, with this coordinator
epoch, and tell me how each partition did". The broker gives one that sends WriteTxnMarkers to
each partition's leader (``brook.broker.marker_channel``); an in-process one can write to local
partitions directly.

``MarkerSender`` runs one task per transaction whose markers are owed (a ``MarkerJob`` from the
shard): it asks the writer for the partitions not yet done, again for those that failed with a
retriable error after ``retry_backoff_ms``, doubled at each failed round up to
``max_backoff_ms`` (a leader that cannot be reached is not asked ten times a second), until all
are done; then it runs the shard's
``complete`` through the runtime (CompleteCommit or CompleteAbort written). It stops, leaving
the transaction in its Prepare state for the next coordinator, when its ``__transaction_state``
partition is no longer coordinated here at the epoch the job was given at, or when a partition
answers that the coordinator is fenced. A partition whose topic no longer exists is done (Kafka
drops it too).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from kio.schema.errors import ErrorCode

from .shard import MarkerJob

__all__ = ["MarkerRequest", "MarkerSender", "MarkerWriter"]

log = logging.getLogger(__name__)

E = ErrorCode

#: Answers after which a partition is done: written, or nothing to write there (Kafka's list).
_DONE = {E.none, E.unsupported_for_message_format, E.unsupported_version}
#: Answers that say this coordinator is stale: the job stops, the next coordinator resends.
_FENCED = {E.invalid_producer_epoch, E.transaction_coordinator_fenced, E.producer_fenced}


@dataclass(frozen=True)
class MarkerRequest:
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: frozenset[tuple[str, int]]


class MarkerWriter(Protocol):
    async def write_markers(self, request: MarkerRequest) -> dict[tuple[str, int], ErrorCode]:
        """Write the markers of ``request``; the answer of each of its partitions (a partition
        left out counts as failed, to be tried again)."""


class MarkerSender:
    """Sends the shards' marker jobs with a ``MarkerWriter`` and completes their transactions
    through ``runtime`` (a ``CoordinatorRuntime`` of ``TransactionShard``s)."""

    def __init__(self, runtime, writer: MarkerWriter, retry_backoff_ms: int = 100,
                 partition_exists: Callable[[str, int], bool] | None = None,
                 max_backoff_ms: int = 5_000) -> None:
        self.runtime = runtime
        self.writer = writer
        self.retry_backoff_ms = retry_backoff_ms
        self.max_backoff_ms = max(max_backoff_ms, retry_backoff_ms)
        self.partition_exists = partition_exists
        self.tasks: dict[tuple, asyncio.Task] = {}

    def send(self, job: MarkerJob) -> None:
        """Called by a shard (from the runtime's worker): start the job's task, unless the same
        job runs already."""
        partition = self.runtime.partition_for(job.transactional_id)
        ctx = self.runtime.contexts.get(partition)
        if ctx is None:
            return
        # (a job of an earlier epoch of the partition may still be stopping: it is another job)
        key = (job, ctx.epoch)
        if key in self.tasks:
            return
        task = asyncio.get_running_loop().create_task(self._run(job, partition, ctx.epoch))
        self.tasks[key] = task
        task.add_done_callback(lambda t: self.tasks.pop(key) if self.tasks.get(key) is t else None)

    def _coordinating(self, partition: int, epoch: int) -> bool:
        ctx = self.runtime.contexts.get(partition)
        return ctx is not None and ctx.epoch == epoch and ctx.state.value in ("loading", "active")

    async def _run(self, job: MarkerJob, partition: int, epoch: int) -> None:
        todo = set(job.partitions)
        what = "COMMIT" if job.commit else "ABORT"
        backoff = self.retry_backoff_ms
        while todo:
            if not self._coordinating(partition, epoch):
                return
            if self.partition_exists is not None:
                gone = {tp for tp in todo if not self.partition_exists(*tp)}
                if gone:  # (said: a marker owed to a partition believed deleted is never sent)
                    log.info("%s markers of %s (producer %d epoch %d): skipping %s, which no "
                             "longer exist", what, job.transactional_id, job.producer_id,
                             job.producer_epoch, ", ".join(f"{t}-{p}" for t, p in sorted(gone)))
                    todo -= gone
                if not todo:
                    break
            request = MarkerRequest(job.producer_id, job.producer_epoch, job.commit, epoch,
                                    frozenset(todo))
            try:
                answers = await self.writer.write_markers(request)
            except Exception as exc:  # the writer failed as a whole: try again
                log.warning("%s markers of %s (producer %d epoch %d) failed: %s", what,
                            job.transactional_id, job.producer_id, job.producer_epoch, exc)
                answers = {}
            for tp, code in answers.items():
                if code in _DONE:
                    todo.discard(tp)
                elif code in _FENCED:
                    log.info("%s markers of %s: %s-%d answers %s, another coordinator has "
                             "taken over", what, job.transactional_id, *tp, code.name)
                    return
            if todo:
                await asyncio.sleep(backoff / 1000)
                backoff = min(backoff * 2, self.max_backoff_ms)
        if not self._coordinating(partition, epoch):
            return
        try:
            await self.runtime.run(job.transactional_id,
                                   lambda shard, now: shard.complete(job, now))
        except Exception as exc:  # not coordinated here any more, or the write failed
            log.warning("completing the transaction of %s failed: %s", job.transactional_id, exc)
            if self._coordinating(partition, epoch):  # the write failed: try again later
                await asyncio.sleep(self.retry_backoff_ms / 1000)
                self.tasks.pop((job, epoch), None)
                self.send(job)

    async def stop(self) -> None:
        tasks = list(self.tasks.values())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
