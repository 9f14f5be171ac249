"""Writing transaction markers on the partitions this broker leads: the partition side of a
transaction's end, for WriteTxnMarkers (`handlers.txn_markers`) and, in process, for a
transaction coordinator on this broker.

A marker is appended as Kafka's coordinator appends one (AppendOrigin.COORDINATOR, internal
topics allowed: `__consumer_offsets` gets its markers too) with acks=all semantics: it counts
once the high watermark passed it (and, with `log.flush.before.ack`, once it is on disk), and
the answer waits for that, bounded by a timeout (Kafka's request.timeout.ms). Each partition's
outcome is Kafka's error code: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER (and the
other leadership errors), NOT_ENOUGH_REPLICAS before the append and
NOT_ENOUGH_REPLICAS_AFTER_APPEND after it, INVALID_PRODUCER_EPOCH for a marker of an older
producer epoch, TRANSACTION_COORDINATOR_FENCED for one of an older coordinator epoch,
REQUEST_TIMED_OUT when the high watermark did not pass it in time (it may still).

A marker for a partition of `__consumer_offsets` is the group coordinator's to write, as in
Kafka 3.9's group coordinator (`completeTransaction`): it goes through the coordinator runtime
as an operation of the partition's shard, so that it is appended in turn with the shard's own
writes and replayed into it once (the producer's pending transactional offsets are committed
or dropped), live as when the partition is loaded. A partition that is not coordinated here, or
is still loading, is answered NOT_LEADER_OR_FOLLOWER, as Kafka translates the coordinator's
errors for the transaction coordinator, which tries again.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Iterable

from kio.schema.errors import ErrorCode

from ..coordinator.common.result import EndTxnMarker
from ..coordinator.common.runtime import AppendFailed, CoordinatorError
from ..coordinator.group.partitioner import OFFSETS_TOPIC
from ..replication.partition import NotEnoughReplicasAfterAppend, NotLeaderError
from .errors import error_code_for

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """One marker to write: a producer's transaction ended (committed or aborted) on some
    partitions, by the coordinator at `coordinator_epoch`."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    committed: bool
    partitions: tuple[tuple[str, int], ...]


def append_txn_marker(broker, topic: str, index: int,
                      marker: TxnMarker) -> tuple[ErrorCode, asyncio.Future | None]:
    """Append `marker` on one partition: (NONE, a future done once the marker is committed,
    whose result is the partition's error code) or (the error, None) when nothing was
    appended. Call on the event loop."""
    partition = broker.partition(topic, index)
    if partition is None:
        return ErrorCode.unknown_topic_or_partition, None
    if topic == OFFSETS_TOPIC and broker.coordinator is not None:
        return _append_through_group_coordinator(broker, index, marker)
    replicas = broker.replicas
    if replicas is not None:
        code = replicas.leader_error(partition)
        if code != ErrorCode.none:
            return code, None
        if len(partition.isr) < broker.min_insync_replicas(topic):
            return ErrorCode.not_enough_replicas, None
    try:
        info = partition.append_marker(marker.producer_id, marker.producer_epoch,
                                       marker.coordinator_epoch, marker.committed)
    except Exception as exc:  # noqa: BLE001 - answered as the partition's error
        code = error_code_for(exc)
        if code == ErrorCode.kafka_storage_error:
            broker.log_dir_failed(partition.log.directory, exc)
        log.info("marker of producer %d (epoch %d, coordinator epoch %d) refused on %s-%d: %s",
                 marker.producer_id, marker.producer_epoch, marker.coordinator_epoch, topic, index,
                 exc)
        return code, None
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    waits = []
    if partition.tracker is not None:
        waits.append(partition.wait_for_high_watermark(info.last_offset + 1,
                                                       broker.min_insync_replicas(topic)))
    if broker.group_commit is not None:
        waits.append(asyncio.shield(broker.group_commit.durable([partition.log])))
    if not waits:
        done.set_result(ErrorCode.none)
        return ErrorCode.none, done
    state = {"left": len(waits), "code": ErrorCode.none}

    def one_done(fut):
        exc = None if fut.cancelled() else fut.exception()  # retrieved even when given up on
        if done.done():
            return
        if fut.cancelled():
            code = ErrorCode.not_leader_or_follower
        else:
            if exc is None:
                code = None
            elif isinstance(exc, NotEnoughReplicasAfterAppend):
                code = ErrorCode.not_enough_replicas_after_append
            elif isinstance(exc, NotLeaderError):
                code = ErrorCode.not_leader_or_follower
            else:
                code = error_code_for(exc)
        if code is not None:
            state["code"] = code
        state["left"] -= 1
        if state["left"] == 0:
            done.set_result(state["code"])

    for wait in waits:
        wait.add_done_callback(one_done)

    def given_up(fut):  # a timeout: the high watermark waiter goes too
        if fut.cancelled():
            for wait in waits:
                wait.cancel()

    done.add_done_callback(given_up)
    return ErrorCode.none, done


#: The coordinator's errors, which a transaction coordinator does not expect: answered
#: NOT_LEADER_OR_FOLLOWER, which it retries (Kafka's translation).
_COORDINATOR_ERRORS = (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                       ErrorCode.coordinator_load_in_progress)


def _append_through_group_coordinator(broker, index: int, marker: TxnMarker
                                      ) -> tuple[ErrorCode, asyncio.Future | None]:
    """`append_txn_marker` on a partition of `__consumer_offsets`: an operation of its shard
    (`complete_transaction`), answered once the marker is committed."""
    end = EndTxnMarker(marker.producer_id, marker.producer_epoch, marker.coordinator_epoch,
                       marker.committed)
    try:
        answer = broker.coordinator.submit_at(
            index, lambda shard, now: shard.complete_transaction(end, now))
    except CoordinatorError:  # not coordinated here, loading, or shutting down
        return ErrorCode.not_leader_or_follower, None
    done = asyncio.get_running_loop().create_future()

    def answered(fut: asyncio.Future) -> None:
        exc = None if fut.cancelled() else fut.exception()  # retrieved even when given up on
        if done.done():
            return
        if fut.cancelled():
            code = ErrorCode.not_leader_or_follower
        elif exc is None:
            code = ErrorCode.none
        elif isinstance(exc, AppendFailed) and exc.code not in _COORDINATOR_ERRORS:
            code = exc.code  # the partition's answer: an epoch refused, too few replicas...
        elif isinstance(exc, CoordinatorError):
            code = ErrorCode.not_leader_or_follower  # unloaded meanwhile: ask the next leader
        else:
            code = ErrorCode.unknown_server_error
        done.set_result(code)

    answer.add_done_callback(answered)
    return ErrorCode.none, done


async def write_txn_markers(broker, markers: Iterable[TxnMarker], timeout_ms: int | None = None,
                            ) -> dict[tuple[int, str, int], ErrorCode]:
    """Write each marker on each of its partitions (all appended first, then waited for
    together); (producer id, topic, partition) -> error code once every one is committed or
    failed, or the timeout (default request.timeout.ms) passed: REQUEST_TIMED_OUT for those
    still waiting. The in-process entry point of a transaction coordinator."""
    if timeout_ms is None:
        timeout_ms = broker.config.request_timeout_ms
    results: dict[tuple[int, str, int], ErrorCode] = {}
    pending: dict[tuple[int, str, int], asyncio.Future] = {}
    for marker in markers:
        for topic, index in marker.partitions:
            key = (marker.producer_id, topic, index)
            code, waiting = append_txn_marker(broker, topic, index, marker)
            if waiting is None:
                results[key] = code
            else:
                pending[key] = waiting
    if pending:
        await asyncio.wait(pending.values(), timeout=max(timeout_ms, 0) / 1000)
        for key, fut in pending.items():
            if fut.done():
                results[key] = fut.result()
            else:
                fut.cancel()
                results[key] = ErrorCode.request_timed_out
    return results
