"""The offsets manager and its cache, on a fake clock: exact records, errors, expiry, memory."""

from __future__ import annotations

import gc
import io
import struct
import sys
import tracemalloc

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.consumer_protocol_subscription.v0.data import (
    ConsumerProtocolSubscription as SubscriptionV0,
)
from kio.schema.consumer_protocol_subscription.v3.data import (
    ConsumerProtocolSubscription as SubscriptionV3,
)
from kio.schema.consumer_protocol_subscription.v3.data import TopicPartition
from kio.schema.errors import ErrorCode as E
from kio.serial import entity_writer

from brook.clock import FakeClock
from brook.coordinator.common.result import CoordinatorRecord, CoordinatorResult, record_pairs
from brook.coordinator.group.classic_group import ClassicGroup
from brook.coordinator.group.classic_group import GroupState as S
from brook.coordinator.group.commit_runs import CommitRun
from brook.coordinator.group.offsets import (
    CommitPartition,
    CommitTopic,
    ExpireResult,
    FetchedOffset,
    OffsetCommit,
    OffsetsConfig,
    OffsetsManager,
    is_subscribed_to_topic,
    subscribed_topics,
)
from brook.coordinator.group.offsets_cache import OffsetsCache
from brook.coordinator.group.schemas import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from tests.support.coordinator_harness import CoordinatorHarness

T0 = 1_700_000_000_000
MINUTE = 60_000
RETENTION = 10_080 * MINUTE


def subscription(*topics: str, version: int = 0) -> bytes:
    """A ConsumerProtocol Subscription as a Kafka consumer sends it: int16 version, then body."""
    buf = io.BytesIO()
    if version == 0:
        entity_writer(SubscriptionV0)(buf, SubscriptionV0(topics=topics, user_data=None))
    else:
        assert version == 3
        owned = tuple(TopicPartition(topic=t, partitions=(0,)) for t in topics)
        entity_writer(SubscriptionV3)(
            buf,
            SubscriptionV3(
                topics=topics, user_data=b"x", owned_partitions=owned, generation_id=4, rack_id="r"
            ),
        )
    return struct.pack(">h", version) + buf.getvalue()


def member(member_id: str, sub: bytes, instance: str | None = None) -> MemberMetadata:
    return MemberMetadata(member_id, instance, "client", "/h", 30_000, 10_000, sub, b"")


def stable_group(
    *members: MemberMetadata, generation: int = 3, protocol_type: str = "consumer", ts: int = T0
) -> ClassicGroup:
    value = GroupMetadataValue(protocol_type, generation, "range", members[0].member_id, ts, members)
    group = ClassicGroup.from_metadata_value("g", value, ts)
    assert group.state is S.STABLE
    return group


def empty_group(protocol_type: str = "consumer", ts: int = T0, generation: int = 3) -> ClassicGroup:
    value = GroupMetadataValue(protocol_type, generation, None, None, ts, ())
    group = ClassicGroup.from_metadata_value("g", value, ts)
    assert group.state is S.EMPTY
    return group


def expanded(records) -> list[CoordinatorRecord]:
    """The records ``records`` stand for, a ``CommitRun`` as one record per row."""
    return [CoordinatorRecord(key, value) for key, value in record_pairs(records)]


def replay_all(manager: OffsetsManager, records, now: int = T0) -> None:
    """What the runtime does once the records are appended: a run through ``replay_commits``,
    a record through ``replay``."""
    for record in records:
        if type(record) is CommitRun:
            manager.replay_commits(record.group, record.topic, record.rows, now)
        else:
            manager.replay(record.key, record.value, now)


class Harness(CoordinatorHarness):
    """The shared harness, driving the offsets of its shard without groups of its own."""

    def __init__(self, **config):
        super().__init__(T0, offsets_config=OffsetsConfig(**config))
        self.manager = self.shard.offsets

    def apply(self, records):
        self.run(CoordinatorResult(records=list(records)))
        return records

    def commit(self, *partitions, group=None, topic="t", group_id="g", **request):
        req = OffsetCommit(
            group_id, (CommitTopic(topic, tuple(partitions)),), **request
        )
        result = self.manager.commit(req, group, self.now)
        self.apply(result.records)
        return result

    def expire(self, groups=None):
        result = self.manager.expire(self.now, groups or {})
        self.apply(result.records)
        return result


def P(partition, offset, **kw):
    return CommitPartition(partition, offset, **kw)


def K(partition, topic="t", group="g"):
    return OffsetCommitKey(group, topic, partition)


# --- OffsetCommit: records and validation ---------------------------------------------------


def test_simple_commit_without_a_group_writes_one_record_per_partition():
    h = Harness()
    result = h.commit(P(0, 10, leader_epoch=2, metadata="m"), P(1, 20, metadata=None))
    assert result.records == [
        CoordinatorRecord(K(0), OffsetCommitValue(10, 2, "m", T0, -1)),
        CommitRun("g", "t", [(1, 20, -1, T0)]),  # no metadata: a row
    ]
    assert expanded(result.records) == [
        CoordinatorRecord(K(0), OffsetCommitValue(10, 2, "m", T0, -1)),
        CoordinatorRecord(K(1), OffsetCommitValue(20, -1, "", T0, -1)),
    ]
    assert result.errors == [("t", 0, E.none), ("t", 1, E.none)]
    assert h.manager.fetch("g", [("t", [0, 1, 2])]) == [
        FetchedOffset("t", 0, 10, 2, "m"),
        FetchedOffset("t", 1, 20, -1, ""),
        FetchedOffset("t", 2, -1, -1, ""),
    ]


def test_partitions_without_metadata_are_written_as_runs_in_request_order():
    h = Harness(offset_metadata_max_bytes=4)
    req = OffsetCommit("g", (
        CommitTopic("a", (P(0, 1), P(1, 2, leader_epoch=3), P(2, 3, metadata="m"), P(3, 4),
                          P(4, 5, metadata="too long"), P(5, 6))),
        CommitTopic("b", (P(0, 7),)),
    ))
    result = h.manager.commit(req, None, T0)
    assert result.records == [
        CommitRun("g", "a", [(0, 1, -1, T0), (1, 2, 3, T0)]),
        CoordinatorRecord(OffsetCommitKey("g", "a", 2), OffsetCommitValue(3, -1, "m", T0, -1)),
        CommitRun("g", "a", [(3, 4, -1, T0), (5, 6, -1, T0)]),  # partition 4 was refused
        CommitRun("g", "b", [(0, 7, -1, T0)]),
    ]
    assert [e for _, _, e in result.errors] == [E.none] * 4 + [E.offset_metadata_too_large, E.none,
                                                                E.none]


def test_a_run_replays_as_its_records_do():
    req = OffsetCommit("g", (CommitTopic("t", (P(0, 1), P(1, 2, metadata="m"), P(2, 3),
                                               P(-1, 4), P(70_000, 5))),))
    by_run, by_record = OffsetsManager(), OffsetsManager()
    records = by_run.commit(req, None, T0).records
    assert any(type(r) is CommitRun for r in records)
    replay_all(by_run, records)
    for record in expanded(records):
        by_record.replay(record.key, record.value, T0)
    assert by_run.fetch("g") == by_record.fetch("g")
    assert by_run.cached_offsets == by_record.cached_offsets == 5


def test_commit_does_not_change_state_until_replayed():
    h = Harness()
    req = OffsetCommit("g", (CommitTopic("t", (P(0, 5),)),))
    result = h.manager.commit(req, None, h.now)
    assert len(result.records) == 1
    assert h.manager.fetch("g", [("t", [0])]) == [FetchedOffset("t", 0, -1, -1, "")]
    assert not h.manager.has_offsets("g")


def test_retention_time_sets_an_expire_timestamp_and_value_version_1():
    h = Harness()
    result = h.commit(P(0, 10), retention_time_ms=5_000, version=2)
    value = OffsetCommitValue(10, -1, "", T0, T0 + 5_000)
    assert result.records == [CoordinatorRecord(K(0), value)]
    assert encode_value(value)[:2] == b"\x00\x01"


def test_v1_commit_timestamp_is_kept():
    h = Harness()
    result = h.commit(P(0, 10, commit_timestamp=123), version=1)
    assert result.records == [CommitRun("g", "t", [(0, 10, -1, 123)])]
    assert expanded(result.records) == [CoordinatorRecord(K(0), OffsetCommitValue(10, -1, "", 123, -1))]


def test_metadata_too_large_fails_only_that_partition():
    h = Harness(offset_metadata_max_bytes=4)
    result = h.commit(P(0, 1, metadata="abcd"), P(1, 2, metadata="abcde"), P(2, 3))
    assert result.errors == [
        ("t", 0, E.none),
        ("t", 1, E.offset_metadata_too_large),
        ("t", 2, E.none),
    ]
    assert [r.key for r in expanded(result.records)] == [K(0), K(2)]


def test_metadata_is_measured_in_utf16_code_units_as_kafka_does():
    h = Harness(offset_metadata_max_bytes=2)
    # "é" is 1 unit (2 UTF-8 bytes); a musical symbol is 2 units (a surrogate pair).
    result = h.commit(P(0, 1, metadata="éé"), P(1, 1, metadata="\U0001d11e"),
                      P(2, 1, metadata="a\U0001d11e"))
    assert [e for _, _, e in result.errors] == [E.none, E.none, E.offset_metadata_too_large]


def test_default_metadata_limit_is_4096():
    h = Harness()
    ok, big = "x" * 4096, "x" * 4097
    result = h.commit(P(0, 1, metadata=ok), P(1, 1, metadata=big))
    assert [e for _, _, e in result.errors] == [E.none, E.offset_metadata_too_large]


def test_all_partitions_of_a_refused_commit_get_the_group_error_and_no_records():
    h = Harness()
    req = OffsetCommit(
        "g", (CommitTopic("a", (P(0, 1), P(1, 1))), CommitTopic("b", (P(7, 1),))), generation=1,
        member_id="m",
    )
    result = h.manager.commit(req, None, h.now)
    assert result.records == []
    assert result.errors == [
        ("a", 0, E.group_id_not_found),
        ("a", 1, E.group_id_not_found),
        ("b", 7, E.group_id_not_found),
    ]


@pytest.mark.parametrize(
    "version, error", [(0, E.illegal_generation), (8, E.illegal_generation),
                       (9, E.group_id_not_found)]
)
def test_unknown_group_with_a_generation(version, error):
    h = Harness()
    result = h.commit(P(0, 1), generation=1, member_id="m", version=version)
    assert result.errors == [("t", 0, error)]


def test_unknown_group_with_generation_minus_one_is_a_simple_commit_even_with_a_member_id():
    h = Harness()
    assert h.commit(P(0, 1), member_id="m").errors == [("t", 0, E.none)]


def stable_gm():
    return stable_group(
        member("m1", subscription("t")), member("m2", subscription("t"), instance="i2")
    )


@pytest.mark.parametrize(
    "request_fields, error",
    [
        ({"generation": 3, "member_id": "m1"}, E.none),
        ({"generation": 3, "member_id": "m2", "group_instance_id": "i2"}, E.none),
        ({"generation": 2, "member_id": "m1"}, E.illegal_generation),
        ({"generation": 3, "member_id": "nobody"}, E.unknown_member_id),
        ({"generation": 3, "member_id": "m1", "group_instance_id": "i2"}, E.fenced_instance_id),
        ({"generation": 3, "member_id": "m1", "group_instance_id": "i9"}, E.unknown_member_id),
        ({"generation": -1, "member_id": ""}, E.unknown_member_id),  # simple commit, members
        ({"generation": -1, "member_id": "m1"}, E.illegal_generation),
    ],
)
def test_commit_validation_against_a_stable_group(request_fields, error):
    h = Harness()
    result = h.commit(P(0, 1), group=stable_gm(), **request_fields)
    assert result.errors == [("t", 0, error)]
    assert bool(result.records) is (error is E.none)


def test_commit_to_an_empty_group():
    h = Harness()
    group = empty_group()
    assert h.commit(P(0, 1), group=group).errors == [("t", 0, E.none)]
    assert h.commit(P(0, 1), group=group, generation=-1, member_id="m").errors == [
        ("t", 0, E.none)
    ]
    assert h.commit(P(0, 1), group=group, generation=3, member_id="m").errors == [
        ("t", 0, E.unknown_member_id)
    ]


def test_commit_during_completing_rebalance_is_rebalance_in_progress():
    h = Harness()
    group = stable_gm()
    group.transition_to(S.PREPARING_REBALANCE, T0)
    assert h.commit(P(0, 1), group=group, generation=3, member_id="m1").errors == [
        ("t", 0, E.none)
    ]
    group.init_next_generation(T0)
    assert group.state is S.COMPLETING_REBALANCE and group.generation == 4
    assert h.commit(P(0, 1), group=group, generation=4, member_id="m1").errors == [
        ("t", 0, E.rebalance_in_progress)
    ]
    assert h.commit(P(0, 1), group=group, generation=3, member_id="m1").errors == [
        ("t", 0, E.illegal_generation)
    ]


def test_commit_to_a_dead_group_is_coordinator_not_available():
    h = Harness()
    group = empty_group()
    group.transition_to(S.DEAD, T0)
    assert h.commit(P(0, 1), group=group).errors == [("t", 0, E.coordinator_not_available)]


# --- OffsetFetch and replay -----------------------------------------------------------------


def test_fetch_all_gives_every_committed_partition_by_topic_then_partition():
    h = Harness()
    h.commit(P(2, 20), P(0, 0), topic="b")
    h.commit(P(1, 11), topic="a")
    h.commit(P(0, 5), group_id="other")
    assert h.manager.fetch("g") == [
        FetchedOffset("b", 0, 0, -1, ""),
        FetchedOffset("b", 2, 20, -1, ""),
        FetchedOffset("a", 1, 11, -1, ""),
    ]
    assert h.manager.fetch("nobody") == []


def test_a_later_commit_replaces_and_a_tombstone_deletes():
    h = Harness()
    h.commit(P(0, 1, metadata="first"))
    h.clock.advance(10)
    h.commit(P(0, 2))
    assert h.manager.cache.get("g", "t", 0) == OffsetCommitValue(2, -1, "", T0 + 10, -1)
    h.apply([CoordinatorRecord(K(0), None)])
    assert h.manager.fetch("g") == []
    assert not h.manager.has_offsets("g")
    assert len(h.manager.cache) == 0


def test_replay_ignores_group_metadata_records():
    h = Harness()
    h.manager.replay(GroupMetadataKey("g"), None)
    h.manager.replay(GroupMetadataKey("g"), GroupMetadataValue("consumer", 1, None, None, 0, ()))
    assert len(h.manager.cache) == 0


def test_loading_from_encoded_records_gives_the_same_state():
    h = Harness()
    h.commit(P(0, 1, metadata="m"), P(3, 9, leader_epoch=7))
    h.commit(P(1, 4), retention_time_ms=100, topic="u")
    h.apply([CoordinatorRecord(K(3), None)])
    encoded = [(encode_key(r.key), encode_value(r.value)) for r in h.log]
    loaded = OffsetsManager()
    for key_bytes, value_bytes in encoded:
        key = decode_key(key_bytes)
        loaded.replay(key, decode_value(key, value_bytes))
    loaded.loaded()
    assert loaded.fetch("g") == h.manager.fetch("g")
    assert list(loaded.cache.group_offsets("g")) == list(h.manager.cache.group_offsets("g"))


def test_cache_keeps_odd_partitions_and_out_of_range_values():
    cache = OffsetsCache()
    odd = {
        -1: OffsetCommitValue(1),
        100_000: OffsetCommitValue(2, metadata="far"),
        3: OffsetCommitValue(2**63 - 1, 2**31 - 1, "", -(2**63), 5),
        4: OffsetCommitValue(2**70),  # beyond int64: kept whole, not in a row
    }
    for partition, value in odd.items():
        cache.put("g", "t", partition, value)
    for partition, value in odd.items():
        assert cache.get("g", "t", partition) == value
    assert len(cache) == 4
    assert [p for p, _ in cache.topic_offsets("g", "t")] == [-1, 3, 4, 100_000]
    cache.put("g", "t", 4, OffsetCommitValue(7))  # back into a row
    assert cache.get("g", "t", 4) == OffsetCommitValue(7) and len(cache) == 4
    for partition in odd:
        assert cache.delete("g", "t", partition)
    assert len(cache) == 0 and not cache.has_group("g")


# --- DeleteGroups and OffsetDelete ----------------------------------------------------------


def test_delete_group_tombstones_every_offset():
    h = Harness()
    h.commit(P(0, 1), P(1, 1), topic="a")
    h.commit(P(5, 1), topic="b")
    records = h.apply(h.manager.delete_group("g"))
    assert records == [
        CoordinatorRecord(K(0, "a"), None), CoordinatorRecord(K(1, "a"), None), CoordinatorRecord(K(5, "b"), None)
    ]
    assert not h.manager.has_offsets("g")
    assert h.manager.delete_group("g") == []


def test_delete_offsets_refuses_subscribed_topics_and_tombstones_only_committed_ones():
    h = Harness()
    h.commit(P(0, 1), P(1, 1), topic="old")
    h.commit(P(0, 1), topic="t")
    group = stable_group(member("m1", subscription("t")))
    result = h.manager.delete_offsets("g", [("old", [0, 1, 2]), ("t", [0])], group)
    assert result.error is E.none
    assert result.records == [CoordinatorRecord(K(0, "old"), None), CoordinatorRecord(K(1, "old"), None)]
    assert result.errors == [
        ("old", 0, E.none), ("old", 1, E.none), ("old", 2, E.none),
        ("t", 0, E.group_subscribed_to_topic),
    ]


def test_delete_offsets_group_errors():
    h = Harness()
    m = OffsetsManager()
    assert h.manager.delete_offsets("g", [("t", [0])], None).error is E.group_id_not_found
    h.commit(P(0, 1))
    simple = h.manager.delete_offsets("g", [("t", [0])], None)
    assert simple.error is E.none and simple.records == [CoordinatorRecord(K(0), None)]
    other = stable_group(member("m1", b"whatever"), protocol_type="connect")
    assert m.delete_offsets("g", [("t", [0])], other).error is E.non_empty_group
    dead = empty_group()
    dead.transition_to(S.DEAD, T0)
    assert m.delete_offsets("g", [("t", [0])], dead).error is E.group_id_not_found
    # An empty group of another protocol type may delete; nothing is subscribed.
    assert m.delete_offsets("g", [("t", [0])], empty_group("connect")).errors == [
        ("t", 0, E.none)
    ]


@given(st.lists(st.tuples(st.sampled_from(["g1", "g2", "g3"]),
                          st.sampled_from(["gone", "kept", "also-gone"]),
                          st.one_of(st.integers(0, 40), st.integers(100_000, 200_000)),
                          st.integers(0, 10**6)), max_size=60))
def test_deleting_topics_tombstones_every_groups_offsets_of_them_and_nothing_else(commits):
    """Whatever was committed (rows and far-away partitions kept apart alike), deleting topics
    leaves no offset of them in any group and every other offset as it was."""
    h = Harness()
    for group_id, topic, partition, offset in commits:
        h.commit(P(partition, offset), topic=topic, group_id=group_id)
    kept_before = {(g, t, p): v for g in h.manager.cache.groups()
                   for t, p, v in h.manager.group_offsets(g) if t == "kept"}
    records = h.apply(h.manager.delete_topics({"gone", "also-gone"}))
    assert all(r.value is None for r in records)
    assert len(records) == len({(g, t, p) for g, t, p, _ in commits if t != "kept"})
    after = {(g, t, p): v for g in h.manager.cache.groups() for t, p, v in h.manager.group_offsets(g)}
    assert after == kept_before
    assert h.manager.delete_topics({"gone", "also-gone"}) == []


# --- subscriptions --------------------------------------------------------------------------


def test_subscribed_topics_of_the_members_any_subscription_version():
    group = stable_group(
        member("m1", subscription("a", "b")), member("m2", subscription("c", version=3))
    )
    assert subscribed_topics(group) == {"a", "b", "c"}
    assert is_subscribed_to_topic(group, "c") and not is_subscribed_to_topic(group, "d")


def test_subscribed_topics_unknown_or_empty():
    assert subscribed_topics(empty_group()) == frozenset()
    assert subscribed_topics(stable_group(member("m1", b"\x00"))) is None
    garbage = stable_group(member("m1", b"\x00\x00\x00\x00\x00\x09ab"))
    assert subscribed_topics(garbage) is None
    assert is_subscribed_to_topic(garbage, "anything")  # consumer group, unknown: subscribed
    other = stable_group(member("m1", subscription("a")), protocol_type="connect")
    assert subscribed_topics(other) is None and not is_subscribed_to_topic(other, "a")
    assert not is_subscribed_to_topic(None, "a")


# --- expiry (KIP-211) -----------------------------------------------------------------------


def test_config_defaults_are_kafkas():
    config = OffsetsConfig()
    assert config.offset_metadata_max_bytes == 4096
    assert config.offsets_retention_ms == 7 * 24 * 60 * MINUTE
    assert config.offsets_retention_check_interval_ms == 600_000


def test_standalone_offsets_expire_retention_after_their_commit():
    h = Harness()
    h.commit(P(0, 1))
    h.clock.advance(MINUTE)
    h.commit(P(1, 1))
    h.clock.advance(RETENTION - MINUTE - 1)
    assert h.expire() == ExpireResult([], [])
    h.clock.advance(1)
    assert h.expire() == ExpireResult([CoordinatorRecord(K(0), None)], [])
    h.clock.advance(MINUTE)
    assert h.expire() == ExpireResult([CoordinatorRecord(K(1), None)], [])
    assert not h.manager.has_offsets("g")


def test_empty_consumer_group_offsets_expire_from_when_it_became_empty():
    h = Harness()
    h.commit(P(0, 1), P(1, 2))  # committed at T0
    group = empty_group(ts=T0 + 5 * MINUTE)
    h.clock.advance(RETENTION + MINUTE)  # retention passed since the commit, not since Empty
    assert h.expire({"g": group}) == ExpireResult([], [])
    h.clock.advance(4 * MINUTE)
    assert h.expire({"g": group}) == ExpireResult([CoordinatorRecord(K(0), None), CoordinatorRecord(K(1), None)], ["g"])


def test_simple_group_without_protocol_type_uses_commit_timestamps():
    h = Harness()
    h.commit(P(0, 1))
    group = empty_group(protocol_type="", ts=T0 + RETENTION)  # "" is loaded as no type
    assert group.protocol_type is None
    h.clock.advance(RETENTION)
    assert h.expire({"g": group}) == ExpireResult([CoordinatorRecord(K(0), None)], ["g"])


def test_explicit_expire_timestamp_wins():
    h = Harness()
    h.commit(P(0, 1), retention_time_ms=MINUTE, version=2)
    group = empty_group(ts=T0 + RETENTION)
    h.clock.advance(MINUTE - 1)
    assert h.expire({"g": group}).records == []
    h.clock.advance(1)
    # The group's own retention has not passed, but the offset's expire timestamp has.
    assert h.expire({"g": group}) == ExpireResult([CoordinatorRecord(K(0), None)], ["g"])


def test_stable_consumer_group_expires_only_unsubscribed_topics():
    h = Harness()
    h.commit(P(0, 1), topic="t")
    h.commit(P(0, 1), P(1, 1), topic="gone")
    group = stable_group(member("m1", subscription("t")), member("m2", subscription("t")))
    h.clock.advance(RETENTION)
    result = h.expire({"g": group})
    assert result == ExpireResult([CoordinatorRecord(K(0, "gone"), None), CoordinatorRecord(K(1, "gone"), None)], [])
    assert h.manager.fetch("g") == [FetchedOffset("t", 0, 1, -1, "")]


@pytest.mark.parametrize("state", [S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE])
def test_rebalancing_groups_keep_their_offsets(state):
    h = Harness()
    h.commit(P(0, 1), topic="gone")
    group = stable_group(member("m1", subscription("t")))
    group.transition_to(S.PREPARING_REBALANCE, T0)
    if state is S.COMPLETING_REBALANCE:
        group.init_next_generation(T0)
    h.clock.advance(10 * RETENTION)
    assert h.expire({"g": group}) == ExpireResult([], [])


def test_groups_with_members_of_other_protocols_or_unknown_subscriptions_keep_offsets():
    h = Harness()
    h.commit(P(0, 1))
    h.clock.advance(10 * RETENTION)
    connect = stable_group(member("m1", b"x"), protocol_type="connect")
    garbage = stable_group(member("m1", b"\x00\x00\xff"))
    assert h.expire({"g": connect}) == ExpireResult([], [])
    assert h.expire({"g": garbage}) == ExpireResult([], [])


def test_empty_group_without_offsets_is_reported_dead_and_dead_groups_are_skipped():
    h = Harness()
    h.commit(P(0, 1), group_id="keep")  # a recent commit of another, standalone group
    dead = empty_group()
    dead.transition_to(S.DEAD, T0)
    groups = {"g": empty_group(), "x": dead, "s": stable_group(member("m1", subscription("t")))}
    assert h.expire(groups) == ExpireResult([], ["g"])


def test_empty_group_with_unexpired_offsets_is_not_dead():
    h = Harness()
    h.commit(P(0, 1), retention_time_ms=10 * RETENTION, version=2)
    h.commit(P(1, 1))
    h.clock.advance(RETENTION)
    assert h.expire({"g": empty_group()}) == ExpireResult([CoordinatorRecord(K(1), None)], [])


# --- the property: replay agrees with a dict ------------------------------------------------

_groups = st.sampled_from(["g", "h"])
_topics = st.sampled_from(["t", "u", "v"])
_partitions = st.one_of(st.integers(0, 12), st.integers(-3, 200_000))
_values = st.builds(
    OffsetCommitValue,
    offset=st.integers(-(2**63), 2**63 - 1),
    leader_epoch=st.integers(-(2**31), 2**31 - 1),
    metadata=st.one_of(st.just(""), st.text(max_size=5)),
    commit_timestamp=st.integers(-1, 2**62),
    expire_timestamp=st.one_of(st.just(-1), st.integers(0, 2**62)),
)
_ops = st.lists(
    st.tuples(_groups, _topics, _partitions, st.one_of(st.none(), _values)), max_size=80
)


@given(_ops)
def test_replay_agrees_with_a_dict_model(ops):
    manager = OffsetsManager()
    model: dict[tuple[str, str, int], OffsetCommitValue] = {}
    for group, topic, partition, value in ops:
        manager.replay(OffsetCommitKey(group, topic, partition), value)
        if value is None:
            model.pop((group, topic, partition), None)
        else:
            model[(group, topic, partition)] = value
    assert len(manager.cache) == len(model)
    for group in ("g", "h"):
        expected = sorted(
            FetchedOffset(t, p, v.offset, v.leader_epoch, v.metadata)
            for (g, t, p), v in model.items()
            if g == group
        )
        assert sorted(manager.fetch(group)) == expected
        assert manager.has_offsets(group) is bool(expected)
        asked = [(t, list(range(-3, 14)) + [200_000]) for t in ("t", "u", "v")]
        for f in manager.fetch(group, asked):
            v = model.get((group, f.topic, f.partition))
            want = (-1, -1, "") if v is None else (v.offset, v.leader_epoch, v.metadata)
            assert (f.offset, f.leader_epoch, f.metadata) == want
    for (g, t, p), v in model.items():
        assert manager.cache.get(g, t, p) == v


_rows = st.lists(
    st.tuples(
        _partitions,
        st.integers(-(2**63), 2**63 - 1),
        st.integers(-(2**31), 2**31 - 1),
        st.integers(-(2**63), 2**63 - 1),
    ),
    max_size=30,
)
_mixed_ops = st.lists(
    st.one_of(
        st.tuples(st.just("record"), _groups, _topics, _partitions, st.one_of(st.none(), _values)),
        st.tuples(st.just("run"), _groups, _topics, _rows),
    ),
    max_size=40,
)


@given(_mixed_ops)
def test_runs_of_commits_replay_as_their_records_do(ops):
    """replay_commits (the loader's runs) against replay of the same records one by one."""
    by_run, by_record = OffsetsManager(), OffsetsManager()
    for op in ops:
        if op[0] == "record":
            _, group, topic, partition, value = op
            by_run.replay(OffsetCommitKey(group, topic, partition), value)
            by_record.replay(OffsetCommitKey(group, topic, partition), value)
            continue
        _, group, topic, rows = op
        by_run.replay_commits(group, topic, iter(rows), T0)
        for partition, offset, epoch, commit in rows:
            by_record.replay(
                OffsetCommitKey(group, topic, partition),
                OffsetCommitValue(offset, epoch, "", commit),
            )
    assert by_run.cached_offsets == by_record.cached_offsets == len(by_record.cache)
    for group in ("g", "h"):
        assert by_run.fetch(group) == by_record.fetch(group)
        assert by_run.has_offsets(group) is by_record.has_offsets(group)
        assert by_run.cache.topics(group) == by_record.cache.topics(group)
        for topic in ("t", "u", "v"):
            assert list(by_run.cache.topic_offsets(group, topic)) == list(
                by_record.cache.topic_offsets(group, topic)
            )
    assert by_run.expire(T0 + RETENTION, {}) == by_record.expire(T0 + RETENTION, {})


def test_an_empty_run_leaves_no_trace():
    manager = OffsetsManager()
    manager.replay_commits("g", "t", iter(()), T0)
    assert not manager.has_offsets("g") and manager.cached_offsets == 0


# --- memory ---------------------------------------------------------------------------------


def test_cache_costs_at_most_64_bytes_per_offset():
    """100,000 offsets: 1,000 groups, 5 topics each (of 50 shared names), 20 partitions a topic,
    replayed as a loader would (each key with its own strings)."""
    topics = [f"orders-events-{i:03d}" for i in range(50)]
    # The cache interns group ids and topic names; the interpreter's table of interned strings
    # grows by megabytes at a time, whenever earlier code happened to fill it. They are interned
    # before tracing, so that such a step is not counted, and their bytes are added below.
    names = [sys.intern(f"consumer-group-{g:06d}") for g in range(1_000)]
    names += [sys.intern(t) for t in topics]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        manager = OffsetsManager()
        count = 0
        for g in range(1_000):
            group_id = f"consumer-group-{g:06d}"
            for t in range(5):
                topic = "".join(topics[(g + t) % 50])  # a fresh string, as decoded from a key
                for partition in range(20):
                    value = OffsetCommitValue(1_000_000 + partition, 5, "", T0 + g)
                    manager.replay(OffsetCommitKey(group_id, topic, partition), value)
                    count += 1
        manager.loaded()
        gc.collect()
        used = tracemalloc.get_traced_memory()[0] - before + sum(map(sys.getsizeof, names))
    finally:
        tracemalloc.stop()
    assert len(manager.cache) == count == 100_000
    per_offset = used / count
    assert per_offset <= 64, f"{per_offset:.1f} bytes per cached offset"
    # The estimate for the metrics is within a quarter of what tracemalloc measured.
    assert manager.cached_offsets == count
    assert 0.75 * used <= manager.cache_bytes() <= 1.25 * used, (manager.cache_bytes(), used)


def test_cache_bytes_counts_metadata_and_sparse_values():
    manager = OffsetsManager()
    manager.replay(K(0), OffsetCommitValue(1))
    plain = manager.cache_bytes()
    manager.replay(K(1), OffsetCommitValue(1, metadata="m" * 1000))
    with_metadata = manager.cache_bytes()
    assert with_metadata >= plain + 1000
    manager.replay(K(10**6), OffsetCommitValue(1))  # far beyond the rows: kept whole
    assert manager.cache_bytes() > with_metadata
    assert manager.cached_offsets == 3
    assert OffsetsManager().cache_bytes() < 200


# --- the periodic expiry task ---------------------------------------------------------------


def test_poll_expires_every_check_interval_and_tombstones_emptied_groups():
    from brook.coordinator.group.classic import ClassicGroupCoordinator

    clock = FakeClock(T0)
    core = ClassicGroupCoordinator()
    core.replay(GroupMetadataKey("g"), GroupMetadataValue("consumer", 3, None, None, T0, ()), T0)
    manager = OffsetsManager(OffsetsConfig(offsets_retention_check_interval_ms=1_000), core.groups)
    req = OffsetCommit("g", (CommitTopic("t", (P(0, 1),)),))
    replay_all(manager, manager.commit(req, core.groups["g"], T0).records)
    assert manager.next_deadline() == 0
    assert manager.poll(T0).records == []  # the first poll only schedules
    assert manager.next_deadline() == T0 + 1_000
    clock.advance(RETENTION)
    now = clock.milliseconds()
    result = manager.poll(now)
    assert result.records == [CoordinatorRecord(K(0), None), CoordinatorRecord(GroupMetadataKey("g"), None)]
    assert manager.next_deadline() == now + 1_000
    for record in result.records:
        manager.replay(record.key, record.value, now)
        core.replay(record.key, record.value, now)
    assert "g" not in core.groups and not manager.has_offsets("g")
    assert manager.poll(now + 999).records == []


def test_readers_for_the_runtime():
    h = Harness()
    h.commit(P(0, 7, metadata="m"))
    assert h.manager.get("g", "t", 0) == OffsetCommitValue(7, -1, "m", T0, -1)
    assert h.manager.get("g", "t", 1) is None
    assert list(h.manager.group_offsets("g")) == [("t", 0, OffsetCommitValue(7, -1, "m", T0, -1))]


def test_expiry_covers_offsets_kept_outside_the_rows():
    h = Harness()
    h.commit(P(-1, 1), P(500_000, 2), P(1, 3))  # two partitions that do not get rows
    h.clock.advance(MINUTE)
    h.commit(P(-1, 4), retention_time_ms=10 * RETENTION, version=2)
    h.clock.advance(RETENTION)
    assert h.expire().records == [CoordinatorRecord(K(1), None), CoordinatorRecord(K(500_000), None)]
    assert h.manager.fetch("g") == [FetchedOffset("t", -1, 4, -1, "")]
