"""The runtime around the sans-I/O group coordinator: I/O, ordering, timers and loading.

Each partition of ``__consumer_offsets`` is a *shard* with its own coordinator core and one
worker task that runs the shard's operations one at a time, in arrival order. For every
operation the worker

1. calls the core with ``now`` (the broker's clock), which returns a ``Result``;
2. appends the result's records to the shard's partition as one batch (through a narrow
   ``OffsetsLog`` interface: the broker's partitions in production, a list in tests);
3. replays each record through the core (the same code that loads a partition);
4. answers the request and delivers the completions of parked replies.

A parked reply (a JoinGroup waiting for the join phase, a SyncGroup waiting for the leader)
is a future keyed by the core's ``parked`` key and resolved by a later ``Completion``.

If the append fails, nothing is replayed: the request and every parked reply the operation
would have completed get ``AppendFailed`` with Kafka's error for the failure, and the core is
told through its ``append_failed(result, error, now)`` hook when it has one.

Timers: each shard has a task that sleeps until the core's next deadline (woken early after
every operation, since an operation may schedule an earlier one) and then queues
``poll(now)`` as an ordinary operation, so a session expiry is just another write.

Loading: on start every shard replays its partition (``decode_key``/``decode_value``; record
types it does not know are skipped) before it serves; until then its groups get
COORDINATOR_LOAD_IN_PROGRESS.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from ..coordinator.classic import Result
from ..coordinator.partitioner import partition_for
from ..coordinator.records import (
    CorruptOffsetsRecordError,
    UnknownKey,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from ..records import Record as BatchRecord
from ..records import encode_batch
from ..storage.producer_state import AppendOrigin
from .errors import error_code_for

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"

#: Records replayed between two yields to the event loop while loading.
LOAD_YIELD_EVERY = 2000


class CoordinatorError(Exception):
    """A group request that cannot be served here and now; ``code`` is the answer."""

    code = ErrorCode.coordinator_not_available

    def __init__(self, message: str = "", code: ErrorCode | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class CoordinatorLoading(CoordinatorError):
    code = ErrorCode.coordinator_load_in_progress


class CoordinatorNotAvailable(CoordinatorError):
    code = ErrorCode.coordinator_not_available


class AppendFailed(CoordinatorError):
    """The records of an operation could not be appended; ``code`` is what Kafka answers."""


def append_error(exc: BaseException) -> ErrorCode:
    """Kafka's answer to a group request whose records could not be written."""
    code = error_code_for(exc)
    if code in (ErrorCode.unknown_topic_or_partition, ErrorCode.not_enough_replicas,
                ErrorCode.not_enough_replicas_after_append, ErrorCode.request_timed_out):
        return ErrorCode.coordinator_not_available
    if code in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    return ErrorCode.unknown_server_error


def offset_commit_append_error(exc: BaseException) -> ErrorCode:
    """As ``append_error``, for offset commits: too large a batch is INVALID_COMMIT_OFFSET_SIZE."""
    code = error_code_for(exc)
    if code in (ErrorCode.message_too_large, ErrorCode.record_list_too_large,
                ErrorCode.invalid_fetch_size):
        return ErrorCode.invalid_commit_offset_size
    return append_error(exc)


class OffsetsLog(Protocol):
    """Where a shard's records go and come back from."""

    def append(self, partition: int, records: list, now: int) -> None:
        """Append ``records`` (``classic.Record``: key and value objects) as one batch, or raise."""

    def read(self, partition: int) -> Iterator[tuple[bytes, bytes | None]]:
        """Every (key, value) stored in the partition, in offset order."""


class PartitionOffsetsLog:
    """The broker's ``__consumer_offsets`` partitions, written with the coordinator origin."""

    def __init__(self, broker) -> None:
        self.broker = broker

    def _partition(self, index: int):
        partition = self.broker.partition(OFFSETS_TOPIC, index)
        if partition is None:
            from .metadata import UnknownTopicError

            raise UnknownTopicError(f"{OFFSETS_TOPIC}-{index} does not exist")
        return partition

    def append(self, partition: int, records: list, now: int) -> None:
        batch = encode_batch([
            BatchRecord(offset=i, timestamp=now, key=encode_key(r.key),
                        value=None if r.value is None else encode_value(r.value))
            for i, r in enumerate(records)
        ], base_offset=0)
        self._partition(partition).append(batch, origin=AppendOrigin.COORDINATOR)

    def read(self, partition: int) -> Iterator[tuple[bytes, bytes | None]]:
        p = self.broker.partition(OFFSETS_TOPIC, partition)
        if p is None:
            return
        lg = p.log
        offset, end = lg.log_start_offset, lg.log_end_offset
        while offset < end:
            info = lg.read(offset, 5 * 1024 * 1024, max_offset=end)
            batches = info.batches()
            if not batches:
                break
            for batch in batches:
                if not batch.is_control:
                    for rec in batch.records:
                        if rec.offset >= offset and rec.key is not None:
                            yield rec.key, rec.value
                offset = max(offset, batch.last_offset + 1)


class ShardState(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"
    CLOSED = "closed"


class Shard:
    """One partition of ``__consumer_offsets``: its coordinator cores and its worker."""

    def __init__(self, runtime: GroupRuntime, index: int, core: Any, offsets: Any | None) -> None:
        self.runtime = runtime
        self.index = index
        self.core = core
        self.offsets = offsets
        self.state = ShardState.LOADING
        self.queue: asyncio.Queue = asyncio.Queue()
        self.parked: dict[str, asyncio.Future] = {}
        self.wake = asyncio.Event()
        self.tasks: list[asyncio.Task] = []

    # --- replay: both live and loading -----------------------------------------------------

    def replay(self, key: object, value: object | None, now: int) -> None:
        self.core.replay(key, value, now)
        if self.offsets is not None:
            self.offsets.replay(key, value, now)

    def load(self, records: Iterator[tuple[bytes, bytes | None]], now: int) -> int:
        count = 0
        for raw_key, raw_value in records:
            try:
                key = decode_key(raw_key)
                if isinstance(key, UnknownKey):
                    continue
                value = decode_value(key, raw_value)
            except CorruptOffsetsRecordError as exc:
                log.error("%s-%d: skipping a record that cannot be read: %s", OFFSETS_TOPIC,
                          self.index, exc)
                continue
            self.replay(key, value, now)
            count += 1
        return count

    # --- operations ------------------------------------------------------------------------

    def next_deadline(self) -> int | None:
        deadlines = [self.core.timers.next_deadline()]
        if self.offsets is not None:
            nd = getattr(self.offsets, "next_deadline", None)
            if nd is not None:
                deadlines.append(nd())
        deadlines = [d for d in deadlines if d is not None]
        return min(deadlines) if deadlines else None

    async def work(self) -> None:
        while self.state is not ShardState.CLOSED:
            op, fut, mapper = await self.queue.get()
            if fut is not None and fut.done():
                continue  # the caller is gone (its connection closed)
            try:
                self._run(op, fut, mapper)
            except Exception as exc:  # a bug in a core: answer it, keep serving the others
                log.exception("%s-%d: group operation failed", OFFSETS_TOPIC, self.index)
                if fut is not None and not fut.done():
                    fut.set_exception(exc)
            self.wake.set()

    def _run(self, op: Callable[[Shard, int], Result], fut: asyncio.Future | None,
             mapper: Callable[[BaseException], ErrorCode] = append_error) -> None:
        runtime = self.runtime
        now = runtime.clock.milliseconds()
        result = op(self, now)
        parked = None
        if result.parked is not None:
            old = self.parked.pop(result.parked, None)
            if old is not None and not old.done():
                old.cancel()
            parked = self.parked[result.parked] = asyncio.get_running_loop().create_future()
        if result.records:
            try:
                runtime.log.append(self.index, result.records, now)
            except Exception as exc:
                self._append_failed(result, parked, fut, exc, now, mapper)
                return
            for record in result.records:
                self.replay(record.key, record.value, now)
        if fut is not None and not fut.done():
            fut.set_result(parked if parked is not None else result.response)
        self._complete(result.completions)

    def _complete(self, completions) -> None:
        for completion in completions:
            f = self.parked.pop(completion.key, None)
            if f is not None and not f.done():
                f.set_result(completion.response)

    def _append_failed(self, result: Result, parked, fut, exc: Exception, now: int,
                       mapper: Callable[[BaseException], ErrorCode]) -> None:
        code = mapper(exc)
        log.warning("%s-%d: appending %d group record(s) failed, answering %s: %s", OFFSETS_TOPIC,
                    self.index, len(result.records), code.name.upper(), exc)
        error = AppendFailed(str(exc), code)
        hook = getattr(self.core, "append_failed", None)
        after = hook(result, code, now) if hook is not None else None
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
        if after is not None:
            self._follow_up(after, now)

    def _follow_up(self, result: Result, now: int) -> None:
        """Write and deliver what the core's failure hook returned (no request waits on it)."""
        if result.records:
            try:
                self.runtime.log.append(self.index, result.records, now)
            except Exception as exc:
                log.warning("%s-%d: appending %d group record(s) failed again: %s", OFFSETS_TOPIC,
                            self.index, len(result.records), exc)
            else:
                for record in result.records:
                    self.replay(record.key, record.value, now)
        self._complete(result.completions)

    async def timers(self) -> None:
        loop = asyncio.get_running_loop()
        clock = self.runtime.clock
        while self.state is not ShardState.CLOSED:
            self.wake.clear()
            deadline = self.next_deadline()
            timeout = None if deadline is None else max(0, deadline - clock.milliseconds() + 1) / 1000
            try:
                await asyncio.wait_for(self.wake.wait(), timeout)
                continue
            except TimeoutError:
                pass
            if self.state is not ShardState.ACTIVE:
                continue
            done = loop.create_future()
            self.queue.put_nowait((self._poll, done, append_error))
            try:
                await done
            except Exception:
                pass  # logged by the worker

    @staticmethod
    def _poll(shard: Shard, now: int) -> Result:
        result = shard.core.poll(now)
        if shard.offsets is not None and hasattr(shard.offsets, "poll"):
            result.merge(shard.offsets.poll(now))
        return result


class GroupRuntime:
    """All shards of ``__consumer_offsets``, routing each group to its partition's shard."""

    def __init__(self, num_partitions: int, log: OffsetsLog, clock,
                 new_core: Callable[[], Any], new_offsets: Callable[[Any], Any] | None = None) -> None:
        self.num_partitions = num_partitions
        self.log = log
        self.clock = clock
        self._new_core = new_core
        self._new_offsets = new_offsets
        self.shards: list[Shard] = []
        self._loader: asyncio.Task | None = None

    @property
    def started(self) -> bool:
        return bool(self.shards)

    def start(self) -> None:
        """Create the shards and start loading them (call from the event loop)."""
        self.shards = []
        for i in range(self.num_partitions):
            core = self._new_core()
            offsets = self._new_offsets(core) if self._new_offsets else None
            self.shards.append(Shard(self, i, core, offsets))
        for shard in self.shards:
            shard.tasks = [asyncio.create_task(shard.work()), asyncio.create_task(shard.timers())]
        self._loader = asyncio.create_task(self._load_all())

    async def _load_all(self) -> None:
        loop = asyncio.get_running_loop()
        total = 0
        started = loop.time()
        for shard in self.shards:
            records = self.log.read(shard.index)
            now = self.clock.milliseconds()
            while True:
                chunk = []
                for item in records:
                    chunk.append(item)
                    if len(chunk) >= LOAD_YIELD_EVERY:
                        break
                total += shard.load(iter(chunk), now)
                if len(chunk) < LOAD_YIELD_EVERY:
                    break
                await asyncio.sleep(0)
            hook = getattr(shard.core, "loaded", None)
            if hook is not None:
                shard._complete(hook(now).completions)
            if shard.offsets is not None and hasattr(shard.offsets, "loaded"):
                shard.offsets.loaded()
            shard.state = ShardState.ACTIVE
            shard.wake.set()
        if total:
            log.info("loaded %d group and offset record(s) from %s in %.2f s", total, OFFSETS_TOPIC,
                     loop.time() - started)

    async def wait_loaded(self) -> None:
        if self._loader is not None:
            await asyncio.shield(self._loader)

    async def stop(self) -> None:
        tasks = [t for s in self.shards for t in s.tasks]
        if self._loader is not None:
            tasks.append(self._loader)
        for shard in self.shards:  # first: a cancellation lost in a race still ends the loops
            shard.state = ShardState.CLOSED
        for t in tasks:
            t.cancel()
        for shard in self.shards:
            for f in shard.parked.values():
                if not f.done():
                    f.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # --- routing ---------------------------------------------------------------------------

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def shard_for(self, group_id: str) -> Shard:
        if not self.shards:
            raise CoordinatorNotAvailable("the group coordinator is not running")
        shard = self.shards[self.partition_for(group_id)]
        if shard.state is ShardState.LOADING:
            raise CoordinatorLoading(f"{OFFSETS_TOPIC}-{shard.index} is loading")
        if shard.state is ShardState.CLOSED:
            raise CoordinatorNotAvailable("the group coordinator is shutting down")
        return shard

    async def run(self, group_id: str, op: Callable[[Shard, int], Result],
                  append_error: Callable[[BaseException], ErrorCode] = append_error) -> Any:
        """Run ``op(shard, now)`` on the group's shard in turn; return its response, waiting
        for the completion of a parked one. Raises CoordinatorError subclasses; a failed append
        is answered with ``append_error(exc)``."""
        shard = self.shard_for(group_id)
        return await self.run_on(shard, op, append_error)

    async def run_on(self, shard: Shard, op: Callable[[Shard, int], Result],
                     append_error: Callable[[BaseException], ErrorCode] = append_error) -> Any:
        fut = asyncio.get_running_loop().create_future()
        shard.queue.put_nowait((op, fut, append_error))
        answer = await fut
        if isinstance(answer, asyncio.Future):
            return await answer
        return answer

    async def read(self, shard: Shard, fn: Callable[[Shard, int], Any]) -> Any:
        """Run a read-only ``fn(shard, now)`` in the shard's order; return what it returns."""
        return await self.run_on(shard, lambda s, now: Result(response=fn(s, now)))
