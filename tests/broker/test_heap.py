"""The survivors of the cycle collector's full passes are frozen (brook.broker.heap), so the
broker's long-lived structures must be released by reference counting alone: a frozen object
that dies inside a cycle would never be freed."""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest

from brook.broker import heap
from brook.broker.broker import Broker
from brook.broker.config import BrokerConfig
from tests.support import socketpair_broker
from tests.support.kafka_wire import frame
from tests.broker.test_connection_writes import Reader, commit_many, decode, OFFSET_COMMIT


@pytest.fixture
def freezing():
    heap.freeze_survivors_of_full_collections()
    try:
        yield
    finally:
        heap.uninstall()


def test_a_full_pass_freezes_what_survived_it_and_later_passes_skip_it(freezing):
    kept = [{"n": i} for i in range(50_000)]
    gc.collect()
    assert gc.get_freeze_count() >= len(kept)
    walked = len(gc.get_objects())  # what a full pass walks now: not the frozen
    assert walked < len(kept) // 10
    newer = [[i] for i in range(1_000)]
    assert len(gc.get_objects()) >= walked + len(newer)  # made since: walked until the next pass
    heap.uninstall()
    assert gc.get_freeze_count() == 0 and len(gc.get_objects()) > len(kept)


def _broker(tmp_path) -> Broker:
    broker = Broker(BrokerConfig.from_props({
        "log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:9092"}))
    broker.open()
    return broker


def test_a_deleted_topics_logs_and_partitions_are_freed_without_the_cycle_collector(
        tmp_path, freezing):
    broker = _broker(tmp_path)
    try:
        broker.create_topic("t", 4)
        gc.collect()  # frozen: only reference counting can free them now
        partition = broker.partitions[("t", 0)]
        log = partition.log  # the partition (no weak references to it) holds it: freed with it
        refs = [weakref.ref(o) for o in (log, log.active_segment, log.active_segment.index)]
        del partition, log
        gc.disable()
        try:
            broker.delete_topic("t")
            assert [r() for r in refs] == [None, None, None]
        finally:
            gc.enable()
    finally:
        broker.close()


def test_a_closed_connection_is_freed_without_the_cycle_collector(tmp_path, freezing):
    refs = []

    async def test(broker, conn, ours, theirs):
        loop = asyncio.get_running_loop()
        broker.create_topic("t", 100)
        await loop.sock_sendall(theirs, frame(commit_many("g"), 1))
        corr, body = await Reader(theirs).frame(30)
        assert corr == 1 and decode(OFFSET_COMMIT, 9, body)
        gc.collect()  # the connection, its task and its socket frozen while in use
        refs.extend(weakref.ref(o) for o in (conn, conn.task))
        gc.disable()

    try:
        socketpair_broker.run_broker(tmp_path, {}, test)
        assert [r() for r in refs] == [None, None]
    finally:
        gc.enable()
