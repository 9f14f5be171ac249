"""brook.spark.read and read_stream (descriptor rows, the reading inside mapInArrow) against a
real broker process: what format "brook" is checked for, through the new path: a batch read
returns exactly the produced rows, restarts while producing lose and duplicate nothing in a
file sink, the group holds each finished micro-batch's end, startingOffsets=group, the sink's
round trip; and data that cannot be read fails the query clearly.

One broker for the module; the SparkSession (local[2]) is the run's (conftest.py).
"""

from __future__ import annotations

import pathlib
import shutil
import time

import pytest

pytest.importorskip("pyspark")

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer  # noqa: E402
from confluent_kafka import TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

import brook.spark  # noqa: E402
from tests.support.steady_producer import SteadyProducer  # noqa: E402
from tests.support.broker_harness import (  # noqa: E402
    BrokerProcess,
    confluent_produce,
    create_topic_confluent,
    make_records,
)

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("broker-spark-bulk"), overrides={
            "num.partitions": 3, "offsets.topic.num.partitions": 3,
            "group.initial.rebalance.delay.ms": 0}) as proc:
        yield proc


def read(spark, kafka, **options):
    return brook.spark.read(spark, {"kafka.bootstrap.servers": kafka.bootstrap, **options})


def stream(spark, kafka, **options):
    return brook.spark.read_stream(spark, {"kafka.bootstrap.servers": kafka.bootstrap, **options})


def started(writer, fresh_checkpoint=None, attempts: int = 3):
    """``writer.start()``, again if Spark gave up on one of its Python processes starting on a
    busy machine before the first micro-batch (see tests/test_spark_streaming.py)."""
    for attempt in range(attempts):
        query = writer.start()
        deadline = time.monotonic() + 180
        while query.isActive and query.lastProgress is None and time.monotonic() < deadline:
            time.sleep(0.1)
        error = None if query.isActive else query.exception()
        if error is None or "failed to connect back" not in str(error) or attempt == attempts - 1:
            return query
        commits = pathlib.Path(fresh_checkpoint or "", "commits")
        if fresh_checkpoint and not (commits.exists() and any(commits.iterdir())):
            shutil.rmtree(fresh_checkpoint, ignore_errors=True)
    return query


def check_no_failure(query) -> None:
    error = query.exception()
    assert error is None or "failed to connect back" in str(error), error


def committed(kafka, group: str) -> dict[str, dict[str, int]]:
    client = AdminClient({"bootstrap.servers": kafka.bootstrap})
    result = client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[
        group].result(30)
    out: dict[str, dict[str, int]] = {}
    for tp in result.topic_partitions:
        if tp.offset >= 0:
            out.setdefault(tp.topic, {})[str(tp.partition)] = tp.offset
    return out


def end_offsets(kafka, topic: str, partitions: int) -> dict[str, dict[str, int]]:
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "brook-tests-watermarks"})
    try:
        return {topic: {str(p): c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                        for p in range(partitions)}}
    finally:
        c.close()


def wait_for(condition, timeout=120.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def produce_values(kafka, topic, values, partition=None):
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 5})
    for v in values:
        extra = {} if partition is None else {"partition": partition}
        producer.produce(topic, value=v, key=v, **extra)
    assert producer.flush(30) == 0


def rows_by_position(df) -> dict[tuple[int, int], dict]:
    out = {}
    for row in df.selectExpr("*", "unix_millis(timestamp) AS millis").collect():
        d = row.asDict(recursive=True)
        d["key"] = bytes(d["key"]) if d["key"] is not None else None
        d["value"] = bytes(d["value"]) if d["value"] is not None else None
        if d.get("headers") is not None:
            d["headers"] = tuple((h["key"], bytes(h["value"])) for h in d["headers"])
        key = (d["partition"], d["offset"])
        assert key not in out, f"row {key} read twice"
        out[key] = d
    return out


# ------------------------------------------------------------------------ batch


def test_batch_read_returns_exactly_the_produced_rows(spark, kafka):
    create_topic_confluent(kafka.bootstrap, "produced", partitions=3)
    records = make_records(6000, seed=5)
    delivery = confluent_produce(kafka.bootstrap, "produced", records, codec="zstd")
    assert not delivery.errors
    want = {pos: records[i] for i, pos in enumerate(delivery.positions)}

    whole = read(spark, kafka, subscribe="produced", includeHeaders="true")
    assert whole.schema == brook.spark.read(spark, {
        "kafka.bootstrap.servers": kafka.bootstrap, "subscribe": "produced",
        "includeHeaders": "true"}).schema
    assert whole.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>>")
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
    plain = read(spark, kafka, subscribe="produced", startingOffsets='{"produced":{"0":10,'
                 '"1":-2,"2":-2}}', endingOffsets='{"produced":{"0":20,"1":0,"2":-1}}')
    assert "headers" not in plain.columns
    assert plain.count() == 10 + sum(1 for p, _ in want if p == 2)


def test_ranges_are_packed_into_as_many_tasks_as_spark_has_cores(spark, kafka):
    """Five partitions on local[2]: two tasks reading them all (a task costs two Python
    worker calls), maxTasks to choose, and splits that were asked for stay tasks of their own."""
    create_topic_confluent(kafka.bootstrap, "packed", partitions=5)
    values = [b"p%d" % i for i in range(500)]
    for p in range(5):
        produce_values(kafka, "packed", values[p::5], partition=p)
    cores = spark.sparkContext.defaultParallelism
    for df, tasks in ((read(spark, kafka, subscribe="packed"), min(cores, 5)),
                      (read(spark, kafka, subscribe="packed", maxTasks="3"), 3),
                      (read(spark, kafka, subscribe="packed", maxTasks="9"), 5),
                      (read(spark, kafka, subscribe="packed", minPartitions="8"), 10)):
        assert df.rdd.getNumPartitions() == tasks  # minPartitions 8: two splits of each range
        assert sorted(r.value for r in df.select("value").collect()) == sorted(values)
    query = (stream(spark, kafka, subscribe="packed", startingOffsets="earliest")
             .writeStream.format("memory").queryName("packed_stream").trigger(availableNow=True))
    query = started(query)
    query.awaitTermination(120)
    check_no_failure(query)
    assert sorted(r.value for r in spark.sql("select value from packed_stream").collect()) == sorted(values)


def test_options_are_checked_as_format_brooks(spark, kafka):
    with pytest.raises(Exception, match="startingOffsets cannot be latest"):
        read(spark, kafka, subscribe="produced", startingOffsets="latest")
    with pytest.raises(Exception, match="unknown option 'subscrbe'"):
        read(spark, kafka, subscrbe="produced")


def test_sink_round_trip(spark, kafka):
    rows = [(b"k%d" % i, b"v%d" % i) for i in range(300)]
    (spark.createDataFrame(rows, "key binary, value binary").write.format("brook")
     .option("kafka.bootstrap.servers", kafka.bootstrap).option("topic", "round-trip")
     .mode("append").save())
    got = read(spark, kafka, subscribe="round-trip").select("key", "value").collect()
    assert sorted((bytes(r.key), bytes(r.value)) for r in got) == sorted(rows)


def test_a_damaged_batch_fails_the_query_clearly(spark, kafka):
    create_topic_confluent(kafka.bootstrap, "damaged", partitions=1)
    confluent_produce(kafka.bootstrap, "damaged", make_records(300, seed=8))
    path = sorted((kafka.log_dir / "damaged-0").glob("*.log"))[0]
    with open(path, "r+b") as f:
        f.seek(150)
        byte = f.read(1)
        f.seek(150)
        f.write(bytes([byte[0] ^ 0x01]))
    with pytest.raises(Exception, match="CRC"):
        read(spark, kafka, subscribe="damaged").collect()


# ------------------------------------------------------------------------ streaming


def test_restarts_while_producing_lose_and_duplicate_nothing(spark, kafka, tmp_path):
    create_topic_confluent(kafka.bootstrap, "clicks", partitions=3)
    records = make_records(3000, seed=11)
    producing = SteadyProducer(kafka.bootstrap, "clicks", records)  # while the query stops and starts
    producing.start()
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def start():
        return started(stream(spark, kafka, subscribe="clicks", startingOffsets="earliest",
                              maxOffsetsPerTrigger="500", **{"group.id": "clicks-archive"})
                       .selectExpr("key", "value", "partition", "offset",
                                   "unix_millis(timestamp) AS ts")
                       .writeStream.format("parquet").option("path", out)
                       .option("checkpointLocation", checkpoint))

    spark.conf.set("spark.sql.streaming.verifyCheckpointDirectoryEmptyOnStart", "false")
    runs = 0
    try:
        while producing.is_alive() or runs < 3:
            query = start()
            runs += 1
            wait_for(lambda: len(query.recentProgress) >= 2 or not query.isActive,
                     what="micro-batches")
            query.stop()
            check_no_failure(query)
        producing.join()
        for _ in range(3):
            query = start()
            try:
                query.processAllAvailable()
                break
            except Exception:
                check_no_failure(query)
            finally:
                query.stop()
    finally:
        producing.join()
        spark.conf.unset("spark.sql.streaming.verifyCheckpointDirectoryEmptyOnStart")
    assert runs >= 3 and not producing.errors
    got = {}
    for row in spark.read.parquet(out).collect():
        pos = (row.partition, row.offset)
        assert pos not in got, f"{pos} written twice"
        got[pos] = (bytes(row.key), bytes(row.value) if row.value is not None else None, row.ts)
    want = {pos: (r.key, r.value, r.timestamp) for pos, r in zip(producing.positions, records)}
    assert len(got) == len(records) and got == want
    assert committed(kafka, "clicks-archive") == end_offsets(kafka, "clicks", 3)


def test_the_group_follows_each_batch_and_starting_offsets_group(spark, kafka, tmp_path):
    create_topic_confluent(kafka.bootstrap, "orders", partitions=2)
    for p in (0, 1):
        produce_values(kafka, "orders", [b"first-%d-%d" % (p, i) for i in range(200)], p)
    seen: dict[int, dict] = {}
    read_rows: dict[str, list] = {}

    def run(name, **options):
        def record(df, batch_id):  # the group's offsets while each micro-batch runs
            seen[(name, batch_id)] = committed(kafka, options.get("group.id", ""))
            read_rows.setdefault(name, []).extend(df.select("partition", "offset").collect())

        query = started(stream(spark, kafka, subscribe="orders", **options)
                        .writeStream.foreachBatch(record)
                        .option("checkpointLocation", str(tmp_path / name))
                        .trigger(availableNow=True), tmp_path / name)
        assert query.awaitTermination(120)
        check_no_failure(query)
        return sorted((r.partition, r.offset) for r in read_rows.get(name, []))

    first = run("orders_first", startingOffsets="earliest", maxOffsetsPerTrigger="150",
                **{"group.id": "orders-etl"})
    assert first == [(p, o) for p in (0, 1) for o in range(200)]
    batches = sorted(b for n, b in seen if n == "orders_first")
    assert len(batches) >= 3 and seen[("orders_first", 0)] == {}
    # while batch N runs, the group holds batch N-1's end; after the run, the last end
    assert all(seen[("orders_first", b)] for b in batches[1:])
    assert committed(kafka, "orders-etl") == {"orders": {"0": 200, "1": 200}}

    for p in (0, 1):
        produce_values(kafka, "orders", [b"second-%d-%d" % (p, i) for i in range(100)], p)
    second = run("orders_second", startingOffsets="group", **{"group.id": "orders-etl"})
    assert second == [(p, o) for p in (0, 1) for o in range(200, 300)]
    assert committed(kafka, "orders-etl") == {"orders": {"0": 300, "1": 300}}


# ------------------------------------------------------------------------ progress


def test_progress_counts_the_records_of_each_micro_batch(spark, kafka, tmp_path):
    # Spark counts a source's input rows at its scan, which returns descriptors here: the
    # descriptors are padded to the records they stand for and filtered out after the scan.
    create_topic_confluent(kafka.bootstrap, "counted", partitions=2)
    for p in (0, 1):
        produce_values(kafka, "counted", [b"%d-%d" % (p, i) for i in range(500)], p)
    query = started(stream(spark, kafka, subscribe="counted", startingOffsets="earliest",
                           maxOffsetsPerTrigger="300")
                    .writeStream.format("memory").queryName("counted")
                    .option("checkpointLocation", str(tmp_path / "ck"))
                    .trigger(availableNow=True), tmp_path / "ck")
    assert query.awaitTermination(120)
    check_no_failure(query)
    batches = [p for p in query.recentProgress if p.numInputRows > 0]
    assert [p.numInputRows for p in batches] == [300, 300, 300, 100]
    assert [p.sources[0].numInputRows for p in batches] == [300, 300, 300, 100]
    assert spark.table("counted").count() == 1000
    assert spark.table("counted").where("topic IS NULL").count() == 0
    # the lag Spark's Kafka source reports in sources[].metrics (Python sources cannot)
    lag = [brook.spark.offsets_behind_latest(p.sources[0]) for p in batches]
    assert [x["maxOffsetsBehindLatest"] for x in lag] == ["350", "200", "50", "0"]
    assert lag[-1] == {"minOffsetsBehindLatest": "0", "maxOffsetsBehindLatest": "0",
                       "avgOffsetsBehindLatest": "0.0"}
