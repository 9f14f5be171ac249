"""The KIP-848 consumer group protocol of a shard, sans-I/O, on a fake clock: epochs, target
assignment by the uniform and range assignors, revocation before assignment, session and
rebalance timeouts, leaving, static members, Kafka's error codes, offset commits with member
epochs, the records replayed into a fresh shard giving the same groups, and a property test
that no partition is ever owned by two members whatever the order of heartbeats."""

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from tests.support.examples import examples

from brook.coordinator.common.loader import replay_batches
from brook.coordinator.group.assignors import MemberSpec, range_assignor, uniform_assignor
from brook.coordinator.group.consumer import ConsumerGroupConfig, ConsumerHeartbeat
from brook.coordinator.group.consumer_group import ConsumerGroupState
from brook.coordinator.group.batch_writer import encode_records
from brook.coordinator.group.consumer_schemas import decode_key, decode_value, encode_key, encode_value
from brook.coordinator.group.offsets import CommitPartition, CommitTopic, OffsetCommit
from brook.coordinator.group.reconciliation import MemberState
from brook.coordinator.group.shard import CoordinatorShard

T = uuid.UUID("11111111-2222-3333-4444-555555555555")
U = uuid.UUID("99999999-2222-3333-4444-555555555555")


class Harness:
    """A shard on a fake clock; every result's records are replayed as the runtime does."""

    def __init__(self, partitions=12, config=None, **topics):
        self.shard = CoordinatorShard(consumer_config=config or ConsumerGroupConfig())
        self.now = 1_000
        self.topics = {"t": (T, partitions), **topics}
        self.written = []
        self.batches = []  # each write as the record batch the runtime appends

    def apply(self, result):
        self.written += result.records
        if result.records:
            self.batches.append(encode_records(result.records, self.now, len(self.written)))
        self.shard.replay_records(result.records, self.now)
        return result.response

    def hb(self, member_id, epoch, owned=None, group="g", **kw):
        if epoch == 0:
            kw.setdefault("subscribed_topic_names", ("t",))
            kw.setdefault("rebalance_timeout_ms", 30_000)
        req = ConsumerHeartbeat(group, member_id, epoch,
                                owned=None if owned is None else frozenset(owned), **kw)
        return self.apply(self.shard.consumer_group_heartbeat(req, self.topics, self.now))

    def advance(self, ms):
        self.now += ms
        for result in self.shard.poll(self.now):
            self.apply(result)

    def group(self, group_id="g"):
        return self.shard.consumer.groups[group_id]


def parts(resp):
    return {(t, p) for t, ps in resp.assignment for p in ps}


def test_a_first_member_gets_every_partition_at_epoch_one():
    h = Harness()
    r = h.hb("a", 0)
    assert r.error == ErrorCode.none and r.member_epoch == 1 and r.member_id == "a"
    assert parts(r) == {(T, p) for p in range(12)}
    assert r.heartbeat_interval_ms == 5_000
    g = h.group()
    assert (g.group_epoch, g.assignment_epoch, g.state) == (1, 1, ConsumerGroupState.STABLE)


def test_a_joining_member_waits_for_the_revocation_then_gets_its_half():
    h = Harness()
    a = parts(h.hb("a", 0))
    r = h.hb("b", 0)
    assert r.member_epoch == 2 and parts(r) == set()  # all still owned by a
    assert h.group().members["b"].assignment.state == MemberState.UNRELEASED_PARTITIONS
    r = h.hb("a", 1, owned=a)
    assert r.member_epoch == 1  # revoke first, same epoch
    kept = parts(r)
    assert len(kept) == 6
    assert h.group().members["a"].assignment.state == MemberState.UNREVOKED_PARTITIONS
    # b is still refused what a has not let go of
    r = h.hb("b", 2, owned=set())
    assert r.assignment is None and h.group().members["b"].assignment.assigned == set()
    r = h.hb("a", 1, owned=kept)  # revoked
    assert r.member_epoch == 2 and r.assignment is None  # the partitions it has: no news
    r = h.hb("b", 2, owned=set())
    assert r.member_epoch == 2 and parts(r) == {(T, p) for p in range(12)} - kept
    assert h.group().state == ConsumerGroupState.STABLE


def test_epochs_are_checked():
    h = Harness()
    h.hb("a", 0)
    assert h.hb("a", 5).error == ErrorCode.fenced_member_epoch
    assert h.hb("nobody", 1).error == ErrorCode.unknown_member_id
    assert h.hb("a", 0, group="").error == ErrorCode.invalid_request
    assert h.hb("", 1).error == ErrorCode.invalid_request
    assert h.hb("a", -3).error == ErrorCode.invalid_request
    assert h.hb("c", 0, rebalance_timeout_ms=-1).error == ErrorCode.invalid_request
    assert h.hb("c", 0, server_assignor="sticky").error == ErrorCode.unsupported_assignor
    assert h.hb("c", 0, subscribed_topic_regex="(a)\\1").error == \
        ErrorCode.invalid_regular_expression
    assert h.hb("x", 3, group="other").error == ErrorCode.group_id_not_found


def test_a_member_whose_answer_was_lost_may_send_the_previous_epoch():
    h = Harness()
    a = parts(h.hb("a", 0))
    h.hb("b", 0)
    kept = parts(h.hb("a", 1, owned=a))
    h.hb("a", 1, owned=kept)  # now epoch 2; suppose the answer was lost
    r = h.hb("a", 1, owned=kept)
    assert r.error == ErrorCode.none and r.member_epoch == 2
    assert h.hb("a", 1, owned=a).error == ErrorCode.fenced_member_epoch  # owns more than it has


def test_session_timeout_fences_the_member_and_bumps_the_epoch():
    h = Harness()
    h.hb("a", 0)
    h.hb("b", 0)
    h.advance(44_000)
    h.hb("a", 1, owned=set())
    h.advance(2_000)  # b silent for 46 s
    g = h.group()
    assert set(g.members) == {"a"} and g.group_epoch == 3
    r = h.hb("a", h.group().members["a"].member_epoch, owned=set())
    assert parts(r) == {(T, p) for p in range(12)} and r.member_epoch == 3


def test_a_member_that_does_not_revoke_in_its_rebalance_timeout_is_fenced():
    h = Harness()
    a = parts(h.hb("a", 0, rebalance_timeout_ms=10_000))
    h.hb("b", 0)
    h.hb("a", 1, owned=a)  # told to revoke
    h.advance(5_000)
    h.hb("a", 1, owned=a)  # still owns them
    h.advance(6_000)
    assert "a" not in h.group().members


def test_leave_removes_the_member():
    h = Harness()
    h.hb("a", 0)
    h.hb("b", 0)
    r = h.hb("b", -1)
    assert r.member_epoch == -1 and set(h.group().members) == {"a"}
    assert h.group().group_epoch == 3
    assert h.hb("b", -1).error == ErrorCode.unknown_member_id


def test_a_static_member_leaving_with_minus_two_is_replaced_with_its_assignment():
    h = Harness()
    first = parts(h.hb("a1", 0, instance_id="i"))
    assert h.hb("a2", 0, instance_id="i").error == ErrorCode.unreleased_instance_id
    assert h.hb("a1", 0, instance_id="i").error == ErrorCode.unreleased_instance_id
    r = h.hb("a1", -2, instance_id="i")
    assert r.member_epoch == -2
    epoch = h.group().group_epoch
    r = h.hb("a2", 0, instance_id="i")
    assert r.error == ErrorCode.none and parts(r) == first and r.member_epoch == 1
    assert set(h.group().members) == {"a2"} and h.group().group_epoch == epoch
    assert h.hb("a1", 1).error == ErrorCode.unknown_member_id


def test_a_departed_static_member_is_removed_after_its_session():
    h = Harness()
    h.hb("a1", 0, instance_id="i")
    h.hb("a1", -2, instance_id="i")
    h.advance(45_000)
    assert h.group().members == {}


def test_the_group_has_a_maximum_size():
    h = Harness(config=ConsumerGroupConfig(max_size=2))
    h.hb("a", 0)
    h.hb("b", 0)
    assert h.hb("c", 0).error == ErrorCode.group_max_size_reached


def test_range_assignor_chosen_by_the_members():
    h = Harness(partitions=4)
    h.hb("a", 0, server_assignor="range")
    h.hb("b", 0, server_assignor="range")
    g = h.group()
    assert g.target["a"] == {(T, 0), (T, 1)} and g.target["b"] == {(T, 2), (T, 3)}


def test_new_partitions_and_topics_bump_the_epoch():
    h = Harness(partitions=2)
    h.hb("a", 0, subscribed_topic_names=("t", "u"))
    assert h.group().group_epoch == 1
    h.topics["t"] = (T, 4)
    h.topics["u"] = (U, 1)
    r = h.hb("a", 1, owned=set())
    assert r.member_epoch == 2 and len(parts(r)) == 5


def test_regex_subscription_follows_the_topics():
    h = Harness(partitions=2, **{"orders-eu": (U, 3)})
    r = h.hb("a", 0, subscribed_topic_names=None, subscribed_topic_regex="orders-.*")
    assert parts(r) == {(U, 0), (U, 1), (U, 2)}
    h.topics["orders-us"] = (V := uuid.uuid4(), 1)
    r = h.hb("a", 1, owned=parts(r))
    assert (V, 0) in parts(r)


def test_commits_need_the_member_epoch():
    h = Harness()
    h.hb("a", 0)

    def commit(member, epoch):
        req = OffsetCommit("g", (CommitTopic("t", (CommitPartition(0, 5, -1, "", -1),)),),
                           epoch, member)
        return h.apply(h.shard.commit_offsets(req, h.now))

    assert commit("a", 0) == [("t", 0, ErrorCode.stale_member_epoch)]
    assert commit("b", 1) == [("t", 0, ErrorCode.unknown_member_id)]
    assert commit("a", 1) == [("t", 0, ErrorCode.none)]
    assert h.shard.fetch_offsets("g", None)[0].offset == 5
    # only consumer groups are listed for it, not a classic group made by the commit
    assert [(g.group_id, g.group_type) for g in h.shard.list_groups()] == [("g", "consumer")]
    # the classic DescribeGroups does not describe it (Kafka 4: GROUP_ID_NOT_FOUND, Dead)
    described = h.shard.describe_group("g")
    assert (described.state, described.error) == ("Dead", ErrorCode.group_id_not_found)


def test_a_classic_group_with_members_keeps_its_id():
    from brook.coordinator.group.classic import JoinGroup

    h = Harness()
    h.apply(h.shard.join_group(JoinGroup("g", "", "consumer", (("range", b""),), 10_000, 10_000,
                                         version=3),
                               h.now))
    assert h.hb("a", 0).error == ErrorCode.group_id_not_found


def test_delete_an_empty_consumer_group():
    h = Harness()
    h.hb("a", 0)
    assert h.apply(h.shard.delete_group("g", h.now)) == ErrorCode.non_empty_group
    h.hb("a", -1)
    assert h.apply(h.shard.delete_group("g", h.now)) == ErrorCode.none
    assert "g" not in h.shard.consumer.groups


def test_the_records_load_into_the_same_groups():
    h = Harness()
    a = parts(h.hb("a", 0, instance_id="ia"))
    h.hb("b", 0, server_assignor="uniform")
    h.hb("a", 1, owned=a)
    loaded = CoordinatorShard()
    for record in h.written:
        key = decode_key(encode_key(record.key))
        loaded.replay(key, decode_value(key, encode_value(record.value)), h.now)
    loaded.loaded(h.now)
    assert loaded.consumer.groups == h.shard.consumer.groups
    timers = loaded.consumer.timers  # sessions start again at the load, and a's revocation
    assert {timers.deadline(k) for k in timers.keys()} == {h.now + 45_000, h.now + 30_000}


def test_the_partition_loads_into_the_same_groups_through_the_loader():
    h = Harness()
    a = parts(h.hb("a", 0, instance_id="ia"))
    h.hb("b", 0, subscribed_topic_regex="t|u", subscribed_topic_names=None)
    h.hb("a", 1, owned=a)
    h.hb("c", 0)
    h.hb("c", -1)
    loaded = CoordinatorShard()
    replay_batches(loaded.batch_replayer(h.now), h.batches)
    assert loaded.consumer.groups == h.shard.consumer.groups
    assert loaded.consumer.groups["g"].members["b"].assignment.state == \
        h.group().members["b"].assignment.state


def test_uniform_is_balanced_and_sticky():
    topics = {T: 12}
    m = {k: MemberSpec(frozenset({T}), frozenset()) for k in "abc"}
    first = uniform_assignor(m, topics)
    assert sorted(len(v) for v in first.values()) == [4, 4, 4]
    m = {k: MemberSpec(frozenset({T}), first.get(k, frozenset())) for k in "abcd"}
    second = uniform_assignor(m, topics)
    assert sorted(len(v) for v in second.values()) == [3, 3, 3, 3]
    assert all(second[k] <= first[k] for k in "abc")  # only moves to the newcomer


def test_range_gives_contiguous_ranges():
    m = {k: MemberSpec(frozenset({T}), frozenset()) for k in "ab"}
    out = range_assignor(m, {T: 5})
    assert out["a"] == {(T, 0), (T, 1), (T, 2)} and out["b"] == {(T, 3), (T, 4)}


# --------------------------------------------------------------------------------------------
# No partition owned twice, whatever the order


ops = st.lists(st.tuples(st.sampled_from(["hb", "hb", "hb", "join", "leave", "expire", "grow",
                                          "lost"]),
                         st.integers(0, 4)), max_size=60)


@settings(max_examples=examples(200), deadline=None)
@given(ops, st.sampled_from(["uniform", "range"]))
def test_no_partition_is_ever_owned_by_two_members(steps, assignor):
    h = Harness(partitions=6, config=ConsumerGroupConfig(assignors=(assignor,)))
    clients = {}  # member id -> (epoch, what the client owns)
    for op, k in steps:
        mid = f"m{k}"
        if op == "join" and mid not in clients:
            r = h.hb(mid, 0)
            if r.error == ErrorCode.none:
                clients[mid] = (r.member_epoch, parts(r))
        elif op in ("hb", "lost") and mid in clients:
            epoch, owned = clients[mid]
            r = h.hb(mid, epoch, owned=owned)
            if r.error != ErrorCode.none:
                del clients[mid]  # fenced: the client drops everything and is gone
            elif op == "hb":  # "lost": the answer never reaches the client
                clients[mid] = (r.member_epoch, parts(r) if r.assignment is not None else owned)
        elif op == "leave" and mid in clients:
            h.hb(mid, -1)
            del clients[mid]
        elif op == "expire":
            h.advance(46_000)
            clients = {m: c for m, c in clients.items() if m in h.group().members}
        elif op == "grow":
            h.topics["t"] = (T, h.topics["t"][1] + 1)
        if "g" not in h.shard.consumer.groups:
            continue
        g = h.group()
        seen = {}
        for m in g.members.values():
            for p in m.assignment.assigned | m.assignment.pending_revocation:
                assert p not in seen, f"{p} owned by {seen[p]} and {m.member_id}"
                seen[p] = m.member_id
        for mid_, (_, owned) in clients.items():
            # what a client holds the coordinator counts as its own
            assert all(seen.get(p) == mid_ for p in owned), (mid_, owned, seen)


def test_offsets_of_subscribed_topics_do_not_expire():
    from brook.coordinator.group.offsets import OffsetsConfig

    h = Harness()
    h.shard = CoordinatorShard(offsets_config=OffsetsConfig(offsets_retention_minutes=1))
    h.hb("a", 0)
    for topic in ("t", "gone"):
        req = OffsetCommit("g", (CommitTopic(topic, (CommitPartition(0, 5, -1, "", -1),)),),
                           1, "a")
        h.apply(h.shard.commit_offsets(req, h.now))
    h.now += 120_000
    expired = h.shard.offsets.expire(h.now, h.shard.classic.groups).records
    assert [(r.key.topic, r.value) for r in expired] == [("gone", None)]


def test_an_empty_consumer_group_becomes_a_classic_group_with_its_offsets():
    from brook.coordinator.group.classic import JoinGroup

    h = Harness()
    h.hb("a", 0)
    req = OffsetCommit("g", (CommitTopic("t", (CommitPartition(0, 7, -1, "", -1),)),), 1, "a")
    h.apply(h.shard.commit_offsets(req, h.now))
    join = JoinGroup("g", "", "consumer", (("range", b""),), 10_000, 10_000, version=3)
    assert h.apply(h.shard.join_group(join, h.now)).error == ErrorCode.inconsistent_group_protocol
    h.hb("a", -1)
    result = h.shard.join_group(join, h.now)
    h.written += result.records  # the classic operations apply their own records
    assert result.response is None or result.response.error == ErrorCode.none
    assert "g" not in h.shard.consumer.groups and "g" in h.shard.classic.groups
    assert [type(r.key).__name__ for r in result.records[:3]] == [
        "ConsumerGroupTargetAssignmentMetadataKey", "ConsumerGroupPartitionMetadataKey",
        "ConsumerGroupMetadataKey"]
    assert h.shard.fetch_offsets("g", None)[0].offset == 7
    # loading what was written gives the same
    loaded = CoordinatorShard()
    loaded.replay_records(h.written, h.now)
    assert "g" not in loaded.consumer.groups and loaded.fetch_offsets("g", None)[0].offset == 7


heartbeats = st.builds(
    ConsumerHeartbeat,
    group_id=st.sampled_from(["g", "", "h"]),
    member_id=st.sampled_from(["m0", "m1", "m2", ""]),
    member_epoch=st.integers(-3, 6),
    instance_id=st.sampled_from([None, "", "i0", "i1"]),
    rack_id=st.sampled_from([None, "r"]),
    rebalance_timeout_ms=st.sampled_from([-1, 0, 1000, 30_000]),
    subscribed_topic_names=st.sampled_from([None, (), ("t",), ("t", "u", "missing")]),
    subscribed_topic_regex=st.sampled_from([None, "", "t|u", "(?=t)", "[", "u.*"]),
    server_assignor=st.sampled_from([None, "uniform", "range", "bogus"]),
    owned=st.none() | st.frozensets(st.tuples(st.sampled_from([T, U, uuid.UUID(int=7)]),
                                              st.integers(-1, 12)), max_size=6),
)


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.tuples(heartbeats, st.integers(0, 50_000)), max_size=30))
def test_any_heartbeat_gets_an_answer_and_keeps_ownership_single(steps):
    """Errors are answers: whatever a heartbeat says, the shard answers it (never raises) and
    no partition is owned twice; the records it wrote load into the same groups."""
    h = Harness(u=(U, 3))
    for req, wait in steps:
        h.advance(wait)
        r = h.apply(h.shard.consumer_group_heartbeat(req, h.topics, h.now))
        assert isinstance(r.error, ErrorCode)
        for g in h.shard.consumer.groups.values():
            seen = set()
            for m in g.members.values():
                mine = m.assignment.assigned | m.assignment.pending_revocation
                assert not mine & seen
                seen |= mine
    loaded = CoordinatorShard()
    loaded.replay_records(h.written, h.now)
    assert loaded.consumer.groups == h.shard.consumer.groups


def test_a_view_lacking_partitions_for_a_moment_does_not_shrink_the_assignment():
    h = Harness(partitions=6)
    h.hb("a", 0)
    h.topics["t"] = (T, 4)  # a new coordinator's view during leader elections
    r = h.hb("a", 1, owned={(T, p) for p in range(6)})
    assert r.member_epoch == 1 and h.group().topics["t"].num_partitions == 6
    h.topics["t"] = (uuid.UUID(int=99), 2)  # the topic deleted and made again: a new id
    r = h.hb("a", 1, owned={(T, p) for p in range(6)})
    assert h.group().group_epoch == 2 and h.group().topics["t"].num_partitions == 2
    assert r.member_epoch == 1 and r.assignment == ()  # the old topic's partitions go first
    r = h.hb("a", 1, owned=set())
    assert r.member_epoch == 2 and parts(r) == {(uuid.UUID(int=99), 0), (uuid.UUID(int=99), 1)}


def test_a_loaded_member_that_must_revoke_has_its_rebalance_timeout():
    h = Harness()
    a = parts(h.hb("a", 0, rebalance_timeout_ms=10_000))
    h.hb("b", 0)
    h.hb("a", 1, owned=a)  # told to revoke
    loaded = CoordinatorShard()
    loaded.replay_records(h.written, h.now)
    loaded.loaded(h.now)
    results = loaded.poll(h.now + 10_000)
    for r in results:
        loaded.replay_records(r.records, h.now + 10_000)
    assert set(loaded.consumer.groups["g"].members) == {"b"}


def test_range_puts_static_members_first_by_instance_id():
    m = {"a": MemberSpec(frozenset({T}), frozenset()),
         "b": MemberSpec(frozenset({T}), frozenset(), instance_id="z"),
         "c": MemberSpec(frozenset({T}), frozenset(), instance_id="y")}
    out = range_assignor(m, {T: 3})
    assert (out["c"], out["b"], out["a"]) == ({(T, 0)}, {(T, 1)}, {(T, 2)})


def test_an_empty_consumer_group_goes_when_its_offsets_expire():
    from brook.coordinator.group.offsets import OffsetsConfig

    h = Harness()
    h.shard = CoordinatorShard(offsets_config=OffsetsConfig(offsets_retention_minutes=1))
    h.hb("a", 0)
    h.hb("b", 0, group="other")  # no offsets and members: stays
    req = OffsetCommit("g", (CommitTopic("t", (CommitPartition(0, 5, -1, "", -1),)),), 1, "a")
    h.apply(h.shard.commit_offsets(req, h.now))
    h.now += 120_000
    assert h.shard.offsets.expire(h.now, h.shard.classic.groups).records == []  # a member
    h.hb("a", -1)
    expired = h.shard.offsets.expire(h.now, h.shard.classic.groups).records
    h.apply(type(h.shard.delete_topics((), h.now))(records=expired))
    assert "g" not in h.shard.consumer.groups and "other" in h.shard.consumer.groups
    assert h.shard.fetch_offsets("g", None) == []


def test_transactional_commits_are_fenced_by_the_member_epoch():
    from brook.coordinator.group.offsets import TxnOffsetCommit

    h = Harness()
    h.hb("a", 0)

    def commit(member, epoch):
        req = TxnOffsetCommit("tx", "g", 7, 0,
                              (CommitTopic("t", (CommitPartition(0, 5, -1, "", -1),)),),
                              epoch, member)
        return h.apply(h.shard.commit_transactional_offsets(req, h.now))

    assert commit("a", 0) == [("t", 0, ErrorCode.illegal_generation)]
    assert commit("x", 1) == [("t", 0, ErrorCode.unknown_member_id)]
    assert commit("a", 1) == [("t", 0, ErrorCode.none)]


def test_a_failed_write_is_rolled_back_from_the_consumer_groups():
    """In a cluster a write is replayed when appended; when it cannot be committed the groups
    go back to what they were before it (and every later uncommitted write), by records that
    are replayed and written."""
    import copy

    h = Harness()
    a = parts(h.hb("a", 0))
    h.apply(h.shard.commit_offsets(OffsetCommit("g", (CommitTopic(
        "t", (CommitPartition(0, 5, -1, "", -1),)),), 1, "a"), h.now))
    before = copy.deepcopy(h.shard.consumer.groups)
    # b joins (write ending at 100), a revokes (write ending at 200): neither committed
    for end, req in ((100, ConsumerHeartbeat("g", "b", 0, rebalance_timeout_ms=30_000,
                                             subscribed_topic_names=("t",))),
                     (200, ConsumerHeartbeat("g", "a", 1, owned=frozenset(a)))):
        result = h.shard.consumer_group_heartbeat(req, h.topics, h.now)
        h.shard.replay_records(result.records, h.now, end)
    assert set(h.group().members) == {"a", "b"}
    restore = h.shard.roll_back(100)
    h.shard.replay_records(restore, h.now)
    assert h.shard.consumer.groups == before
    assert h.shard.fetch_offsets("g", None)[0].offset == 5
    # what is written loads into the same group
    loaded = CoordinatorShard()
    loaded.replay_records(h.written + restore, h.now)
    assert loaded.consumer.groups == before


def test_a_committed_write_is_not_rolled_back_and_a_new_group_goes_entirely():
    h = Harness()
    result = h.shard.consumer_group_heartbeat(
        ConsumerHeartbeat("g", "a", 0, rebalance_timeout_ms=30_000,
                          subscribed_topic_names=("t",)), h.topics, h.now)
    h.shard.replay_records(result.records, h.now, 100)
    h.shard.committed(100)
    assert h.shard.roll_back(100) == [] and set(h.group().members) == {"a"}
    result = h.shard.consumer_group_heartbeat(
        ConsumerHeartbeat("n", "x", 0, rebalance_timeout_ms=30_000,
                          subscribed_topic_names=("t",)), h.topics, h.now)
    h.shard.replay_records(result.records, h.now, 200)
    h.shard.replay_records(h.shard.roll_back(200), h.now)
    assert "n" not in h.shard.consumer.groups and "g" in h.shard.consumer.groups
