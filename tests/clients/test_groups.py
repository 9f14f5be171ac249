"""Consumer groups against a real broker process with real clients (confluent-kafka), and the
group APIs over the wire."""

from __future__ import annotations

import time
from datetime import timedelta
import uuid

import pytest
from kio.schema.errors import ErrorCode

from brook.protocol.messages import make
from brook.records import Record, encode_batch
from tests.support.kafka_wire import WireClient, request_class

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer  # noqa: E402
from confluent_kafka import ConsumerGroupState  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

GROUP_BROKER = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 10}


def consumer(bootstrap: str, group: str) -> Consumer:
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 200,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "topic.metadata.refresh.interval.ms": 1000,
    })
    return c


def assignments(consumers: list[Consumer]) -> list[set[int]]:
    return [{tp.partition for tp in c.assignment()} for c in consumers]


def settle(consumers: list[Consumer], partitions: int, timeout: float = 30.0) -> list[set[int]]:
    """Poll every consumer until each owns something and together they own every partition once."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for c in consumers:
            c.poll(0.05)
        owned = assignments(consumers)
        if all(owned) and sum(len(o) for o in owned) == partitions \
                and set().union(*owned) == set(range(partitions)):
            return owned
    raise AssertionError(f"no settled assignment within {timeout}s: {assignments(consumers)}")


def test_three_consumers_split_twelve_partitions_and_a_fourth_takes_its_share(broker_factory):
    broker = broker_factory(GROUP_BROKER)
    topic, group = "orders", f"group-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 12, 1)])[topic].result(10)
    consumers = [consumer(broker.bootstrap, group) for _ in range(3)]
    try:
        for c in consumers:
            c.subscribe([topic])
        before = settle(consumers, 12)
        assert sorted(len(o) for o in before) == [4, 4, 4]

        consumers.append(consumer(broker.bootstrap, group))
        consumers[-1].subscribe([topic])
        after = settle(consumers, 12)
        assert sorted(len(o) for o in after) == [3, 3, 3, 3]
        assert after[:3] != before  # partitions moved to the newcomer

        described = admin.describe_consumer_groups([group])[group].result(10)
        assert str(described.state).endswith("STABLE")
        assert len(described.members) == 4
        owned = sorted(tp.partition for m in described.members for tp in m.assignment.topic_partitions)
        assert owned == list(range(12))
        listed = admin.list_consumer_groups().result(10)
        assert group in {g.group_id for g in listed.valid}
    finally:
        for c in consumers:
            c.close()
    # Every member left: the group is Empty.
    listed = admin.describe_consumer_groups([group])[group].result(10)
    assert str(listed.state).endswith("EMPTY") and not listed.members


def test_find_coordinator_creates_the_internal_offsets_topic_and_producers_cannot_write_it(broker_factory):
    broker = broker_factory(GROUP_BROKER)
    with WireClient(broker.bootstrap) as w:
        found = w.request(make(request_class(10, 4), key_type=0, coordinator_keys=("a", "b")))
        assert [(c.key, c.error_code, c.port) for c in found.coordinators] == [
            ("a", ErrorCode.none, broker.port), ("b", ErrorCode.none, broker.port)]
        old = w.request(make(request_class(10, 0), key="a"))
        assert old.error_code == ErrorCode.none and old.node_id == 1

        meta = w.request(make(request_class(3, 12), topics=None, allow_auto_topic_creation=False,
                              include_topic_authorized_operations=False))
        [offsets] = [t for t in meta.topics if t.name == "__consumer_offsets"]
        assert offsets.is_internal and len(offsets.partitions) == 10

        produce = request_class(0, 9)
        mod = __import__(produce.__module__, fromlist=["x"])
        batch = encode_batch([Record(0, int(time.time() * 1000), b"k", b"v")])
        answer = w.request(make(produce, transactional_id=None, acks=1, timeout=timedelta(seconds=5), topic_data=(
            mod.TopicProduceData(name="__consumer_offsets", partition_data=(
                mod.PartitionProduceData(index=0, records=batch),)),)))
        [part] = answer.responses[0].partition_responses
        assert part.error_code == ErrorCode.invalid_topic_exception


def test_group_requests_with_an_empty_group_id_are_refused(broker_factory):
    broker = broker_factory(GROUP_BROKER)
    with WireClient(broker.bootstrap) as w:
        hb = w.request(make(request_class(12, 4), group_id="", generation_id=1, member_id="m",
                            group_instance_id=None))
        assert hb.error_code == ErrorCode.invalid_group_id
        listed = w.request(make(request_class(16, 4), states_filter=("Stable",)))
        assert listed.error_code == ErrorCode.none and listed.groups == ()


def test_committed_offsets_survive_a_restart_and_the_group_resumes_from_them(broker_factory):
    from confluent_kafka import Producer, TopicPartition

    broker = broker_factory(GROUP_BROKER)
    topic, group = "events", "resumer"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 12, 1)])[topic].result(10)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    values = [f"v{i}".encode() for i in range(600)]
    for i, v in enumerate(values):
        producer.produce(topic, value=v, partition=i % 12)
    assert producer.flush(30) == 0

    def consume(c: Consumer, want: int, seen: list[bytes], commit: bool) -> None:
        deadline = time.monotonic() + 30
        while len(seen) < want and time.monotonic() < deadline:
            m = c.poll(0.1)
            if m is None or m.error():
                continue
            seen.append(m.value())
            if commit:
                c.commit(message=m, asynchronous=False)

    first: list[bytes] = []
    c = consumer(broker.bootstrap, group)
    c.subscribe([topic])
    try:
        consume(c, 300, first, commit=True)
        committed = c.committed([TopicPartition(topic, p) for p in range(12)], timeout=10)
    finally:
        c.close()
    assert len(first) == 300
    before = {tp.partition: tp.offset for tp in committed}
    assert sum(o for o in before.values() if o > 0) == 300

    broker.restart()

    second: list[bytes] = []
    c = consumer(broker.bootstrap, group)
    try:
        after = {tp.partition: tp.offset
                 for tp in c.committed([TopicPartition(topic, p) for p in range(12)], timeout=20)}
        assert after == before
        c.subscribe([topic])
        consume(c, 300, second, commit=False)
    finally:
        c.close()
    # Every record processed once: the group resumed exactly where it had committed.
    assert sorted(first + second) == sorted(values)


def test_deleting_a_topic_removes_every_groups_offsets_of_it(broker_factory):
    """As in Kafka, a topic's committed offsets go with it: once DeleteTopics is answered no
    group has any (nor after a restart), and a group consuming a topic created again under
    the same name starts from auto.offset.reset, not from the old topic's offset 2 (which
    the new topic also has, so a stale offset would silently skip two records)."""
    from confluent_kafka import Producer, TopicPartition

    broker = broker_factory(GROUP_BROKER)
    topic = "recreated"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1), NewTopic("other", 1, 1)])[topic].result(10)
    groups = ["first", "second"]
    for group in groups:
        c = consumer(broker.bootstrap, group)
        try:
            c.commit(offsets=[TopicPartition(topic, 0, 2), TopicPartition(topic, 1, 7),
                              TopicPartition("other", 0, 3)], asynchronous=False)
        finally:
            c.close()
    admin.delete_topics([topic])[topic].result(10)

    def committed(group: str) -> dict[tuple[str, int], int]:
        c = consumer(broker.bootstrap, group)
        try:
            found = c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1),
                                 TopicPartition("other", 0)], timeout=20)
        finally:
            c.close()
        return {(tp.topic, tp.partition): tp.offset for tp in found if tp.offset >= 0}

    for group in groups:
        assert committed(group) == {("other", 0): 3}
    # A consumer still at work commits its old positions again: refused, the topic is gone.
    c = consumer(broker.bootstrap, "first")
    try:
        from confluent_kafka import KafkaException
        with pytest.raises(KafkaException) as refused:
            c.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
        assert "UNKNOWN_TOPIC_OR_PART" in refused.value.args[0].name()
    finally:
        c.close()
    assert committed("first") == {("other", 0): 3}
    broker.restart()
    for group in groups:
        assert committed(group) == {("other", 0): 3}

    deadline = time.monotonic() + 30
    while True:  # the deletion may still be settling in the client's metadata
        result = admin.create_topics([NewTopic(topic, 2, 1)])[topic]
        try:
            result.result(10)
            break
        except Exception:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(5):
        producer.produce(topic, value=b"new-%d" % i, partition=0)
    assert producer.flush(30) == 0
    c = consumer(broker.bootstrap, "first")
    seen = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(seen) < 5 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                seen.append(m.value())
    finally:
        c.close()
    assert seen == [b"new-%d" % i for i in range(5)]


def test_offset_commit_fetch_delete_over_the_wire(broker_factory):
    broker = broker_factory(GROUP_BROKER)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("t", 3, 1)])["t"].result(10)
    commit_cls = request_class(8, 9)
    cm = __import__(commit_cls.__module__, fromlist=["x"])
    with WireClient(broker.bootstrap) as w:
        def commit(group, offsets, metadata=""):
            return w.request(make(commit_cls, group_id=group, generation_id_or_member_epoch=-1,
                                  member_id="", group_instance_id=None, topics=(
                cm.OffsetCommitRequestTopic(name="t", partitions=tuple(
                    cm.OffsetCommitRequestPartition(partition_index=p, committed_offset=o,
                                                    committed_leader_epoch=-1,
                                                    committed_metadata=metadata)
                    for p, o in offsets.items())),)))

        answer = commit("simple", {0: 5, 1: 7})
        assert [(p.partition_index, p.error_code) for p in answer.topics[0].partitions] == [
            (0, ErrorCode.none), (1, ErrorCode.none)]
        too_large = commit("simple", {2: 1}, metadata="m" * 5000)
        assert too_large.topics[0].partitions[0].error_code == ErrorCode.offset_metadata_too_large
        # As Kafka: a partition the broker does not have is refused, the others committed.
        mixed = commit("simple", {3: 1, 1: 7})
        assert sorted((p.partition_index, p.error_code) for p in mixed.topics[0].partitions) == [
            (1, ErrorCode.none), (3, ErrorCode.unknown_topic_or_partition)]

        fetch_cls = request_class(9, 9)
        fm = __import__(fetch_cls.__module__, fromlist=["x"])
        fetched = w.request(make(fetch_cls, require_stable=False, groups=(
            fm.OffsetFetchRequestGroup(group_id="simple", topics=None),
            fm.OffsetFetchRequestGroup(group_id="other", topics=(
                fm.OffsetFetchRequestTopics(name="t", partition_indexes=(0,)),)))))
        g1, g2 = fetched.groups
        assert [(p.partition_index, p.committed_offset) for p in g1.topics[0].partitions] == [(0, 5), (1, 7)]
        assert g2.topics[0].partitions[0].committed_offset == -1

        old = w.request(make(request_class(9, 1), group_id="simple", topics=(
            __import__(request_class(9, 1).__module__, fromlist=["x"]).OffsetFetchRequestTopic(
                name="t", partition_indexes=(1, 2)),)))
        assert [p.committed_offset for p in old.topics[0].partitions] == [7, -1]

        listed = w.request(make(request_class(16, 4), states_filter=("Empty",)))
        assert "simple" in {g.group_id for g in listed.groups}

        delete_cls = request_class(47, 0)
        dm = __import__(delete_cls.__module__, fromlist=["x"])
        deleted = w.request(make(delete_cls, group_id="simple", topics=(
            dm.OffsetDeleteRequestTopic(name="t", partitions=(
                dm.OffsetDeleteRequestPartition(partition_index=0),)),)))
        assert deleted.error_code == ErrorCode.none
        assert deleted.topics[0].partitions[0].error_code == ErrorCode.none

        groups = w.request(make(request_class(42, 2), groups_names=("simple", "nobody")))
        assert [(r.group_id, r.error_code) for r in groups.results] == [
            ("simple", ErrorCode.none), ("nobody", ErrorCode.group_id_not_found)]
        after = w.request(make(fetch_cls, require_stable=False, groups=(
            fm.OffsetFetchRequestGroup(group_id="simple", topics=None),)))
        assert after.groups[0].topics == ()


def _listed(admin: AdminClient) -> dict:
    listed = admin.list_consumer_groups().result(15)
    assert not listed.errors
    return {g.group_id: g for g in listed.valid}


def test_a_group_that_only_commits_is_listed_described_reloaded_and_deleted(broker_factory):
    """A simple consumer (assign() and commit(), no subscribe) makes an Empty group without a
    protocol type, as in Kafka: admin tools list and describe it, also after a restart, and
    DeleteGroups removes it with its offsets."""
    from confluent_kafka import TopicPartition

    broker = broker_factory(GROUP_BROKER)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("ledger", 3, 1)])["ledger"].result(10)
    c = consumer(broker.bootstrap, "spark-job")
    try:
        c.assign([TopicPartition("ledger", p) for p in range(3)])
        c.commit(offsets=[TopicPartition("ledger", 0, 5), TopicPartition("ledger", 2, 9)],
                 asynchronous=False)
    finally:
        c.close()
    # A consumer group next to it: Empty after its member leaves, but with a protocol type.
    joined = consumer(broker.bootstrap, "joined")
    try:
        joined.subscribe(["ledger"])
        settle([joined], 3)
    finally:
        joined.close()

    def check() -> None:
        # A new admin client after each restart: librdkafka 2.16 keeps a coordinator handle
        # decommissioned by its re-bootstrap and never sends DescribeGroups through it.
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        groups = _listed(admin)
        assert str(groups["spark-job"].state).endswith("EMPTY")
        assert groups["spark-job"].is_simple_consumer_group
        assert str(groups["joined"].state).endswith("EMPTY")
        assert not groups["joined"].is_simple_consumer_group
        described = admin.describe_consumer_groups(["spark-job"])["spark-job"].result(15)
        assert str(described.state).endswith("EMPTY") and described.is_simple_consumer_group
        assert described.members == []
        empty_only = admin.list_consumer_groups(states={ConsumerGroupState.EMPTY}).result(15)
        assert "spark-job" in {g.group_id for g in empty_only.valid}
        stable_only = admin.list_consumer_groups(states={ConsumerGroupState.STABLE}).result(15)
        assert "spark-job" not in {g.group_id for g in stable_only.valid}

    check()
    broker.restart()  # the group is rebuilt from its commits in __consumer_offsets
    check()

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_consumer_groups(["spark-job"])["spark-job"].result(15)
    assert "spark-job" not in _listed(admin)
    c = consumer(broker.bootstrap, "spark-job")
    try:
        got = c.committed([TopicPartition("ledger", p) for p in range(3)], timeout=15)
        assert [tp.offset for tp in got] == [-1001] * 3  # no committed offsets left
    finally:
        c.close()
    broker.restart()  # and it stays deleted after a reload
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert "spark-job" not in _listed(admin)
    assert "joined" in _listed(admin)


def test_a_simple_group_is_a_group_as_kafka_has_it(broker_factory):
    """Kafka creates the group on a simple commit: a generation's commit is then checked against
    its (absent) members, and the group outlives the deletion of its offsets until expiry."""
    broker = broker_factory(GROUP_BROKER)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("t", 1, 1)])["t"].result(10)
    commit_cls = request_class(8, 9)
    cm = __import__(commit_cls.__module__, fromlist=["x"])
    with WireClient(broker.bootstrap) as w:
        def commit(generation, member):
            answer = w.request(make(commit_cls, group_id="simple", member_id=member,
                                    generation_id_or_member_epoch=generation,
                                    group_instance_id=None, topics=(
                cm.OffsetCommitRequestTopic(name="t", partitions=(
                    cm.OffsetCommitRequestPartition(partition_index=0, committed_offset=3,
                                                    committed_leader_epoch=-1,
                                                    committed_metadata=""),)),)))
            return answer.topics[0].partitions[0].error_code

        assert commit(1, "m") == ErrorCode.group_id_not_found  # no group yet
        assert commit(-1, "") == ErrorCode.none
        assert commit(1, "m") == ErrorCode.unknown_member_id  # now there is one

        delete_cls = request_class(47, 0)
        dm = __import__(delete_cls.__module__, fromlist=["x"])
        deleted = w.request(make(delete_cls, group_id="simple", topics=(
            dm.OffsetDeleteRequestTopic(name="t", partitions=(
                dm.OffsetDeleteRequestPartition(partition_index=0),)),)))
        assert deleted.error_code == ErrorCode.none
        listed = w.request(make(request_class(16, 4), states_filter=()))
        assert [(g.group_id, g.group_state, g.protocol_type) for g in listed.groups] == [
            ("simple", "Empty", "")]
        described = w.request(make(request_class(15, 5), groups=("simple", "nobody"),
                                   include_authorized_operations=False))
        assert [(g.group_id, g.error_code, g.group_state) for g in described.groups] == [
            ("simple", ErrorCode.none, "Empty"), ("nobody", ErrorCode.none, "Dead")]
