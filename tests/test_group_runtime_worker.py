"""The shard's worker and its immediate path survive a core whose timers fail: the operation
is answered, and the operations after it are served (a bug in a core answers one request, it
does not stop the shard)."""

from __future__ import annotations

import asyncio

from brook.broker.group_runtime import GroupRuntime, append_error
from brook.clock import SYSTEM_CLOCK
from brook.coordinator.classic import Result


class BrokenTimers:
    def __init__(self) -> None:
        self.fail = False

    def next_deadline(self):
        if self.fail:
            raise RuntimeError("a broken timer heap")
        return None


class ToyCore:
    """A core with no groups whose timers can be made to fail."""

    def __init__(self) -> None:
        self.groups: dict = {}
        self.timers = BrokenTimers()
        self.replayed: list = []

    def replay(self, key, value, now) -> None:
        self.replayed.append((key, value))

    def poll(self, now) -> Result:
        return Result()


class NoLog:
    def append(self, partition, records, now) -> None:
        pass

    def read(self, partition):
        return iter(())


def answer(value):
    return lambda shard, now: Result(response=value)


def test_operations_are_answered_and_served_when_a_core_fails_to_give_its_deadline():
    async def main():
        rt = GroupRuntime(1, NoLog(), SYSTEM_CLOCK, ToyCore)
        rt.start()
        await rt.wait_loaded()
        shard = rt.shards[0]
        try:
            assert await rt.run("g", answer(1)) == 1
            shard.core.timers.fail = True
            assert await rt.run("g", answer(2)) == 2  # at once: the shard is idle
            loop = asyncio.get_running_loop()
            futures = [loop.create_future() for _ in range(3)]
            for i, fut in enumerate(futures):  # through the worker, one after the other
                shard.queue.put_nowait((answer(10 + i), fut, append_error))
            done = await asyncio.wait_for(asyncio.gather(*futures), 5)
            assert done == [10, 11, 12]
            shard.core.timers.fail = False
            assert await rt.run("g", answer(3)) == 3
        finally:
            shard.core.timers.fail = False
            await rt.stop()

    asyncio.run(main())
