"""The transaction shard on the coordinator runtime with the marker sender: EndTxn answered once
its Prepare record is written, markers then written through the ``MarkerWriter`` (retried
partition by partition), CompleteCommit after; a coordinator that dies between PrepareCommit and
CompleteCommit is replaced by one that loads the log and finishes the markers; a sender whose
partition was unloaded, or that is told it is fenced, stops."""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode as E

from brook.clock import FakeClock
from brook.coordinator.common.runtime import CoordinatorRuntime
from brook.coordinator.transaction.batch_writer import encode_records
from brook.coordinator.transaction.markers import MarkerRequest, MarkerSender
from brook.coordinator.transaction.metadata import TransactionState
from brook.coordinator.transaction.partitioner import TRANSACTION_STATE_TOPIC, partition_for
from brook.coordinator.transaction.schemas import decode_key, decode_value
from brook.coordinator.transaction.shard import TransactionShard
from brook.records.batch import iter_batches, read_header

S = TransactionState


class MemoryLog:
    def __init__(self) -> None:
        self.partitions: dict[int, list[bytes]] = {}

    def end(self, partition: int) -> int:
        return sum(read_header(b).record_count for b in self.partitions.get(partition, []))

    def append(self, partition, epoch, records, now, restoring=False, producer=None) -> int:
        self.partitions.setdefault(partition, []).append(
            encode_records(records, now, self.end(partition)))
        return self.end(partition)

    def written(self, partition, offset):
        return None

    def high_watermark(self, partition):
        return self.end(partition)

    def log_end_offset(self, partition):
        return self.end(partition)

    def read(self, partition):
        yield from self.partitions.get(partition, [])

    def states(self, partition: int) -> list[tuple[str, int]]:
        out = []
        for batch in self.partitions.get(partition, []):
            for b in iter_batches(batch):
                for r in b.records:
                    value = decode_value(r.value)
                    out.append((decode_key(r.key).transactional_id,
                                None if value is None else S(value.status)))
        return out


class Markers:
    """A MarkerWriter answering from a script: each call pops the next answer per partition
    (NONE once the script is used up); ``hang`` makes every call wait forever."""

    def __init__(self, script=None, hang=False) -> None:
        self.requests: list[MarkerRequest] = []
        self.script = dict(script or {})
        self.hang = hang

    async def write_markers(self, request):
        self.requests.append(request)
        if self.hang:
            await asyncio.Event().wait()
        return {tp: (self.script.get(tp) or [E.none]).pop(0) if self.script.get(tp) else E.none
                for tp in request.partitions}


def coordinator(log, markers, clock=None, partitions=3, partition_exists=None):
    rt = CoordinatorRuntime(partitions, log, clock or FakeClock(), None,
                            topic=TRANSACTION_STATE_TOPIC, partitioner=partition_for)
    sender = MarkerSender(rt, markers, retry_backoff_ms=1, max_backoff_ms=4,
                          partition_exists=partition_exists)
    rt._new_shard = lambda: TransactionShard(markers=sender.send)
    return rt, sender


async def begin(rt, tid="t"):
    answer = await rt.run(tid, lambda s, now: s.init_producer_id(tid, 10_000, now,
                                                                 new_producer_id=42))
    assert answer.error == E.none
    code = await rt.run(tid, lambda s, now: s.add_partitions(
        tid, 42, answer.producer_epoch, [("a", 0), ("b", 1)], now))
    assert code == E.none
    return answer.producer_epoch


async def state(rt, tid="t"):
    return (await rt.read(tid, lambda s, now: s.describe(tid))).state


async def settle(sender, rounds=200):
    for _ in range(rounds):
        if not sender.tasks:
            return
        await asyncio.sleep(0.001)


async def ended(markers, commit=True, wait=True, partition_exists=None):
    """A running coordinator with transaction "t" of producer 42 on two partitions, ended
    (commit or abort) and, with ``wait``, its marker tasks settled: (log, runtime, sender,
    epoch)."""
    log = MemoryLog()
    rt, sender = coordinator(log, markers, partition_exists=partition_exists)
    rt.start()
    await rt.wait_loaded()
    epoch = await begin(rt)
    assert await rt.run("t", lambda s, now: s.end_txn("t", 42, epoch, commit, now)) == E.none
    if wait:
        await settle(sender)
    return log, rt, sender, epoch


def test_end_txn_then_markers_then_complete_commit():
    asyncio.run(_test_end_txn_then_markers_then_complete_commit())


async def _test_end_txn_then_markers_then_complete_commit():
    markers = Markers()
    log, rt, sender, epoch = await ended(markers)
    [request] = markers.requests
    assert request.commit and request.partitions == {("a", 0), ("b", 1)}
    assert request.producer_id == 42 and request.coordinator_epoch == 0
    assert await state(rt) is S.COMPLETE_COMMIT
    p = partition_for("t", 3)
    assert [s for _, s in log.states(p)] == [S.EMPTY, S.ONGOING, S.PREPARE_COMMIT,
                                            S.COMPLETE_COMMIT]
    await rt.stop()


def test_failed_partitions_are_tried_again_until_written():
    asyncio.run(_test_failed_partitions_are_tried_again_until_written())


async def _test_failed_partitions_are_tried_again_until_written():
    markers = Markers({("b", 1): [E.not_leader_or_follower, E.request_timed_out]})
    log, rt, sender, epoch = await ended(markers, commit=False)
    assert [r.partitions for r in markers.requests] == [{("a", 0), ("b", 1)}, {("b", 1)},
                                                       {("b", 1)}]
    assert await state(rt) is S.COMPLETE_ABORT
    await rt.stop()


def test_a_partition_that_no_longer_exists_is_owed_no_marker():
    asyncio.run(_test_a_partition_that_no_longer_exists_is_owed_no_marker())


async def _test_a_partition_that_no_longer_exists_is_owed_no_marker():
    gone = {("b", 1)}
    markers = Markers({("a", 0): [E.not_leader_or_follower]})
    log, rt, sender, epoch = await ended(markers, commit=False,
                                         partition_exists=lambda t, p: (t, p) not in gone)
    assert [r.partitions for r in markers.requests] == [{("a", 0)}, {("a", 0)}]
    assert await state(rt) is S.COMPLETE_ABORT
    await rt.stop()


def test_a_fenced_coordinator_stops_and_leaves_the_transaction_prepared():
    asyncio.run(_test_a_fenced_coordinator_stops_and_leaves_the_transaction_prepared())


async def _test_a_fenced_coordinator_stops_and_leaves_the_transaction_prepared():
    markers = Markers({("a", 0): [E.transaction_coordinator_fenced]})
    log, rt, sender, epoch = await ended(markers)
    assert len(markers.requests) == 1
    assert await state(rt) is S.PREPARE_COMMIT
    await rt.stop()


def test_a_coordinator_killed_before_complete_commit_is_finished_by_its_successor():
    asyncio.run(_test_a_coordinator_killed_before_complete_commit_is_finished_by_its_successor())


async def _test_a_coordinator_killed_before_complete_commit_is_finished_by_its_successor():
    hung = Markers(hang=True)
    log, first, first_sender, epoch = await ended(hung, wait=False)
    await asyncio.sleep(0.01)
    assert len(hung.requests) == 1  # its markers are on their way when it dies
    await first_sender.stop()
    await first.stop()
    p = partition_for("t", 3)
    assert log.states(p)[-1] == ("t", S.PREPARE_COMMIT)

    markers = Markers()
    second, sender = coordinator(log, markers)
    second.start(load_all=False)
    second.load(p, 1)  # the new leader of the partition, at the next epoch
    await second.wait_loaded()
    await settle(sender)
    [request] = markers.requests
    assert request.commit and request.producer_epoch == epoch and request.coordinator_epoch == 1
    assert await state(second) is S.COMPLETE_COMMIT
    assert log.states(p)[-1] == ("t", S.COMPLETE_COMMIT)
    await second.stop()


def test_a_sender_whose_partition_was_unloaded_stops():
    asyncio.run(_test_a_sender_whose_partition_was_unloaded_stops())


async def _test_a_sender_whose_partition_was_unloaded_stops():
    markers = Markers({("a", 0): [E.not_leader_or_follower] * 1000})
    log, rt, sender, epoch = await ended(markers, wait=False)
    await asyncio.sleep(0.01)
    rt.unload(partition_for("t", 3))
    await settle(sender)
    assert not sender.tasks
    p = partition_for("t", 3)
    assert log.states(p)[-1] == ("t", S.PREPARE_COMMIT)
    await rt.stop()


def test_a_partition_loaded_again_at_a_newer_epoch_sends_the_markers_again():
    asyncio.run(_test_a_partition_loaded_again_at_a_newer_epoch_sends_the_markers_again())


class HangsAtEpoch0(Markers):
    """Answers nothing to the coordinator of epoch 0 (its requests hang)."""

    async def write_markers(self, request):
        self.requests.append(request)
        if request.coordinator_epoch == 0:
            await asyncio.Event().wait()
        return {tp: E.none for tp in request.partitions}


async def _test_a_partition_loaded_again_at_a_newer_epoch_sends_the_markers_again():
    markers = HangsAtEpoch0()
    log, rt, sender, epoch = await ended(markers, wait=False)
    p = partition_for("t", 3)
    await asyncio.sleep(0.001)
    assert markers.requests  # the first job waits for its answer
    rt.load(p, 1)  # leadership moved away and back meanwhile: the new epoch's job is another
    await rt.wait_loaded()
    for _ in range(200):
        if await state(rt) is S.COMPLETE_COMMIT:
            break
        await asyncio.sleep(0.001)
    assert {r.coordinator_epoch for r in markers.requests} == {0, 1}
    assert await state(rt) is S.COMPLETE_COMMIT
    await sender.stop()
    await rt.stop()
