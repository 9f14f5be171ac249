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

An operation that finds its shard idle (nothing queued) runs at once, in the caller's task;
otherwise it is queued behind the others. Either way operations run one at a time, in arrival
order, through the same steps; running at once only saves the trip through the worker task.

Timers: each shard has a task that sleeps until the core's next deadline (woken early when an
operation schedules an earlier one) and then runs ``poll(now)`` as an ordinary operation, so a
session expiry is just another write.

Timers wait while a shard loads: a core's deadlines mean nothing before its state is loaded.

Loading: on start every shard replays its partition before it serves; until then its groups get
COORDINATOR_LOAD_IN_PROGRESS. The partition's record batches are read as stored and decoded by a
``RecordsDecoder``: runs of plain offset commits go to the cores' ``replay_commits`` (rows of
numbers, no key or value objects), every other record to the same ``replay`` as live records.
As in Kafka's coordinator loader, records of a type brook does not know (newer Kafka's group
types, a left-over of an aborted upgrade) are skipped with a warning, while a record that
cannot be decoded, or that a core fails to replay, fails the load: the shard is then FAILED,
logs the offset and the reason, and answers NOT_COORDINATOR for its groups rather than serve
offsets that may be wrong (a skipped tombstone would bring a deleted offset back). The other
shards load and serve as usual.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from ..coordinator.classic import Result
from ..coordinator.partitioner import partition_for
from ..coordinator.records import (
    CommitRun,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordsDecoder,
    UnknownKey,
    encode_commit_batch,
    encode_key,
    encode_value,
    record_pairs,
)
from ..records import Record as BatchRecord
from ..records import encode_batch
from ..records.batch import CONTROL_BIT, HEADER_SIZE, HEADER_STRUCT, LOG_OVERHEAD
from ..records.compression import CODEC_MASK, codec_of, decompress
from ..storage.producer_state import AppendOrigin
from .errors import error_code_for

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"

#: Bytes of record batches read (and replayed) between two yields to the event loop while
#: loading: about 12,000 offset commits, some 10 ms.
LOAD_BUFFER_SIZE = 1024 * 1024

_read_header = HEADER_STRUCT.unpack_from


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


class NotCoordinator(CoordinatorError):
    code = ErrorCode.not_coordinator


class LoadFailed(Exception):
    """A partition of ``__consumer_offsets`` could not be loaded (a record that cannot be
    decoded or replayed); the message names the record's batch."""


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
        """Append ``records`` (``classic.Record``s, key and value objects, and ``CommitRun``s)
        as one batch, or raise."""

    def read(self, partition: int) -> Iterator[bytes]:
        """The partition's record batches (v2, as stored), in offset order: buffers of whole
        batches."""


def encode_records(records: list, now: int, base_offset: int = 0) -> bytes:
    """One record batch of ``classic.Record``s and ``CommitRun``s with Kafka's keys and values,
    timestamped ``now`` (the log assigns the offsets)."""
    if base_offset == 0:
        batch = encode_commit_batch(records, now)  # an offset commit's batch, written faster
        if batch is not None:
            return batch
    return encode_batch([
        BatchRecord(offset=base_offset + i, timestamp=now, key=encode_key(key),
                    value=None if value is None else encode_value(value))
        for i, (key, value) in enumerate(record_pairs(records))
    ], base_offset=base_offset)


def record_count(records: list) -> int:
    """How many records ``records`` (``classic.Record``s and ``CommitRun``s) hold."""
    return sum(len(r.rows) if type(r) is CommitRun else 1 for r in records)


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
        self._partition(partition).append(encode_records(records, now),
                                          origin=AppendOrigin.COORDINATOR)

    def read(self, partition: int) -> Iterator[bytes]:
        p = self.broker.partition(OFFSETS_TOPIC, partition)
        if p is not None:
            yield from read_batches(p.log)


def read_batches(lg) -> Iterator[bytes]:
    """The record batches of a ``storage.Log`` from its start to its end, as stored: buffers of
    whole batches of about ``LOAD_BUFFER_SIZE`` bytes."""
    offset, end = lg.log_start_offset, lg.log_end_offset
    while offset < end:
        data = lg.read(offset, LOAD_BUFFER_SIZE, max_offset=end).read()
        whole, next_offset = _whole_batches(data)
        if not whole:
            break
        yield data[:whole] if whole < len(data) else data
        offset = next_offset


def _whole_batches(data: bytes) -> tuple[int, int]:
    """(bytes of the whole batches at the start of ``data``, the offset after the last)."""
    pos = 0
    next_offset = -1
    while pos + HEADER_SIZE <= len(data):
        header = _read_header(data, pos)
        size = header[1] + LOG_OVERHEAD
        if pos + size > len(data):
            break
        next_offset = header[0] + header[6] + 1  # base offset + last offset delta + 1
        pos += size
    return pos, next_offset


class ShardState(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"
    FAILED = "failed"  # the load failed: NOT_COORDINATOR for the shard's groups
    CLOSED = "closed"


class Shard:
    """One partition of ``__consumer_offsets``: its coordinator cores and its worker.

    ``load_time_ms`` (how long the last load took, None before one ended) and
    ``records_loaded`` (the records it read: every record of its non-control batches, skipped
    ones included, as Kafka counts) are figures for the broker's metrics; read them, do not
    set them.
    """

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
        #: The deadline the timer task sleeps until (None: none); an operation that schedules
        #: an earlier one wakes it.
        self.timer_deadline: int | None = None
        self.load_time_ms: float | None = None
        self.records_loaded = 0
        #: Every record is replayed into each of these, in this order.
        self._cores = [c for c in (core, offsets) if c is not None]

    def unload(self) -> None:
        """Drop what a failed load left in the cores: fresh, empty ones in their place."""
        self.core = self.runtime._new_core()
        self.offsets = self.runtime._new_offsets(self.core) if self.runtime._new_offsets else None
        self._cores = [c for c in (self.core, self.offsets) if c is not None]

    # --- replay: both live and loading -----------------------------------------------------

    def replay(self, key: object, value: object | None, now: int) -> None:
        for core in self._cores:
            core.replay(key, value, now)

    def replay_records(self, records: list, now: int) -> None:
        """Apply records just appended (``classic.Record``s and ``CommitRun``s), in order."""
        for record in records:
            if type(record) is CommitRun:
                self.replay_commits(record, now)
            else:
                self.replay(record.key, record.value, now)

    def replay_commits(self, run: CommitRun, now: int) -> None:
        """Apply a run of plain offset commits (see ``CommitRun``) to every core: through its
        ``replay_commits`` when it has one, else as one record at a time."""
        group, topic = run.group, run.topic
        rows = list(run.rows)
        for core in self._cores:
            bulk = getattr(core, "replay_commits", None)
            if bulk is not None:
                bulk(group, topic, rows, now)
                continue
            for partition, offset, epoch, commit in rows:
                core.replay(OffsetCommitKey(group, topic, partition),
                            OffsetCommitValue(offset, epoch, "", commit), now)

    def load(self, batches: Iterable[bytes], now: int, decoder: RecordsDecoder | None = None,
             unknown: Counter | None = None) -> int:
        """Replay buffers of whole record batches; return how many records they held. Raises
        ``LoadFailed`` at the first record that cannot be decoded or replayed. Record types
        brook does not read are counted in ``unknown`` (by type) and skipped."""
        decoder = decoder or RecordsDecoder()
        unknown = Counter() if unknown is None else unknown
        count = 0
        for data in batches:
            pos, end = 0, len(data)
            while pos < end:
                header = _read_header(data, pos)
                base_offset, attributes, records = header[0], header[5], header[12]
                size = header[1] + LOG_OVERHEAD
                body = data[pos + HEADER_SIZE:pos + size]
                pos += size
                if attributes & CONTROL_BIT:
                    continue  # transaction markers: brook writes no transactional offsets
                try:
                    if attributes & CODEC_MASK:
                        body = decompress(codec_of(attributes), body)
                    for item in decoder.decode(body, records):
                        if type(item) is CommitRun:
                            self.replay_commits(item, now)
                        elif type(item.key) is UnknownKey:
                            unknown[item.key.version] += 1
                        else:
                            self.replay(item.key, item.value, now)
                except Exception as exc:
                    raise LoadFailed(f"the batch at offset {base_offset}: {exc}") from exc
                count += records
        return count

    # --- operations ------------------------------------------------------------------------

    def next_deadline(self) -> int | None:
        """The earliest deadline of the cores' timers (None: none)."""
        deadline = self.core.timers.next_deadline()
        if self.offsets is not None:
            other = self.offsets.next_deadline()
            if other is not None and (deadline is None or other < deadline):
                deadline = other
        return deadline

    def submit(self, op: Callable[[Shard, int], Result], fut: asyncio.Future,
               mapper: Callable[[BaseException], ErrorCode] = append_error) -> None:
        """Run ``op`` now if nothing is queued (the worker holds no operation between its
        awaits, so the shard is idle), else queue it; ``fut`` gets its answer either way."""
        if self.queue.empty() and self.state is not ShardState.CLOSED:
            self._execute(op, fut, mapper)
        else:
            self.queue.put_nowait((op, fut, mapper))

    async def work(self) -> None:
        while self.state is not ShardState.CLOSED:
            op, fut, mapper = await self.queue.get()
            if fut is not None and fut.done():
                continue  # the caller is gone (its connection closed)
            self._execute(op, fut, mapper)

    def _execute(self, op: Callable[[Shard, int], Result], fut: asyncio.Future | None,
                 mapper: Callable[[BaseException], ErrorCode]) -> None:
        try:
            self._run(op, fut, mapper)
        except Exception as exc:  # a bug in a core: answer it, keep serving the others
            log.exception("%s-%d: group operation failed", OFFSETS_TOPIC, self.index)
            if fut is not None and not fut.done():
                fut.set_exception(exc)
        try:
            deadline = self.next_deadline()
        except Exception:  # a bug in a core's timers: the operation is answered all the same
            log.exception("%s-%d: reading the next deadline failed", OFFSETS_TOPIC, self.index)
            return
        if deadline is not None and (self.timer_deadline is None or deadline < self.timer_deadline):
            self.wake.set()  # the timer task sleeps past the new deadline

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
            parked = self.parked[result.parked] = runtime.loop.create_future()
        if result.records:
            try:
                runtime.log.append(self.index, result.records, now)
            except Exception as exc:
                self._append_failed(result, parked, fut, exc, now, mapper)
                return
            self.replay_records(result.records, now)
        if fut is not None and not fut.done():
            fut.set_result(parked if parked is not None else result.response)
        if result.completions:
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
                    self.index, record_count(result.records), code.name.upper(), exc)
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
                            self.index, record_count(result.records), exc)
            else:
                self.replay_records(result.records, now)
        self._complete(result.completions)

    async def timers(self) -> None:
        loop = asyncio.get_running_loop()
        clock = self.runtime.clock
        while self.state is not ShardState.CLOSED:
            self.wake.clear()
            if self.state is not ShardState.ACTIVE:
                await self.wake.wait()  # set when the load ends (and when closing)
                continue
            deadline = self.timer_deadline = self.next_deadline()
            timeout = None if deadline is None else max(0, deadline - clock.milliseconds() + 1) / 1000
            try:
                await asyncio.wait_for(self.wake.wait(), timeout)
                continue
            except TimeoutError:
                pass
            if self.state is not ShardState.ACTIVE:
                continue
            done = loop.create_future()
            self.submit(self._poll, done)
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
        self.loop: asyncio.AbstractEventLoop | None = None  # the event loop it was started on

    @property
    def started(self) -> bool:
        return bool(self.shards)

    def start(self) -> None:
        """Create the shards and start loading them (call from the event loop)."""
        self.loop = asyncio.get_running_loop()
        self.shards = []
        for i in range(self.num_partitions):
            core = self._new_core()
            offsets = self._new_offsets(core) if self._new_offsets else None
            self.shards.append(Shard(self, i, core, offsets))
        for shard in self.shards:
            shard.tasks = [asyncio.create_task(shard.work()), asyncio.create_task(shard.timers())]
        self._loader = asyncio.create_task(self._load_all())

    async def _load_all(self) -> None:
        started = time.monotonic()
        total = loaded = 0
        for shard in self.shards:
            total += await self._load(shard)
            loaded += shard.state is ShardState.ACTIVE
        if total:
            seconds = time.monotonic() - started
            log.info("loaded %d record(s) from %d of %d partition(s) of %s in %.3f s "
                     "(%.0f records/s)", total, loaded, len(self.shards), OFFSETS_TOPIC, seconds,
                     total / seconds if seconds else 0)

    async def _load(self, shard: Shard) -> int:
        """Load one shard, yielding to the event loop between buffers; it ends ACTIVE, or
        FAILED when a record cannot be read."""
        started = time.monotonic()
        now = self.clock.milliseconds()
        decoder = RecordsDecoder()
        unknown: Counter = Counter()
        count = 0
        try:
            for data in self.log.read(shard.index):
                count += shard.load((data,), now, decoder, unknown)
                await asyncio.sleep(0)
            hook = getattr(shard.core, "loaded", None)
            if hook is not None:
                shard._complete(hook(now).completions)
            if shard.offsets is not None and hasattr(shard.offsets, "loaded"):
                shard.offsets.loaded()
        except Exception as exc:
            # Kafka's loader fails the partition here too: serving it would answer with
            # whatever happened to be loaded before the bad record.
            log.error("%s-%d: loading failed after %d record(s), its groups get NOT_COORDINATOR "
                      "until the broker restarts: %s", OFFSETS_TOPIC, shard.index, count, exc)
            shard.state = ShardState.FAILED
            shard.unload()
        else:
            shard.state = ShardState.ACTIVE
        finally:
            shard.records_loaded = count
            shard.load_time_ms = (time.monotonic() - started) * 1000
            shard.wake.set()
        for version, n in sorted(unknown.items()):
            log.warning("%s-%d: skipped %d record(s) of unknown record type %d (a newer Kafka's "
                        "group records, or a left-over of an aborted upgrade)", OFFSETS_TOPIC,
                        shard.index, n, version)
        if count and shard.state is ShardState.ACTIVE:
            log.info("%s-%d: loaded %d record(s) in %.0f ms", OFFSETS_TOPIC, shard.index, count,
                     shard.load_time_ms)
        return count

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
        if shard.state is ShardState.FAILED:
            raise NotCoordinator(f"{OFFSETS_TOPIC}-{shard.index} failed to load")
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
        fut = self.loop.create_future()
        shard.submit(op, fut, append_error)
        answer = await fut
        if isinstance(answer, asyncio.Future):
            return await answer
        return answer

    async def delete_topics_offsets(self, topics: Collection[str]) -> int:
        """Tombstone every group's committed offsets of these deleted topics, on every active
        shard (in each shard's order, as any other group operation); returns how many. A
        shard that fails is logged: the topics are gone all the same."""
        topics = frozenset(topics)

        def op(shard: Shard, now: int) -> Result:
            if shard.offsets is None:
                return Result(response=0)
            records = shard.offsets.delete_topics(topics)
            return Result(records=records, response=len(records))

        shards = [s for s in self.shards if s.state is ShardState.ACTIVE]
        done = await asyncio.gather(*(self.run_on(s, op) for s in shards), return_exceptions=True)
        count = 0
        for shard, outcome in zip(shards, done):
            if isinstance(outcome, BaseException):
                log.warning("%s-%d: removing the committed offsets of deleted topic(s) %s "
                            "failed: %s", OFFSETS_TOPIC, shard.index, ", ".join(sorted(topics)),
                            outcome)
            else:
                count += outcome
        return count

    async def read(self, shard: Shard, fn: Callable[[Shard, int], Any]) -> Any:
        """Run a read-only ``fn(shard, now)`` in the shard's order; return what it returns."""
        return await self.run_on(shard, lambda s, now: Result(response=fn(s, now)))
