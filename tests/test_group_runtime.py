"""The group runtime on an in-memory offsets log: ordering, append-then-replay, parked replies,
append failures, timers and loading."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.errors import ErrorCode

from brook.broker.group_runtime import (
    AppendFailed,
    CoordinatorLoading,
    GroupRuntime,
    PartitionOffsetsLog,
    append_error,
)
from brook.clock import SYSTEM_CLOCK
from brook.coordinator import classic
from brook.coordinator.classic import ClassicGroupCoordinator, GroupConfig
from brook.coordinator.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    encode_key,
    encode_value,
)
from brook.storage.errors import KafkaStorageError

PROTOCOLS = (("range", b"sub"),)


class MemoryLog:
    """Records per partition as the bytes the broker would store."""

    def __init__(self) -> None:
        self.partitions: dict[int, list[tuple[bytes, bytes | None]]] = {}
        self.appends: list[tuple[int, list]] = []
        self.fail: Exception | None = None

    def append(self, partition: int, records: list, now: int) -> None:
        if self.fail is not None:
            raise self.fail
        self.appends.append((partition, list(records)))
        self.partitions.setdefault(partition, []).extend(
            (encode_key(r.key), None if r.value is None else encode_value(r.value)) for r in records)

    def read(self, partition: int):
        yield from self.partitions.get(partition, [])


def new_runtime(log: MemoryLog, partitions: int = 4, **config) -> GroupRuntime:
    cfg = GroupConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=10, **config)
    return GroupRuntime(partitions, log, SYSTEM_CLOCK, lambda: ClassicGroupCoordinator(cfg))


def join(group: str, member_id: str = "", session_ms: int = 10_000) -> classic.JoinGroup:
    return classic.JoinGroup(group_id=group, member_id=member_id, protocol_type="consumer",
                             protocols=PROTOCOLS, session_timeout_ms=session_ms,
                             rebalance_timeout_ms=session_ms, client_id="c", version=9)


async def join_and_sync(rt: GroupRuntime, group: str, session_ms: int = 10_000):
    first = await rt.run(group, lambda s, now: s.core.join_group(join(group, session_ms=session_ms), now))
    assert first.error == ErrorCode.member_id_required
    joined = await rt.run(group, lambda s, now: s.core.join_group(
        join(group, first.member_id, session_ms), now))
    assert joined.error == ErrorCode.none
    sync = classic.SyncGroup(group, joined.member_id, joined.generation,
                             assignments=((joined.member_id, b"assignment"),))
    synced = await rt.run(group, lambda s, now: s.core.sync_group(sync, now))
    return joined, synced


async def started(rt: GroupRuntime) -> GroupRuntime:
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
            group = rt.shards[index].core.groups["g"]
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
            new = await rt.run("g", lambda s, now: s.core.join_group(join("g"), now))
            second = asyncio.ensure_future(
                rt.run("g", lambda s, now: s.core.join_group(join("g", new.member_id), now)))
            await asyncio.sleep(0.01)
            assert not second.done()
            first = await rt.run("g", lambda s, now: s.core.join_group(join("g", joined.member_id), now))
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
            first = await rt.run("g", lambda s, now: s.core.join_group(join("g"), now))
            joined = await rt.run("g", lambda s, now: s.core.join_group(join("g", first.member_id), now))
            log.fail = KafkaStorageError("disk gone")
            sync = classic.SyncGroup("g", joined.member_id, joined.generation,
                                     assignments=((joined.member_id, b"a"),))
            with pytest.raises(AppendFailed) as info:
                await rt.run("g", lambda s, now: s.core.sync_group(sync, now))
            assert info.value.code == ErrorCode.not_coordinator
            assert not log.appends
            # Nothing was replayed: the group did not become Stable with that assignment.
            group = rt.shards[rt.partition_for("g")].core.groups["g"]
            assert str(group.state) != "Stable"
            assert all(m.assignment != b"a" for m in group.members.values())
        finally:
            await rt.stop()

    asyncio.run(main())


def test_append_errors_map_as_kafka_maps_them():
    from brook.broker.metadata import UnknownTopicError
    from brook.records import CorruptRecordError

    assert append_error(UnknownTopicError("x")) == ErrorCode.coordinator_not_available
    assert append_error(KafkaStorageError("x")) == ErrorCode.not_coordinator
    assert append_error(CorruptRecordError("x")) == ErrorCode.unknown_server_error


def test_session_expiry_fires_from_the_timer_task_without_requests():
    async def main():
        log = MemoryLog()
        rt = await started(new_runtime(log))
        try:
            await join_and_sync(rt, "g", session_ms=50)
            group = rt.shards[rt.partition_for("g")].core.groups["g"]
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
        # A record type from a newer Kafka (KIP-848 consumer group metadata, type 3).
        log.partitions[index].insert(0, (b"\x00\x03\x00\x01g", b"\x00\x00"))
        again = await started(new_runtime(log))
        try:
            group = again.shards[index].core.groups["g"]
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
                await rt.run("g", lambda s, now: s.core.join_group(join("g"), now))
            assert info.value.code == ErrorCode.coordinator_load_in_progress
            await rt.wait_loaded()
            answer = await rt.run("g", lambda s, now: s.core.join_group(join("g"), now))
            assert answer.error == ErrorCode.member_id_required
        finally:
            await rt.stop()

    asyncio.run(main())


def test_partition_log_writes_one_batch_with_kafkas_keys_and_values(tmp_path):
    from brook.broker.broker import Broker
    from brook.broker.config import BrokerConfig
    from brook.broker.group_runtime import OFFSETS_TOPIC

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
        plog.append(1, [classic.Record(GroupMetadataKey("a"), value),
                        classic.Record(GroupMetadataKey("b"), None)], 1_700_000_000_000)
        p = broker.partition(OFFSETS_TOPIC, 1)
        assert p.log_end_offset == 2
        assert len(p.log.read(0, 1 << 20).batches()) == 1
        assert list(plog.read(1)) == [(encode_key(GroupMetadataKey("a")), encode_value(value)),
                                      (encode_key(GroupMetadataKey("b")), None)]
    finally:
        broker.close()


def test_expired_offsets_are_tombstoned_by_the_timer_task():
    from brook.coordinator.offsets import (
        CommitPartition,
        CommitTopic,
        OffsetCommit,
        OffsetsConfig,
        OffsetsManager,
    )
    from brook.coordinator.records import OffsetCommitKey

    async def main():
        log = MemoryLog()
        cfg = GroupConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=10)
        offsets_cfg = OffsetsConfig(offsets_retention_check_interval_ms=20)
        rt = GroupRuntime(4, log, SYSTEM_CLOCK, lambda: ClassicGroupCoordinator(cfg),
                          lambda core: OffsetsManager(offsets_cfg, core.groups))
        await started(rt)
        try:
            commit = OffsetCommit("simple", (CommitTopic("t", (CommitPartition(0, 42),)),),
                                  retention_time_ms=50, version=2)

            def op(shard, now):
                done = shard.offsets.commit(commit, None, now)
                return classic.Result(records=list(done.records), response=done.errors)

            assert await rt.run("simple", op) == [("t", 0, ErrorCode.none)]
            shard = rt.shards[rt.partition_for("simple")]
            assert shard.offsets.get("simple", "t", 0).offset == 42
            for _ in range(100):
                if shard.offsets.get("simple", "t", 0) is None:
                    break
                await asyncio.sleep(0.01)
            assert shard.offsets.get("simple", "t", 0) is None
            # The simple group the commit created goes with its last offset.
            assert log.appends[-1][1] == [classic.Record(OffsetCommitKey("simple", "t", 0), None),
                                          classic.Record(GroupMetadataKey("simple"), None)]
            assert "simple" not in shard.core.groups
        finally:
            await rt.stop()

    asyncio.run(main())
