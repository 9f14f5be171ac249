"""log.flush.before.ack: produce and coordinator writes answered only once fsynced, the fsyncs
shared by everything waiting (group commit)."""

from __future__ import annotations

import asyncio
import os
import time
from datetime import timedelta

import pytest
from kio.schema.errors import ErrorCode

from brook.broker import group_commit
from brook.broker.group_commit import GroupCommitter
from brook.records import Record, encode_batch
from brook.storage.config import LogConfig
from brook.storage.errors import KafkaStorageError
from brook.storage.log import Log


class Synced:
    """What the rounds made durable: each fsync's file and each syncfs's file system."""

    def __init__(self, use_syncfs: bool) -> None:
        self.use_syncfs = use_syncfs
        self.files: list[tuple[int, int]] = []
        self.filesystems: list[int] = []

    def covers(self, path) -> bool:
        dev, ino = file_id(path)
        return (dev, ino) in self.files or dev in self.filesystems

    def calls(self) -> int:
        return len(self.files) + len(self.filesystems)

    def clear(self) -> None:
        self.files.clear()
        self.filesystems.clear()

    def config(self) -> dict:
        return {"log.flush.before.ack": "true",
                "log.flush.before.ack.syncfs": str(self.use_syncfs).lower()}


@pytest.fixture(params=["syncfs", "fsync"])
def synced(request, monkeypatch):
    """Rounds of either kind: several files of a file system in one syncfs, or one fsync a
    file; what they covered is recorded."""
    if request.param == "syncfs" and not group_commit.SYNCFS_AVAILABLE:
        pytest.skip("no syncfs reporting write-back errors here (Linux 5.8 and later)")
    seen = Synced(request.param == "syncfs")
    real_fsync, real_syncfs = os.fsync, group_commit.syncfs

    def fsync(fd):
        st = os.fstat(fd)
        seen.files.append((st.st_dev, st.st_ino))
        real_fsync(fd)

    def syncfs(fd):
        seen.filesystems.append(os.fstat(fd).st_dev)
        real_syncfs(fd)

    monkeypatch.setattr(group_commit.os, "fsync", fsync)
    monkeypatch.setattr(group_commit, "syncfs", syncfs)
    return seen


def file_id(path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def logs(tmp_path, n: int) -> list[Log]:
    return [Log(str(tmp_path / f"t-{i}"), LogConfig()) for i in range(n)]


def append(lg: Log, value: bytes = b"v") -> None:
    lg.append(encode_batch([Record(0, 0, None, value)]))


def test_waiters_share_fsync_rounds_and_each_round_covers_what_came_before_it(tmp_path, synced):
    lgs = logs(tmp_path, 4)
    committer = GroupCommitter(synced.use_syncfs)

    async def main():
        waiters = []
        for i in range(40):
            lg = lgs[i % 4]
            append(lg)
            waiters.append(asyncio.ensure_future(committer.sync([lg])))
        await asyncio.gather(*waiters)

    try:
        asyncio.run(main())
        assert committer.answered == 40
        assert committer.rounds <= 2  # the first waiter's round, then everyone who came meanwhile
        assert all(synced.covers(lg.segments[-1].log_path) for lg in lgs)
        if synced.use_syncfs:  # the logs share a file system: one syncfs a round
            assert synced.files == [] and len(synced.filesystems) == committer.rounds
        else:
            assert len(synced.files) <= committer.rounds * 8  # a segment and a directory per log
    finally:
        for lg in lgs:
            lg.close()


def test_a_log_already_durable_is_not_fsynced_again(tmp_path, synced):
    [lg] = logs(tmp_path, 1)
    committer = GroupCommitter(synced.use_syncfs)

    async def main():
        append(lg)
        await committer.sync([lg])
        count = synced.calls()
        await committer.sync([lg])  # nothing new
        assert synced.calls() == count
        append(lg)
        await committer.sync([lg])
        assert synced.calls() > count

    try:
        asyncio.run(main())
    finally:
        lg.close()


@pytest.mark.parametrize("count", [1, 3])
def test_a_failed_fsync_fails_the_waiters_of_its_round_and_the_next_round_tries_again(
        tmp_path, monkeypatch, synced, count):
    """One log (an fsync of its segment) or three new ones (a syncfs for their files and
    directories, or an fsync each)."""
    lgs = logs(tmp_path, count)
    committer = GroupCommitter(synced.use_syncfs)
    failing = [True]
    real_fsync, real_syncfs = group_commit.os.fsync, group_commit.syncfs

    def fail_or(real):
        def sync(fd):
            if failing[0]:
                raise OSError(5, "Input/output error")
            real(fd)
        return sync

    monkeypatch.setattr(group_commit.os, "fsync", fail_or(real_fsync))
    monkeypatch.setattr(group_commit, "syncfs", fail_or(real_syncfs))

    async def main():
        for lg in lgs:
            append(lg)
        waiters = [asyncio.ensure_future(committer.sync([lg])) for lg in lgs]
        for w in waiters:
            with pytest.raises(KafkaStorageError):
                await w
        failing[0] = False
        synced.clear()
        await committer.sync(lgs)  # not marked durable by the failed round
        assert all(synced.covers(lg.segments[-1].log_path) for lg in lgs)

    try:
        asyncio.run(main())
        assert committer.rounds == 2
    finally:
        for lg in lgs:
            lg.close()


def test_waiters_joining_over_several_turns_of_the_loop_share_one_round(tmp_path):
    """Requests handled one turn of the event loop after another (as connections' requests
    are) wait for each other: one round for all, not one each."""
    [lg] = logs(tmp_path, 1)
    committer = GroupCommitter()

    async def main():
        waits = []
        for _ in range(8):
            append(lg)
            waits.append(committer.durable([lg]))
            await asyncio.sleep(0)
        await asyncio.gather(*waits)

    try:
        asyncio.run(main())
        assert (committer.rounds, committer.answered) == (1, 8)
    finally:
        lg.close()


def test_a_round_starts_while_waiters_keep_joining(tmp_path, monkeypatch):
    """Gathering is bounded: a stream of waiters that never pauses still gets its rounds."""
    import threading
    [lg] = logs(tmp_path, 1)
    committer = GroupCommitter(use_syncfs=False)
    started = threading.Event()
    real = os.fsync

    def fsync(fd):
        started.set()
        real(fd)

    monkeypatch.setattr(group_commit.os, "fsync", fsync)

    async def main():
        waits = []
        deadline = time.monotonic() + 5
        while not started.is_set() and time.monotonic() < deadline:
            append(lg)
            waits.append(committer.durable([lg]))  # a new waiter every turn
            await asyncio.sleep(0)
        in_time = started.is_set()
        await asyncio.gather(*waits)
        return in_time

    try:
        assert asyncio.run(main()), "no round started in 5 s of waiters joining every turn"
        assert committer.rounds >= 1
    finally:
        lg.close()


def test_a_waiter_cancelled_leaves_the_others_of_its_round_waiting(tmp_path):
    """Waiters of a round share one future: cancelling one caller must not cancel it."""
    lgs = logs(tmp_path, 2)
    committer = GroupCommitter()

    async def main():
        for lg in lgs:
            append(lg)
        first = asyncio.ensure_future(committer.sync([lgs[0]]))
        second = asyncio.ensure_future(committer.sync([lgs[1]]))
        await asyncio.sleep(0)
        first.cancel()
        await second  # still answered by its round
        assert first.cancelled()

    try:
        asyncio.run(main())
        assert committer.answered == 2
    finally:
        for lg in lgs:
            lg.close()


async def roundtrip(theirs, request, api_key: int, version: int):
    """Send one request on the client's end of the socket pair and read its answer (any
    version brook serves, the ones Kafka 4 dropped too)."""
    from kio.serial import entity_reader

    from brook.protocol.messages import response_class
    from tests.support.kafka_wire import frame

    loop = asyncio.get_running_loop()
    await loop.sock_sendall(theirs, frame(request, 7))
    data = b""
    while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
        data += await loop.sock_recv(theirs, 65536)
    cls = response_class(api_key, version)
    body = data[4:]
    header, offset = entity_reader(cls.__header_schema__)(body, 0)
    return entity_reader(cls)(body, offset)[0]


def test_a_produce_is_answered_after_its_segment_is_fsynced(tmp_path, synced):
    from tests.support.socketpair_broker import run_broker

    from brook.protocol.messages import make
    from tests.support.kafka_wire import request_class

    async def test(broker, conn, ours, theirs):
        broker.create_topic("t", 1)
        cls = request_class(0, 9)
        mod = __import__(cls.__module__, fromlist=["x"])
        request = make(cls, transactional_id=None, acks=-1, timeout=timedelta(seconds=30), topic_data=(
            make(mod.TopicProduceData, name="t", partition_data=(
                make(mod.PartitionProduceData, index=0,
                     records=encode_batch([Record(0, 0, None, b"v")])),)),))
        answer = await roundtrip(theirs, request, 0, 9)
        assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none
        assert synced.covers(broker.partition("t", 0).log.segments[-1].log_path)
        assert broker.group_commit.answered == 1

    run_broker(tmp_path, synced.config(), test)


@pytest.mark.parametrize("durable", [True, False])
def test_an_offset_commit_is_answered_after_its_offsets_partition_is_fsynced(tmp_path, synced,
                                                                            durable):
    """And without the setting, nothing waits for an fsync."""
    from tests.support.socketpair_broker import run_broker
    from tests.support.commit_frames import commit

    async def test(broker, conn, ours, theirs):
        broker.create_topic("t", 1)
        answer = await roundtrip(theirs, commit("g", 5), 8, 9)
        assert answer.topics[0].partitions[0].error_code == ErrorCode.none
        offsets = broker.partition("__consumer_offsets", 0).log
        assert synced.covers(offsets.segments[-1].log_path) is durable
        assert (broker.group_commit is not None) is durable

    run_broker(tmp_path, {**synced.config(), "log.flush.before.ack": str(durable).lower()}, test)


def test_real_clients_produce_consume_and_commit_with_durable_acknowledgements(broker_factory):
    from confluent_kafka import Consumer, TopicPartition

    from tests.support.broker_harness import (
        check_round_trip,
        confluent_config,
        confluent_consume,
        confluent_produce,
        create_topic_confluent,
        make_records,
        partition_counts,
    )

    broker = broker_factory({"log.flush.before.ack": "true"})
    create_topic_confluent(broker.bootstrap, "durable", 2)
    records = make_records(3_000, seed=3)
    delivery = confluent_produce(broker.bootstrap, "durable", records, "lz4", acks="all")
    assert not delivery.errors, delivery.errors[:3]
    consumed = confluent_consume(broker.bootstrap, "durable", partition_counts(delivery, 2))
    check_round_trip(records, delivery, consumed)
    consumer = Consumer(confluent_config(broker.bootstrap, group_id="durable-group",
                                         enable_auto_commit=False))
    try:
        offsets = [TopicPartition("durable", p, 10 + p) for p in range(2)]
        consumer.commit(offsets=offsets, asynchronous=False)
        got = consumer.committed([TopicPartition("durable", p) for p in range(2)], timeout=10)
        assert [tp.offset for tp in got] == [10, 11]
    finally:
        consumer.close()


def test_pipelined_requests_on_one_connection_share_fsyncs_and_are_answered_in_order(tmp_path):
    """The connection goes on with the next requests while a deferred answer waits for its
    fsync: 16 pipelined commits need far fewer fsync rounds, and come back in order."""
    from tests.support.socketpair_broker import run_broker
    from tests.support.commit_frames import answers, commit

    from tests.support.kafka_wire import frame

    async def test(broker, conn, ours, theirs):
        broker.create_topic("t", 1)
        loop = asyncio.get_running_loop()
        await roundtrip(theirs, commit("g", 0), 8, 9)  # creates __consumer_offsets
        rounds = broker.group_commit.rounds
        await loop.sock_sendall(theirs, b"".join(frame(commit("g", i), i) for i in range(1, 17)))
        data = b""
        while len(answers(data)) < 16 if _whole(data) else True:
            data += await loop.sock_recv(theirs, 65536)
        got = answers(data)
        assert [c for c, _ in got] == list(range(1, 17))
        assert all(a.topics[0].partitions[0].error_code == ErrorCode.none for _, a in got)
        assert broker.group_commit.rounds - rounds <= 4
        fetched = broker.coordinator.context_for("g").shard.offsets.get("g", "t", 0)
        assert fetched.offset == 16

    run_broker(tmp_path, {"log.flush.before.ack": "true"}, test)


def test_requests_read_after_a_deferred_answer_are_handled_while_it_waits_for_its_fsync(
        tmp_path, monkeypatch):
    """A client that sends its next commit after the broker has read the first (another read
    of the socket) has it appended while the first still waits for its fsync, not after: the
    two share fsyncs instead of waiting for one round each."""
    import threading

    from tests.support.socketpair_broker import run_broker
    from tests.support.commit_frames import answers, commit

    from tests.support.kafka_wire import frame

    slow = threading.Event()

    def slowed(real):
        def sync(fd):
            if slow.is_set():
                time.sleep(3.0)
            real(fd)
        return sync

    monkeypatch.setattr(group_commit.os, "fsync", slowed(os.fsync))
    monkeypatch.setattr(group_commit, "syncfs", slowed(group_commit.syncfs))

    async def test(broker, conn, ours, theirs):
        broker.create_topic("t", 1)
        loop = asyncio.get_running_loop()
        await roundtrip(theirs, commit("g", 0), 8, 9)  # creates __consumer_offsets
        offsets = broker.partition("__consumer_offsets", 0).log
        start = offsets.log_end_offset
        slow.set()
        try:
            await loop.sock_sendall(theirs, frame(commit("g", 1), 1))
            await _until(lambda: offsets.log_end_offset == start + 1, 2.0)
            sent = time.monotonic()
            await loop.sock_sendall(theirs, frame(commit("g", 2), 2))  # a read of its own
            await _until(lambda: offsets.log_end_offset == start + 2, 2.0)
            assert time.monotonic() - sent < 2.0  # the first commit's fsync still sleeps (3 s)
            slow.clear()  # the second commit's round need not sleep
            data = b""
            while len(answers(data)) < 2 if _whole(data) else True:
                data += await loop.sock_recv(theirs, 65536)
        finally:
            slow.clear()
        got = answers(data)
        assert [c for c, _ in got] == [1, 2]
        assert all(a.topics[0].partitions[0].error_code == ErrorCode.none for _, a in got)

    run_broker(tmp_path, {"log.flush.before.ack": "true"}, test)


async def _until(condition, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "not within the time"
        await asyncio.sleep(0.005)


def _whole(data: bytes) -> bool:
    """Whether ``data`` ends at the end of a frame."""
    pos = 0
    while pos + 4 <= len(data):
        pos += 4 + int.from_bytes(data[pos:pos + 4], "big")
    return pos == len(data)


def test_a_segment_rolled_since_the_last_round_is_fsynced_with_its_directory(tmp_path, synced):
    lg = Log(str(tmp_path / "t-0"), LogConfig(segment_bytes=400))
    committer = GroupCommitter(synced.use_syncfs)

    async def main():
        append(lg, b"x" * 250)
        await committer.sync([lg])
        synced.clear()
        append(lg, b"y" * 250)  # does not fit: a new segment
        assert len(lg.segments) == 2
        await committer.sync([lg])
        assert synced.covers(lg.segments[-1].log_path)
        assert synced.covers(lg.directory)
        synced.clear()
        append(lg, b"z")
        await committer.sync([lg])
        assert synced.files == [file_id(lg.segments[-1].log_path)]  # no new entry to make durable
        assert synced.filesystems == []

    try:
        asyncio.run(main())
    finally:
        lg.close()
