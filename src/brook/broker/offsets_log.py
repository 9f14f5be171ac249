"""The broker's side of a coordinator: the partitions of its topic as the runtime's
``PartitionWriter`` (``brook.coordinator.common.runtime``). The group coordinator's is
``PartitionOffsetsLog`` (``__consumer_offsets``), the transaction coordinator's
``transaction_state_log`` (``__transaction_state``); only the topic, the encoder of the records,
whether tombstones alone may be split into several batches and the replication timeout differ.

Appends are written with the coordinator origin (clients never write the offsets topic) and a
failure is reported as the Kafka error of the exception the partition raised. A transactional
write (TxnOffsetCommit) is the producer's batch without a sequence: with the coordinator origin
the partition checks its producer epoch and not its sequence, as Kafka's log does for its
coordinators' appends, so it needs no sequence of the producer's. A write of a transaction
marker (``EndTxnMarker``, the group coordinator's way of taking WriteTxnMarkers for its own
partitions) is appended as the partition's ``append_marker``, which checks the producer and
coordinator epochs as for any partition. A restoring
append (the old values a rollback puts back) skips the min.insync.replicas check: nobody is
acknowledged for it, and it makes the log say what the coordinator serves. Reading gives the
partition's batches as stored, in buffers of whole batches for the loader.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

from kio.schema.errors import ErrorCode

from ..coordinator.common.result import CoordinatorRecord, EndTxnMarker, TxnProducer
from ..coordinator.common.runtime import AppendError
from ..coordinator.group.batch_writer import encode_records
from ..coordinator.group.partitioner import OFFSETS_TOPIC
from ..coordinator.transaction.batch_writer import encode_records as encode_txn_records
from ..coordinator.transaction.partitioner import TRANSACTION_STATE_TOPIC
from ..records.batch import HEADER_SIZE, HEADER_STRUCT, LOG_OVERHEAD
from ..storage.producer_state import UNVERIFIED, AppendOrigin
from .errors import error_code_for
from ..replication.partition import NotEnoughReplicasAfterAppend

#: Bytes of record batches read (and replayed) between two yields to the event loop while
#: loading: about 12,000 offset commits, some 10 ms.
LOAD_BUFFER_SIZE = 1024 * 1024

_read_header = HEADER_STRUCT.unpack_from


class PartitionCoordinatorLog:
    """The broker's partitions of a coordinator's ``topic``, written with the coordinator origin:
    records serialized by ``encode(records, now, max_batch_bytes=...)``; with
    ``split_tombstones``, a write of tombstones alone may take several batches (see
    ``_split_limit``); a write waits ``timeout_ms()`` at most for its replicas."""

    def __init__(self, broker, topic: str, encode, split_tombstones: bool,
                 timeout_ms: Callable[[], int]) -> None:
        self.broker = broker
        self.topic = topic
        self.encode = encode
        self.split_tombstones = split_tombstones
        self.timeout_ms = timeout_ms

    def append(self, partition: int, epoch: int, records: list, now: int,
               restoring: bool = False, producer: TxnProducer | None = None) -> int:
        p = self.broker.partition(self.topic, partition)
        if p is None:
            raise AppendError(ErrorCode.unknown_topic_or_partition,
                              f"{self.topic}-{partition} does not exist")
        if self.broker.replicas is not None:
            # A cluster: only the leader at the coordinator's epoch writes (a deposed
            # coordinator's late write is refused), with enough replicas in sync.
            if p.tracker is None or p.leader_epoch != epoch:
                raise AppendError(ErrorCode.not_leader_or_follower,
                                  f"{self.topic}-{partition} is not led here at epoch {epoch}")
            if not restoring and len(p.isr) < self.broker.min_insync_replicas(self.topic):
                raise AppendError(ErrorCode.not_enough_replicas,
                                  f"{self.topic}-{partition} has {len(p.isr)} in-sync replicas")
        try:
            if len(records) == 1 and type(records[0]) is EndTxnMarker:
                m = records[0]
                p.append_marker(m.producer_id, m.producer_epoch, m.coordinator_epoch, m.committed)
                return p.log_end_offset
            limit = (p.log.config.max_message_bytes if restoring
                     else _split_limit(p, records) if self.split_tombstones else None)
            p.append(self.encode(records, now, max_batch_bytes=limit, producer=producer),
                     origin=AppendOrigin.COORDINATOR,
                     guard=UNVERIFIED if producer is None else producer.guard)
        except Exception as exc:
            code = error_code_for(exc)
            if code == ErrorCode.kafka_storage_error:
                self.broker.log_dir_failed(p.log.directory, exc)
            raise AppendError(code, str(exc)) from exc
        return p.log_end_offset

    def written(self, partition: int, offset: int) -> asyncio.Future | None:
        """What must happen before answering: in a cluster, every in-sync replica has the
        records (the high watermark passed them, as acks=all); with log.flush.before.ack, the
        fsync (shared with others)."""
        p = self.broker.partition(self.topic, partition)
        if p is None:
            return None
        waits = []
        if p.tracker is not None and p.high_watermark < offset:
            min_isr = self.broker.min_insync_replicas(self.topic)
            waits.append(_as_append_error(p.wait_for_high_watermark(offset, min_isr),
                                          self.timeout_ms() / 1000))
        committer = self.broker.group_commit
        if committer is not None:
            waits.append(committer.durable((p.log,)))
        if not waits:
            return None
        return waits[0] if len(waits) == 1 else asyncio.ensure_future(_all(waits))

    def high_watermark(self, partition: int) -> int:
        p = self.broker.partition(self.topic, partition)
        return 0 if p is None else p.high_watermark

    def log_end_offset(self, partition: int) -> int:
        p = self.broker.partition(self.topic, partition)
        return 0 if p is None else p.log_end_offset

    def read(self, partition: int) -> Iterator[bytes]:
        p = self.broker.partition(self.topic, partition)
        if p is not None:
            yield from read_batches(p.log)


def PartitionOffsetsLog(broker) -> PartitionCoordinatorLog:
    """The group coordinator's ``__consumer_offsets`` partitions."""
    return PartitionCoordinatorLog(broker, OFFSETS_TOPIC, encode_records, True,
                                   lambda: broker.config.offsets_commit_timeout_ms)


def transaction_state_log(broker) -> PartitionCoordinatorLog:
    """The transaction coordinator's ``__transaction_state`` partitions (a write waits for its
    replicas as long as Kafka's: request.timeout.ms)."""
    return PartitionCoordinatorLog(broker, TRANSACTION_STATE_TOPIC, encode_txn_records, False,
                                   lambda: broker.config.request_timeout_ms)


def _split_limit(p, records: list) -> int | None:
    """Tombstones alone (offsets expiring, a group deleted) may be written in several batches
    within max.message.bytes: past some 15,000 offsets one batch is refused, and they would
    never expire. Anything else (a commit, a group's metadata) stays one batch, as Kafka
    writes it, so it is applied whole or not at all (a commit too large is refused)."""
    if all(type(r) is CoordinatorRecord and r.value is None for r in records):
        return p.log.config.max_message_bytes
    return None


def _as_append_error(fut: asyncio.Future, timeout_s: float) -> asyncio.Future:
    """The high watermark's future, failing with AppendError(NOT_LEADER_OR_FOLLOWER) when
    leadership moved before the records were replicated (answered NOT_COORDINATOR), with
    NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below min.insync.replicas while they
    waited (answered COORDINATOR_NOT_AVAILABLE), and with
    REQUEST_TIMED_OUT after ``timeout_s`` (answered COORDINATOR_NOT_AVAILABLE, as Kafka; the
    records stay in the log and in the coordinator's state, to be replicated or truncated)."""
    loop = asyncio.get_running_loop()
    out = loop.create_future()

    def timed_out() -> None:
        if not out.done():
            out.set_exception(AppendError(ErrorCode.request_timed_out,
                                          f"not replicated within {timeout_s * 1000:.0f} ms"))
            out.exception()  # retrieved: a write whose caller went away leaves no warning

    timer = loop.call_later(timeout_s, timed_out)

    def done(f: asyncio.Future) -> None:
        timer.cancel()
        if out.done():
            return
        if f.cancelled() or f.exception() is not None:
            exc = None if f.cancelled() else f.exception()
            code = (ErrorCode.not_enough_replicas_after_append
                    if isinstance(exc, NotEnoughReplicasAfterAppend) else ErrorCode.not_leader_or_follower)
            out.set_exception(AppendError(code, str(exc or "cancelled")))
            out.exception()
        else:
            out.set_result(None)

    fut.add_done_callback(done)
    return out


async def _all(waits: list) -> None:
    for w in waits:
        await w


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
