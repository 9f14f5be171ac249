"""Online migration between the classic protocol and KIP-848's (group.consumer.migration.policy),
sans-I/O on a fake clock: a classic group with members converted into a consumer group when a
member joins with ConsumerGroupHeartbeat, its classic members served JoinGroup, SyncGroup,
Heartbeat and LeaveGroup from the consumer group's target assignment, and converted back when
the last member of the new protocol leaves; offsets kept throughout, the records loading into
the same groups, and the policy obeyed."""

import io
import struct
import uuid

from kio.schema.consumer_protocol_subscription.v1.data import (
    ConsumerProtocolSubscription,
    TopicPartition,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.static.primitive import i32

from tests.support.examples import examples

from brook.coordinator.group.classic import GroupConfig, Heartbeat, JoinGroup, LeaveGroup, \
    LeavingMember, SyncGroup
from brook.coordinator.group.classic_group import GroupState
from brook.coordinator.group.consumer import ConsumerGroupConfig, ConsumerHeartbeat
from brook.coordinator.group.consumer_protocol import decode_assignment, encode_assignment
from brook.coordinator.group.consumer_schemas import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
)
from brook.coordinator.group.offsets import CommitPartition, CommitTopic, OffsetCommit
from brook.coordinator.group.schemas import GroupMetadataKey
from brook.coordinator.group.shard import CoordinatorShard

T = uuid.UUID("11111111-2222-3333-4444-555555555555")
_write = entity_writer(ConsumerProtocolSubscription)


def subscription(topics=("t",), owned=None) -> bytes:
    out = io.BytesIO()
    _write(out, ConsumerProtocolSubscription(
        topics=tuple(topics), owned_partitions=tuple(
            TopicPartition(topic=t, partitions=tuple(i32(p) for p in ps))
            for t, ps in (owned or {}).items())))
    return struct.pack(">h", 1) + out.getvalue()


class Harness:
    """A shard on a fake clock; records replayed as the runtime replays them (unless the
    operation applied them itself), parked replies collected by key."""

    def __init__(self, policy="bidirectional"):
        self.shard = CoordinatorShard(
            GroupConfig(initial_rebalance_delay_ms=0),
            consumer_config=ConsumerGroupConfig(migration_policy=policy))
        self.now = 1_000
        self.topics = {"t": (T, 6)}
        self.written = []
        self.replies = {}

    def apply(self, result):
        self.written += result.records
        if result.replay:
            self.shard.replay_records(result.records, self.now)
        if result.on_success is not None:
            for c in result.on_success(self.now):
                self.replies[c.key] = c.response
        for c in result.completions:
            self.replies[c.key] = c.response
        return result.response

    def join(self, member_id, owned=None, generation=None):
        req = JoinGroup("g", member_id, "consumer", (("range", subscription(owned=owned)),),
                        10_000, 20_000, client_id=member_id or "new", version=3)
        return self.apply(self.shard.join_group(req, self.now, lambda: self.topics))

    def sync(self, member_id, generation, assignments=()):
        return self.apply(self.shard.sync_group(
            SyncGroup("g", member_id, generation, tuple(assignments), None, "consumer", "range"),
            self.now))

    def heartbeat(self, member_id, generation):
        return self.apply(self.shard.heartbeat(Heartbeat("g", member_id, generation), self.now))

    def hb(self, member_id, epoch, owned=None):
        kw = {}
        if epoch == 0:
            kw = {"subscribed_topic_names": ("t",), "rebalance_timeout_ms": 30_000}
        req = ConsumerHeartbeat("g", member_id, epoch,
                                owned=None if owned is None else frozenset(owned), **kw)
        return self.apply(self.shard.consumer_group_heartbeat(req, self.topics, self.now))

    def advance(self, ms):
        self.now += ms
        for result in self.shard.poll(self.now):
            self.apply(result)

    def reply(self, member_id, kind="join"):
        return next(r for k, r in self.replies.items() if k.endswith(member_id) and kind in k)


def parts(resp):
    return {(t, p) for t, ps in resp.assignment for p in ps}


def stable_classic_group(h):
    """Classic members a and b, a leading, with three partitions each at generation 2."""
    h.join("")
    group = h.shard.classic.groups["g"]
    (a,) = group.members
    h.sync(a, group.generation, [(a, encode_assignment({"t": tuple(range(6))}))])
    h.join("")  # b: a rebalance, that a joins again
    h.join(a)
    a, b = list(group.members)
    gen = group.generation
    assign = {a: encode_assignment({"t": (0, 1, 2)}), b: encode_assignment({"t": (3, 4, 5)})}
    h.sync(a, gen, assign.items())
    h.sync(b, gen)
    assert group.is_in(GroupState.STABLE)
    return a, b, gen


def migrated_group():
    """A classic group of a and b upgraded by c, a and b rejoined as classic members."""
    h = Harness()
    a, b, _ = stable_classic_group(h)
    h.hb("c", 0)
    for m in (a, b):
        j = h.join(m)
        h.sync(m, j.generation)
    return h, a, b


def test_a_classic_group_is_upgraded_when_a_member_joins_with_the_new_protocol():
    h = Harness()
    a, b, gen = stable_classic_group(h)
    h.apply(h.shard.commit_offsets(OffsetCommit("g", (CommitTopic(
        "t", (CommitPartition(0, 42, -1, "", -1),)),), gen, a), h.now))
    before = len(h.written)
    r = h.hb("c", 0)
    assert r.error == ErrorCode.none and parts(r) == set()  # all still owned by a and b
    records = h.written[before:]
    # Kafka's order: the classic metadata tombstoned, the members, the epoch, the target,
    # the current assignments, then the joining member's heartbeat
    assert type(records[0].key) is GroupMetadataKey and records[0].value is None
    assert [type(x.key) for x in records[1:3]] == [ConsumerGroupMemberMetadataKey] * 2
    assert type(records[3].key) is ConsumerGroupMetadataKey and records[3].value.epoch == gen
    assert "g" not in h.shard.classic.groups
    g = h.shard.consumer.groups["g"]
    assert g.group_epoch == gen + 1 and set(g.members) == {a, b, "c"}
    assert g.members[a].classic is not None and g.members[a].member_epoch == gen
    assert g.members[a].assignment.assigned == {(T, p) for p in (0, 1, 2)}
    # the classic members are told to rejoin; their JoinGroup is a full heartbeat
    assert h.heartbeat(a, gen).error == ErrorCode.rebalance_in_progress
    j = h.join(a)  # eager: it revoked everything before rejoining
    assert j.error == ErrorCode.none and j.generation == gen + 1 and j.protocol == "range"
    assert j.leader == "" and j.members == ()
    s = h.sync(a, j.generation)
    got_a = set(decode_assignment(s.assignment).get("t", ()))
    assert len(got_a) == 2 and s.protocol_type == "consumer"
    assert h.heartbeat(a, j.generation).error == ErrorCode.none
    assert h.heartbeat(a, gen).error == ErrorCode.illegal_generation
    jb = h.join(b)
    got_b = set(decode_assignment(h.sync(b, jb.generation).assignment).get("t", ()))
    r = h.hb("c", gen + 1, owned=set())
    got_c = {p for _, p in parts(r)}
    assert len(got_b) == 2 and len(got_c) == 2
    assert got_a | got_b | got_c == set(range(6)) and not (got_a & got_b or got_a & got_c
                                                            or got_b & got_c)
    assert h.shard.consumer.groups["g"].state.value == "Stable"
    # offsets: kept, and committed by a classic member with its member epoch
    assert h.shard.fetch_offsets("g", None)[0].offset == 42
    res = h.apply(h.shard.commit_offsets(OffsetCommit("g", (CommitTopic(
        "t", (CommitPartition(0, 43, -1, "", -1),)),), j.generation, a), h.now))
    assert res == [("t", 0, ErrorCode.none)]


def test_the_last_new_protocol_member_leaving_downgrades_the_group():
    h, a, b = migrated_group()
    epoch = h.shard.consumer.groups["g"].group_epoch
    before = len(h.written)
    assert h.hb("c", -1).member_epoch == -1
    records = h.written[before:]
    assert "g" not in h.shard.consumer.groups
    group = h.shard.classic.groups["g"]
    # back to classic: the consumer group's records tombstoned, the classic group written
    assert type(records[-1].key) is GroupMetadataKey and records[-1].value.generation == epoch
    assert all(r.value is None for r in records[:-1])
    assert {type(r.key) for r in records[:-1]} >= {ConsumerGroupCurrentMemberAssignmentKey,
                                                   ConsumerGroupMetadataKey}
    # it prepares a rebalance: both rejoin and get a new generation from their leader
    assert group.is_in(GroupState.PREPARING_REBALANCE) and set(group.members) == {a, b}
    assert h.heartbeat(a, epoch).error == ErrorCode.rebalance_in_progress
    h.join(a)
    h.join(b)
    assert group.is_in(GroupState.COMPLETING_REBALANCE) and group.generation == epoch + 1
    # the records load into the same groups
    loaded = CoordinatorShard()
    loaded.replay_records(h.written, h.now)
    assert "g" not in loaded.consumer.groups and set(loaded.classic.groups["g"].members) == {a, b}


def test_a_fenced_new_protocol_member_downgrades_the_group_too():
    h, a, b = migrated_group()
    for _ in range(12):  # the classic members heartbeat, c does not
        h.advance(5_000)
        if "g" not in h.shard.consumer.groups:
            break
        for m in (a, b):
            h.heartbeat(m, h.shard.consumer.groups["g"].members[m].member_epoch)
    assert h.now - 1_000 >= 45_000  # c's session
    assert "g" not in h.shard.consumer.groups
    assert set(h.shard.classic.groups["g"].members) == {a, b}


def test_classic_members_leave_a_consumer_group():
    h = Harness()
    a, b, gen = stable_classic_group(h)
    h.hb("c", 0)
    epoch = h.shard.consumer.groups["g"].group_epoch
    r = h.apply(h.shard.leave_group(LeaveGroup("g", (LeavingMember(a), LeavingMember("x"))),
                                    h.now))
    assert r.members == ((a, None, ErrorCode.none), ("x", None, ErrorCode.unknown_member_id))
    g = h.shard.consumer.groups["g"]
    assert set(g.members) == {b, "c"} and g.group_epoch == epoch + 1


def test_a_new_classic_member_joins_a_consumer_group():
    h = Harness()
    first = h.hb("c", 0)
    r = h.join("")
    assert r.error == ErrorCode.none and r.generation == 2  # v3: no member id round trip
    s = h.sync(r.member_id, r.generation)
    assert decode_assignment(s.assignment) == {}  # c still owns all
    p = parts(h.hb("c", 1, owned=parts(first)))  # c revokes half
    h.hb("c", 1, owned=p)
    assert h.heartbeat(r.member_id, 2).error == ErrorCode.rebalance_in_progress  # now free
    j = h.join(r.member_id)
    got = decode_assignment(h.sync(r.member_id, j.generation).assignment)["t"]
    assert len(got) == 3 and not {(T, x) for x in got} & p
    # a classic member joining with a protocol type other than consumer
    other = JoinGroup("g", "", "connect", (("x", b""),), 10_000, 10_000, version=3)
    assert h.apply(h.shard.join_group(other, h.now, lambda: h.topics)).error == \
        ErrorCode.inconsistent_group_protocol
    # the last new-protocol member leaving: a classic group again, r's member in it
    h.hb("c", -1)
    assert set(h.shard.classic.groups["g"].members) == {r.member_id}


def test_the_migration_policy_is_obeyed():
    h = Harness("disabled")
    stable_classic_group(h)
    assert h.hb("c", 0).error == ErrorCode.group_id_not_found
    assert "g" in h.shard.classic.groups
    h = Harness("downgrade")
    stable_classic_group(h)
    assert h.hb("c", 0).error == ErrorCode.group_id_not_found
    h = Harness("upgrade")
    a, b, _ = stable_classic_group(h)
    assert h.hb("c", 0).error == ErrorCode.none
    h.hb("c", -1)
    # no downgrade: a consumer group of classic members
    g = h.shard.consumer.groups["g"]
    assert set(g.members) == {a, b} and "g" not in h.shard.classic.groups


def test_a_classic_group_mid_rebalance_is_upgraded_and_its_parked_joins_answered():
    h = Harness()
    a, b, gen = stable_classic_group(h)
    h.join("")  # a third classic member: the group prepares a rebalance, the join is parked
    group = h.shard.classic.groups["g"]
    assert group.is_in(GroupState.PREPARING_REBALANCE)
    h.replies.clear()
    assert h.hb("c", 0).error == ErrorCode.none
    assert [r.error for r in h.replies.values()] == [ErrorCode.rebalance_in_progress]
    assert len(h.shard.consumer.groups["g"].members) == 4


def test_the_upgrade_records_load_into_the_same_groups():
    h = Harness()
    a, b, gen = stable_classic_group(h)
    h.hb("c", 0)
    j = h.join(a)
    h.sync(a, j.generation)
    loaded = CoordinatorShard()
    loaded.replay_records(h.written, h.now)
    assert loaded.consumer.groups == h.shard.consumer.groups
    assert "g" not in loaded.classic.groups


def test_a_loaded_classic_member_has_its_own_session_timeout():
    h, a, b = migrated_group()
    loaded = CoordinatorShard()
    loaded.replay_records(h.written, h.now)
    loaded.loaded(h.now)
    timers = loaded.consumer.timers
    deadlines = {timers.deadline(k) for k in timers.keys() if "session" in k}
    assert deadlines == {h.now + 10_000, h.now + 45_000}  # a and b's own, c's the group's


ops = st.lists(st.tuples(st.sampled_from(["hb"] * 4 + ["chb"] * 4 + ["join", "cjoin"] * 2
                                         + ["leave", "cleave", "expire"]),
                         st.integers(0, 3)), max_size=60)


@settings(max_examples=examples(200), deadline=None)
@given(ops)
def test_no_partition_is_owned_twice_with_classic_members_inside(steps):
    """Consumer-protocol members and eager classic members (they let go of everything before
    rejoining) in any order: no partition is counted for two members, and what every client
    holds the coordinator counts as its own, until the group is classic again."""
    h = Harness()
    first = h.hb("m-first", 0)
    consumers = {"m-first": (first.member_epoch, parts(first))}
    classics = {}  # member id -> (generation, what it holds)
    names = {}  # k -> a classic client's member id

    def classic_join(k, member_id):
        j = h.join(member_id)
        if j.error != ErrorCode.none:
            classics.pop(member_id, None)
            names.pop(k, None)
            return
        names[k] = j.member_id
        classics[j.member_id] = (j.generation, set())
        s = h.sync(j.member_id, j.generation)
        if s.error == ErrorCode.none:
            held = {(T, p) for p in decode_assignment(s.assignment).get("t", ())}
            classics[j.member_id] = (j.generation, held)
        elif s.error != ErrorCode.rebalance_in_progress:
            del classics[j.member_id]
            names.pop(k, None)

    for op, k in steps:
        mid = f"m{k}"
        if op == "join" and mid not in consumers:
            r = h.hb(mid, 0)
            if r.error == ErrorCode.none:
                consumers[mid] = (r.member_epoch, parts(r))
        elif op == "hb" and mid in consumers:
            epoch, owned = consumers[mid]
            r = h.hb(mid, epoch, owned=owned)
            if r.error != ErrorCode.none:
                del consumers[mid]
            else:
                consumers[mid] = (r.member_epoch,
                                  parts(r) if r.assignment is not None else owned)
        elif op == "leave" and mid in consumers:
            h.hb(mid, -1)
            del consumers[mid]
        elif op == "cjoin" and k not in names:
            classic_join(k, "")
        elif op == "chb" and k in names:
            member_id = names[k]
            gen, held = classics[member_id]
            r = h.heartbeat(member_id, gen)
            if r.error == ErrorCode.rebalance_in_progress:
                classics[member_id] = (gen, set())  # eager: everything revoked, then rejoin
                classic_join(k, member_id)
            elif r.error != ErrorCode.none:
                del classics[member_id]
                del names[k]
        elif op == "cleave" and k in names:
            member_id = names.pop(k)
            del classics[member_id]
            h.apply(h.shard.leave_group(LeaveGroup("g", (LeavingMember(member_id),)), h.now))
        elif op == "expire":
            h.advance(46_000)
        g = h.shard.consumer.groups.get("g")
        if g is None or not g.members:
            return  # classic, or empty: the classic protocol's own tests take over
        consumers = {m: c for m, c in consumers.items() if m in g.members}
        for key in [key for key, m in names.items() if m not in g.members]:
            del classics[names.pop(key)]
        seen = {}
        for m in g.members.values():
            for p in m.assignment.assigned | m.assignment.pending_revocation:
                assert p not in seen, f"{p} owned by {seen[p]} and {m.member_id}"
                seen[p] = m.member_id
        for member_id, (_, owned) in [*consumers.items(), *classics.items()]:
            assert all(seen.get(p) == member_id for p in owned), (member_id, owned, seen)
