"""The group runtime on an in-memory offsets log: ordering, append-then-replay, parked replies,
append failures, timers and loading."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.errors import ErrorCode

from brook.broker.errors import error_code_for
from brook.broker.offsets_log import PartitionOffsetsLog
from brook.clock import SYSTEM_CLOCK, FakeClock
from brook.coordinator.common.result import (
    CoordinatorRecord,
    CoordinatorResult,
    EndTxnMarker,
    append_error,
)
from brook.coordinator.common.runtime import (
    AppendError,
    AppendFailed,
    CoordinatorLoading,
    CoordinatorRuntime,
    NotCoordinator,
    ShardState,
)
from brook.coordinator.group import classic
from brook.coordinator.group.batch_writer import encode_records
from brook.coordinator.group.classic import ClassicGroupCoordinator, GroupConfig
from brook.coordinator.group.partitioner import OFFSETS_TOPIC, partition_for
from brook.coordinator.group.schemas import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    encode_key,
    encode_value,
)
from brook.coordinator.group.shard import CoordinatorShard
from brook.records import Record as BatchRecord
from brook.records import encode_batch
from brook.records.batch import read_header
from brook.records.control import end_txn_marker_batch
from brook.storage.errors import KafkaStorageError
from tests.support.runtime_ops import join, join_and_sync

#: The group coordinator's topic and partitioner, which the runtime is given.
GROUPS = {"topic": OFFSETS_TOPIC, "partitioner": partition_for}


class MemoryLog:
    """Record batches per partition, as the bytes the broker would store."""

    def __init__(self) -> None:
        self.partitions: dict[int, list[bytes]] = {}
        self.appends: list[tuple[int, list]] = []
        self.fail: Exception | None = None
        self.hold = None
        self.restored: list[tuple[int, list]] = []  # the restoring appends of rollbacks
        #: partition -> its high watermark, where not the log end offset
        self.high_watermarks: dict[int, int] = {}

    def append(self, partition: int, epoch: int, records: list, now: int,
               restoring: bool = False, producer=None) -> int:
        """The runtime's writer: fails with the Kafka error of ``fail`` when it is set, as the
        broker's writer reports the exception its partition raised."""
        if self.fail is not None:
            raise AppendError(error_code_for(self.fail), str(self.fail))
        self.appends.append((partition, list(records)))
        if restoring:
            self.restored.append((partition, list(records)))
        self.write(partition, records, now, producer)
        return self.end(partition)

    def write(self, partition: int, records: list, now: int, producer=None) -> None:
        """A batch of ``records`` as the coordinator writes them (a marker's control batch, a
        transactional write's batch of its producer)."""
        batches = self.partitions.setdefault(partition, [])
        base = self.end(partition)
        if len(records) == 1 and type(records[0]) is EndTxnMarker:
            m = records[0]
            batches.append(end_txn_marker_batch(m.producer_id, m.producer_epoch,
                                                m.coordinator_epoch, m.committed, now,
                                                base_offset=base))
        else:
            batches.append(encode_records(records, now, base, producer=producer))

    def append_raw(self, partition: int, pairs: list[tuple[bytes, bytes | None]],
                   now: int = 0) -> None:
        """A batch of (key, value) bytes as they are, whatever they hold."""
        base = self.end(partition)
        self.partitions.setdefault(partition, []).append(encode_batch(
            [BatchRecord(base + i, now, k, v) for i, (k, v) in enumerate(pairs)], base_offset=base))

    def end(self, partition: int) -> int:
        return sum(read_header(b).record_count for b in self.partitions.get(partition, []))

    def written(self, partition: int, offset: int):
        """What an append waits for before it is answered: the future ``hold`` when set."""
        return self.hold

    def high_watermark(self, partition: int) -> int:
        return self.high_watermarks.get(partition, self.end(partition))

    def log_end_offset(self, partition: int) -> int:
        return self.end(partition)

    def read(self, partition: int):
        yield from self.partitions.get(partition, [])


def new_runtime(log: MemoryLog, partitions: int = 4, **config) -> CoordinatorRuntime:
    cfg = GroupConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=10, **config)
    return CoordinatorRuntime(partitions, log, SYSTEM_CLOCK, lambda: CoordinatorShard(cfg),
                              **GROUPS)


async def started(rt: CoordinatorRuntime) -> CoordinatorRuntime:
    rt.start()
    await rt.wait_loaded()
    return rt


def test_join_sync_appends_the_assignment_then_replays_it():
    async def main():
        log = MemoryLog()
        rt = await started(new_runtime(log))
        try:
            joined, synced = await join_and_sync(rt, "g")
            assert synced.error == ErrorCode.none and synced.assignment == b"assignment"
            index = rt.partition_for("g")
            [(partition, records)] = log.appends
            assert partition == index
            assert records[0].key == GroupMetadataKey("g")
            assert records[0].value.members[0].assignment == b"assignment"
            group = rt.contexts[index].shard.groups["g"]
            assert str(group.state) == "Stable"
        finally:
            await rt.stop()

    asyncio.run(main())


def test_parked_joins_complete_when_the_join_phase_ends():
    async def main():
        rt = await started(new_runtime(MemoryLog()))
        try:
            joined, _ = await join_and_sync(rt, "g")
            # A second member joins: the first must rejoin; both parked replies complete together.
            new = await rt.run("g", lambda s, now: s.join_group(join("g"), now))
            second = asyncio.ensure_future(
                rt.run("g", lambda s, now: s.join_group(join("g", new.member_id), now)))
            await asyncio.sleep(0.01)
            assert not second.done()
            first = await rt.run("g", lambda s, now: s.join_group(join("g", joined.member_id), now))
            second = await second
            assert first.error == second.error == ErrorCode.none
            assert first.generation == second.generation == joined.generation + 1
            assert first.leader == second.leader
        finally:
            await rt.stop()

    asyncio.run(main())


def test_a_failed_append_answers_kafkas_error_and_fails_parked_replies():
    async def main():
        log = MemoryLog()
        rt = await started(new_runtime(log))
        try:
            first = await rt.run("g", lambda s, now: s.join_group(join("g"), now))
            joined = await rt.run("g", lambda s, now: s.join_group(join("g", first.member_id), now))
            log.fail = KafkaStorageError("disk gone")
            sync = classic.SyncGroup("g", joined.member_id, joined.generation,
                                     assignments=((joined.member_id, b"a"),))
            with pytest.raises(AppendFailed) as info:
                await rt.run("g", lambda s, now: s.sync_group(sync, now))
            assert info.value.code == ErrorCode.not_coordinator
            assert not log.appends
            # Nothing was replayed: the group did not become Stable with that assignment.
            group = rt.contexts[rt.partition_for("g")].shard.groups["g"]
            assert str(group.state) != "Stable"
            assert all(m.assignment != b"a" for m in group.members.values())
        finally:
            await rt.stop()

    asyncio.run(main())


def test_append_errors_map_as_kafka_maps_them():
    from brook.broker.metadata import UnknownTopicError
    from brook.records import CorruptRecordError

    def answer(exc):
        return append_error(error_code_for(exc))

    assert answer(UnknownTopicError("x")) == ErrorCode.coordinator_not_available
    assert answer(KafkaStorageError("x")) == ErrorCode.not_coordinator
    assert answer(CorruptRecordError("x")) == ErrorCode.unknown_server_error


def test_session_expiry_fires_from_the_timer_task_without_requests():
    async def main():
        log = MemoryLog()
        rt = await started(new_runtime(log))
        try:
            await join_and_sync(rt, "g", session_ms=50)
            group = rt.contexts[rt.partition_for("g")].shard.groups["g"]
            for _ in range(100):
                if str(group.state) == "Empty":
                    break
                await asyncio.sleep(0.01)
            assert str(group.state) == "Empty" and not group.members
            # The expiry was a write: the empty group's metadata went to the log.
            assert log.appends[-1][1][0].value.members == ()
        finally:
            await rt.stop()

    asyncio.run(main())


def test_loading_replays_the_log_and_skips_unknown_record_types():
    async def main():
        log = MemoryLog()
        rt = await started(new_runtime(log))
        try:
            await join_and_sync(rt, "g")
        finally:
            await rt.stop()
        index = rt.partition_for("g")
        # A record type from a newer Kafka (a share group's, type 10).
        log.append_raw(index, [(b"\x00\x0a\x00\x01g", b"\x00\x00")])
        again = await started(new_runtime(log))
        try:
            group = again.contexts[index].shard.groups["g"]
            assert str(group.state) == "Stable"
            assert [m.assignment for m in group.members.values()] == [b"assignment"]
        finally:
            await again.stop()

    asyncio.run(main())


def test_groups_of_a_loading_partition_get_load_in_progress():
    async def main():
        rt = new_runtime(MemoryLog())
        rt.start()  # loading has not had a chance to run yet
        try:
            with pytest.raises(CoordinatorLoading) as info:
                await rt.run("g", lambda s, now: s.join_group(join("g"), now))
            assert info.value.code == ErrorCode.coordinator_load_in_progress
            await rt.wait_loaded()
            answer = await rt.run("g", lambda s, now: s.join_group(join("g"), now))
            assert answer.error == ErrorCode.member_id_required
        finally:
            await rt.stop()

    asyncio.run(main())


def test_partition_log_writes_one_batch_with_kafkas_keys_and_values(tmp_path):
    from brook.broker.broker import Broker
    from brook.broker.config import BrokerConfig

    broker = Broker(BrokerConfig.from_props({"log.dirs": str(tmp_path), "offsets.topic.num.partitions": "3"}))
    broker.open()
    try:
        assert broker.ensure_offsets_topic()
        tm = broker.metadata.get(OFFSETS_TOPIC)
        assert tm.internal and tm.partitions == 3
        assert tm.configs["cleanup.policy"] == "compact"
        assert tm.configs["segment.bytes"] == "104857600"
        value = GroupMetadataValue("consumer", 1, None, None, 5, ())
        plog = PartitionOffsetsLog(broker)
        assert plog.append(1, 0, [CoordinatorRecord(GroupMetadataKey("a"), value),
                                  CoordinatorRecord(GroupMetadataKey("b"), None)],
                           1_700_000_000_000) == 2
        p = broker.partition(OFFSETS_TOPIC, 1)
        assert p.log_end_offset == 2
        assert len(p.log.read(0, 1 << 20).batches()) == 1
        [data] = plog.read(1)
        [batch] = p.log.read(0, 1 << 20).batches()
        assert data == p.log.read(0, 1 << 20).read()
        assert [(r.key, r.value) for r in batch.records] == [
            (encode_key(GroupMetadataKey("a")), encode_value(value)),
            (encode_key(GroupMetadataKey("b")), None)]
    finally:
        broker.close()


def test_expired_offsets_are_tombstoned_by_the_timer_task():
    from brook.coordinator.group.offsets import (
        CommitPartition,
        CommitTopic,
        OffsetCommit,
        OffsetsConfig,
    )
    from brook.coordinator.group.schemas import OffsetCommitKey

    async def main():
        log = MemoryLog()
        cfg = GroupConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=10)
        offsets_cfg = OffsetsConfig(offsets_retention_check_interval_ms=20)
        rt = CoordinatorRuntime(4, log, SYSTEM_CLOCK, lambda: CoordinatorShard(cfg, offsets_cfg),
                                **GROUPS)
        await started(rt)
        try:
            commit = OffsetCommit("simple", (CommitTopic("t", (CommitPartition(0, 42),)),),
                                  retention_time_ms=50, version=2)

            def op(shard, now):
                done = shard.offsets.commit(commit, None, now)
                return CoordinatorResult(records=list(done.records), response=done.errors)

            assert await rt.run("simple", op) == [("t", 0, ErrorCode.none)]
            shard = rt.contexts[rt.partition_for("simple")].shard
            assert shard.offsets.get("simple", "t", 0).offset == 42
            for _ in range(100):
                if shard.offsets.get("simple", "t", 0) is None:
                    break
                await asyncio.sleep(0.01)
            assert shard.offsets.get("simple", "t", 0) is None
            # The simple group the commit created goes with its last offset.
            assert log.appends[-1][1] == [CoordinatorRecord(OffsetCommitKey("simple", "t", 0), None),
                                          CoordinatorRecord(GroupMetadataKey("simple"), None)]
            assert "simple" not in shard.groups
        finally:
            await rt.stop()

    asyncio.run(main())


# --- loading: figures, record types brook does not read, records it cannot read ---------------


def commit_op(group: str, partitions, offset: int = 7):
    from brook.coordinator.group.offsets import CommitPartition, CommitTopic, OffsetCommit

    commit = OffsetCommit(group, (CommitTopic("t", tuple(CommitPartition(p, offset + p)
                                                         for p in partitions)),))

    def op(shard, now):
        done = shard.offsets.commit(commit, shard.groups.get(group), now)
        return CoordinatorResult(records=list(done.records), response=done.errors)

    return op


def offsets_runtime(log: MemoryLog, clock=SYSTEM_CLOCK, partitions: int = 4) -> CoordinatorRuntime:
    cfg = GroupConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=10)
    return CoordinatorRuntime(partitions, log, clock, lambda: CoordinatorShard(cfg), **GROUPS)


def test_each_shard_reports_how_long_its_load_took_and_how_many_records_it_read():
    async def main():
        log = MemoryLog()
        rt = await started(offsets_runtime(log))
        try:
            await rt.run("g", commit_op("g", range(10)))
            await rt.run("g", commit_op("g", range(5), offset=100))
        finally:
            await rt.stop()
        index = rt.partition_for("g")
        again = offsets_runtime(log)
        again.start()
        assert all(c.load_time_ms is None and c.records_loaded == 0
                   for c in again.contexts.values())
        await again.wait_loaded()
        try:
            ctx = again.contexts[index]
            assert ctx.records_loaded == 15
            assert ctx.load_time_ms is not None and ctx.load_time_ms >= 0
            assert [c.records_loaded for c in again.contexts.values() if c is not ctx] == [0, 0, 0]
            assert ctx.shard.offsets.cached_offsets == 10
            assert ctx.shard.offsets.get("g", "t", 3).offset == 103
            assert ctx.shard.offsets.get("g", "t", 7).offset == 14
        finally:
            await again.stop()

    asyncio.run(main())


def test_record_types_brook_does_not_read_are_skipped_with_one_warning(caplog):
    async def main():
        log = MemoryLog()
        index = new_runtime(log).partition_for("g")
        log.append_raw(index, [(b"\x00\x0a\x00\x01g", b"\x00\x00")] * 3
                       + [(b"\x00\x0c\x00\x01g", None)])
        log.write(index, [CoordinatorRecord(OffsetCommitKey("g", "t", 0), OffsetCommitValue(9))], 0)
        rt = await started(offsets_runtime(log))
        try:
            ctx = rt.contexts[index]
            assert ctx.records_loaded == 5  # Kafka counts the skipped records too
            assert ctx.shard.offsets.get("g", "t", 0).offset == 9
        finally:
            await rt.stop()

    with caplog.at_level("WARNING", logger="brook.coordinator.common.runtime"):
        asyncio.run(main())
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 2
    assert "skipped 3 record(s) of unknown record type 10" in warnings[0]
    assert "skipped 1 record(s) of unknown record type 12" in warnings[1]


def test_a_record_that_cannot_be_read_is_skipped_and_its_partition_served(caplog):
    """One bad record must not make its partition unloadable (its groups would be unreachable
    at every restart): it is skipped, logged with its offset and counted; the rest is served."""

    async def main():
        log = MemoryLog()
        rt = await started(offsets_runtime(log))
        try:
            await rt.run("g", commit_op("g", range(3)))
        finally:
            await rt.stop()
        index = rt.partition_for("g")
        # A commit whose value is cut short, then a later, good commit.
        log.append_raw(index, [(encode_key(OffsetCommitKey("g", "t", 0)), b"\x00\x03\x00")])
        log.write(index, [CoordinatorRecord(OffsetCommitKey("g", "t", 1), OffsetCommitValue(99))], 0)
        again = await started(offsets_runtime(log))
        try:
            ctx = again.contexts[index]
            assert ctx.state is ShardState.ACTIVE
            assert ctx.records_loaded == 5 and ctx.records_skipped == 1
            offsets = {f.partition: f.offset for f in ctx.shard.offsets.fetch("g")}
            assert offsets == {0: 7, 1: 99, 2: 9}  # the bad record's commit is lost, no more
            assert await again.run("g", commit_op("g", [0])) == [("t", 0, ErrorCode.none)]
        finally:
            await again.stop()

    with caplog.at_level("ERROR", logger="brook.coordinator.common.runtime"):
        asyncio.run(main())
    [error] = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert "skipped 1 record(s) at offset 3 that cannot be read" in error
    assert "bad OffsetCommitValue" in error


@pytest.mark.parametrize("key, value", [
    # a metadata length past the value's end
    (encode_key(OffsetCommitKey("g", "t", 5)), b"\x00\x03" + bytes(12) + b"\x7f\xff" + b"m"),
    # a group value announcing 2^31-1 members
    (encode_key(GroupMetadataKey("g")),
     b"\x00\x03\x00\x08consumer\x00\x00\x00\x01\xff\xff\xff\xff" + bytes(8) + b"\x7f\xff\xff\xff"),
    # a negative key string length
    (b"\x00\x01\xff\xfe", b"\x00\x03" + bytes(22)),
    # an empty key
    (b"", b"\x00\x03" + bytes(22)),
    # no key at all
    (None, b"\x00\x03" + bytes(22)),
], ids=["metadata-past-the-end", "2^31-1-members", "negative-key-length", "empty-key", "no-key"])
def test_hostile_records_are_skipped_and_the_groups_around_them_served(key, value):
    async def main():
        log = MemoryLog()
        rt = await started(offsets_runtime(log, partitions=1))
        try:
            await rt.run("g", commit_op("g", range(2)))
        finally:
            await rt.stop()
        log.append_raw(0, [(key, value)])
        log.write(0, [CoordinatorRecord(OffsetCommitKey("h", "t", 0), OffsetCommitValue(5))], 0)
        again = await started(offsets_runtime(log, partitions=1))
        try:
            ctx = again.contexts[0]
            assert ctx.state is ShardState.ACTIVE and ctx.records_skipped == 1
            assert [f.offset for f in ctx.shard.offsets.fetch("g")] == [7, 8]
            assert [f.offset for f in ctx.shard.offsets.fetch("h")] == [5]
        finally:
            await again.stop()

    asyncio.run(main())


def test_a_shard_failing_to_replay_a_record_skips_that_record():
    class Refusing(ClassicGroupCoordinator):
        def replay(self, key, value, now):
            if isinstance(key, GroupMetadataKey):
                raise ValueError("cannot replay this")
            super().replay(key, value, now)

    async def main():
        log = MemoryLog()
        log.write(0, [CoordinatorRecord(GroupMetadataKey("g"),
                                        GroupMetadataValue("consumer", 1, None, None, 5, ()))], 0)
        log.write(0, [CoordinatorRecord(OffsetCommitKey("g", "t", 0), OffsetCommitValue(3))], 0)
        rt = CoordinatorRuntime(1, log, SYSTEM_CLOCK, lambda: CoordinatorShard(classic=Refusing()),
                                **GROUPS)
        await started(rt)
        try:
            ctx = rt.contexts[0]
            assert ctx.state is ShardState.ACTIVE and ctx.records_skipped == 1
            assert ctx.shard.offsets.get("g", "t", 0).offset == 3
        finally:
            await rt.stop()

    asyncio.run(main())


def test_a_partition_whose_log_cannot_be_read_answers_not_coordinator():
    class Unreadable(MemoryLog):
        def read(self, partition):
            raise OSError("input/output error")

    async def main():
        rt = await started(offsets_runtime(Unreadable(), partitions=1))
        try:
            assert rt.contexts[0].state is ShardState.FAILED
            with pytest.raises(NotCoordinator):
                await rt.run("g", commit_op("g", [0]))
        finally:
            await rt.stop()

    asyncio.run(main())


def test_a_failed_load_is_tried_again_with_a_growing_backoff_until_it_succeeds():
    class FlakyLog(MemoryLog):
        fails = 2
        reads = 0

        def read(self, partition):
            self.reads += 1
            if self.fails:
                self.fails -= 1
                raise OSError("input/output error")
            return super().read(partition)

    async def main():
        log = FlakyLog()
        log.write(0, [CoordinatorRecord(OffsetCommitKey("g", "t", 0), OffsetCommitValue(7))], 0)
        cfg = GroupConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=10)
        rt = CoordinatorRuntime(1, log, SYSTEM_CLOCK, lambda: CoordinatorShard(cfg), **GROUPS,
                                load_retry_backoff_ms=20, load_retry_max_backoff_ms=40)
        await started(rt)
        try:
            assert rt.contexts[0].state is ShardState.FAILED
            with pytest.raises(NotCoordinator):
                await rt.run("g", commit_op("g", [1]))
            for _ in range(100):  # 20 ms, then 40 ms
                await asyncio.sleep(0.01)
                if rt.contexts[0].state is ShardState.ACTIVE:
                    break
            ctx = rt.contexts[0]
            assert ctx.state is ShardState.ACTIVE and ctx.load_failures == 2 and log.reads == 3
            assert ctx.shard.offsets.get("g", "t", 0).offset == 7
        finally:
            await rt.stop()

    asyncio.run(main())


def test_a_failed_load_is_not_tried_again_once_the_partition_is_unloaded():
    class Unreadable(MemoryLog):
        reads = 0

        def read(self, partition):
            self.reads += 1
            raise OSError("input/output error")

    async def main():
        log = Unreadable()
        cfg = GroupConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=10)
        rt = CoordinatorRuntime(1, log, SYSTEM_CLOCK, lambda: CoordinatorShard(cfg), **GROUPS,
                                load_retry_backoff_ms=20)
        await started(rt)
        try:
            rt.unload(0)
            await asyncio.sleep(0.1)
            assert log.reads == 1 and 0 not in rt.contexts
        finally:
            await rt.stop()

    asyncio.run(main())


def test_timers_wait_while_their_shard_loads():
    """A loading shard's timer task used to see a deadline of 0, find the shard not active and
    try again at once: eight of them spun on the event loop, competing with the load. Now they
    read no deadline (and so no clock) until their shard is loaded."""

    class CountingClock(FakeClock):
        calls = 0

        def milliseconds(self) -> int:
            self.calls += 1
            return super().milliseconds()

    async def main():
        log = MemoryLog()
        for i in range(40):  # forty buffers: the load yields to the event loop forty times
            log.write(0, [CoordinatorRecord(OffsetCommitKey("g", "t", i), OffsetCommitValue(i))], 0)
        clock = CountingClock()
        rt = offsets_runtime(log, clock, partitions=8)
        rt.start()
        turns = 0
        while rt.contexts[0].state is ShardState.LOADING:
            await asyncio.sleep(0)
            turns += 1
        assert turns >= 40
        assert clock.calls <= 8  # the loader's "now" for each shard, nothing else
        await rt.wait_loaded()
        assert rt.contexts[0].shard.offsets.cached_offsets == 40
        await rt.stop()

    asyncio.run(main())


# --- an offset commit's records: runs of rows, written and replayed as loading reads them ------


def test_a_commit_is_written_as_its_records_and_replayed_as_loading_replays_them():
    from brook.coordinator.common.result import record_pairs
    from brook.coordinator.group.commit_runs import CommitRun
    from brook.coordinator.group.offsets import CommitPartition, CommitTopic, OffsetCommit

    commit = OffsetCommit("g", (
        CommitTopic("t", (CommitPartition(0, 5), CommitPartition(1, 6, 2, "m"),
                          CommitPartition(2, 7, 3), CommitPartition(3, 8))),
        CommitTopic("u", tuple(CommitPartition(p, 100 + p) for p in range(80))),
    ))

    def op(shard, now):
        done = shard.offsets.commit(commit, shard.groups.get("g"), now)
        return CoordinatorResult(records=done.records, response=done.errors)

    async def main():
        log = MemoryLog()
        rt = await started(offsets_runtime(log))
        index = rt.partition_for("g")
        try:
            await rt.run("g", op)
            [(partition, records)] = log.appends
            assert partition == index
            assert [type(r) for r in records] == [CommitRun, CoordinatorRecord, CommitRun, CommitRun]
            [batch] = log.partitions[index]
            timestamp = read_header(batch).max_timestamp
            pairs = list(record_pairs(records))
            assert batch == encode_batch([
                BatchRecord(i, timestamp, encode_key(k), encode_value(v))
                for i, (k, v) in enumerate(pairs)])
            assert [k.partition for k, _ in pairs] == [0, 1, 2, 3, *range(80)]
            live = rt.contexts[index].shard.offsets.fetch("g")
            assert len(live) == 84 and live[1].metadata == "m" and live[2].leader_epoch == 3
            assert "g" in rt.contexts[index].shard.groups  # a simple consumer's group exists
        finally:
            await rt.stop()
        again = await started(offsets_runtime(log))
        try:
            assert again.contexts[index].shard.offsets.fetch("g") == live
            assert "g" in again.contexts[index].shard.groups
        finally:
            await again.stop()

    asyncio.run(main())


def test_runs_are_written_with_other_base_offsets_as_their_records():
    from brook.coordinator.group.commit_runs import CommitRun

    records = [CoordinatorRecord(OffsetCommitKey("g", "t", 9), None),
               CommitRun("g", "t", [(0, 1, 2, 3), (1, 4, 5, 6)])]
    assert encode_records(records, 7, base_offset=12) == encode_batch([
        BatchRecord(12, 7, encode_key(OffsetCommitKey("g", "t", 9)), None),
        BatchRecord(13, 7, encode_key(OffsetCommitKey("g", "t", 0)),
                    encode_value(OffsetCommitValue(1, 2, "", 3))),
        BatchRecord(14, 7, encode_key(OffsetCommitKey("g", "t", 1)),
                    encode_value(OffsetCommitValue(4, 5, "", 6))),
    ], base_offset=12)


# --- running operations: at once on an idle shard, in arrival order, timers woken when due ----


def test_an_operation_on_an_idle_shard_is_answered_without_waiting_for_the_worker():
    async def main():
        rt = await started(offsets_runtime(MemoryLog()))
        try:
            call = rt.run("g", commit_op("g", range(3)))
            with pytest.raises(StopIteration) as done:  # finished without yielding once
                call.send(None)
            assert done.value.value == [("t", p, ErrorCode.none) for p in range(3)]
        finally:
            await rt.stop()

    asyncio.run(main())


def test_an_operation_arriving_behind_a_queued_one_runs_after_it():
    async def main():
        rt = await started(offsets_runtime(MemoryLog()))
        shard = rt.context_for("g")
        ran: list[str] = []

        def op(tag):
            def run(s, now):
                ran.append(tag)
                return CoordinatorResult(response=tag)
            return run

        try:
            queued, later, idle = (rt.loop.create_future() for _ in range(3))
            shard.queue.put_nowait((op("queued"), queued))  # the worker's next
            shard.submit(op("later"), later)
            assert ran == []  # not run at once: it waits its turn
            assert await later == "later" and await queued == "queued"
            assert ran == ["queued", "later"]
            shard.submit(op("idle"), idle)
            assert ran == ["queued", "later", "idle"] and idle.result() == "idle"
        finally:
            await rt.stop()

    asyncio.run(main())


def test_operations_that_schedule_no_earlier_deadline_leave_the_timer_task_asleep():
    class CountingClock(FakeClock):
        calls = 0

        def milliseconds(self) -> int:
            self.calls += 1
            return super().milliseconds()

    async def main():
        clock = CountingClock()
        rt = await started(offsets_runtime(MemoryLog(), clock, partitions=1))
        try:
            for _ in range(5):  # the first poll (it schedules the expiry check) and its rerun
                await asyncio.sleep(0)
            clock.calls = 0
            for i in range(50):
                await rt.run("g", commit_op("g", range(3), offset=i))
                await asyncio.sleep(0)
            assert clock.calls == 50  # each commit's "now"; the timer task never looked
            expiry_check = rt.contexts[0].timer_deadline
            # A member's session deadline, earlier than the expiry check, wakes it.
            await join_and_sync(rt, "members", session_ms=10_000)
            for _ in range(10):
                await asyncio.sleep(0)
            assert rt.contexts[0].timer_deadline == clock.milliseconds() + 10_000 < expiry_check
        finally:
            await rt.stop()

    asyncio.run(main())


# --- a step of the system clock ------------------------------------------------------------------


class SteppedWall:
    """A system clock an operator can step (nanoseconds, as time.time_ns gives them)."""

    def __init__(self) -> None:
        self.offset_ns = 0

    def __call__(self) -> int:
        import time

        return time.time_ns() + self.offset_ns


def session_expiry_after_a_step_back(clock, wall: SteppedWall) -> float:
    """Seconds until a silent member of a 300 ms session is gone, the wall clock having been
    stepped back a minute just after it joined (at most 3 s)."""
    import time

    async def main():
        rt = await started(CoordinatorRuntime(1, MemoryLog(), clock, lambda: CoordinatorShard(
            GroupConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=10)), **GROUPS))
        try:
            await join_and_sync(rt, "g", session_ms=300)
            wall.offset_ns -= 60 * 10**9
            started_at = time.monotonic()
            group = rt.contexts[0].shard.groups["g"]
            while group.members and time.monotonic() - started_at < 3:
                await asyncio.sleep(0.02)
            return time.monotonic() - started_at
        finally:
            await rt.stop()

    return asyncio.run(main())


def test_stepping_the_wall_clock_back_does_not_delay_session_expiry():
    from brook.clock import MonotonicWallClock

    wall = SteppedWall()
    assert session_expiry_after_a_step_back(MonotonicWallClock(wall=wall), wall) < 1.0
    # The clock that read the wall clock directly kept the member (a minute too long).
    plain = SteppedWall()

    class WallClock:
        def milliseconds(self) -> int:
            return plain() // 1_000_000

    assert session_expiry_after_a_step_back(WallClock(), plain) >= 3


def test_monotonic_wall_clock_starts_at_the_wall_time_and_moves_with_the_monotonic_clock():
    from brook.clock import MonotonicWallClock

    wall, mono = [1_700_000_000_000 * 10**6], [5 * 10**9]
    clock = MonotonicWallClock(wall=lambda: wall[0], monotonic=lambda: mono[0])
    assert clock.milliseconds() == 1_700_000_000_000
    wall[0] -= 3_600 * 10**9  # stepped back an hour
    mono[0] += 1_500 * 10**6
    assert clock.milliseconds() == 1_700_000_001_500


def test_the_broker_runs_group_timeouts_on_the_monotonic_wall_clock(tmp_path):
    from brook.broker.broker import Broker
    from brook.broker.config import BrokerConfig
    from brook.clock import MonotonicWallClock

    broker = Broker(BrokerConfig.from_props({"log.dirs": str(tmp_path)}))
    broker.open()
    try:
        assert isinstance(broker.coordinator.clock, MonotonicWallClock)
        assert broker.fetch_sessions.clock is broker.coordinator.clock
    finally:
        broker.close()


# --- answers that wait for the write to be durable -----------------------------------------------


def test_an_operation_is_answered_once_its_write_is_durable_and_others_go_on_meanwhile():
    async def main():
        log = MemoryLog()
        rt = await started(offsets_runtime(log))
        try:
            loop = asyncio.get_running_loop()
            durable = log.hold = loop.create_future()
            commit = asyncio.ensure_future(rt.run("g", commit_op("g", range(2))))
            await asyncio.sleep(0.01)
            assert not commit.done() and len(log.appends) == 1  # written, not yet answered
            log.hold = None
            assert await rt.run("g", commit_op("g", [5])) == [("t", 5, ErrorCode.none)]
            durable.set_result(None)
            assert await commit == [("t", 0, ErrorCode.none), ("t", 1, ErrorCode.none)]
        finally:
            await rt.stop()

    asyncio.run(main())


def test_a_write_that_cannot_be_made_durable_is_answered_not_coordinator():
    async def main():
        log = MemoryLog()
        rt = await started(offsets_runtime(log))
        try:
            log.hold = asyncio.get_running_loop().create_future()
            log.hold.set_exception(KafkaStorageError("fsync failed"))
            with pytest.raises(AppendFailed) as info:
                await rt.run("g", commit_op("g", [0]))
            assert info.value.code == ErrorCode.not_coordinator
        finally:
            await rt.stop()

    asyncio.run(main())


def test_a_leaders_assignment_completes_syncs_that_arrived_while_it_was_being_written():
    """As Kafka's propagation: every member waiting in SyncGroup when the write is done."""
    async def main():
        log = MemoryLog()
        rt = await started(new_runtime(log))
        try:
            a, _ = await join_and_sync(rt, "g")  # a Stable group of one
            other = await rt.run("g", lambda s, now: s.join_group(join("g"), now))
            b = asyncio.ensure_future(rt.run("g", lambda s, now: s.join_group(
                join("g", other.member_id), now)))  # parked: the group rebalances
            await asyncio.sleep(0.01)
            ja = await rt.run("g", lambda s, now: s.join_group(join("g", a.member_id), now))
            jb = await b
            assert ja.generation == jb.generation == 2
            leader, follower = (ja, jb) if ja.leader == ja.member_id else (jb, ja)
            loop = asyncio.get_running_loop()
            durable = log.hold = loop.create_future()
            assignments = ((leader.member_id, b"L"), (follower.member_id, b"F"))
            lead = asyncio.ensure_future(rt.run("g", lambda s, now: s.sync_group(classic.SyncGroup(
                "g", leader.member_id, leader.generation, assignments), now)))
            await asyncio.sleep(0.01)
            log.hold = None
            follow = asyncio.ensure_future(rt.run("g", lambda s, now: s.sync_group(
                classic.SyncGroup("g", follower.member_id, follower.generation), now)))
            await asyncio.sleep(0.01)
            assert not lead.done() and not follow.done()
            durable.set_result(None)
            assert (await lead).assignment == b"L" and (await follow).assignment == b"F"
        finally:
            await rt.stop()

    asyncio.run(main())
