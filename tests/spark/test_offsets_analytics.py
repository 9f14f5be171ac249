"""Offsets-topic analytics on Spark (``brook.spark.offsets_analytics``) against a real broker.

One broker serves the module, and the run's SparkSession (``local[2]``, conftest.py). The
scenario commits, overwrites, deletes offsets (OffsetDelete), deletes a group (DeleteGroups) and
keeps a group with a member, through real clients. The records of ``__consumer_offsets`` are read back with confluent-kafka
into a pyarrow table with the rows of Spark's Kafka source; the broker's own coordinator (its
replay, OffsetFetch and expiry) is the oracle for the compacted view and its expiry.
"""

from __future__ import annotations

import io
import struct
import time
from datetime import datetime, timezone

import pytest

pytest.importorskip("pyspark")
confluent_kafka = pytest.importorskip("confluent_kafka")

import pyarrow as pa  # noqa: E402
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from kio.schema.consumer_protocol_subscription.v0.data import (  # noqa: E402
    ConsumerProtocolSubscription,
)
from kio.serial import entity_reader, entity_writer  # noqa: E402

from tests.support.broker_harness import BrokerProcess  # noqa: E402
from brook.coordinator.group.offsets import OffsetsConfig  # noqa: E402
from brook.coordinator.group.partitioner import partition_for  # noqa: E402
from brook.coordinator.group.schemas import (  # noqa: E402
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    UnknownKey,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from brook.coordinator.group.shard import CoordinatorShard  # noqa: E402
from brook.spark.offsets_analytics import (  # noqa: E402
    DECODED_SCHEMA,
    main,
    read_offsets_topic as read_with_format,
    DIFFERENCES_SCHEMA,
    LAG_SCHEMA,
    VIEW_SCHEMA,
    ServedOffset,
    audit_offsets,
    compacted_offsets,
    consumer_lag,
    decode_offsets_topic,
    fetch_log_end_offsets,
    fetch_served_offsets,
    offsets_differences,
)

# Spark on a shared 2-core machine: minutes when other suites run, not seconds.
pytestmark = pytest.mark.timeout(600)

OFFSETS_PARTITIONS = 3
BROKER_SETTINGS = {
    "offsets.topic.num.partitions": OFFSETS_PARTITIONS,
    "group.initial.rebalance.delay.ms": 0,
    "num.partitions": 1,
}
#: Records produced per topic partition.
PRODUCED = {("orders", 0): 10, ("orders", 1): 6, ("orders", 2): 0, ("payments", 0): 4,
            ("payments", 1): 5}


# --- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("broker-offsets-analytics"),
                       overrides=BROKER_SETTINGS) as proc:
        yield proc


def group_consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 30000,
        "heartbeat.interval.ms": 500,
    })


def joined(bootstrap: str, group: str, topics: list[str]) -> Consumer:
    """A consumer that has joined ``group`` subscribed to ``topics`` and has its assignment."""
    c = group_consumer(bootstrap, group)
    c.subscribe(topics)
    deadline = time.monotonic() + 30
    while not c.assignment():
        assert time.monotonic() < deadline, f"{group} got no assignment"
        c.poll(0.05)
    return c


def commit(c: Consumer, *offsets: tuple) -> None:
    """Commit (topic, partition, offset[, leader_epoch]) tuples synchronously."""
    tps = [TopicPartition(t, p, o, leader_epoch=rest[0] if rest else -1)
           for t, p, o, *rest in offsets]
    c.commit(offsets=tps, asynchronous=False)


class Scenario:
    """What the module's scenario did, to check the analytics against."""

    def __init__(self) -> None:
        #: group -> the offset commits it made, in order: (topic, partition, offset, epoch, meta)
        self.commits: dict[str, list[tuple]] = {}
        #: group -> the keys whose offsets were deleted, in order of their tombstones.
        self.tombstoned: dict[str, list[tuple[str, int]]] = {}
        #: (group, topic, partition) -> (offset, epoch, metadata) that the broker must serve.
        self.live: dict[tuple[str, str, int], tuple[int, int, str]] = {}
        self.live_consumer: Consumer | None = None
        self.started_ms = 0
        self.finished_ms = 0

    def committed(self, group: str, *offsets: tuple) -> None:
        for t, p, o, *rest in offsets:
            epoch = rest[0] if len(rest) > 0 else -1
            meta = rest[1] if len(rest) > 1 else ""
            self.commits.setdefault(group, []).append((t, p, o, epoch, meta))
            self.live[(group, t, p)] = (o, epoch, meta)

    def deleted(self, group: str, keys: list[tuple[str, int]]) -> None:
        self.tombstoned.setdefault(group, []).extend(keys)
        for t, p in keys:
            self.live.pop((group, t, p), None)


@pytest.fixture(scope="module")
def scenario(broker):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.structs import OffsetAndMetadata

    s = Scenario()
    bootstrap = broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic("orders", 3, 1), NewTopic("payments", 2, 1)]).values():
        f.result(15)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for (topic, partition), n in PRODUCED.items():
        for i in range(n):
            producer.produce(topic, value=f"{topic}-{partition}-{i}".encode(), partition=partition)
    assert producer.flush(30) == 0
    s.started_ms = int(time.time() * 1000)

    # A simple consumer (no group membership): commits, then overwrites.
    c = group_consumer(bootstrap, "simple")
    commit(c, ("orders", 0, 3))
    commit(c, ("orders", 1, 2))
    commit(c, ("orders", 0, 7, 0))
    c.close()
    s.committed("simple", ("orders", 0, 3), ("orders", 1, 2), ("orders", 0, 7, 0))

    # Metadata, committed with kafka-python (which sends the string as given).
    kc = KafkaConsumer(bootstrap_servers=bootstrap, group_id="with-metadata",
                       enable_auto_commit=False)
    kc.commit({KTopicPartition("orders", 2): OffsetAndMetadata(0, "checkpoint-1", -1),
               KTopicPartition("payments", 0): OffsetAndMetadata(4, "état ✓", 0)})
    kc.close()
    s.committed("with-metadata", ("orders", 2, 0, -1, "checkpoint-1"),
                ("payments", 0, 4, 0, "état ✓"))

    # Offsets of one topic deleted with OffsetDelete.
    c = group_consumer(bootstrap, "deleted-offsets")
    commit(c, ("orders", 0, 1), ("payments", 0, 2), ("payments", 1, 3))
    c.close()
    s.committed("deleted-offsets", ("orders", 0, 1), ("payments", 0, 2), ("payments", 1, 3))
    kadmin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        errors = kadmin.delete_group_offsets(
            "deleted-offsets", [KTopicPartition("payments", 0), KTopicPartition("payments", 1)])
    finally:
        kadmin.close()
    assert all(e.errno == 0 for e in errors.values()), errors
    s.deleted("deleted-offsets", [("payments", 0), ("payments", 1)])

    # A consumer group that ran, left and was deleted with DeleteGroups.
    c = joined(bootstrap, "deleted-group", ["orders"])
    commit(c, ("orders", 1, 5))
    c.close()
    s.committed("deleted-group", ("orders", 1, 5))
    assert admin.delete_consumer_groups(["deleted-group"])["deleted-group"].result(15) is None
    s.deleted("deleted-group", [("orders", 1)])

    # A consumer group whose member left: Empty, with the consumer protocol type.
    c = joined(bootstrap, "empty", ["orders"])
    commit(c, ("orders", 2, 0), ("payments", 1, 1))
    c.close()
    s.committed("empty", ("orders", 2, 0), ("payments", 1, 1))

    # A group with a member for the whole module (Stable), committing a topic it does not
    # subscribe to as well.
    live = joined(bootstrap, "live", ["orders"])
    commit(live, ("orders", 0, 10), ("payments", 0, 1))
    s.committed("live", ("orders", 0, 10), ("payments", 0, 1))
    s.live_consumer = live
    s.finished_ms = int(time.time() * 1000)
    try:
        yield s
    finally:
        live.close()


def read_offsets_topic(bootstrap: str, timeout: float = 30.0) -> pa.Table:
    """Every record of ``__consumer_offsets`` up to the high watermarks, as a pyarrow table with
    the columns and types of Spark's Kafka source."""
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "offsets-topic-reader",
                       "enable.auto.commit": False})
    try:
        topic = reader.list_topics("__consumer_offsets", timeout=timeout).topics[
            "__consumer_offsets"]
        ends = {p: reader.get_watermark_offsets(TopicPartition("__consumer_offsets", p),
                                                timeout=timeout)[1]
                for p in topic.partitions}
        reader.assign([TopicPartition("__consumer_offsets", p, 0) for p in ends])
        want = sum(ends.values())
        messages = []
        deadline = time.monotonic() + timeout
        while len(messages) < want:
            assert time.monotonic() < deadline, f"read {len(messages)} of {want} records"
            m = reader.poll(0.2)
            if m is None or m.error() or m.offset() >= ends[m.partition()]:
                continue
            messages.append(m)
    finally:
        reader.close()
    messages.sort(key=lambda m: (m.partition(), m.offset()))
    return pa.table({
        "key": pa.array([m.key() for m in messages], pa.binary()),
        "value": pa.array([m.value() for m in messages], pa.binary()),
        "topic": pa.array([m.topic() for m in messages], pa.string()),
        "partition": pa.array([m.partition() for m in messages], pa.int32()),
        "offset": pa.array([m.offset() for m in messages], pa.int64()),
        "timestamp": pa.array(
            [datetime.fromtimestamp(m.timestamp()[1] / 1000, timezone.utc) for m in messages],
            pa.timestamp("us", tz="UTC")),
        # confluent-kafka: 1 create time, 2 log append time; Spark's Kafka source: 0 and 1.
        "timestampType": pa.array([m.timestamp()[0] - 1 for m in messages], pa.int32()),
    })


@pytest.fixture(scope="module")
def raw(broker, scenario) -> pa.Table:
    return read_offsets_topic(broker.bootstrap)


@pytest.fixture(scope="module")
def decoded(spark, raw):
    frame = decode_offsets_topic(spark.createDataFrame(raw)).cache()
    try:
        yield frame
    finally:
        frame.unpersist()


@pytest.fixture(scope="module")
def decoded_rows(decoded) -> list:
    """The decoded rows in the order of the topic (partition, offset)."""
    return sorted(decoded.collect(), key=lambda r: (r.source_partition, r.source_offset))


# --- the decoded records ----------------------------------------------------------------------


def _read_subscription(data: bytes) -> list[str] | None:
    try:
        subscription, _ = entity_reader(ConsumerProtocolSubscription)(data, 2)
        return list(subscription.topics)
    except Exception:
        return None


def expected_row(key: bytes, value: bytes | None, partition: int, offset: int) -> dict:
    """The decoded row of one record, built field by field from the records' objects."""
    row = {f.name: None for f in DECODED_SCHEMA.fields}
    row.update(source_partition=partition, source_offset=offset, is_tombstone=value is None,
               key_version=struct.unpack(">h", key[:2])[0],
               value_version=None if value is None else struct.unpack(">h", value[:2])[0])
    k = decode_key(key)
    if isinstance(k, UnknownKey):
        row["record_type"] = "unknown"
        return row
    v = decode_value(k, value)
    row["group_id"] = k.group
    if isinstance(k, OffsetCommitKey):
        row.update(record_type="offset_commit", topic=k.topic, partition=k.partition)
        if v is not None:
            row.update(committed_offset=v.offset, leader_epoch=v.leader_epoch,
                       metadata=v.metadata, commit_timestamp=v.commit_timestamp,
                       expire_timestamp=v.expire_timestamp)
        return row
    row["record_type"] = "group_metadata"
    if v is not None:
        topics = set()
        for m in v.members:
            found = _read_subscription(m.subscription)
            topics = None if found is None or topics is None else topics | set(found)
        row.update(
            protocol_type=v.protocol_type, generation=v.generation, protocol=v.protocol,
            leader=v.leader, current_state_timestamp=v.current_state_timestamp,
            member_count=len(v.members),
            members=[(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                      m.rebalance_timeout, m.session_timeout) for m in v.members],
            subscribed_topics=(
                sorted(topics) if topics is not None and v.protocol_type == "consumer" else None),
        )
    return row


def columns(schema) -> list[tuple]:
    """Names and types (Spark decides nullability)."""
    return [(f.name, f.dataType) for f in schema.fields]


def as_dict(row) -> dict:
    d = row.asDict(recursive=False)
    if d.get("members") is not None:
        d["members"] = [tuple(m) for m in d["members"]]
    return d


def test_decoded_rows_are_exactly_the_records_of_the_topic(decoded, decoded_rows, raw):
    assert columns(decoded.schema) == columns(DECODED_SCHEMA)
    rows = [as_dict(r) for r in decoded_rows]
    keys, values = raw.column("key").to_pylist(), raw.column("value").to_pylist()
    parts, offsets = raw.column("partition").to_pylist(), raw.column("offset").to_pylist()
    times = raw.column("timestamp").to_pylist()
    expected = [expected_row(k, v, p, o) for k, v, p, o in zip(keys, values, parts, offsets)]
    for row, t in zip(expected, times):
        row["source_timestamp"] = t.replace(tzinfo=None)  # the session's time zone is UTC
    assert len(rows) == len(expected) > 0
    for got, want in zip(rows, expected):
        assert got == want


def test_decoded_commits_and_tombstones_are_the_scenarios(decoded_rows, scenario):
    commits = [r for r in decoded_rows if r.record_type == "offset_commit"]
    made: dict[str, list[tuple]] = {}
    tombstones: dict[str, list[tuple]] = {}
    for r in commits:
        assert r.source_partition == partition_for(r.group_id, OFFSETS_PARTITIONS)
        if r.is_tombstone:
            assert r.committed_offset is None and r.value_version is None
            tombstones.setdefault(r.group_id, []).append((r.topic, r.partition))
        else:
            assert scenario.started_ms - 1000 <= r.commit_timestamp <= scenario.finished_ms + 1000
            assert (r.key_version, r.value_version, r.expire_timestamp) == (1, 3, -1)
            made.setdefault(r.group_id, []).append(
                (r.topic, r.partition, r.committed_offset, r.leader_epoch, r.metadata))
    assert made == scenario.commits
    assert tombstones == scenario.tombstoned


def test_decoded_group_metadata(decoded_rows, scenario):
    groups = [r for r in decoded_rows if r.record_type == "group_metadata"]
    latest = {}
    for r in groups:
        latest[r.group_id] = r
    assert set(latest) == {"deleted-group", "empty", "live"}
    # Deleted: the last record is the group's tombstone.
    assert latest["deleted-group"].is_tombstone and latest["deleted-group"].protocol_type is None
    empty = latest["empty"]
    assert (empty.protocol_type, empty.member_count, empty.members, empty.protocol,
            empty.leader, empty.subscribed_topics) == ("consumer", 0, [], None, None, [])
    assert scenario.started_ms - 1000 <= empty.current_state_timestamp <= scenario.finished_ms
    live = latest["live"]
    member_ids = [scenario.live_consumer.memberid()]
    assert not live.is_tombstone and live.protocol_type == "consumer"
    assert live.member_count == 1 and [m.member_id for m in live.members] == member_ids
    assert live.leader == member_ids[0] and live.protocol in ("range", "roundrobin")
    assert live.subscribed_topics == ["orders"]
    assert live.generation >= 1 and live.members[0].session_timeout == 30000


def test_a_read_through_format_brook_decodes_to_the_same_rows(spark, broker, decoded_rows):
    rows = decode_offsets_topic(read_with_format(spark, broker.bootstrap)).collect()
    positions = {(r.source_partition, r.source_offset): as_dict(r) for r in rows}
    # The same records (and any written since the scenario, by the live group's heartbeats
    # turning into a rebalance on a slow machine, say).
    assert [positions.get((r.source_partition, r.source_offset)) for r in decoded_rows] == [
        as_dict(r) for r in decoded_rows]


def test_the_jobs_from_the_command_line(spark, broker, scenario, capsys):
    assert main(["--bootstrap-server", broker.bootstrap]) == 0
    out = capsys.readouterr().out
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in out.splitlines()
             if line.startswith("|") and "group_id" not in line]
    assert {(g, t, int(p)): (int(o), int(e), int(lag)) for g, t, p, o, e, lag in cells} == {
        k: (o, PRODUCED[k[1:]], PRODUCED[k[1:]] - o) for k, o in COMMITTED.items()}
    assert f"{len(COMMITTED)} committed offsets in the log, 0 past their retention; " \
           "0 differences from what the broker serves" in out


# --- job 1: lag -------------------------------------------------------------------------------

#: The latest live commit of each group, topic and partition at the end of the scenario.
COMMITTED = {
    ("simple", "orders", 0): 7, ("simple", "orders", 1): 2,
    ("with-metadata", "orders", 2): 0, ("with-metadata", "payments", 0): 4,
    ("deleted-offsets", "orders", 0): 1,
    ("empty", "orders", 2): 0, ("empty", "payments", 1): 1,
    ("live", "orders", 0): 10, ("live", "payments", 0): 1,
}


def lag_rows(frame) -> dict:
    return {(r.group_id, r.topic, r.partition): (r.committed_offset, r.log_end_offset, r.lag)
            for r in frame.collect()}


def test_lag_from_the_brokers_end_offsets(decoded, broker, scenario):
    assert {k: v[0] for k, v in scenario.live.items()} == COMMITTED
    lag = consumer_lag(decoded, bootstrap_servers=broker.bootstrap)
    assert columns(lag.schema) == columns(LAG_SCHEMA)
    assert lag_rows(lag) == {(g, t, p): (o, PRODUCED[(t, p)], PRODUCED[(t, p)] - o)
                             for (g, t, p), o in COMMITTED.items()}


def test_lag_with_end_offsets_the_caller_gives(decoded, broker, spark):
    ends = fetch_log_end_offsets(broker.bootstrap, list(PRODUCED) + [("no-such-topic", 0)])
    assert ends == PRODUCED  # the unknown partition is left out
    del ends[("payments", 0)]
    rows = lag_rows(consumer_lag(decoded, ends))
    assert rows[("with-metadata", "payments", 0)] == (4, None, None)
    assert rows[("live", "orders", 0)] == (10, 10, 0)
    frame = spark.createDataFrame([("orders", 0, 12)], "topic string, partition int, "
                                                       "log_end_offset long")
    rows = lag_rows(consumer_lag(decoded, frame))
    assert rows[("simple", "orders", 0)] == (7, 12, 5)
    assert rows[("simple", "orders", 1)] == (2, None, None)
    with pytest.raises(ValueError):
        consumer_lag(decoded)


# --- job 2: the audit -------------------------------------------------------------------------


#: The retention of the module's audit, and when it looks: around the first expiries.
AUDIT_RETENTION_MINUTES = 60


@pytest.fixture(scope="module")
def audit(decoded, broker, scenario):
    now = scenario.finished_ms + AUDIT_RETENTION_MINUTES * 60_000
    return audit_offsets(decoded, broker.bootstrap, now, AUDIT_RETENTION_MINUTES), now


def test_audit_agrees_with_offset_fetch(audit, broker, scenario):
    (view, differences), _ = audit
    assert columns(view.schema) == columns(VIEW_SCHEMA)
    assert columns(differences.schema) == columns(DIFFERENCES_SCHEMA)
    assert differences.collect() == []
    assert {(r.group_id, r.topic, r.partition): (r.committed_offset, r.leader_epoch, r.metadata)
            for r in view.collect()} == scenario.live
    served = fetch_served_offsets(broker.bootstrap, ["with-metadata", "deleted-group", "nobody"])
    assert served == [ServedOffset("with-metadata", "orders", 2, 0, -1, "checkpoint-1"),
                      ServedOffset("with-metadata", "payments", 0, 4, 0, "état ✓")]


def test_view_knows_each_groups_stored_state_and_when_its_offsets_expire(audit, scenario):
    (view, _), now = audit
    retention = AUDIT_RETENTION_MINUTES * 60_000
    rows = {(r.group_id, r.topic, r.partition): r for r in view.collect()}
    assert {k: r.group_state for k, r in rows.items()} == {
        k: {"empty": "Empty", "live": "Stable"}.get(k[0]) for k in scenario.live}
    empty_since = rows[("empty", "orders", 2)].state_timestamp
    for key, r in rows.items():
        group = key[0]
        if group == "live" and key[1] == "orders":
            assert r.expires_at is None and not r.expired  # the member consumes it
        elif group == "empty":
            assert r.expires_at == empty_since + retention  # from when the group became Empty
        else:  # simple consumers, and a topic the Stable group does not subscribe to
            assert r.expires_at == r.commit_timestamp + retention
        assert r.expired == (r.expires_at is not None and r.expires_at <= now)


def test_expiry_agrees_with_the_coordinators_at_every_boundary(decoded, raw, scenario):
    retention_minutes = 1
    # The "expired" column is checked at one time, "expires_at" around every boundary.
    at = scenario.finished_ms + 60_000
    view = compacted_offsets(decoded, at, retention_minutes).collect()
    oracle = Oracle(raw, retention_minutes)
    assert {(r.group_id, r.topic, r.partition): r.committed_offset for r in view} == \
        oracle.offsets()
    assert {(r.group_id, r.topic, r.partition) for r in view if r.expired} == oracle.expired(at)
    boundaries = {r.expires_at for r in view if r.expires_at is not None}
    assert len(boundaries) >= 3
    for boundary in sorted(boundaries):
        for now in (boundary - 1, boundary):
            spark_expired = {(r.group_id, r.topic, r.partition) for r in view
                             if r.expires_at is not None and r.expires_at <= now}
            assert spark_expired == oracle.expired(now), now


def test_audit_reports_injected_differences(audit, broker):
    (view, _), _ = audit
    served = fetch_served_offsets(broker.bootstrap, ["simple", "live", "with-metadata"])
    # The broker's answers, doctored: one missing, one moved, one invented, one re-labelled.
    doctored = [s for s in served if (s.group_id, s.topic, s.partition) != ("live", "orders", 0)]
    doctored = [s._replace(committed_offset=99) if (s.group_id, s.partition) == ("simple", 1)
                else s._replace(metadata="other") if s.metadata == "checkpoint-1" else s
                for s in doctored]
    doctored.append(ServedOffset("simple", "orders", 2, 5, -1, ""))
    keep = "group_id in ('simple', 'live', 'with-metadata')"
    differences = {
        (r.group_id, r.topic, r.partition): (r.difference, r.log_offset, r.served_offset,
                                             r.log_metadata, r.served_metadata)
        for r in offsets_differences(view.where(keep), doctored).collect()
    }
    assert differences == {
        ("live", "orders", 0): ("not_served", 10, None, "", None),
        ("simple", "orders", 1): ("different", 2, 99, "", ""),
        ("with-metadata", "orders", 2): ("different", 0, 0, "checkpoint-1", "other"),
        ("simple", "orders", 2): ("not_in_log", None, 5, None, ""),
    }
    # A doctored log view against the real answers: another leader epoch.
    from pyspark.sql import functions as F

    moved = view.where(keep).withColumn(
        "leader_epoch",
        F.when(F.col("group_id") == "live", F.lit(7)).otherwise(F.col("leader_epoch")))
    rows = offsets_differences(moved, served).collect()
    assert {(r.group_id, r.topic, r.partition, r.difference, r.log_leader_epoch,
             r.served_leader_epoch) for r in rows} == {
        ("live", "orders", 0, "different", 7, -1), ("live", "payments", 0, "different", 7, -1)}


def test_audit_sees_a_commit_made_after_the_topic_was_read(audit, broker):
    (view, _), _ = audit
    c = group_consumer(broker.bootstrap, "late")
    try:
        commit(c, ("orders", 1, 4))
    finally:
        c.close()
    rows = offsets_differences(view, fetch_served_offsets(broker.bootstrap)).collect()
    assert [(r.group_id, r.topic, r.partition, r.difference, r.served_offset) for r in rows] == [
        ("late", "orders", 1, "not_in_log", 4)]


# --- the broker's coordinator as the oracle ---------------------------------------------------


class Oracle:
    """The coordinator's view of a log: records replayed into a coordinator shard per
    partition of the topic, as the broker loads them."""

    def __init__(self, table: pa.Table, retention_minutes: int) -> None:
        config = OffsetsConfig(offsets_retention_minutes=retention_minutes)
        self.shards: dict[int, CoordinatorShard] = {}
        for key, value, partition in zip(table.column("key").to_pylist(),
                                         table.column("value").to_pylist(),
                                         table.column("partition").to_pylist()):
            if partition not in self.shards:
                self.shards[partition] = CoordinatorShard(None, config)
            k = decode_key(key)
            if isinstance(k, UnknownKey):
                continue
            self.shards[partition].replay(k, decode_value(k, value), 0)

    def offsets(self) -> dict[tuple[str, str, int], int]:
        found = {}
        for shard in self.shards.values():
            for group in shard.offsets.cache.groups():
                for f in shard.fetch_offsets(group, None):
                    found[(group, f.topic, f.partition)] = f.offset
        return found

    def expired(self, now: int) -> set[tuple[str, str, int]]:
        found = set()
        for shard in self.shards.values():
            for record in shard.offsets.expire(now, shard.groups).records:
                found.add((record.key.group, record.key.topic, record.key.partition))
        return found


def subscription(topics: list[str]) -> bytes:
    buf = io.BytesIO()
    entity_writer(ConsumerProtocolSubscription)(
        buf, ConsumerProtocolSubscription(topics=tuple(topics), user_data=None))
    return b"\x00\x00" + buf.getvalue()


TOPICS = ["a", "b", "c"]
timestamps = st.integers(0, 600_000)
commits = st.tuples(st.just("commit"), st.sampled_from(TOPICS), st.integers(0, 1),
                    st.integers(0, 100), timestamps, st.one_of(st.just(-1), timestamps))
offset_tombstones = st.tuples(st.just("offset_tombstone"), st.sampled_from(TOPICS),
                              st.integers(0, 1))
empty_groups = st.tuples(st.just("empty"), st.sampled_from(["consumer", "", "connect"]),
                         timestamps)
stable_groups = st.tuples(
    st.just("stable"), st.sampled_from(["consumer", "connect"]), timestamps,
    st.lists(st.one_of(st.lists(st.sampled_from(TOPICS), unique=True, max_size=2),
                       st.just(None)),  # None: a subscription the coordinator cannot read
             min_size=1, max_size=2))
group_tombstones = st.tuples(st.just("group_tombstone"))
events = st.lists(st.one_of(commits, commits, offset_tombstones, empty_groups, stable_groups,
                            group_tombstones), max_size=10)


def history_records(history: dict[str, list[tuple]]) -> list[tuple[bytes, bytes | None]]:
    """The records a group's events would have written; every metadata record a new
    generation, as the coordinator writes them."""
    records = []
    for group, group_events in history.items():
        generation = 0
        for event in group_events:
            kind = event[0]
            if kind == "commit":
                _, topic, partition, offset, ts, expire = event
                records.append((encode_key(OffsetCommitKey(group, topic, partition)),
                                encode_value(OffsetCommitValue(offset, -1, "", ts, expire))))
            elif kind == "offset_tombstone":
                _, topic, partition = event
                records.append((encode_key(OffsetCommitKey(group, topic, partition)), None))
            elif kind == "group_tombstone":
                records.append((encode_key(GroupMetadataKey(group)), None))
            else:
                generation += 1
                _, protocol_type, ts, *rest = event
                members = tuple(
                    MemberMetadata(f"m{i}", None, "c", "/h", 1000, 1000,
                                   b"\x00" if topics is None else subscription(topics), b"")
                    for i, topics in enumerate(rest[0] if rest else []))
                value = GroupMetadataValue(protocol_type, generation,
                                           "range" if members else None,
                                           members[0].member_id if members else None, ts,
                                           members)
                records.append((encode_key(GroupMetadataKey(group)), encode_value(value)))
    return records


def records_table(records: list[tuple[bytes, bytes | None]]) -> pa.Table:
    n = len(records)
    return pa.table({
        "key": pa.array([k for k, _ in records], pa.binary()),
        "value": pa.array([v for _, v in records], pa.binary()),
        "partition": pa.array([0] * n, pa.int32()),
        "offset": pa.array(range(n), pa.int64()),
        "timestamp": pa.array([0] * n, pa.timestamp("ms", tz="UTC")),
    })


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(histories=st.lists(st.lists(events, min_size=1, max_size=3), min_size=5, max_size=25),
       retention_minutes=st.integers(1, 10), now=st.integers(0, 1_300_000))
def test_view_and_expiry_agree_with_the_coordinator(spark, histories, retention_minutes, now):
    # Groups are independent of each other, so one Spark job checks many histories at once.
    history = {f"h{i}-g{j}": group_events
               for i, groups in enumerate(histories) for j, group_events in enumerate(groups)}
    table = records_table(history_records(history))
    decoded = decode_offsets_topic(spark.createDataFrame(table))
    view = compacted_offsets(decoded, now, retention_minutes).collect()
    oracle = Oracle(table, retention_minutes)
    assert {(r.group_id, r.topic, r.partition): r.committed_offset for r in view} == \
        oracle.offsets()
    assert {(r.group_id, r.topic, r.partition) for r in view if r.expired} == \
        oracle.expired(now)
    boundaries = {r.expires_at for r in view if r.expires_at is not None}
    for at in sorted(boundaries):
        for t in (at - 1, at):
            assert {(r.group_id, r.topic, r.partition) for r in view
                    if r.expires_at is not None and r.expires_at <= t} == oracle.expired(t)


# --- the decoder on records the broker does not write -----------------------------------------


def test_decoder_reads_every_version_and_flags_what_it_cannot_read(spark):
    member = MemberMetadata("m-1", "inst", "client", "/10.0.0.1", 3000, 2000,
                            subscription(["b", "a"]), b"\x01")
    group = GroupMetadataValue("consumer", 4, "range", "m-1", 1234, (member,))
    records = [
        (encode_key(OffsetCommitKey("g", "t", 0), 0),
         encode_value(OffsetCommitValue(5, -1, "x", 10), 0)),
        (encode_key(OffsetCommitKey("g", "t", 1)), encode_value(OffsetCommitValue(6, 2, "", 11),
                                                                 4)),
        (encode_key(OffsetCommitKey("g", "t", 2)),
         encode_value(OffsetCommitValue(7, -1, "", 12, 99))),  # version 1: an expire timestamp
        (encode_key(GroupMetadataKey("g")), encode_value(group, 4)),
        (encode_key(GroupMetadataKey("g")), encode_value(group, 0)),
        (b"\x00\x07\x00\x01x", b"\x00\x00anything"),  # a record type of newer group kinds
        (encode_key(OffsetCommitKey("g", "t", 3)), b"\x00\x03\x00"),  # a truncated value
        (b"\x00", None),
        (None, b"\x00\x03"),
    ]
    rows = decode_offsets_topic(spark.createDataFrame(records_table(records))).orderBy(
        "source_offset").collect()
    pick = ["record_type", "key_version", "value_version", "is_tombstone", "group_id", "topic",
            "partition", "committed_offset", "leader_epoch", "metadata", "commit_timestamp",
            "expire_timestamp"]
    assert [tuple(r[c] for c in pick) for r in rows[:3]] == [
        ("offset_commit", 0, 0, False, "g", "t", 0, 5, -1, "x", 10, -1),
        ("offset_commit", 1, 4, False, "g", "t", 1, 6, 2, "", 11, -1),
        ("offset_commit", 1, 1, False, "g", "t", 2, 7, -1, "", 12, 99),
    ]
    v4, v0 = rows[3], rows[4]
    assert (v4.record_type, v4.value_version, v4.protocol_type, v4.generation, v4.protocol,
            v4.leader, v4.current_state_timestamp, v4.member_count, v4.subscribed_topics) == (
        "group_metadata", 4, "consumer", 4, "range", "m-1", 1234, 1, ["a", "b"])
    assert [tuple(m) for m in v4.members] == [("m-1", "inst", "client", "/10.0.0.1", 3000, 2000)]
    # Version 0 has no state timestamp, no instance id and no rebalance timeout.
    assert (v0.value_version, v0.current_state_timestamp) == (0, -1)
    assert [tuple(m) for m in v0.members] == [("m-1", None, "client", "/10.0.0.1", 2000, 2000)]
    unknown, truncated, short_key, no_key = rows[5:]
    assert (unknown.record_type, unknown.key_version, unknown.value_version,
            unknown.group_id, unknown.error) == ("unknown", 7, 0, None, None)
    assert (truncated.record_type, truncated.group_id, truncated.partition,
            truncated.committed_offset) == ("corrupt", "g", 3, None)
    assert "OffsetCommitValue" in truncated.error
    assert (short_key.record_type, short_key.is_tombstone) == ("corrupt", True)
    assert "key" in short_key.error
    assert (no_key.record_type, no_key.error) == ("corrupt", "a record without a key")
    # None of them is taken for a committed offset.
    view = compacted_offsets(decode_offsets_topic(spark.createDataFrame(records_table(records))))
    assert sorted((r.partition, r.committed_offset) for r in view.collect()) == [
        (0, 5), (1, 6), (2, 7)]


def test_decoding_keeps_only_the_offsets_topic_and_needs_a_kafka_read(spark):
    table = records_table([(encode_key(OffsetCommitKey("g", "t", 0)),
                            encode_value(OffsetCommitValue(5, commit_timestamp=1)))] * 2)
    table = table.append_column("topic", pa.array(["__consumer_offsets", "orders"]))
    rows = decode_offsets_topic(spark.createDataFrame(table)).collect()
    assert [(r.source_offset, r.committed_offset) for r in rows] == [(0, 5)]
    with pytest.raises(ValueError, match="value"):
        decode_offsets_topic(spark.createDataFrame(table.drop_columns(["value"])))


def test_view_without_a_state_timestamp_and_lag_without_an_offset(spark):
    # A version 1 group value has no state timestamp: the broker counts from when it loaded the
    # group, which the log does not say.
    group = GroupMetadataValue("consumer", 1, None, None, -1, ())
    records = [
        (encode_key(GroupMetadataKey("old")), encode_value(group, 1)),
        (encode_key(OffsetCommitKey("old", "t", 0)),
         encode_value(OffsetCommitValue(-1, -1, "", 5))),
    ]
    decoded = decode_offsets_topic(spark.createDataFrame(records_table(records)))
    [row] = compacted_offsets(decoded, 10**12, 1).collect()
    assert (row.group_state, row.state_timestamp, row.expires_at, row.expired) == (
        "Empty", -1, None, False)
    [lag] = consumer_lag(decoded, {("t", 0): 9}).collect()
    assert (lag.committed_offset, lag.log_end_offset, lag.lag) == (-1, 9, None)
