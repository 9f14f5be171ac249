"""ZooKeeper calls made for admin requests, and the one exception they fail with.

ZooKeeper out of reach, or this broker's session expired, must not cost a client its
connection (an exception escaping a handler closes it): the handlers answer every resource
of the request with an error code instead. Kafka's ZooKeeper mode answers such failures
UNKNOWN_SERVER_ERROR; requests only the controller serves (CreateTopics, CreatePartitions,
DeleteTopics) get NOT_CONTROLLER, which clients retry on the controller they find next.
"""

from __future__ import annotations

import asyncio


class ZooKeeperUnavailable(Exception):
    """A ZooKeeper call of an admin request failed; trying again later can succeed."""


async def in_zookeeper(zk, call, *args):
    """``call(*args)`` in a worker thread (kazoo blocks), once the ZooKeeper client ``zk`` has
    a session: a brief outage or a new session after an expiry delays an admin request,
    within zookeeper.connection.timeout.ms, rather than failing it."""
    from ..cluster.zk_client import TRANSIENT_ERRORS  # kazoo: only in a cluster

    try:
        return await asyncio.to_thread(zk.call_in_session, call, *args)
    except TRANSIENT_ERRORS as exc:
        raise ZooKeeperUnavailable("ZooKeeper cannot be reached from this broker now "
                                   f"({type(exc).__name__}): ask again") from None
