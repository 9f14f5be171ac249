"""The runtime around the sans-I/O coordinator shards: I/O, ordering, timers, loading, unloading.

A coordinator keeps its state in the partitions of a topic of its own (the group coordinator's
``__consumer_offsets``), and the runtime knows it by that topic's name and by the function that
routes a key (a group id) to its partition; what the records mean is the shard's business. Each
partition that this broker coordinates has a *context*: the partition's shard (built by
``new_shard()``), the leader epoch it was loaded at, a state, and one worker task that runs the
shard's operations one at a time, in arrival order. For every operation the worker

1. calls ``op(shard, now)`` (``now`` from the injected clock), which returns a
   ``CoordinatorResult``;
2. appends the result's records to the partition as one batch, through the narrow
   ``PartitionWriter`` interface (the broker's partitions in production, a list in tests),
   which says where the batch landed or raises ``AppendError`` with the append's Kafka error
   (a transactional write, ``result.producer``, as that producer's batch; a transaction
   marker, ``EndTxnMarker``, as its control batch);
3. replays the records into the shard (unless the operation applied them itself), the same
   replay that loads a partition (with the producer id of a transactional write);
4. once the records are committed (at once on one broker; in a cluster when the high watermark
   passes them, ``PartitionWriter.written``), runs the result's ``on_success``, answers the
   request and delivers the completions of parked replies.

Committed and uncommitted writes. In a cluster, the operations after a write run while it
waits to be committed, on the state with its records applied; the shard keeps what each
waiting write replaced (the group coordinator: of the committed offsets, so that OffsetFetch
answers only committed ones). When the high watermark passes a write, it and the writes before
it are answered (``shard.committed``). When its wait fails (too few replicas, leadership lost, a
timeout), it and every later write still waiting get the error, and the shard gives back what
they replaced (``shard.roll_back``), which is replayed and appended, so a write whose client was
told it failed is never served. Reads of a partition just loaded wait
(COORDINATOR_LOAD_IN_PROGRESS) until the high watermark reaches the end of what was loaded: the
previous leader's last records may not all be replicated.

Serving. A broker on ZooKeeper coordinates only while its session is known to be alive
(``lease``, see ``brook.cluster.lease``): a request is refused with NOT_COORDINATOR when it is
handled and again right before it is answered if the lease has lapsed, e.g. after the process
was paused past its session timeout, while another broker may already coordinate its partition.

A parked reply (a JoinGroup waiting for the join phase, a SyncGroup waiting for the leader) is
a future keyed by the result's ``parked`` key and resolved by a later ``Completion``. If the
append fails, nothing is replayed: the request and every parked reply the operation would have
completed get ``AppendFailed`` with ``result.error_for(error)`` (Kafka's answer), and the
result's ``on_failure`` puts the shard back on track; what it returns is written best effort.
(A write whose append succeeded but that could not be committed is rolled back instead, as
above.)

An operation that finds its context idle (nothing queued) runs at once, in the caller's task;
otherwise it is queued behind the others. Either way operations run one at a time, in arrival
order, through the same steps; running at once only saves the trip through the worker task.

Timers: each context has a task that sleeps until the shard's next deadline (woken early when an
operation schedules an earlier one) and then runs ``poll(now)``, whose results are written as
ordinary operations, so a session expiry is just another write. Timers wait while a shard loads.

Leadership: ``load(partition, epoch)`` makes a context and replays the partition in the
background (requests routed to it get COORDINATOR_LOAD_IN_PROGRESS meanwhile);
``unload(partition)`` closes it: queued and parked requests get NOT_COORDINATOR, its timers
stop, and its state is dropped, so a later load starts fresh. A load of an older epoch than the
context's is ignored. A single broker loads every partition at epoch 0 when it starts. A record
that cannot be decoded or replayed is skipped and logged with its offset
(``brook.coordinator.common.loader``), so one bad record never makes what a partition
coordinates unreachable; a load that cannot read the log at all leaves the context FAILED,
answering NOT_COORDINATOR, while the other partitions load and serve as usual; it is loaded
again after a backoff (doubling from ``load_retry_backoff_ms`` up to
``load_retry_max_backoff_ms``) while this broker still coordinates the partition at that epoch.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, Generic, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from .loader import BatchReplayer, Skipped, replay_batches
from .result import CoordinatorResult, TxnProducer, record_count

__all__ = [
    "AppendError",
    "AppendFailed",
    "CoordinatorContext",
    "CoordinatorError",
    "CoordinatorLoading",
    "CoordinatorNotAvailable",
    "CoordinatorRuntime",
    "NotCoordinator",
    "PartitionWriter",
    "ShardState",
]

log = logging.getLogger(__name__)

#: Unreadable places of a partition logged one by one at a load; the rest in one line.
_LOGGED_UNREADABLE = 20


# --- errors -----------------------------------------------------------------------------------


class CoordinatorError(Exception):
    """A request that cannot be served here and now; ``code`` is the answer."""

    code = ErrorCode.coordinator_not_available

    def __init__(self, message: str = "", code: ErrorCode | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class CoordinatorLoading(CoordinatorError):
    code = ErrorCode.coordinator_load_in_progress


class CoordinatorNotAvailable(CoordinatorError):
    code = ErrorCode.coordinator_not_available


class NotCoordinator(CoordinatorError):
    code = ErrorCode.not_coordinator


class AppendFailed(CoordinatorError):
    """The records of an operation could not be appended; ``code`` is what Kafka answers."""


class AppendError(Exception):
    """Raised by a ``PartitionWriter``: the append failed with the Kafka error ``code``."""

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(message or code.name)
        self.code = code


# --- the interfaces around the runtime ----------------------------------------------------------


class PartitionWriter(Protocol):
    """Where a shard's records go and come back from."""

    def append(self, partition: int, epoch: int, records: list, now: int,
               restoring: bool = False, producer: TxnProducer | None = None) -> int:
        """Append ``records`` (``CoordinatorRecord``s and runs) as one batch, written
        as the coordinator of ``partition`` at leader ``epoch``; return the offset after the
        batch, or raise ``AppendError``. A ``restoring`` append (a rollback's values, which
        nobody waits for) is made whatever the number of in-sync replicas, in several batches
        if need be. With ``producer``, the batch is that producer's transactional batch; a
        write of one ``EndTxnMarker`` is that marker's control batch."""

    def read(self, partition: int) -> Iterator[bytes]:
        """The partition's record batches (v2, as stored), in offset order: buffers of whole
        batches."""

    def written(self, partition: int, offset: int) -> asyncio.Future | None:
        """What to wait for before answering an append that ended at ``offset`` (None: answer
        at once, the records are committed): it fails when the records could not be made
        durable (replicated, or on disk)."""

    def high_watermark(self, partition: int) -> int:
        """The partition's high watermark: the records below it are committed."""

    def log_end_offset(self, partition: int) -> int:
        """The offset after the partition's last record."""


class Shard(Protocol):
    """What the runtime needs of a shard (the group coordinator's is
    ``brook.coordinator.group.shard.CoordinatorShard``): how to load it, replay records just
    written into it, settle its uncommitted writes, its timers."""

    def batch_replayer(self, now: int) -> BatchReplayer: ...

    def replay_records(self, records: list, now: int, end: int | None = None,
                       producer_id: int = -1) -> None: ...

    def committed(self, offset: int) -> None: ...

    def roll_back(self, end: int) -> list: ...

    def loaded(self, now: int) -> CoordinatorResult: ...

    def next_deadline(self) -> int | None: ...

    def poll(self, now: int) -> list[CoordinatorResult]: ...


S = TypeVar("S", bound=Shard)
Operation = Callable[[Any, int], "CoordinatorResult | list[CoordinatorResult]"]


# --- one partition ----------------------------------------------------------------------------

#: Why a broker whose lease on its ZooKeeper session lapsed answers NOT_COORDINATOR.
NOT_SERVING = "this broker's ZooKeeper session is not known to be alive"


class _Pending:
    """A write appended and waiting to be committed (``PartitionWriter.written``), with what
    answers it."""

    __slots__ = ("end", "result", "fut", "parked", "settled")

    def __init__(self, end: int, result: CoordinatorResult, fut: asyncio.Future | None,
                 parked: asyncio.Future | None) -> None:
        self.end = end  # the offset after its records
        self.result = result
        self.fut = fut
        self.parked = parked
        self.settled = False  # answered (or failed)


def _fail(futures, error: BaseException) -> None:
    for f in futures:
        if f is not None and not f.done():
            f.set_exception(error)
            f.exception()  # retrieved: a caller that went away leaves no warning


class ShardState(enum.Enum):
    LOADING = "loading"  # replaying its partition: COORDINATOR_LOAD_IN_PROGRESS
    ACTIVE = "active"  # serving
    FAILED = "failed"  # the load failed: NOT_COORDINATOR
    CLOSED = "closed"  # unloaded or stopped: answers nothing more


_VALID_PREVIOUS = {
    ShardState.LOADING: (),
    ShardState.ACTIVE: (ShardState.LOADING,),
    ShardState.FAILED: (ShardState.LOADING,),
    ShardState.CLOSED: (ShardState.LOADING, ShardState.ACTIVE, ShardState.FAILED),
}


class CoordinatorContext(Generic[S]):
    """One partition of the coordinator's topic coordinated here: its shard, epoch and worker.

    ``load_time_ms`` (how long the load took, None before it ended), ``records_loaded`` (the
    records it read: every record of its non-control batches, skipped ones included, as Kafka
    counts) and ``records_skipped`` (those that could not be decoded or replayed) are figures
    for the broker's metrics; read them, do not set them.
    """

    def __init__(self, runtime: CoordinatorRuntime, partition: int, epoch: int, shard: S) -> None:
        self.runtime = runtime
        self.partition = partition
        self.epoch = epoch
        self.shard = shard
        self.state = ShardState.LOADING
        self.queue: asyncio.Queue = asyncio.Queue()
        self.parked: dict[str, asyncio.Future] = {}
        self.wake = asyncio.Event()
        self.tasks: list[asyncio.Task] = []
        #: The deadline the timer task sleeps until (None: none); an operation that schedules
        #: an earlier one wakes it.
        self.timer_deadline: int | None = None
        self.load_time_ms: float | None = None
        self.load_failures = 0  # loads of this partition at this epoch that failed
        self.records_loaded = 0
        self.records_skipped = 0
        #: Writes appended and not yet committed, in log order.
        self.pending: deque[_Pending] = deque()
        #: The log end offset at the end of the load while the high watermark was below it:
        #: reads wait for the high watermark to get there (None: they need not).
        self.reads_from: int | None = None

    @property
    def name(self) -> str:
        return f"{self.runtime.topic}-{self.partition}"

    def transition_to(self, state: ShardState) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise RuntimeError(f"{self.name}: no transition from {self.state.value} to "
                               f"{state.value}")
        self.state = state
        self.wake.set()  # the timer task looks at the state again

    def start(self) -> None:
        self.tasks = [asyncio.create_task(self.work()), asyncio.create_task(self.timers())]

    def close(self, error: CoordinatorError | None) -> list[asyncio.Task]:
        """Stop serving: parked and queued requests get ``error`` (cancelled when None); returns
        the tasks to await."""
        if self.state is not ShardState.CLOSED:
            self.transition_to(ShardState.CLOSED)
        for task in self.tasks:
            task.cancel()
        waiting = list(self.parked.values())
        self.parked.clear()
        for write in self.pending:  # their records may yet be committed: not known here
            write.settled = True
            waiting += [write.fut, write.parked]
        self.pending.clear()
        while not self.queue.empty():
            _, fut = self.queue.get_nowait()
            if fut is not None:
                waiting.append(fut)
        for fut in waiting:
            if fut is None or fut.done():
                continue
            if error is None:
                fut.cancel()
            else:
                fut.set_exception(error)
                fut.exception()  # retrieved: a caller that went away leaves no warning
        return self.tasks

    # --- operations ------------------------------------------------------------------------

    def submit(self, op: Operation, fut: asyncio.Future | None) -> None:
        """Run ``op`` now if nothing is queued (the worker holds no operation between its
        awaits, so the context is idle), else queue it; ``fut`` gets its answer either way."""
        if self.queue.empty() and self.state is not ShardState.CLOSED:
            self._execute(op, fut)
        else:
            self.queue.put_nowait((op, fut))

    async def work(self) -> None:
        while self.state is not ShardState.CLOSED:
            op, fut = await self.queue.get()
            if fut is not None and fut.done():
                continue  # the caller is gone (its connection closed)
            self._execute(op, fut)

    def _execute(self, op: Operation, fut: asyncio.Future | None) -> None:
        try:
            now = self.runtime.clock.milliseconds()
            outcome = op(self.shard, now)
            if type(outcome) is list:  # the timers: several writes, nobody waits on them
                for result in outcome:
                    self._write(result, None, now)
                if fut is not None and not fut.done():
                    fut.set_result(None)
            else:
                self._write(outcome, fut, now)
        except CoordinatorError as exc:  # the operation's answer (a read that must wait)
            if fut is not None and not fut.done():
                fut.set_exception(exc)
        except Exception as exc:  # a bug in a shard: answer it, keep serving the others
            log.exception("%s: operation failed", self.name)
            if fut is not None and not fut.done():
                fut.set_exception(exc)
        try:
            deadline = self.shard.next_deadline()
        except Exception:  # a bug in a shard's timers: the operation is answered all the same
            log.exception("%s: reading the next deadline failed", self.name)
            return
        if deadline is not None and (self.timer_deadline is None or deadline < self.timer_deadline):
            self.wake.set()  # the timer task sleeps past the new deadline

    def _write(self, result: CoordinatorResult, fut: asyncio.Future | None, now: int) -> None:
        """Append the result's records, replay them, and complete what it answers (once they
        are committed)."""
        parked = None
        if result.parked is not None:
            old = self.parked.pop(result.parked, None)
            if old is not None and not old.done():
                old.cancel()
            parked = self.parked[result.parked] = self.runtime.loop.create_future()
        if result.records:
            writer = self.runtime.writer
            producer = result.producer
            try:
                end = writer.append(self.partition, self.epoch, result.records, now,
                                    producer=producer)
            except Exception as exc:
                self._append_failed(result, fut, exc, now)
                return
            wait = writer.written(self.partition, end)
            producer_id = -1 if producer is None else producer.producer_id
            if wait is None:  # committed at once (one broker, nothing to wait for)
                if result.replay:
                    self.shard.replay_records(result.records, now, None, producer_id)
            else:  # answered once committed; the next operations go on meanwhile
                if result.replay:
                    self.shard.replay_records(result.records, now, end, producer_id)
                write = _Pending(end, result, fut, parked)
                self.pending.append(write)
                wait.add_done_callback(lambda done: self._written(write, done))
                return
        self._answer(result, fut, parked, now)

    def _answer(self, result: CoordinatorResult, fut: asyncio.Future | None,
                parked: asyncio.Future | None, now: int) -> None:
        """The write is done (or there was none): what waited for it, then the response and
        the completions; NOT_COORDINATOR instead when this broker may no longer serve them
        (``CoordinatorRuntime.serving``), checked last, right before answering."""
        completions = result.completions
        if result.on_success is not None:
            completions = [*completions, *(result.on_success(now) or ())]
        if not self.runtime.serving():
            error = NotCoordinator(f"{self.name}: {NOT_SERVING}")
            _fail([fut, parked, *(self.parked.pop(c.key, None) for c in completions)], error)
            return
        if fut is not None and not fut.done():
            fut.set_result(parked if parked is not None else result.response)
        self._complete(completions)

    def _written(self, write: _Pending, done: asyncio.Future) -> None:
        """The wait of an appended write ended: committed, or failed."""
        if write.settled:
            return  # answered already: a later write was committed, or an earlier one failed
        exc = None if done.cancelled() else done.exception()
        if done.cancelled() or exc is not None:
            code = exc.code if isinstance(exc, AppendError) else ErrorCode.kafka_storage_error
            self._roll_back(write, code, exc)
        else:
            self._committed(write.end)

    def _committed(self, offset: int) -> None:
        """The high watermark reached ``offset``: every write ending there or before is
        committed (each waits for its own offset, and offsets are in log order) and answered."""
        self.shard.committed(offset)
        now = self.runtime.clock.milliseconds()
        pending = self.pending
        while pending and pending[0].end <= offset:
            write = pending.popleft()
            write.settled = True
            self._answer(write.result, write.fut, write.parked, now)

    def _roll_back(self, write: _Pending, code: ErrorCode, exc: BaseException | None) -> None:
        """``write`` was appended but could not be committed: it and every later write still
        waiting (made on top of it) are answered with the error, and what they replaced goes
        back (the records ``shard.roll_back`` gives): replayed, and appended so that the log
        says what the shard serves (best effort: if that append fails too, the log keeps the
        failed values, which a later load of the partition may serve; see
        docs/offsets-topic.md)."""
        failed = []
        while self.pending and self.pending[-1].end >= write.end:
            failed.append(self.pending.pop())
        failed.reverse()
        now = self.runtime.clock.milliseconds()
        restore = self.shard.roll_back(write.end)
        log.warning("%s: %d write(s) could not be committed (%s: %s): answering %s, "
                    "%d record(s) put back", self.name, len(failed), code.name.upper(),
                    exc, write.result.error_for(code).name.upper(), len(restore))
        if restore:
            self.shard.replay_records(restore, now)
            if self.state is not ShardState.CLOSED:
                try:
                    self.runtime.writer.append(self.partition, self.epoch, restore, now,
                                               restoring=True)
                except Exception as append_exc:
                    log.warning("%s: writing back %d record(s) failed: %s", self.name,
                                len(restore), append_exc)
        for w in failed:
            w.settled = True
            _fail([w.fut, w.parked], AppendFailed(str(exc), w.result.error_for(code)))

    def reading(self, fn: Callable[[Any, int], Any]) -> Operation:
        """The operation reading ``fn(shard, now)``: answered COORDINATOR_LOAD_IN_PROGRESS
        until the records loaded are committed (``reads_from``)."""
        def op(shard, now: int) -> CoordinatorResult:
            if self.reads_from is not None:
                if self.runtime.writer.high_watermark(self.partition) < self.reads_from:
                    raise CoordinatorLoading(f"{self.name}: the records loaded are not all "
                                             "replicated yet")
                self.reads_from = None  # the high watermark never moves back while leader
            return CoordinatorResult(response=fn(shard, now))
        return op

    def _complete(self, completions) -> None:
        for completion in completions:
            f = self.parked.pop(completion.key, None)
            if f is not None and not f.done():
                f.set_result(completion.response)

    def _append_failed(self, result: CoordinatorResult, fut: asyncio.Future | None,
                       exc: Exception, now: int) -> None:
        code = exc.code if isinstance(exc, AppendError) else ErrorCode.unknown_server_error
        answer = result.error_for(code)
        log.warning("%s: appending %d record(s) failed, answering %s: %s", self.name,
                    record_count(result.records), answer.name.upper(), exc)
        error = AppendFailed(str(exc), answer)
        after = result.failed(code, now)
        failed = [c.key for c in result.completions]
        if result.parked is not None:
            failed.append(result.parked)
        for key in failed:
            f = self.parked.pop(key, None)
            if f is not None and not f.done():
                f.set_exception(error)
                f.exception()  # retrieved: a caller that went away leaves no warning
        if fut is not None and not fut.done():
            fut.set_exception(error)
        self._follow_up(after, now)

    def _follow_up(self, result: CoordinatorResult, now: int) -> None:
        """Write and deliver what a failed append's ``on_failure`` returned (no request waits on
        it; if this append fails too, it is logged and its completions are sent all the same)."""
        if result.records:
            try:
                self.runtime.writer.append(self.partition, self.epoch, result.records, now)
            except Exception as exc:
                log.warning("%s: appending %d record(s) failed again: %s", self.name,
                            record_count(result.records), exc)
            else:
                if result.replay:
                    self.shard.replay_records(result.records, now)
                if result.on_success is not None:
                    self._complete(result.on_success(now) or ())
        self._complete(result.completions)

    async def timers(self) -> None:
        loop = asyncio.get_running_loop()
        clock = self.runtime.clock
        while self.state is not ShardState.CLOSED:
            self.wake.clear()
            if self.state is not ShardState.ACTIVE:
                await self.wake.wait()  # set when the load ends (and when closing)
                continue
            deadline = self.timer_deadline = self.shard.next_deadline()
            timeout = None if deadline is None else max(0, deadline - clock.milliseconds() + 1) / 1000
            try:
                async with asyncio.timeout(timeout):  # (not wait_for: see cluster/channel.py)
                    await self.wake.wait()
                continue
            except TimeoutError:
                pass
            if self.state is not ShardState.ACTIVE:
                continue
            done = loop.create_future()
            self.submit(_poll, done)
            try:
                await done
            except Exception:
                pass  # logged by the worker


def _poll(shard: Shard, now: int) -> list[CoordinatorResult]:
    return shard.poll(now)


# --- all partitions -----------------------------------------------------------------------------


class CoordinatorRuntime(Generic[S]):
    """The partitions of a coordinator's ``topic`` coordinated here, each request routed to the
    context of its key's partition (``partitioner(key, num_partitions)``: the group
    coordinator's is Kafka's hash of the group id)."""

    def __init__(self, num_partitions: int, writer: PartitionWriter, clock,
                 new_shard: Callable[[], S], *, topic: str,
                 partitioner: Callable[[str, int], int], load_retry_backoff_ms: int = 500,
                 load_retry_max_backoff_ms: int = 30_000,
                 lease: Callable[[], bool] | None = None) -> None:
        self.topic = topic
        self.num_partitions = num_partitions
        self._partitioner = partitioner
        #: Whether this broker may serve as a coordinator now (None: always): a broker on
        #: ZooKeeper serves only while its session is known to be alive (``SessionLease``).
        self.lease = lease
        self.load_retry_backoff_ms = load_retry_backoff_ms
        self.load_retry_max_backoff_ms = load_retry_max_backoff_ms
        self.writer = writer
        self.clock = clock
        self._new_shard = new_shard
        self.contexts: dict[int, CoordinatorContext[S]] = {}
        self.loop: asyncio.AbstractEventLoop | None = None  # the event loop it was started on
        self._to_load: asyncio.Queue | None = None
        self._loader: asyncio.Task | None = None
        self._loads_pending = 0
        self._loaded = asyncio.Event()
        self._stopped = False

    @property
    def started(self) -> bool:
        return self.loop is not None and not self._stopped

    def serving(self) -> bool:
        """Whether this broker may answer as a coordinator now: checked when a request is
        handled and again right before it is answered, so that a broker that was paused past
        its ZooKeeper session (another coordinates its partitions by then) answers nothing from
        before, not even in the moment before it notices."""
        return self.lease is None or self.lease()

    def start(self, load_all: bool = True) -> None:
        """Start (call from the event loop); with ``load_all``, load every partition at epoch 0
        (a single broker coordinates them all)."""
        self.loop = asyncio.get_running_loop()
        self._to_load = asyncio.Queue()
        self._loaded = asyncio.Event()
        self._loaded.set()
        self._loader = asyncio.create_task(self._load_queued())
        if load_all:
            for partition in range(self.num_partitions):
                self.load(partition, 0)

    # --- leadership ------------------------------------------------------------------------

    def load(self, partition: int, epoch: int) -> CoordinatorContext[S] | None:
        """Become the coordinator of ``partition`` at leader ``epoch``: a fresh context that
        loads in the background. A context of the same or a newer epoch is kept as it is."""
        current = self.contexts.get(partition)
        if current is not None and current.state is not ShardState.CLOSED:
            if current.epoch >= epoch:
                return None
            self.unload(partition)
        ctx = CoordinatorContext(self, partition, epoch, self._new_shard())
        if current is not None and current.epoch == epoch:
            ctx.load_failures = current.load_failures  # loaded again after a failure
        self.contexts[partition] = ctx
        ctx.start()
        self._loads_pending += 1
        self._loaded.clear()
        self._to_load.put_nowait(ctx)
        return ctx

    def unload(self, partition: int, epoch: int | None = None) -> list[asyncio.Task]:
        """Stop coordinating ``partition`` (unless its context is of a newer epoch than
        ``epoch``): its requests get NOT_COORDINATOR and its state is dropped. Returns the
        context's tasks, which end at their next turn."""
        ctx = self.contexts.get(partition)
        if ctx is None or (epoch is not None and ctx.epoch > epoch):
            return []
        del self.contexts[partition]
        log.info("%s: no longer the coordinator (epoch %d)", ctx.name, ctx.epoch)
        return ctx.close(NotCoordinator(f"{ctx.name} is no longer coordinated by this broker"))

    async def _load_queued(self) -> None:
        started = time.monotonic()
        total = loaded = partitions = 0
        while True:
            ctx = await self._to_load.get()
            try:
                if ctx.state is ShardState.LOADING:
                    total += await self._load(ctx)
                    loaded += ctx.state is ShardState.ACTIVE
                    partitions += 1
            finally:
                self._loads_pending -= 1
            if not self._loads_pending:
                if total:
                    seconds = time.monotonic() - started
                    log.info("loaded %d record(s) from %d of %d partition(s) of %s in %.3f s "
                             "(%.0f records/s)", total, loaded, partitions, self.topic,
                             seconds, total / seconds if seconds else 0)
                total = loaded = partitions = 0
                self._loaded.set()
                started = time.monotonic()

    async def _load(self, ctx: CoordinatorContext[S]) -> int:
        """Load one context, yielding to the event loop between buffers; it ends ACTIVE, or
        FAILED when a record cannot be read (or CLOSED if unloaded meanwhile)."""
        started = time.monotonic()
        now = self.clock.milliseconds()
        skipped = Skipped()
        count = 0
        try:
            replayer = ctx.shard.batch_replayer(now)
            for data in self.writer.read(ctx.partition):
                count += replay_batches(replayer, (data,), skipped)
                await asyncio.sleep(0)
                if ctx.state is not ShardState.LOADING:
                    return count  # unloaded while loading: what was read goes with it
            ctx._complete(ctx.shard.loaded(now).completions)
            end = self.writer.log_end_offset(ctx.partition)
            if self.writer.high_watermark(ctx.partition) < end:
                ctx.reads_from = end  # the previous leader's last records: not all replicated
        except Exception as exc:
            # The log itself cannot be read: serving would answer with whatever happened to
            # be loaded before the failure.
            ctx.load_failures += 1
            delay = min(self.load_retry_max_backoff_ms,
                        self.load_retry_backoff_ms * 2 ** (ctx.load_failures - 1))
            log.error("%s: loading failed after %d record(s), it answers NOT_COORDINATOR; "
                      "loading again in %d ms: %s", ctx.name, count, delay, exc)
            ctx.shard = self._new_shard()  # nothing half-loaded is kept
            ctx.transition_to(ShardState.FAILED)
            self.loop.call_later(delay / 1000, self._load_again, ctx)
        else:
            ctx.transition_to(ShardState.ACTIVE)
        finally:
            ctx.records_loaded = count
            ctx.records_skipped = sum(u.count for u in skipped.unreadable)
            ctx.load_time_ms = (time.monotonic() - started) * 1000
        unreadable = skipped.unreadable
        for u in unreadable[:_LOGGED_UNREADABLE]:
            log.error("%s: skipped %d record(s) at offset %d that cannot be read (what they "
                      "held is lost; the rest of the partition is served): %s", ctx.name,
                      u.count, u.offset, u.reason)
        if len(unreadable) > _LOGGED_UNREADABLE:
            log.error("%s: and %d more unreadable place(s), %d record(s) skipped in all",
                      ctx.name, len(unreadable) - _LOGGED_UNREADABLE, ctx.records_skipped)
        for version, n in sorted(skipped.unknown.items()):
            log.warning("%s: skipped %d record(s) of unknown record type %d (a newer Kafka's "
                        "records, or a left-over of an aborted upgrade)", ctx.name, n,
                        version)
        if count and ctx.state is ShardState.ACTIVE:
            log.info("%s: loaded %d record(s) in %.0f ms", ctx.name, count, ctx.load_time_ms)
        return count

    def _load_again(self, ctx: CoordinatorContext[S]) -> None:
        """A failed load tried again, if the context is still this partition's (not unloaded,
        not replaced by a newer epoch) and the runtime runs."""
        if self._stopped or self.contexts.get(ctx.partition) is not ctx \
                or ctx.state is not ShardState.FAILED:
            return
        ctx.close(None)
        self.load(ctx.partition, ctx.epoch)

    async def wait_loaded(self) -> None:
        """Until every load asked for so far has ended."""
        await self._loaded.wait()

    async def stop(self) -> None:
        self._stopped = True
        tasks = []
        for ctx in self.contexts.values():  # first: a cancellation lost in a race still ends
            tasks += ctx.close(None)
        if self._loader is not None:
            self._loader.cancel()
            tasks.append(self._loader)
        await asyncio.gather(*tasks, return_exceptions=True)

    # --- routing ---------------------------------------------------------------------------

    def partition_for(self, key: str) -> int:
        """The partition that coordinates ``key`` (a group id)."""
        return self._partitioner(key, self.num_partitions)

    def context_for(self, key: str) -> CoordinatorContext[S]:
        """The context of ``key``'s partition, ready to serve; else the CoordinatorError to
        answer."""
        return self.context_at(self.partition_for(key))

    def context_at(self, partition: int) -> CoordinatorContext[S]:
        """The context of ``partition``, ready to serve; else the CoordinatorError to answer."""
        if self.loop is None:
            raise CoordinatorNotAvailable("the coordinator is not running")
        ctx = self.contexts.get(partition)
        if ctx is None:
            raise NotCoordinator(f"{self.topic}-{partition} is not coordinated here")
        if not self.serving():
            raise NotCoordinator(f"{self.topic}-{partition}: {NOT_SERVING}")
        if ctx.state is ShardState.LOADING:
            raise CoordinatorLoading(f"{ctx.name} is loading")
        if ctx.state is ShardState.FAILED:
            raise NotCoordinator(f"{ctx.name} failed to load")
        if ctx.state is ShardState.CLOSED:
            raise CoordinatorNotAvailable("the coordinator is shutting down")
        return ctx

    async def run(self, key: str, op: Operation) -> Any:
        """Run ``op(shard, now)`` on the shard of ``key`` in turn; return its response, waiting
        for the completion of a parked one. Raises CoordinatorError subclasses (AppendFailed
        with Kafka's answer when the records could not be written)."""
        return await self.run_on(self.context_for(key), op)

    async def run_on(self, ctx: CoordinatorContext[S], op: Operation) -> Any:
        fut = self.loop.create_future()
        ctx.submit(op, fut)
        return await self.answer(fut)

    def submit(self, key: str, op: Operation) -> asyncio.Future:
        """``run`` without waiting: the operation takes its turn now (so requests that follow
        come after it) and the future gets what ``answer`` reads the response from; often it is
        done already. Raises CoordinatorError as ``run`` does."""
        return self.submit_at(self.partition_for(key), op)

    def submit_at(self, partition: int, op: Operation) -> asyncio.Future:
        """``submit`` to the shard of ``partition`` (what is not routed by a key: a transaction
        marker for the partition)."""
        ctx = self.context_at(partition)
        fut = self.loop.create_future()
        ctx.submit(op, fut)
        return fut

    @staticmethod
    async def answer(fut: asyncio.Future) -> Any:
        """The response of a submitted operation (waiting for a parked one's completion)."""
        answer = await fut
        if isinstance(answer, asyncio.Future):
            return await answer
        return answer

    async def read(self, key: str, fn: Callable[[S, int], Any]) -> Any:
        """Run a read-only ``fn(shard, now)`` on the shard of ``key`` in turn; return its value
        (COORDINATOR_LOAD_IN_PROGRESS while the records loaded are not all committed)."""
        ctx = self.context_for(key)
        return await self.run_on(ctx, ctx.reading(fn))

    async def read_all(self, fn: Callable[[S, int], Any]) -> tuple[list, bool]:
        """``fn(shard, now)`` on every serving shard, each in its turn: (the values, whether some
        partition is still loading)."""
        active = [c for c in self.contexts.values() if c.state is ShardState.ACTIVE]
        values = await asyncio.gather(*(self.run_on(c, c.reading(fn)) for c in active),
                                      return_exceptions=True)
        loading = (any(c.state is ShardState.LOADING for c in self.contexts.values())
                   or any(isinstance(v, CoordinatorLoading) for v in values))
        return [v for v in values if not isinstance(v, BaseException)], loading

    async def run_all(self, op: Operation) -> list[tuple[int, Any]]:
        """Run ``op`` on every serving shard, each in its turn: (partition, response or the
        exception it failed with) for each."""
        active = [c for c in self.contexts.values() if c.state is ShardState.ACTIVE]
        done = await asyncio.gather(*(self.run_on(c, op) for c in active), return_exceptions=True)
        return [(c.partition, outcome) for c, outcome in zip(active, done)]

