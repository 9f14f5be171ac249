"""The runtime answers a write once it is committed and reads at the committed offsets: a commit
waiting for its replicas is not fetched, a commit whose wait fails is rolled back (with every
later one) and written back, reads of a partition just loaded wait for its high watermark, and
a broker whose lease on its ZooKeeper session lapsed answers NOT_COORDINATOR, when a request is
handled and again right before it is answered."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.errors import ErrorCode

from brook.clock import FakeClock
from brook.coordinator.common.runtime import (
    AppendError,
    AppendFailed,
    CoordinatorLoading,
    CoordinatorRuntime,
    NotCoordinator,
)
from brook.coordinator.group.classic import GroupConfig
from brook.coordinator.group.offsets import (CommitPartition, CommitTopic, OffsetCommit,
                                            offset_commit_append_error)
from brook.coordinator.group.partitioner import OFFSETS_TOPIC, partition_for
from brook.coordinator.group.shard import CoordinatorShard
from tests.coordinator.test_runtime import MemoryLog


class HeldLog(MemoryLog):
    """Each append waits for a future of its own (``waits[end]``), resolved by the test, as a
    cluster's append waits for its partition's high watermark."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: dict[int, asyncio.Future] = {}

    def written(self, partition: int, offset: int):
        fut = self.waits[offset] = asyncio.get_running_loop().create_future()
        return fut

    def commit_at(self, end: int) -> None:
        self.waits[end].set_result(None)

    def fail_at(self, end: int, code: ErrorCode) -> None:
        self.waits[end].set_exception(AppendError(code))


class Lease:
    def __init__(self) -> None:
        self.held = True

    def __call__(self) -> bool:
        return self.held


def runtime(log: MemoryLog, lease=None) -> CoordinatorRuntime:
    cfg = GroupConfig(initial_rebalance_delay_ms=0)
    return CoordinatorRuntime(1, log, FakeClock(), lambda: CoordinatorShard(cfg),
                              topic=OFFSETS_TOPIC, partitioner=partition_for, lease=lease)


def commit_op(offset: int, partition: int = 0, metadata: str = ""):
    request = OffsetCommit("g", (CommitTopic("t", (CommitPartition(partition, offset,
                                                                   metadata=metadata),)),))
    return lambda shard, now: shard.commit_offsets(request, now)


def fetch(rt: CoordinatorRuntime):
    async def go():
        got = await rt.read("g", lambda shard, now: shard.fetch_offsets("g", [("t", [0, 1])]))
        return {f.partition: f.offset for f in got}
    return go()


async def settle():
    for _ in range(3):
        await asyncio.sleep(0)


def run(main):
    asyncio.run(asyncio.wait_for(main(), 10))


def test_a_commit_is_answered_and_fetched_once_committed_not_before():
    async def main():
        log = HeldLog()
        rt = runtime(log)
        rt.start()
        await rt.wait_loaded()
        try:
            first = asyncio.ensure_future(rt.run("g", commit_op(5)))
            second = asyncio.ensure_future(rt.run("g", commit_op(6)))
            await settle()
            assert sorted(log.waits) == [1, 2] and not first.done() and not second.done()
            assert await fetch(rt) == {0: -1, 1: -1}
            log.commit_at(1)
            assert (await first)[0][2] == ErrorCode.none
            assert await fetch(rt) == {0: 5, 1: -1}
            assert not second.done()
            log.commit_at(2)
            assert (await second)[0][2] == ErrorCode.none
            assert await fetch(rt) == {0: 6, 1: -1}
        finally:
            await rt.stop()

    run(main)


def test_a_later_write_committed_first_answers_the_earlier_ones():
    async def main():
        log = HeldLog()
        rt = runtime(log)
        rt.start()
        await rt.wait_loaded()
        try:
            first = asyncio.ensure_future(rt.run("g", commit_op(5)))
            second = asyncio.ensure_future(rt.run("g", commit_op(6, 1)))
            await settle()
            log.commit_at(2)  # the high watermark passed both
            assert (await first)[0][2] == ErrorCode.none
            assert (await second)[0][2] == ErrorCode.none
            assert await fetch(rt) == {0: 5, 1: 6}
            log.commit_at(1)  # late: changes nothing
            await settle()
            assert await fetch(rt) == {0: 5, 1: 6}
            assert not rt.contexts[0].pending and not rt.contexts[0].shard.offsets.uncommitted
        finally:
            await rt.stop()

    run(main)


@pytest.mark.parametrize("code, answer", [
    (ErrorCode.not_enough_replicas_after_append, ErrorCode.coordinator_not_available),
    (ErrorCode.request_timed_out, ErrorCode.coordinator_not_available),
    (ErrorCode.not_leader_or_follower, ErrorCode.not_coordinator),
])
def test_a_commit_whose_wait_fails_is_never_fetched_and_its_old_value_is_written_back(code, answer):
    async def main():
        log = HeldLog()
        rt = runtime(log)
        rt.start()
        await rt.wait_loaded()
        try:
            ok = asyncio.ensure_future(rt.run("g", commit_op(5)))
            await settle()
            log.commit_at(1)
            await ok
            failing = asyncio.ensure_future(rt.run("g", commit_op(6, metadata="m")))
            later = asyncio.ensure_future(rt.run("g", commit_op(60, 1)))
            await settle()
            assert await fetch(rt) == {0: 5, 1: -1}
            log.fail_at(2, code)
            for f in (failing, later):  # the later one was made on top of the failed one
                with pytest.raises(AppendFailed) as err:
                    await f
                assert err.value.code == offset_commit_append_error(code) == answer
            assert await fetch(rt) == {0: 5, 1: -1}
            # What the shard serves is what the log says: the old values written back.
            [(_, restored)] = log.restored
            assert sorted((r.key.partition, r.value and r.value.offset) for r in restored) == [
                (0, 5), (1, None)]
            log.commit_at(3)  # the failed writes' waits end late, or their records get replicated
            await settle()
            assert await fetch(rt) == {0: 5, 1: -1}
            # A commit after the rollback goes on from there.
            again = asyncio.ensure_future(rt.run("g", commit_op(7)))
            await settle()
            log.commit_at(max(log.waits))
            assert (await again)[0][2] == ErrorCode.none
            assert await fetch(rt) == {0: 7, 1: -1}
        finally:
            await rt.stop()
        log.hold = None
        reloaded = runtime(MemoryLog())
        reloaded.writer.partitions = log.partitions  # the same records, loaded afresh
        reloaded.start()
        await reloaded.wait_loaded()
        try:
            assert await fetch(reloaded) == {0: 7, 1: -1}
        finally:
            await reloaded.stop()

    run(main)


def test_an_earlier_write_still_waiting_is_kept_when_a_later_one_fails():
    async def main():
        log = HeldLog()
        rt = runtime(log)
        rt.start()
        await rt.wait_loaded()
        try:
            first = asyncio.ensure_future(rt.run("g", commit_op(5)))
            second = asyncio.ensure_future(rt.run("g", commit_op(6)))
            await settle()
            log.fail_at(2, ErrorCode.request_timed_out)
            with pytest.raises(AppendFailed):
                await second
            assert not first.done()
            assert await fetch(rt) == {0: -1, 1: -1}
            log.commit_at(1)
            assert (await first)[0][2] == ErrorCode.none
            assert await fetch(rt) == {0: 5, 1: -1}
        finally:
            await rt.stop()

    run(main)


def test_unloading_answers_the_writes_still_waiting_not_coordinator():
    async def main():
        log = HeldLog()
        rt = runtime(log)
        rt.start()
        await rt.wait_loaded()
        try:
            waiting = asyncio.ensure_future(rt.run("g", commit_op(5)))
            await settle()
            rt.unload(0)
            with pytest.raises(NotCoordinator):
                await waiting
            log.commit_at(1)  # too late to matter
            await settle()
        finally:
            await rt.stop()

    run(main)


def test_reads_of_a_partition_just_loaded_wait_for_its_high_watermark():
    async def main():
        log = MemoryLog()
        log.write(0, commit_op(5)(CoordinatorShard(), 0).records, 0)
        log.high_watermarks[0] = 0  # the new leader's high watermark lags its log
        rt = runtime(log)
        rt.start()
        await rt.wait_loaded()
        try:
            with pytest.raises(CoordinatorLoading):
                await fetch(rt)
            listed, loading = await rt.read_all(lambda shard, now: shard.list_groups())
            assert loading and not listed
            log.high_watermarks[0] = 1
            assert await fetch(rt) == {0: 5, 1: -1}
            log.high_watermarks[0] = 0  # (cannot happen while leader): not asked again
            assert await fetch(rt) == {0: 5, 1: -1}
        finally:
            await rt.stop()

    run(main)


def test_without_its_lease_a_broker_answers_not_coordinator_when_handling_and_answering():
    async def main():
        log = HeldLog()
        lease = Lease()
        rt = runtime(log, lease)
        rt.start()
        await rt.wait_loaded()
        try:
            ok = asyncio.ensure_future(rt.run("g", commit_op(5)))
            await settle()
            log.commit_at(1)
            await ok
            lease.held = False  # e.g. the process was paused past its ZooKeeper session
            with pytest.raises(NotCoordinator):
                await fetch(rt)
            with pytest.raises(NotCoordinator):
                rt.submit("g", commit_op(6))
            lease.held = True
            waiting = asyncio.ensure_future(rt.run("g", commit_op(7)))
            await settle()
            lease.held = False
            log.commit_at(2)  # replicated, but the lease lapsed meanwhile: not acknowledged
            with pytest.raises(NotCoordinator):
                await waiting

            lease.held = True

            def lapses_while_reading(shard, now):
                lease.held = False  # paused between the read and the answer
                return shard.fetch_offsets("g", None)

            with pytest.raises(NotCoordinator):
                await rt.read("g", lapses_while_reading)
            lease.held = True
            assert await fetch(rt) == {0: 7, 1: -1}
        finally:
            await rt.stop()

    run(main)


def test_the_broker_writes_back_old_values_even_with_too_few_in_sync_replicas(tmp_path):
    """A rollback's restoring append is made below min.insync.replicas (nobody is acknowledged
    for it; it makes the log say what the coordinator serves), where a commit is refused."""
    from brook.broker.broker import Broker
    from brook.broker.config import BrokerConfig
    from brook.broker.offsets_log import PartitionOffsetsLog
    from brook.coordinator.common.result import CoordinatorRecord
    from brook.coordinator.group.schemas import OffsetCommitKey, OffsetCommitValue

    broker = Broker(BrokerConfig.from_props({"log.dirs": str(tmp_path),
                                             "offsets.topic.num.partitions": "1"}))
    broker.open()
    try:
        assert broker.ensure_offsets_topic()
        p = broker.partition(OFFSETS_TOPIC, 0)
        p.become_leader(0, 3, (0,), (0, 1, 2), 0, 0)  # the followers fell out of the ISR
        broker.replicas = object()  # a cluster's broker, as far as the writer asks
        broker.min_insync_replicas = lambda topic: 2
        plog = PartitionOffsetsLog(broker)
        records = [CoordinatorRecord(OffsetCommitKey("g", "t", 0), OffsetCommitValue(5))]
        with pytest.raises(AppendError) as refused:
            plog.append(0, 3, records, 0)
        assert refused.value.code == ErrorCode.not_enough_replicas
        assert plog.append(0, 3, records, 0, restoring=True) == 1
        assert plog.log_end_offset(0) == 1 and plog.high_watermark(0) == 1
        with pytest.raises(AppendError) as stale:  # never as a deposed coordinator, though
            plog.append(0, 2, records, 0, restoring=True)
        assert stale.value.code == ErrorCode.not_leader_or_follower
    finally:
        broker.replicas = None
        broker.close()
