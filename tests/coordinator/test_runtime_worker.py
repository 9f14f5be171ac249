"""The runtime's worker and its immediate path survive a shard whose timers fail: the operation
is answered, and the operations after it are served (a bug in a shard answers one request, it
does not stop the runtime). The runtime is generic: a toy shard stands in for the coordinator."""

from __future__ import annotations

import asyncio

from brook.clock import SYSTEM_CLOCK
from brook.coordinator.common.result import CoordinatorResult
from brook.coordinator.common.runtime import CoordinatorRuntime


class ToyShard:
    """A shard with no groups whose timers can be made to fail."""

    def __init__(self) -> None:
        self.fail = False
        self.replayed: list = []

    def batch_replayer(self, now) -> ToyShard:
        return self

    def replay_batch(self, body, start, stop, count, base_offset, skipped) -> None:
        self.replayed.append((base_offset, count))

    def replay_records(self, records, now, end=None, producer_id=-1) -> None:
        self.replayed += records

    def loaded(self, now) -> CoordinatorResult:
        return CoordinatorResult()

    def next_deadline(self):
        if self.fail:
            raise RuntimeError("a broken timer heap")
        return None

    def poll(self, now) -> list[CoordinatorResult]:
        return []


class NoLog:
    def append(self, partition, epoch, records, now, restoring=False, producer=None) -> int:
        return 0

    def written(self, partition, offset):
        return None

    def high_watermark(self, partition) -> int:
        return 0

    def log_end_offset(self, partition) -> int:
        return 0

    def read(self, partition):
        return iter(())


def answer(value):
    return lambda shard, now: CoordinatorResult(response=value)


def test_operations_are_answered_and_served_when_a_shard_fails_to_give_its_deadline():
    async def main():
        rt = CoordinatorRuntime(1, NoLog(), SYSTEM_CLOCK, ToyShard, topic="__toy",
                                partitioner=lambda key, partitions: 0)
        rt.start()
        await rt.wait_loaded()
        ctx = rt.contexts[0]
        try:
            assert await rt.run("g", answer(1)) == 1
            ctx.shard.fail = True
            assert await rt.run("g", answer(2)) == 2  # at once: the shard is idle
            loop = asyncio.get_running_loop()
            futures = [loop.create_future() for _ in range(3)]
            for i, fut in enumerate(futures):  # through the worker, one after the other
                ctx.queue.put_nowait((answer(10 + i), fut))
            done = await asyncio.wait_for(asyncio.gather(*futures), 5)
            assert done == [10, 11, 12]
            ctx.shard.fail = False
            assert await rt.run("g", answer(3)) == 3
        finally:
            ctx.shard.fail = False
            await rt.stop()

    asyncio.run(main())
