"""Group operations run on a `CoordinatorRuntime` as the broker's handlers run them: a
classic member's join (KIP-394's two rounds) and sync."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from brook.coordinator.common.runtime import CoordinatorRuntime
from brook.coordinator.group import classic

PROTOCOLS = (("range", b"sub"),)


def join(group: str, member_id: str = "", session_ms: int = 10_000) -> classic.JoinGroup:
    return classic.JoinGroup(group_id=group, member_id=member_id, protocol_type="consumer",
                             protocols=PROTOCOLS, session_timeout_ms=session_ms,
                             rebalance_timeout_ms=session_ms, client_id="c", version=9)


async def join_and_sync(rt: CoordinatorRuntime, group: str, session_ms: int = 10_000):
    first = await rt.run(group, lambda s, now: s.join_group(join(group, session_ms=session_ms), now))
    assert first.error == ErrorCode.member_id_required
    joined = await rt.run(group, lambda s, now: s.join_group(
        join(group, first.member_id, session_ms), now))
    assert joined.error == ErrorCode.none
    sync = classic.SyncGroup(group, joined.member_id, joined.generation,
                             assignments=((joined.member_id, b"assignment"),))
    synced = await rt.run(group, lambda s, now: s.sync_group(sync, now))
    return joined, synced
