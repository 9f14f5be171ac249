"""Partition: acks=all waiters complete when the high watermark reaches them, and fail with
NOT_ENOUGH_REPLICAS_AFTER_APPEND when it got there only because the ISR shrank below
min.insync.replicas (a real log; the leader's view of its followers is brook's own tracker)."""

from __future__ import annotations

import asyncio

import pytest

from brook.replication.partition import NotEnoughReplicasAfterAppend, NotLeaderError, Partition
from brook.records import Record, encode_batch
from brook.storage.config import LogConfig
from brook.storage.log import Log


def _leader(tmp_path) -> Partition:
    p = Partition("t", 0, Log(str(tmp_path / "t-0"), LogConfig()))
    p.become_leader(1, leader_epoch=1, isr=(1, 2, 3), replicas=(1, 2, 3), zk_version=0, now_ms=0)
    return p


def _append(p: Partition, n: int) -> int:
    info = p.append(encode_batch([Record(i, 0, None, b"v") for i in range(n)]))
    return info.last_offset + 1


def test_the_isr_shrinking_below_min_insync_fails_the_waiters_it_releases(tmp_path):
    async def run():
        p = _leader(tmp_path)
        end = _append(p, 3)
        waiter = p.wait_for_high_watermark(end, min_insync=2)
        await asyncio.sleep(0)
        assert not waiter.done()
        # Both followers dropped from the ISR (the controller, after their sessions expired):
        # the high watermark moves to the leader's log end and reaches the waiting records.
        p.update_leadership(isr=(1,), replicas=(1, 2, 3), zk_version=1)
        assert p.high_watermark == end
        with pytest.raises(NotEnoughReplicasAfterAppend):
            waiter.result()
        p.log.close()

    asyncio.run(run())


def test_a_waiter_reached_with_enough_replicas_succeeds(tmp_path):
    async def run():
        p = _leader(tmp_path)
        end = _append(p, 2)
        waiter = p.wait_for_high_watermark(end, min_insync=2)
        p.on_follower_fetch(2, end, now_ms=1)
        assert not waiter.done()  # replica 3 has not fetched yet
        p.update_leadership(isr=(1, 2), replicas=(1, 2, 3), zk_version=1)
        assert waiter.done() and waiter.result() is None
        # already reached, with the ISR at its minimum: answered at once
        assert p.wait_for_high_watermark(end, min_insync=2).result() is None
        # already reached, but the ISR is below the minimum now
        p.update_leadership(isr=(1,), replicas=(1, 2, 3), zk_version=2)
        with pytest.raises(NotEnoughReplicasAfterAppend):
            p.wait_for_high_watermark(end, min_insync=2).result()
        p.log.close()

    asyncio.run(run())


def test_losing_leadership_fails_waiters_as_not_leader(tmp_path):
    async def run():
        p = _leader(tmp_path)
        waiter = p.wait_for_high_watermark(_append(p, 1), min_insync=2)
        p.become_follower(2, leader_epoch=2, isr=(2, 3), replicas=(1, 2, 3), zk_version=1)
        with pytest.raises(NotLeaderError):
            waiter.result()
        p.log.close()

    asyncio.run(run())


def test_waiters_failed_after_their_callers_went_away_leave_no_unretrieved_exception(tmp_path):
    # A produce whose client disconnected, or a coordinator write that timed out, leaves its
    # waiter behind; failing it later (leadership moved, the ISR shrank) must not log asyncio's
    # "Future exception was never retrieved" (hundreds of lines in a nemesis run's logs).
    import gc

    async def run():
        loop = asyncio.get_running_loop()
        unretrieved = []
        loop.set_exception_handler(lambda _loop, context: unretrieved.append(context["message"]))
        p = _leader(tmp_path)
        end = _append(p, 2)
        p.wait_for_high_watermark(end, min_insync=2)  # nobody awaits these
        p.wait_for_high_watermark(end + 1, min_insync=2)
        p.update_leadership(isr=(1,), replicas=(1, 2, 3), zk_version=1)  # fails the first
        p.become_follower(2, 2, (2, 3), (1, 2, 3), 2)  # fails the second
        gc.collect()
        await asyncio.sleep(0)
        p.log.close()
        return unretrieved

    assert asyncio.run(run()) == []
