"""Format "brook" in Spark Structured Streaming, against a real broker process: exactly-once
output across restarts while producing goes on, the group's committed offsets after every
micro-batch, startingOffsets=group, partition and topic discovery, trigger(availableNow=True)
with maxOffsetsPerTrigger, failOnDataLoss, and the streaming sink.

One broker for the module; the SparkSession (local[2]) is the run's (conftest.py).
"""

from __future__ import annotations

import json
import pathlib
import shutil
import time

import pytest

pytest.importorskip("pyspark")

from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
)

from tests.support.steady_producer import SteadyProducer  # noqa: E402
from tests.support.broker_harness import (  # noqa: E402
    BrokerProcess,
    create_topic_confluent,
    make_records,
)

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("broker-spark-streaming"), overrides={
            "num.partitions": 3, "offsets.topic.num.partitions": 3,
            "group.initial.rebalance.delay.ms": 0, "log.retention.check.interval.ms": 100}) as proc:
        yield proc


def stream(spark, kafka, **options):
    reader = spark.readStream.format("brook").option("kafka.bootstrap.servers", kafka.bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def started(writer, fresh_checkpoint=None, attempts: int = 3):
    """``writer.start()``, started again if the query dies of Spark giving up on one of its
    Python processes before its first micro-batch is done: Spark waits a fixed 10 s for each to
    connect back, which a machine busy with other work can miss. ``fresh_checkpoint``, the
    checkpoint of a query started for the first time, is removed before starting again if no
    batch finished (the memory sink cannot start from a used checkpoint)."""
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
    """The query did not fail, but for Spark not waiting long enough for a Python process to
    start on a busy machine (see started)."""
    error = query.exception()
    assert error is None or "failed to connect back" in str(error), error


def admin(kafka) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka.bootstrap})


def committed(kafka, group: str) -> dict[str, dict[str, int]]:
    """The group's committed offsets, in the source's offset JSON form."""
    client = admin(kafka)  # held until the answer is in: a dropped client cancels requests
    result = client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[
        group].result(30)
    out: dict[str, dict[str, int]] = {}
    for tp in result.topic_partitions:
        if tp.offset >= 0:
            out.setdefault(tp.topic, {})[str(tp.partition)] = tp.offset
    return out


def add_partitions(kafka, topic: str, count: int) -> None:
    client = admin(kafka)
    client.create_partitions([NewPartitions(topic, count)])[topic].result(30)


def end_offsets(kafka, topic: str, partitions: int) -> dict[str, dict[str, int]]:
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "brook-tests-watermarks"})
    try:
        return {topic: {str(p): c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                        for p in range(partitions)}}
    finally:
        c.close()


def offsets_of(progress_offset) -> dict:
    return json.loads(progress_offset) if isinstance(progress_offset, str) else progress_offset


def progress(query) -> list[dict]:
    """The query's progress reports of batches that read something, as plain dicts."""
    out = []
    for p in query.recentProgress:
        p = json.loads(p.json) if hasattr(p, "json") else p
        out.append(p)
    return out


def wait_for(condition, timeout=120.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def produce_values(kafka, topic, values, partition=None):
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 5})
    for v in values:
        if partition is None:
            producer.produce(topic, value=v, key=v)
        else:
            producer.produce(topic, value=v, key=v, partition=partition)
    assert producer.flush(30) == 0


# ------------------------------------------------------------------------ exactly once


def test_restarts_while_producing_lose_and_duplicate_nothing(spark, kafka, tmp_path):
    create_topic_confluent(kafka.bootstrap, "clicks", partitions=3)
    records = make_records(4000, seed=11)
    producing = SteadyProducer(kafka.bootstrap, "clicks", records)  # while the query stops and starts
    producing.start()
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def start():
        return started(stream(spark, kafka, subscribe="clicks", startingOffsets="earliest",
                       maxOffsetsPerTrigger="500", **{"group.id": "clicks-archive"})
                .selectExpr("key", "value", "partition", "offset", "unix_millis(timestamp) AS ts")
                .writeStream.format("parquet").option("path", out)
                .option("checkpointLocation", checkpoint))

    # Spark 4.3 refuses to restart a checkpoint whose first offset-log write was cut short
    # (it finds the write's temporary file and takes the directory for another query's); this
    # test stops queries anywhere, so let Spark start such a query afresh.
    spark.conf.set("spark.sql.streaming.verifyCheckpointDirectoryEmptyOnStart", "false")
    runs = 0
    try:
        while producing.is_alive() or runs < 3:
            query = start()
            runs += 1
            # stop after a couple of micro-batches, wherever the query is
            wait_for(lambda: len(query.recentProgress) >= 2 or not query.isActive,
                     what="micro-batches")
            query.stop()
            check_no_failure(query)  # a query killed by a busy machine is one more stop
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

    rows = spark.read.parquet(out).collect()
    got = {}
    for row in rows:
        pos = (row.partition, row.offset)
        assert pos not in got, f"{pos} written twice"
        got[pos] = (bytes(row.key), bytes(row.value) if row.value is not None else None, row.ts)
    want = {pos: (r.key, r.value, r.timestamp) for pos, r in zip(producing.positions, records)}
    assert len(got) == len(records) and got == want
    # the group followed the checkpoint to the end
    assert committed(kafka, "clicks-archive") == end_offsets(kafka, "clicks", 3)


# ------------------------------------------------------------------------ group commits


def test_the_group_holds_each_finished_micro_batchs_end(spark, kafka, tmp_path):
    create_topic_confluent(kafka.bootstrap, "views", partitions=2)
    group = "views-counter"
    seen: dict[int, dict] = {}

    def record_commits(df, batch_id):  # runs as each micro-batch executes
        seen[batch_id] = committed(kafka, group)

    def start(**trigger):
        writer = (stream(spark, kafka, subscribe="views", startingOffsets="earliest",
                         maxOffsetsPerTrigger="150", **{"group.id": group})
                  .writeStream.foreachBatch(record_commits)
                  .option("checkpointLocation", str(tmp_path / "checkpoint")))
        return started(writer.trigger(**trigger) if trigger else writer)

    def check(query):
        # (foreachBatch here never reads its DataFrame, so numInputRows stays 0)
        batches = [p for p in progress(query)
                   if p["sources"][0]["startOffset"] != p["sources"][0]["endOffset"]]
        assert len(batches) >= 2
        for p in batches:
            start_offsets = offsets_of(p["sources"][0]["startOffset"])
            # while batch N runs, the group holds batch N-1's end (the new query's own start
            # is not committed: nothing had been processed there)
            expected = {} if p["batchId"] == 0 else start_offsets
            assert seen[p["batchId"]] == expected, p["batchId"]
        last_end = offsets_of(batches[-1]["sources"][0]["endOffset"])
        return last_end

    produce_values(kafka, "views", [b"a%d" % i for i in range(500)])
    query = start()
    query.processAllAvailable()
    # the last batch is committed although no next batch has started
    assert committed(kafka, group) == check(query) == end_offsets(kafka, "views", 2)

    produce_values(kafka, "views", [b"b%d" % i for i in range(400)])
    query.processAllAvailable()  # the query goes idle again: the group reaches the new end
    assert committed(kafka, group) == check(query) == end_offsets(kafka, "views", 2)
    query.stop()

    produce_values(kafka, "views", [b"c%d" % i for i in range(300)])
    seen.clear()
    query = start(availableNow=True)
    assert query.awaitTermination(120)
    assert committed(kafka, group) == check(query) == end_offsets(kafka, "views", 2)


def test_starting_offsets_group_resumes_where_the_group_left_off(spark, kafka, tmp_path):
    create_topic_confluent(kafka.bootstrap, "orders", partitions=2)
    for p in (0, 1):
        produce_values(kafka, "orders", [b"first-%d-%d" % (p, i) for i in range(200)], p)

    def run(name, **options):
        query = started(stream(spark, kafka, subscribe="orders", **options)
                        .selectExpr("partition", "offset").writeStream.format("memory")
                        .queryName(name).option("checkpointLocation", str(tmp_path / name))
                        .trigger(availableNow=True), tmp_path / name)
        assert query.awaitTermination(120)
        return sorted((r.partition, r.offset) for r in spark.table(name).collect())

    first = run("orders_first", startingOffsets="earliest", maxOffsetsPerTrigger="150",
                **{"group.id": "orders-etl"})
    assert first == [(p, o) for p in (0, 1) for o in range(200)]
    assert committed(kafka, "orders-etl") == {"orders": {"0": 200, "1": 200}}

    for p in (0, 1):
        produce_values(kafka, "orders", [b"second-%d-%d" % (p, i) for i in range(100)], p)
    add_partitions(kafka, "orders", 3)
    produce_values(kafka, "orders", [b"new-%d" % i for i in range(30)], 2)

    # A new query (new checkpoint) of the same group starts at its committed offsets; the
    # partition without a commit starts at startingOffsetsFallback (default earliest).
    second = run("orders_second", startingOffsets="group", **{"group.id": "orders-etl"})
    assert second == [(p, o) for p in (0, 1) for o in range(200, 300)] + [
        (2, o) for o in range(30)]
    assert committed(kafka, "orders-etl") == {"orders": {"0": 300, "1": 300, "2": 30}}

    client = admin(kafka)
    client.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
        "orders-partial", [TopicPartition("orders", 0, 250)])])["orders-partial"].result(30)
    third = run("orders_third", startingOffsets="group", startingOffsetsFallback="latest",
                **{"group.id": "orders-partial"})
    assert third == [(0, o) for o in range(250, 300)]
    with pytest.raises(Exception, match="no committed offset for orders-0, orders-1, orders-2"):
        run("orders_fourth", startingOffsets="group", startingOffsetsFallback="none",
            **{"group.id": "orders-partial-2"})


# ------------------------------------------------------------------------ discovery and limits


def test_new_partitions_and_topics_matching_the_pattern_are_picked_up(spark, kafka, tmp_path):
    create_topic_confluent(kafka.bootstrap, "disc-a", partitions=1)
    produce_values(kafka, "disc-a", [b"a%d" % i for i in range(10)])
    query = started(stream(spark, kafka, subscribePattern="disc-.*", startingOffsets="earliest")
                    .selectExpr("topic", "partition", "offset").writeStream.format("memory")
                    .queryName("discovered").option("checkpointLocation", str(tmp_path / "ck")),
                    tmp_path / "ck")
    try:
        query.processAllAvailable()
        create_topic_confluent(kafka.bootstrap, "disc-b", partitions=2)
        produce_values(kafka, "disc-b", [b"b%d" % i for i in range(20)])
        add_partitions(kafka, "disc-a", 2)
        produce_values(kafka, "disc-a", [b"c%d" % i for i in range(5)], partition=1)
        produce_values(kafka, "disc-a", [b"d%d" % i for i in range(3)], partition=0)
        create_topic_confluent(kafka.bootstrap, "other-topic", partitions=1)
        produce_values(kafka, "other-topic", [b"x"])

        def rows():
            return sorted((r.topic, r.partition, r.offset)
                          for r in spark.table("discovered").collect())

        want = ([("disc-a", 0, o) for o in range(13)] + [("disc-a", 1, o) for o in range(5)])
        wait_for(lambda: len(rows()) >= 38, what="the new partitions' records")
        got = rows()
        assert [r for r in got if r[0] == "disc-a"] == want
        b_rows = [r for r in got if r[0] == "disc-b"]
        assert len(b_rows) == 20 and len(set(b_rows)) == 20
        assert len(got) == 38
    finally:
        query.stop()


def test_available_now_respects_max_offsets_per_trigger(spark, kafka, tmp_path):
    create_topic_confluent(kafka.bootstrap, "capped", partitions=2)
    produce_values(kafka, "capped", [b"%d" % i for i in range(500)], partition=0)
    produce_values(kafka, "capped", [b"%d" % i for i in range(500)], partition=1)
    query = started(stream(spark, kafka, subscribe="capped", startingOffsets="earliest",
                           maxOffsetsPerTrigger="300")
                    .writeStream.format("memory").queryName("capped")
                    .option("checkpointLocation", str(tmp_path / "ck"))
                    .trigger(availableNow=True), tmp_path / "ck")
    assert query.awaitTermination(120)
    batches = [p for p in progress(query) if p["numInputRows"] > 0]
    assert [p["numInputRows"] for p in batches] == [300, 300, 300, 100]
    # the source reports the offsets the run aims at (reportLatestOffset) in every batch
    assert {json.dumps(offsets_of(p["sources"][0]["latestOffset"]), sort_keys=True)
            for p in batches} == {json.dumps({"capped": {"0": 500, "1": 500}}, sort_keys=True)}
    assert spark.table("capped").count() == 1000


def test_local_sessions_write_checkpoints_through_hadoops_file_system_api(spark, kafka, tmp_path):
    """brook.spark.local_session picks Spark's FileSystem checkpoint manager (the FileContext
    one forks chmod and readlink for each checkpoint file without Hadoop's native library),
    unless the session names a manager itself; the checkpoints it writes restart a query."""
    from brook.spark import session

    key = "spark.sql.streaming.checkpointFileManagerClass"
    assert spark.conf.get(key).endswith(".FileSystemBasedCheckpointFileManager")
    chosen = spark.conf.get(key)
    try:
        spark.conf.set(key, "com.example.OwnManager")
        session._checkpoint_without_forks(spark)
        assert spark.conf.get(key) == "com.example.OwnManager"
    finally:
        spark.conf.set(key, chosen)

    create_topic_confluent(kafka.bootstrap, "checkpointed", partitions=1)
    produce_values(kafka, "checkpointed", [b"%d" % i for i in range(50)], partition=0)
    ck = tmp_path / "ck"

    def run():
        query = started(stream(spark, kafka, subscribe="checkpointed", startingOffsets="earliest")
                        .writeStream.format("noop")
                        .option("checkpointLocation", str(ck)).trigger(availableNow=True), ck)
        assert query.awaitTermination(120)
        return sum(p["numInputRows"] for p in progress(query))

    assert run() == 50
    assert sorted(f.name for f in (ck / "offsets").iterdir() if not f.name.startswith(".")) == ["0"]
    assert sorted(f.name for f in (ck / "commits").iterdir() if not f.name.startswith(".")) == ["0"]
    produce_values(kafka, "checkpointed", [b"%d" % i for i in range(50, 80)], partition=0)
    assert run() == 30  # resumed from the checkpoint, not from earliest


# ------------------------------------------------------------------------ data loss


def test_fail_on_data_loss_in_streaming_queries(spark, kafka, tmp_path):
    create_topic_confluent(kafka.bootstrap, "expiring", partitions=1,
                           config={"segment.bytes": "2048"})

    def produce(lo, hi):
        producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 0})
        for i in range(lo, hi):
            producer.produce("expiring", value=b"v%04d" % i, partition=0)
            if i % 10 == 9:
                producer.flush(30)
        producer.flush(30)

    def run(fail_on_data_loss):
        query = started(stream(spark, kafka, subscribe="expiring", startingOffsets="earliest",
                               failOnDataLoss=fail_on_data_loss)
                        .selectExpr("offset").writeStream.format("parquet")
                        .option("path", str(tmp_path / "out"))
                        .option("checkpointLocation", str(tmp_path / "ck"))
                        .trigger(availableNow=True))
        try:
            query.awaitTermination(120)
        except Exception:  # the query failed: query.exception() has it
            pass
        return query

    produce(0, 100)
    assert run("true").exception() is None
    produce(100, 300)
    client = admin(kafka)
    for future in client.incremental_alter_configs([ConfigResource("TOPIC", "expiring",
                                                                   incremental_configs=[
        ConfigEntry("retention.bytes", "1", incremental_operation=AlterConfigOpType.SET)])]).values():
        future.result(30)
    wait_for(lambda: end_low(kafka) > 100, what="retention")
    low = end_low(kafka)

    failed = run("true")
    assert failed.exception() is not None
    assert "offsets [100, " in str(failed.exception()) and "failOnDataLoss" in str(
        failed.exception())
    assert run("false").exception() is None
    offsets = sorted(r.offset for r in spark.read.parquet(str(tmp_path / "out")).collect())
    assert offsets == list(range(100)) + list(range(low, 300))


def end_low(kafka) -> int:
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "brook-tests-watermarks"})
    try:
        return c.get_watermark_offsets(TopicPartition("expiring", 0), timeout=10)[0]
    finally:
        c.close()


# ------------------------------------------------------------------------ the streaming sink


def test_streaming_sink_writes_each_micro_batch(spark, kafka, tmp_path):
    create_topic_confluent(kafka.bootstrap, "upper-in", partitions=2)
    create_topic_confluent(kafka.bootstrap, "upper-out", partitions=2)
    produce_values(kafka, "upper-in", [b"word-%d" % i for i in range(400)])
    query = started(stream(spark, kafka, subscribe="upper-in", startingOffsets="earliest",
                           maxOffsetsPerTrigger="100")
                    .selectExpr("key", "upper(cast(value as string)) AS value")
                    .writeStream.format("brook").option("kafka.bootstrap.servers", kafka.bootstrap)
                    .option("topic", "upper-out").option("checkpointLocation", str(tmp_path / "ck"))
                    .trigger(availableNow=True))
    assert query.awaitTermination(120)
    assert len([p for p in progress(query) if p["numInputRows"] > 0]) == 4
    back = (spark.read.format("brook").option("kafka.bootstrap.servers", kafka.bootstrap)
            .option("subscribe", "upper-out").load()
            .selectExpr("cast(key as string) key", "cast(value as string) value").collect())
    assert sorted((r.key, r.value) for r in back) == sorted(
        ("word-%d" % i, "WORD-%d" % i) for i in range(400))
