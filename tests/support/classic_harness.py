"""The fake-clock harness of the classic group tests: the shared `CoordinatorHarness` driving
one group ("g") of its shard's classic coordinator, and the records and member metadata the
tests expect."""

from __future__ import annotations

from kio.schema.errors import ErrorCode as E

from brook.coordinator.common.result import CoordinatorRecord
from brook.coordinator.group.classic import (GroupConfig, Heartbeat, JoinGroup, LeaveGroup,
                                            LeavingMember, SyncGroup)
from brook.coordinator.group.classic_group import GroupState as S
from brook.coordinator.group.schemas import GroupMetadataKey, GroupMetadataValue, MemberMetadata
from tests.support.coordinator_harness import CoordinatorHarness

PROTOS = (("range", b"sub"),)


class Harness(CoordinatorHarness):
    """The shared harness, driving the classic groups of its shard."""

    def __init__(self, **config):
        super().__init__(0, GroupConfig(**{"initial_rebalance_delay_ms": 0, **config}))
        self.core = self.shard.classic

    def _run(self, result):
        return self.run(result)

    def join(self, member_id="", client="c", protocols=PROTOS, session=10_000, rebalance=30_000,
             instance=None, ptype="consumer", version=9):
        return self._run(self.core.join_group(
            JoinGroup("g", member_id, ptype, protocols, session, rebalance, instance, client,
                      "/h", version),
            self.clock.milliseconds()))

    def sync(self, member_id, generation, assignments=(), instance=None):
        return self._run(self.core.sync_group(
            SyncGroup("g", member_id, generation, tuple(assignments), instance),
            self.clock.milliseconds()))

    def heartbeat(self, member_id, generation, instance=None):
        return self._run(self.core.heartbeat(
            Heartbeat("g", member_id, generation, instance), self.clock.milliseconds()))

    def leave(self, *members):
        return self._run(self.core.leave_group(
            LeaveGroup("g", tuple(LeavingMember(*m) for m in members)),
            self.clock.milliseconds()))

    def advance(self, ms):
        """The groups' timers only (the offsets' expiry has nothing to do here)."""
        self.clock.advance(ms)
        return self._run(self.core.poll(self.clock.milliseconds()))

    @property
    def group(self):
        return self.core.groups["g"]

    def join_new(self, client="c", **kw):
        """KIP-394: the first join gets a member id, the second joins with it."""
        first = self.join(client=client, **kw)
        assert first.response.error is E.member_id_required
        return self.join(member_id=first.response.member_id, client=client, **kw)

    def stable(self, *clients):
        """A stable group of these clients' members (generation 1, assignment b"<member>")."""
        ids = [self.join(client=c).response.member_id for c in clients]
        for c, member_id in zip(clients, ids):
            self.join(member_id=member_id, client=c)
        members = list(self.group.members)
        assert members == ids and self.group.generation == 1
        self.sync(members[0], self.group.generation, [(m, m.encode()) for m in members])
        for m in members[1:]:
            self.sync(m, self.group.generation)
        assert self.group.state is S.STABLE
        return members


def stored(generation, leader, members, protocol="range", ts=0):
    return CoordinatorRecord(
        GroupMetadataKey("g"),
        GroupMetadataValue("consumer", generation, protocol, leader, ts, tuple(members)),
    )


def mm(member_id, assignment, client="c", session=10_000, rebalance=30_000, instance=None):
    return MemberMetadata(member_id, instance, client, "/h", rebalance, session, b"sub", assignment)
