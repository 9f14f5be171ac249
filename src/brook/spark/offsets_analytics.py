"""Analytics of ``__consumer_offsets`` on Spark: the records decoded into columns, consumer lag,
and an audit of the committed offsets against what the broker serves.

The input is a batch read of the offsets topic with the rows of Spark's Kafka source
(``key``, ``value``, ``partition``, ``offset``, ``timestamp``; ``topic`` and ``timestampType``
may be there too), for instance
``spark.read.format("brook").option("subscribe", "__consumer_offsets").load()``.

Records are decoded on the executors, a pyarrow batch at a time, by the broker's own decoder
(``brook.coordinator.group.schemas``), so this module reads exactly what the coordinator reads.
The compacted view and its expiry follow ``brook.coordinator.group.offsets`` (Kafka's rules,
KIP-211), recomputed in Spark so that they scale with the topic. The group state they use is
the state stored in the log (a group with members is Stable, one without is Empty), which is
what a coordinator has right after loading the partition.

All timestamps are Kafka's: milliseconds since the epoch, -1 for none.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import NamedTuple

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.functions import arrow_udf
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from brook.coordinator.group.classic_group import ClassicGroup
from brook.coordinator.group.expiry import expires_at
from brook.coordinator.group.offsets import OffsetsConfig, subscribed_topics
from brook.coordinator.group.schemas import (
    CorruptOffsetsRecordError,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    UnknownKey,
    decode_key,
    decode_value,
)

__all__ = [
    "CORRUPT",
    "DECODED_SCHEMA",
    "DIFFERENCES_SCHEMA",
    "GROUP_METADATA",
    "LAG_SCHEMA",
    "OFFSETS_TOPIC",
    "OFFSET_COMMIT",
    "OffsetsAudit",
    "SERVED_SCHEMA",
    "ServedOffset",
    "UNKNOWN",
    "VIEW_SCHEMA",
    "audit_offsets",
    "compacted_offsets",
    "consumer_lag",
    "decode_offsets_topic",
    "fetch_log_end_offsets",
    "fetch_served_offsets",
    "main",
    "offsets_differences",
    "read_offsets_topic",
]

OFFSETS_TOPIC = "__consumer_offsets"

#: The values of the ``record_type`` column.
OFFSET_COMMIT = "offset_commit"
GROUP_METADATA = "group_metadata"
UNKNOWN = "unknown"  # a record type (key version) the classic coordinator skips
CORRUPT = "corrupt"  # bytes the decoder refuses; ``error`` says why

#: Group states as the log stores them.
STABLE = "Stable"
EMPTY = "Empty"

DEFAULT_RETENTION_MINUTES = OffsetsConfig().offsets_retention_minutes

_MEMBER = StructType(
    [
        StructField("member_id", StringType()),
        StructField("group_instance_id", StringType()),
        StructField("client_id", StringType()),
        StructField("client_host", StringType()),
        StructField("rebalance_timeout", IntegerType()),
        StructField("session_timeout", IntegerType()),
    ]
)

#: What the decoder makes of one record's key and value, in the order of ``_decode``'s tuples.
_RECORD = StructType(
    [
        StructField("record_type", StringType()),
        StructField("key_version", IntegerType()),
        StructField("value_version", IntegerType()),
        StructField("is_tombstone", BooleanType()),
        StructField("group_id", StringType()),
        # Offset commits: the committed topic partition and the OffsetCommitValue.
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("committed_offset", LongType()),
        StructField("leader_epoch", IntegerType()),
        StructField("metadata", StringType()),
        StructField("commit_timestamp", LongType()),
        StructField("expire_timestamp", LongType()),
        # Group metadata: the GroupMetadataValue.
        StructField("protocol_type", StringType()),
        StructField("generation", IntegerType()),
        StructField("protocol", StringType()),
        StructField("leader", StringType()),
        StructField("current_state_timestamp", LongType()),
        StructField("member_count", IntegerType()),
        StructField("members", ArrayType(_MEMBER)),
        # The topics the members subscribe to, as the coordinator reads them for expiry; null
        # when it does not know them (not a consumer group, or a subscription it cannot parse).
        StructField("subscribed_topics", ArrayType(StringType())),
        StructField("error", StringType()),
    ]
)
_WIDTH = len(_RECORD.fields)

#: The columns of ``decode_offsets_topic``: the decoded record, then where it is in the topic.
DECODED_SCHEMA = StructType(
    [
        *_RECORD.fields,
        StructField("source_partition", IntegerType()),
        StructField("source_offset", LongType()),
        StructField("source_timestamp", TimestampType()),
    ]
)

#: The columns of ``compacted_offsets``.
VIEW_SCHEMA = StructType(
    [
        StructField("group_id", StringType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("committed_offset", LongType()),
        StructField("leader_epoch", IntegerType()),
        StructField("metadata", StringType()),
        StructField("commit_timestamp", LongType()),
        StructField("expire_timestamp", LongType()),
        StructField("source_partition", IntegerType()),
        StructField("source_offset", LongType()),
        # The group as its latest metadata record stores it; null without one.
        StructField("group_state", StringType()),
        StructField("protocol_type", StringType()),
        StructField("generation", IntegerType()),
        StructField("state_timestamp", LongType()),
        # When the retention rules expire the offset, null when they keep it while the group
        # stays as stored; and whether that is at or before ``now_ms``.
        StructField("expires_at", LongType()),
        StructField("expired", BooleanType()),
    ]
)

#: The columns of ``consumer_lag``.
LAG_SCHEMA = StructType(
    [
        StructField("group_id", StringType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("committed_offset", LongType()),
        StructField("log_end_offset", LongType()),
        StructField("lag", LongType()),
    ]
)

#: The columns of the broker's answers to OffsetFetch (``fetch_served_offsets`` as a DataFrame).
SERVED_SCHEMA = StructType(
    [
        StructField("group_id", StringType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("committed_offset", LongType()),
        StructField("leader_epoch", IntegerType()),
        StructField("metadata", StringType()),
    ]
)

#: The columns of ``offsets_differences``.
DIFFERENCES_SCHEMA = StructType(
    [
        StructField("group_id", StringType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        # not_served: in the log, not answered by OffsetFetch; not_in_log: the other way round;
        # different: both, with another offset, leader epoch or metadata.
        StructField("difference", StringType()),
        StructField("log_offset", LongType()),
        StructField("served_offset", LongType()),
        StructField("log_leader_epoch", IntegerType()),
        StructField("served_leader_epoch", IntegerType()),
        StructField("log_metadata", StringType()),
        StructField("served_metadata", StringType()),
    ]
)


# --- decoding, on the executors ---------------------------------------------------------------


_ARROW_FIELDS = [(f.name, to_arrow_type(f.dataType)) for f in _RECORD.fields]


def _version(data: bytes | None) -> int | None:
    """The int16 version a key or value starts with, None when there is none."""
    if data is None or len(data) < 2:
        return None
    return int.from_bytes(data[:2], "big", signed=True)


def _subscribed(group_id: str, value: GroupMetadataValue) -> list[str] | None:
    """The subscribed topics the coordinator would see after loading this value."""
    try:
        group = ClassicGroup.from_metadata_value(group_id, value, 0)
    except Exception:  # members the coordinator could not load: their topics are not known
        return None
    topics = subscribed_topics(group)
    return None if topics is None else sorted(topics)


def _decode(key: bytes | None, value: bytes | None) -> tuple:
    """One record as a tuple of ``_RECORD``'s fields; never raises on bad bytes."""
    kv, vv, tomb = _version(key), _version(value), value is None
    if key is None:
        return (CORRUPT, kv, vv, tomb) + (None,) * (_WIDTH - 5) + ("a record without a key",)
    try:
        k = decode_key(key)
    except CorruptOffsetsRecordError as e:
        return (CORRUPT, kv, vv, tomb) + (None,) * (_WIDTH - 5) + (str(e),)
    if type(k) is UnknownKey:
        return (UNKNOWN, kv, vv, tomb) + (None,) * (_WIDTH - 4)
    try:
        v = decode_value(k, value)
    except CorruptOffsetsRecordError as e:
        error: str | None = str(e)
        v = None
    else:
        error = None
    record_type = CORRUPT if error else OFFSET_COMMIT if type(k) is OffsetCommitKey else (
        GROUP_METADATA
    )
    if type(k) is OffsetCommitKey:
        head = (record_type, kv, vv, tomb, k.group, k.topic, k.partition)
        if type(v) is OffsetCommitValue:
            commit = (v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp)
        else:
            commit = (None,) * 5
        return head + commit + (None,) * 8 + (error,)
    assert type(k) is GroupMetadataKey
    head = (record_type, kv, vv, tomb, k.group) + (None,) * 7
    if type(v) is not GroupMetadataValue:
        return head + (None,) * 8 + (error,)
    members = [
        (m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout,
         m.session_timeout)
        for m in v.members
    ]
    return head + (
        v.protocol_type,
        v.generation,
        v.protocol,
        v.leader,
        v.current_state_timestamp,
        len(members),
        members,
        _subscribed(k.group, v),
        None,
    )


def _decode_arrays(keys: pa.Array, values: pa.Array) -> pa.Array:
    """A batch of records decoded into one struct array (the body of the Arrow UDF)."""
    rows = [_decode(k, v) for k, v in zip(keys.to_pylist(), values.to_pylist())]
    columns = zip(*rows) if rows else ([] for _ in _ARROW_FIELDS)
    arrays = [pa.array(c, type=t) for c, (_, t) in zip(columns, _ARROW_FIELDS)]
    return pa.StructArray.from_arrays(arrays, names=[name for name, _ in _ARROW_FIELDS])


# Scalar (from the type hints). Marked nondeterministic only so that the optimizer evaluates it
# once per record: otherwise it pushes filters on the decoded fields below the projection and
# decodes every record twice.
_decode_udf = arrow_udf(_decode_arrays, _RECORD).asNondeterministic()

_SOURCE_COLUMNS = ("key", "value", "partition", "offset", "timestamp")


def read_offsets_topic(spark: SparkSession, bootstrap_servers: str) -> DataFrame:
    """A batch read of all of ``__consumer_offsets`` (``brook.spark.read``: format brook's
    rows, reaching Spark as Arrow batches)."""
    from brook.spark import read

    return read(spark, {"kafka.bootstrap.servers": bootstrap_servers,
                        "subscribe": OFFSETS_TOPIC})


def decode_offsets_topic(df: DataFrame) -> DataFrame:
    """Decode a batch read of ``__consumer_offsets`` (rows of Spark's Kafka source) into the
    columns of ``DECODED_SCHEMA``: one row per record, in any order.

    ``record_type`` is ``offset_commit``, ``group_metadata``, ``unknown`` (a record type of
    newer Kafka group kinds, which the coordinator skips) or ``corrupt`` (``error`` says why).
    A tombstone has ``is_tombstone`` set and null value columns. Rows of other topics, when the
    frame has a ``topic`` column, are left out.
    """
    missing = [c for c in _SOURCE_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"not a read of a Kafka topic: no column {', '.join(missing)}")
    if "topic" in df.columns:
        df = df.where(F.col("topic") == OFFSETS_TOPIC)
    decoded = df.select(
        _decode_udf(F.col("key"), F.col("value")).alias("record"),
        F.col("partition").cast(IntegerType()).alias("source_partition"),
        F.col("offset").cast(LongType()).alias("source_offset"),
        F.col("timestamp").cast(TimestampType()).alias("source_timestamp"),
    )
    return decoded.select("record.*", "source_partition", "source_offset", "source_timestamp")


# --- the compacted view and its expiry --------------------------------------------------------

_COMMIT_COLUMNS = [
    "committed_offset",
    "leader_epoch",
    "metadata",
    "commit_timestamp",
    "expire_timestamp",
    "source_partition",
    "source_offset",
]
_GROUP_COLUMNS = [
    "protocol_type",
    "generation",
    "current_state_timestamp",
    "member_count",
    "subscribed_topics",
]


def _latest_records(decoded: DataFrame, *record_types: str) -> DataFrame:
    """The latest record of every key of ``record_types`` (tombstones included): one row per
    record type, group, topic and partition (topic and partition null for group metadata)."""
    keys = ["record_type", "group_id", "topic", "partition"]
    columns = ["is_tombstone", *_COMMIT_COLUMNS, *_GROUP_COLUMNS]
    # A key's records are in one partition of the topic (the group's), in offset order.
    latest = (
        decoded.where(F.col("record_type").isin(*record_types))
        .groupBy(*keys)
        .agg(F.max_by(F.struct(*columns), F.col("source_offset")).alias("last"))
    )
    return latest.select(*keys, *(F.col(f"last.{c}").alias(c) for c in columns))


def _latest_commits(decoded: DataFrame) -> DataFrame:
    latest = _latest_records(decoded, OFFSET_COMMIT).where(~F.col("is_tombstone"))
    return latest.select("group_id", "topic", "partition", *_COMMIT_COLUMNS)


def _with_stored_groups(latest: DataFrame) -> DataFrame:
    """The latest commits, each with its group as the group's latest metadata record stores it
    (null columns when there is none, or when it is a tombstone). A window over the group
    rather than a join, so that the records are decoded once."""
    stored = (F.col("record_type") == GROUP_METADATA) & ~F.col("is_tombstone")
    group = F.struct(
        F.when(F.col("member_count") > 0, F.lit(STABLE)).otherwise(F.lit(EMPTY)).alias(
            "group_state"
        ),
        "protocol_type",
        "generation",
        F.col("current_state_timestamp").alias("state_timestamp"),
        "subscribed_topics",
    )
    # At most one row of a group is its metadata: "max" picks it.
    with_group = latest.withColumn(
        "group", F.max(F.when(stored, group)).over(Window.partitionBy("group_id"))
    )
    commits = with_group.where(
        (F.col("record_type") == OFFSET_COMMIT) & ~F.col("is_tombstone")
    )
    return commits.select("group_id", "topic", "partition", *_COMMIT_COLUMNS, "group.*")


def _expiry_arrays(state: pa.Array, protocol_type: pa.Array, state_timestamp: pa.Array,
                   subscribed: pa.Array, topic: pa.Array, commit_timestamp: pa.Array,
                   expire_timestamp: pa.Array, retention_ms: pa.Array) -> pa.Array:
    """``expiry.expires_at`` of every row (the body of the Arrow UDF): the coordinator's rule
    itself, not a copy of it."""
    columns = (state, protocol_type, state_timestamp, subscribed, topic, commit_timestamp,
               expire_timestamp, retention_ms)
    return pa.array([
        expires_at(s, p, -1 if ts is None else ts, subs, t, c, e, r)
        for s, p, ts, subs, t, c, e, r in zip(*(c.to_pylist() for c in columns))
    ], type=pa.int64())


_expires_at_udf = arrow_udf(_expiry_arrays, LongType())


def _expires_at(retention_ms: int) -> Column:
    """When an offset of the view expires, by the coordinator's rule (``expiry.expires_at``)
    applied to its group as stored. The log has no rebalancing groups (a stored group with
    members is Stable, one without is Empty), and an Empty group stored without the time it
    became Empty (metadata versions 0 and 1) keeps its offsets: the coordinator counts from
    when it loaded them, which the log does not record."""
    return _expires_at_udf(
        F.col("group_state"), F.col("protocol_type"), F.col("state_timestamp"),
        F.col("subscribed_topics"), F.col("topic"), F.col("commit_timestamp"),
        F.col("expire_timestamp"), F.lit(retention_ms).cast(LongType()))


def compacted_offsets(
    decoded: DataFrame,
    now_ms: int | None = None,
    retention_minutes: int = DEFAULT_RETENTION_MINUTES,
) -> DataFrame:
    """The committed offsets a coordinator holds after loading the topic: the latest commit per
    group, topic and partition with tombstones applied (``VIEW_SCHEMA``), and when each expires
    under ``offsets.retention.minutes`` given its group as stored (``expires_at``;
    ``expired`` at ``now_ms``, by default the current time)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    # Partitioned by group once: both the latest records and the window over each group's
    # rows then read it without another shuffle.
    by_group = decoded.repartition("group_id")
    view = _with_stored_groups(_latest_records(by_group, OFFSET_COMMIT, GROUP_METADATA))
    expires_at = _expires_at(retention_minutes * 60_000)
    return view.select(
        "group_id",
        "topic",
        "partition",
        *_COMMIT_COLUMNS,
        "group_state",
        F.when(F.col("protocol_type") != "", F.col("protocol_type")).alias("protocol_type"),
        "generation",
        "state_timestamp",
        expires_at.alias("expires_at"),
        F.coalesce(expires_at <= F.lit(now), F.lit(False)).alias("expired"),
    )


# --- job 1: lag -------------------------------------------------------------------------------


def fetch_log_end_offsets(
    bootstrap_servers: str, partitions: Iterable[tuple[str, int]], timeout: float = 30.0
) -> dict[tuple[str, int], int]:
    """The log end offsets (high watermarks) of ``partitions`` from the broker, by one
    ListOffsets per broker; partitions the broker does not have are left out."""
    from confluent_kafka import KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    wanted = {TopicPartition(t, p): OffsetSpec.latest() for t, p in set(partitions)}
    if not wanted:
        return {}
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    ends: dict[tuple[str, int], int] = {}
    for tp, future in admin.list_offsets(wanted, request_timeout=timeout).items():
        try:
            ends[(tp.topic, tp.partition)] = future.result(timeout).offset
        except KafkaException:
            continue  # an unknown topic or partition: no end offset, so no lag
    return ends


def consumer_lag(
    decoded: DataFrame,
    end_offsets: Mapping[tuple[str, int], int] | DataFrame | None = None,
    *,
    bootstrap_servers: str | None = None,
    timeout: float = 30.0,
) -> DataFrame:
    """Per group, topic and partition (``LAG_SCHEMA``): the latest live committed offset, the
    partition's log end offset and the lag between them, as ``kafka-consumer-groups`` computes
    it (null when the committed offset is -1 or the end offset is unknown).

    ``end_offsets`` maps (topic, partition) to the end offset, or is a DataFrame of ``topic``,
    ``partition``, ``log_end_offset``; without it they are fetched from ``bootstrap_servers``
    for the partitions the groups have committed."""
    commits = _latest_commits(decoded).select("group_id", "topic", "partition", "committed_offset")
    spark = decoded.sparkSession
    if not isinstance(end_offsets, DataFrame):
        if end_offsets is None:
            if bootstrap_servers is None:
                raise ValueError("give end_offsets or bootstrap_servers to fetch them from")
            committed = commits.select("topic", "partition").distinct().collect()
            end_offsets = fetch_log_end_offsets(
                bootstrap_servers, [(r.topic, r.partition) for r in committed], timeout
            )
        end_offsets = spark.createDataFrame(
            [(t, p, o) for (t, p), o in end_offsets.items()],
            "topic string, partition int, log_end_offset long",
        )
    ends = end_offsets.select(
        "topic", "partition", F.col("log_end_offset").cast(LongType()).alias("log_end_offset")
    )
    committed_offset, end = F.col("committed_offset"), F.col("log_end_offset")
    return commits.join(ends, ["topic", "partition"], "left").select(
        "group_id",
        "topic",
        "partition",
        "committed_offset",
        "log_end_offset",
        F.when((committed_offset != -1) & end.isNotNull(), end - committed_offset).alias("lag"),
    )


# --- job 2: the audit -------------------------------------------------------------------------


class ServedOffset(NamedTuple):
    """One committed offset as the broker answers OffsetFetch."""

    group_id: str
    topic: str
    partition: int
    committed_offset: int
    leader_epoch: int
    metadata: str


def fetch_served_offsets(
    bootstrap_servers: str, groups: Iterable[str] | None = None, timeout: float = 30.0
) -> list[ServedOffset]:
    """Every committed offset of ``groups`` (by default every group the broker lists), as the
    broker answers OffsetFetch: one request per coordinator for all its groups (OffsetFetch v8).

    kafka-python, because it hands metadata back exactly: confluent-kafka appends a NUL to the
    metadata it commits and reads fetched metadata as a NUL-terminated C string, past the end of
    metadata other clients wrote."""
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(
        bootstrap_servers=bootstrap_servers, request_timeout_ms=int(timeout * 1000)
    )
    try:
        if groups is None:
            groups = [g["group_id"] for g in admin.list_groups()]
        wanted = sorted(set(groups))
        answers = admin.list_group_offsets(wanted) if wanted else {}
    finally:
        admin.close()
    return [
        ServedOffset(group, tp.topic, tp.partition, om.offset, om.leader_epoch, om.metadata or "")
        for group, offsets in sorted(answers.items())
        for tp, om in sorted(offsets.items())
    ]


def offsets_differences(view: DataFrame, served: DataFrame | Iterable[ServedOffset]) -> DataFrame:
    """Where the compacted view and the broker's OffsetFetch answers disagree
    (``DIFFERENCES_SCHEMA``; empty when they agree). ``served`` must cover the view's groups."""
    if not isinstance(served, DataFrame):
        served = view.sparkSession.createDataFrame(list(served), SERVED_SCHEMA)
    keys = ["group_id", "topic", "partition"]
    log = view.select(
        *keys,
        F.col("committed_offset").alias("log_offset"),
        F.col("leader_epoch").alias("log_leader_epoch"),
        F.col("metadata").alias("log_metadata"),
    )
    answered = served.select(
        *keys,
        F.col("committed_offset").alias("served_offset"),
        F.col("leader_epoch").alias("served_leader_epoch"),
        F.col("metadata").alias("served_metadata"),
    )
    differs = (
        (F.col("log_offset") != F.col("served_offset"))
        | (F.col("log_leader_epoch") != F.col("served_leader_epoch"))
        | (F.col("log_metadata") != F.col("served_metadata"))
    )
    difference = (
        F.when(F.col("served_offset").isNull(), F.lit("not_served"))
        .when(F.col("log_offset").isNull(), F.lit("not_in_log"))
        .when(differs, F.lit("different"))
    )
    joined = log.join(answered, keys, "full_outer").withColumn("difference", difference)
    return joined.where(F.col("difference").isNotNull()).select(
        *(field.name for field in DIFFERENCES_SCHEMA.fields)
    )


class OffsetsAudit(NamedTuple):
    #: The compacted view with expiry (``compacted_offsets``).
    view: DataFrame
    #: Its differences from what the broker serves (``offsets_differences``).
    differences: DataFrame


def audit_offsets(
    decoded: DataFrame,
    bootstrap_servers: str,
    now_ms: int | None = None,
    retention_minutes: int = DEFAULT_RETENTION_MINUTES,
    timeout: float = 30.0,
) -> OffsetsAudit:
    """Compute the compacted view and compare it with the broker's OffsetFetch answers for every
    group in the view or listed by the broker. The view is computed (and kept, with
    ``localCheckpoint``) before the broker is asked, so commits made after the topic was read
    show up as differences: audit a quiet moment, or read them as what changed meanwhile."""
    view = compacted_offsets(decoded, now_ms, retention_minutes).localCheckpoint()
    from kafka.admin import KafkaAdminClient

    groups = {r.group_id for r in view.select("group_id").distinct().collect()}
    admin = KafkaAdminClient(
        bootstrap_servers=bootstrap_servers, request_timeout_ms=int(timeout * 1000)
    )
    try:
        groups.update(g["group_id"] for g in admin.list_groups())
    finally:
        admin.close()
    served = fetch_served_offsets(bootstrap_servers, groups, timeout)
    return OffsetsAudit(view, offsets_differences(view, served))


# --- the jobs from the command line -----------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Print every group's lag, then the audit: how many offsets the log holds, how many are
    past their retention, and where the broker's answers differ (exit status 1 if anywhere)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m brook.spark.offsets_analytics",
                                     description=main.__doc__)
    parser.add_argument("--bootstrap-server", default="127.0.0.1:9092")
    parser.add_argument("--retention-minutes", type=int, default=DEFAULT_RETENTION_MINUTES,
                        help="offsets.retention.minutes for the expiry of the audit")
    args = parser.parse_args(argv)
    from brook.spark import local_session

    spark = local_session("brook-offsets-analytics")
    decoded = decode_offsets_topic(read_offsets_topic(spark, args.bootstrap_server)).cache()
    try:
        order = ["group_id", "topic", "partition"]
        lag = consumer_lag(decoded, bootstrap_servers=args.bootstrap_server)
        lag.orderBy(*order).show(1_000_000, truncate=False)
        audit = audit_offsets(decoded, args.bootstrap_server,
                              retention_minutes=args.retention_minutes)
        differences = audit.differences.orderBy(*order).collect()
        offsets, expired = audit.view.agg(F.count("*"), F.count_if(F.col("expired"))).first()
    finally:
        decoded.unpersist()
    print(f"{offsets} committed offsets in the log, {expired} past their retention; "
          f"{len(differences)} differences from what the broker serves")
    for row in differences:
        print("  " + ", ".join(f"{k}={v!r}" for k, v in row.asDict().items()))
    return 1 if differences else 0


if __name__ == "__main__":
    raise SystemExit(main())
