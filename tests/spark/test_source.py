"""Format "brook" in Spark batch queries, against a real broker process: reads return exactly
the produced rows, DataFrames written to topics read back equal, the offset and data-loss
options behave as in Spark's Kafka source, and wrong options or DataFrames fail with a
message. Also the executor-side range reader on its own (exact range ends, gaps, data loss).

One broker for the module; the SparkSession (local[2]) is the run's (conftest.py).
"""

from __future__ import annotations

import time

import pytest

pytest.importorskip("pyspark")

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)

from tests.support.broker_harness import (  # noqa: E402
    BrokerProcess,
    confluent_produce,
    create_topic_confluent,
    make_records,
)
from brook.spark.reader import DataLossError, OffsetRange, read_range  # noqa: E402

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("broker-spark-source"), overrides={
            "num.partitions": 3, "offsets.topic.num.partitions": 3,
            "log.retention.check.interval.ms": 100, "log.cleaner.backoff.ms": 100}) as proc:
        yield proc


def read(spark, kafka, **options):
    reader = spark.read.format("brook").option("kafka.bootstrap.servers", kafka.bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def rows_by_position(df) -> dict[tuple[int, int], dict]:
    """Rows keyed by (partition, offset), timestamps as epoch milliseconds."""
    out = {}
    for row in df.selectExpr("*", "unix_millis(timestamp) AS millis").collect():
        d = row.asDict(recursive=True)
        d["key"] = bytes(d["key"]) if d["key"] is not None else None
        d["value"] = bytes(d["value"]) if d["value"] is not None else None
        if "headers" in d and d["headers"] is not None:
            d["headers"] = tuple((h["key"], bytes(h["value"])) for h in d["headers"])
        key = (d["partition"], d["offset"])
        assert key not in out, f"row {key} read twice"
        out[key] = d
    return out


def set_topic_config(kafka, topic: str, **configs) -> None:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    entries = [ConfigEntry(k.replace("_", "."), str(v), incremental_operation=AlterConfigOpType.SET)
               for k, v in configs.items()]
    for future in admin.incremental_alter_configs(
            [ConfigResource("TOPIC", topic, incremental_configs=entries)]).values():
        future.result(30)


def wait_for(condition, timeout=60.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def earliest(kafka, topic, partition) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "brook-tests-watermarks"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[0]
    finally:
        c.close()


# ------------------------------------------------------------------------ batch reads


def test_batch_read_returns_exactly_the_produced_rows(spark, kafka):
    create_topic_confluent(kafka.bootstrap, "produced", partitions=3)
    records = make_records(6000, seed=5)
    delivery = confluent_produce(kafka.bootstrap, "produced", records, codec="lz4")
    assert not delivery.errors
    want = {pos: records[i] for i, pos in enumerate(delivery.positions)}

    whole = read(spark, kafka, subscribe="produced", includeHeaders="true")
    assert whole.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>>")
    # Small splits: many tasks per partition, each stopping exactly at its range's end.
    split = read(spark, kafka, subscribe="produced", includeHeaders="true",
                 maxRecordsPerPartition="700")
    assert split.rdd.getNumPartitions() >= 9
    for df in (whole, split):
        got = rows_by_position(df)
        assert set(got) == set(want)
        for pos, record in want.items():
            row = got[pos]
            assert (row["key"], row["value"], row["millis"]) == (record.key, record.value,
                                                                  record.timestamp), pos
            assert row["headers"] == (record.headers or None), pos
            assert (row["topic"], row["timestampType"]) == ("produced", 0)

    plain = read(spark, kafka, subscribe="produced")
    assert "headers" not in plain.columns and plain.count() == len(records)


def test_offsets_options_select_exact_ranges(spark, kafka):
    create_topic_confluent(kafka.bootstrap, "ranges", partitions=2)
    records = make_records(200, seed=6)
    for partition in (0, 1):
        confluent_produce(kafka.bootstrap, "ranges", records[:100], partition=partition)

    def positions(df):
        return sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())

    df = read(spark, kafka, subscribe="ranges", startingOffsets='{"ranges":{"0":10,"1":-2}}',
              endingOffsets='{"ranges":{"0":20,"1":5}}')
    assert positions(df) == [(0, o) for o in range(10, 20)] + [(1, o) for o in range(5)]
    df = read(spark, kafka, assign='{"ranges":[1]}', startingOffsets='{"ranges":{"1":95}}')
    assert positions(df) == [(1, o) for o in range(95, 100)]
    assert read(spark, kafka, subscribe="ranges", endingOffsets='{"ranges":{"0":0,"1":0}}'
                ).count() == 0  # no split at all
    assert read(spark, kafka, subscribe="no-such-topic-yet").count() == 0


@pytest.mark.parametrize("options, message", [
    ({"subscribe": "t", "assign": '{"t":[0]}'}, "exactly one of the options subscribe"),
    ({"subscribe": "t", "startingOffsets": "latest"}, "cannot be latest"),
    ({"subscribe": "t", "startingOffset": "earliest"}, "unknown option 'startingoffset'"),
    ({"subscribe": "t", "failOnDataLoss": "maybe"}, "failOnDataLoss must be true or false"),
    ({"subscribe": "ranges", "startingOffsets": '{"ranges":{"0":1}}'},
     "startingOffsets must name every partition the query reads"),
    ({"assign": '{"ranges":[7]}'}, "assigned partitions do not exist: ranges-7"),
    ({"subscribe": "t", "kafka.no.such.setting": "1"}, "client settings are not valid"),
])
def test_wrong_options_fail_the_query_with_a_message(spark, kafka, options, message):
    create_topic_confluent_once(kafka, "ranges", 2)
    with pytest.raises(Exception, match=message):
        read(spark, kafka, **options).collect()


def create_topic_confluent_once(kafka, topic, partitions):
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    if topic not in admin.list_topics(timeout=10).topics:
        create_topic_confluent(kafka.bootstrap, topic, partitions=partitions)


def test_a_fixed_schema_is_refused_with_another(spark, kafka):
    with pytest.raises(Exception, match="fixed schema"):
        (spark.read.format("brook").schema("value string")
         .option("kafka.bootstrap.servers", kafka.bootstrap).option("subscribe", "t")
         .load().collect())


# ------------------------------------------------------------------------ data loss


def produce_in_small_batches(kafka, topic, n, partition=0):
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 0})
    for i in range(n):
        producer.produce(topic, value=b"v%04d" % i, key=b"k%d" % i, partition=partition)
        if i % 10 == 9:
            producer.flush(30)
    assert producer.flush(30) == 0


def test_fail_on_data_loss_in_batch_reads(spark, kafka):
    create_topic_confluent(kafka.bootstrap, "lossy", partitions=1,
                           config={"segment.bytes": "2048"})
    produce_in_small_batches(kafka, "lossy", 300)
    set_topic_config(kafka, "lossy", retention_bytes=1)  # every closed segment goes
    wait_for(lambda: earliest(kafka, "lossy", 0) > 0, what="retention")
    low = earliest(kafka, "lossy", 0)
    from_zero = {"subscribe": "lossy", "startingOffsets": '{"lossy":{"0":0}}'}
    with pytest.raises(Exception, match=r"offsets \[0, \d+\) of lossy-0 are not in the log.*"
                                        r"failOnDataLoss"):
        read(spark, kafka, **from_zero).collect()
    rows = read(spark, kafka, failOnDataLoss="false", **from_zero).select("offset").collect()
    assert sorted(r.offset for r in rows) == list(range(low, 300))


def test_range_reader_reports_data_loss_found_while_reading(kafka):
    # Planning saw the data; by the time the executor reads, retention has removed it.
    create_topic_confluent(kafka.bootstrap, "lossy-read", partitions=1,
                           config={"segment.bytes": "2048"})
    produce_in_small_batches(kafka, "lossy-read", 300)
    set_topic_config(kafka, "lossy-read", retention_bytes=1)
    wait_for(lambda: earliest(kafka, "lossy-read", 0) > 0, what="retention")
    low = earliest(kafka, "lossy-read", 0)
    client = {"bootstrap.servers": kafka.bootstrap, "group.id": "brook-tests-reader"}
    with pytest.raises(DataLossError, match="lossy-read-0 from offset 0.*failOnDataLoss"):
        list(read_range(OffsetRange("lossy-read", 0, 0, 300, client)))
    batches = list(read_range(OffsetRange("lossy-read", 0, 0, 300, client,
                                          fail_on_data_loss=False)))
    assert [o for b in batches for o in b.column("offset").to_pylist()] == list(range(low, 300))
    # a range entirely below the log start is empty
    assert list(read_range(OffsetRange("lossy-read", 0, 0, low, client,
                                       fail_on_data_loss=False))) == []


def test_range_reader_stops_exactly_at_the_end_and_across_gaps(kafka):
    create_topic_confluent(kafka.bootstrap, "exact", partitions=1)
    confluent_produce(kafka.bootstrap, "exact", make_records(5000, seed=9))
    client = {"bootstrap.servers": kafka.bootstrap, "group.id": "brook-tests-reader"}
    for start, end in [(0, 1), (17, 4321), (4999, 5000), (0, 5000)]:
        batches = list(read_range(OffsetRange("exact", 0, start, end, client)))
        assert [o for b in batches for o in b.column("offset").to_pylist()] == list(
            range(start, end))
    # Compaction leaves gaps: a range ending in a gap ends without waiting for more.
    create_topic_confluent(kafka.bootstrap, "gaps", partitions=1, config={
        "cleanup.policy": "compact", "segment.bytes": "2048", "min.cleanable.dirty.ratio": "0.01"})
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 0})
    for i in range(400):
        producer.produce("gaps", key=b"k%d" % (i % 5), value=b"v%d" % i, partition=0)
        if i % 10 == 9:
            producer.flush(30)
    producer.flush(30)

    def offsets_read(start, end):
        return [o for b in read_range(OffsetRange("gaps", 0, start, end, client, poll_timeout_ms=20_000))
                for o in b.column("offset").to_pylist()]

    wait_for(lambda: len(offsets_read(0, 400)) < 300, what="compaction")
    kept = offsets_read(0, 400)
    missing = sorted(set(range(400)) - set(kept))
    t0 = time.monotonic()
    assert offsets_read(0, missing[-1] + 1) == [o for o in kept if o <= missing[-1]]
    assert time.monotonic() - t0 < 10  # the next record (past the end) ends the range


# ------------------------------------------------------------------------ the sink


def test_sink_round_trip(spark, kafka):
    create_topic_confluent(kafka.bootstrap, "written", partitions=3)
    headers = "array(named_struct('key', 'h', 'value', cast(cast(id as string) as binary)))"
    df = spark.range(3000).selectExpr(
        "cast(concat('k', id) as binary) AS key",
        "CASE WHEN id % 100 = 7 THEN NULL ELSE cast(concat('value-', id) as binary) END AS value",
        "cast(id % 3 as int) AS partition",
        f"CASE WHEN id % 2 = 0 THEN {headers} ELSE NULL END AS headers")
    df.write.format("brook").mode("append").option("kafka.bootstrap.servers", kafka.bootstrap) \
        .option("topic", "written").save()
    back = read(spark, kafka, subscribe="written", includeHeaders="true")
    got = sorted((bytes(r.key), bytes(r.value) if r.value is not None else None, r.partition,
                  tuple((h.key, bytes(h.value)) for h in r.headers) if r.headers else None)
                 for r in back.collect())
    want = sorted((b"k%d" % i, None if i % 100 == 7 else b"value-%d" % i, i % 3,
                   (("h", b"%d" % i),) if i % 2 == 0 else None) for i in range(3000))
    assert got == want


def test_sink_routes_rows_by_topic_column_and_the_topic_option_overrides_it(spark, kafka):
    for t in ("route-a", "route-b", "route-c"):
        create_topic_confluent(kafka.bootstrap, t, partitions=1)
    df = spark.createDataFrame([("route-a", "x", "1"), ("route-b", "y", "2"), ("route-a", None, "3")],
                               "topic string, key string, value string")
    writer = df.write.format("brook").mode("append").option("kafka.bootstrap.servers",
                                                             kafka.bootstrap)
    writer.save()

    def values(topic):
        return sorted(((r.key, r.value) for r in read(spark, kafka, subscribe=topic)
                       .selectExpr("cast(key as string) key", "cast(value as string) value")
                       .collect()), key=lambda kv: kv[1])

    assert values("route-a") == [("x", "1"), (None, "3")]
    assert values("route-b") == [("y", "2")]
    writer.option("topic", "route-c").save()
    assert values("route-c") == [("x", "1"), ("y", "2"), (None, "3")]


def test_keys_go_to_the_partitions_of_kafkas_java_partitioner(spark, kafka):
    create_topic_confluent(kafka.bootstrap, "keyed", partitions=4)
    spark.createDataFrame([("a", "1"), ("b", "2"), ("key-123", "3")], "key string, value string") \
        .write.format("brook").mode("append").option("kafka.bootstrap.servers", kafka.bootstrap) \
        .option("topic", "keyed").save()
    got = {r.key: r.partition for r in read(spark, kafka, subscribe="keyed")
           .selectExpr("cast(key as string) key", "partition").collect()}
    # murmur2(key) & 0x7fffffff % 4, as Kafka's DefaultPartitioner computes it
    assert got == {k: murmur2(k.encode()) % 4 for k in ("a", "b", "key-123")}


def murmur2(data: bytes) -> int:
    """Kafka's Utils.murmur2, positive (toPositive), for checking partitions."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    rest = length % 4
    tail = data[length - rest:]
    if rest == 3:
        h ^= tail[2] << 16
    if rest >= 2:
        h ^= tail[1] << 8
    if rest >= 1:
        h ^= tail[0]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h & 0x7FFFFFFF


@pytest.mark.parametrize("columns, options, message", [
    ("key string", {"topic": "t"}, "has no value column"),
    ("value int", {"topic": "t"}, "value column must be a string or binary"),
    ("value string", {}, "no topic column and no topic option"),
    ("value string, partition long", {"topic": "t"}, "partition column must be an int"),
    ("value string, headers array<string>", {"topic": "t"}, "headers column must be"),
])
def test_sink_refuses_dataframes_it_cannot_write(spark, kafka, columns, options, message):
    writer = spark.createDataFrame([], columns).write.format("brook").mode("append") \
        .option("kafka.bootstrap.servers", kafka.bootstrap)
    for name, value in options.items():
        writer = writer.option(name, value)
    with pytest.raises(Exception, match=message):
        writer.save()


def test_a_failed_delivery_fails_the_write(spark, kafka):
    create_topic_confluent(kafka.bootstrap, "small-records", partitions=2,
                           config={"max.message.bytes": "200"})
    df = spark.range(20).selectExpr("repeat('x', cast(id * 20 as int)) AS value")
    with pytest.raises(Exception, match=r"records were not delivered.*MESSAGE_TOO_LARGE|"
                                        r"records were not delivered.*too large"):
        df.write.format("brook").mode("append").option("kafka.bootstrap.servers", kafka.bootstrap) \
            .option("topic", "small-records").save()
    bad_partition = spark.range(3).selectExpr("cast(id as string) AS value", "7 AS partition")
    with pytest.raises(Exception, match="records were not delivered"):
        bad_partition.write.format("brook").mode("append") \
            .option("kafka.bootstrap.servers", kafka.bootstrap) \
            .option("topic", "small-records").save()


def test_a_null_topic_fails_the_write(spark, kafka):
    df = spark.createDataFrame([("route-a", "1"), (None, "2")], "topic string, value string")
    with pytest.raises(Exception, match="a row has a null topic"):
        df.write.format("brook").mode("append") \
            .option("kafka.bootstrap.servers", kafka.bootstrap).save()


# ------------------------------------------------------------------------ pickling


def test_readers_travel_to_executors_without_clients():
    # Spark pickles readers (cloudpickle) into the tasks that call read(); a client holds
    # threads and sockets, so it must be left behind and made again where it is needed.
    from pyspark import cloudpickle

    from brook.spark.options import SourceOptions
    from brook.spark.source import BrookBatchReader, BrookStreamReader

    options = SourceOptions.parse({"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t",
                                   "group.id": "g"}, streaming=True)
    for reader in (BrookStreamReader(options), BrookBatchReader(options)):
        assert reader.planner.admin.client is not None  # a live client on the driver
        copy = cloudpickle.loads(cloudpickle.dumps(reader))
        assert copy.planner.admin._client is None
        assert copy.planner.options == options
    stream = cloudpickle.loads(cloudpickle.dumps(BrookStreamReader(options)))
    assert stream.committer is None and stream._initial is None


def test_read_committed_reads_stop_at_the_last_stable_offset_and_drop_aborted_rows(spark, kafka):
    """A committed, an aborted and a still open transaction on one partition: read_committed
    (the default) returns the committed rows only and does not wait for the open transaction
    (its range ends at the LSO); read_uncommitted returns every row. Both the data source and
    brook.spark.read."""
    import brook.spark

    create_topic_confluent(kafka.bootstrap, "txn-read", partitions=1)

    def transactional(tid):
        # A timeout longer than the reads: the coordinator must not end the open one for them.
        p = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": tid,
                      "transaction.timeout.ms": 600_000})
        p.init_transactions(30)
        p.begin_transaction()
        return p

    done = transactional("spark-txn-done")
    for i in range(5):
        done.produce("txn-read", key=b"c%d" % i, value=b"committed", partition=0)
    done.commit_transaction(30)
    done.begin_transaction()
    for i in range(3):
        done.produce("txn-read", key=b"a%d" % i, value=b"aborted", partition=0)
    done.flush(30)  # in the log before the abort (librdkafka drops what it has not sent)
    done.abort_transaction(30)
    open_txn = transactional("spark-txn-open")
    for i in range(2):
        open_txn.produce("txn-read", key=b"o%d" % i, value=b"open", partition=0)
    open_txn.flush(30)
    try:
        for options in ({}, {"kafka.isolation.level": "read_committed"}):
            started = time.monotonic()
            rows = rows_by_position(read(spark, kafka, subscribe="txn-read", **options))
            assert sorted(r["key"] for r in rows.values()) == [b"c%d" % i for i in range(5)]
            assert time.monotonic() - started < 60  # not kafkaConsumer.pollTimeoutMs
            bulk = brook.spark.read(spark, {"kafka.bootstrap.servers": kafka.bootstrap,
                                            "subscribe": "txn-read", **options})
            assert sorted(bytes(r.key) for r in bulk.collect()) == [b"c%d" % i for i in range(5)]
        every = rows_by_position(read(spark, kafka, subscribe="txn-read",
                                      **{"kafka.isolation.level": "read_uncommitted"}))
        assert sorted(r["value"] for r in every.values()) == sorted(
            [b"committed"] * 5 + [b"aborted"] * 3 + [b"open"] * 2)
    finally:
        open_txn.abort_transaction(30)
