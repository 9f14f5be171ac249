"""A broker in the test's own process serving one connection on a socket pair: the test holds
the client's end and can look inside the broker's `Connection` while it works."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

from brook.broker.broker import Broker
from brook.broker.config import BrokerConfig
from brook.broker.connection import Connection


def run_broker(tmp_path, props: dict[str, str],
               test: Callable[..., Awaitable[None]], *, buffer_bytes: int | None = None,
               socket_class: type[socket.socket] | None = None) -> None:
    """Run ``await test(broker, conn, ours, theirs)`` with the group coordinator loaded and a
    `Connection` serving ``ours``; ``buffer_bytes`` sets both ends' socket buffers small (for
    a socket that fills on purpose), ``socket_class`` wraps the broker's end."""
    broker = Broker(BrokerConfig.from_props({
        "log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:9092",
        "offsets.topic.num.partitions": "1", **props}))
    broker.open()

    async def main():
        broker.coordinator.start()
        await broker.coordinator.wait_loaded()
        ours, theirs = socket.socketpair()
        if socket_class is not None:
            ours = socket_class(fileno=ours.detach())
        if buffer_bytes is not None:
            ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer_bytes)
            theirs.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer_bytes)
        for s in (ours, theirs):
            s.setblocking(False)
        conn = Connection(broker, ours, "test", "PLAINTEXT")
        task = conn.task = asyncio.ensure_future(conn.run())
        try:
            await test(broker, conn, ours, theirs)
        finally:
            conn.close()
            await asyncio.gather(task, return_exceptions=True)
            theirs.close()
            await broker.coordinator.stop()

    try:
        asyncio.run(main())
    finally:
        broker.close()
