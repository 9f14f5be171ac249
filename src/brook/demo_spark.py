"""The Spark part of `make demo`: a Structured Streaming pipeline on brook topics.

Starts a brook broker on a free port with a temporary data dir, produces a stream of page
views (user, URL, event time) while a PySpark query counts views per URL per minute of event
time, with ``group.id`` set so that the broker sees the query's progress as a consumer group.
Each micro-batch's updated counts go to a compacted brook topic and to a Parquet directory.
The demo prints the group's lag as the query catches up (it falls to zero) and what
`brook groups describe` says of the group, then reads the counts back from the topic, checks
them against what was produced, and stops everything.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

URLS = ["/", "/pricing", "/docs", "/blog", "/signup", "/login"]
VIEWS = "page-views"
COUNTS = "page-view-counts"
GROUP = "page-view-counts"
EVENTS = 40_000
MINUTE_MS = 60_000


def say(text: str) -> None:
    print(f"\n== {text}", flush=True)


class Broker:
    """A ``brook broker`` process on a free port and its own data dir."""

    def __init__(self, data_dir: str) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.log_path = os.path.join(data_dir, "broker.log")
        self.cmd = [sys.executable, "-m", "brook", "broker",
                    "--override", f"listeners=PLAINTEXT://{self.bootstrap}",
                    "--override", f"log.dirs={data_dir}/logs",
                    "--override", "offsets.topic.num.partitions=4",
                    "--override", "group.initial.rebalance.delay.ms=0"]
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=log,
                                         stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the broker exited:\n{open(self.log_path).read()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("the broker did not start within 30 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)


class PageViews(threading.Thread):
    """Produces ``EVENTS`` page views over a few seconds; their event time spans 5 minutes."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.counts: dict[tuple[str, int], int] = {}  # (url, minute start ms) -> views
        self.errors: list[str] = []

    def run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 20,
                             "compression.type": "lz4", "log_level": 2})
        rng = random.Random(5)
        start = (int(time.time() * 1000) // MINUTE_MS - 10) * MINUTE_MS
        for i in range(EVENTS):
            user = f"user-{rng.randrange(1000)}"
            url = rng.choices(URLS, weights=[8, 3, 5, 2, 1, 4])[0]
            ts = start + i * 5 * MINUTE_MS // EVENTS
            minute = ts - ts % MINUTE_MS
            self.counts[(url, minute)] = self.counts.get((url, minute), 0) + 1
            event = json.dumps({"user": user, "url": url}).encode()
            while True:
                try:
                    producer.produce(VIEWS, key=user.encode(), value=event, timestamp=ts,
                                     on_delivery=self._delivered)
                    break
                except BufferError:
                    producer.poll(0.05)
            if i % 1000 == 999:
                producer.poll(0)
                time.sleep(0.15)
        producer.flush(60)

    def _delivered(self, error, message) -> None:
        if error is not None:
            self.errors.append(str(error))


@contextlib.contextmanager
def quiet_stderr():
    """Send this process's stderr (which Spark's Python workers share) to /dev/null."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "wb") as null:
        os.dup2(null.fileno(), 2)
    try:
        yield
    finally:
        time.sleep(0.5)  # the worker prints as it exits, just after stop() returns
        os.dup2(saved, 2)
        os.close(saved)


def group_lag(admin, partitions: int) -> tuple[int, int]:
    """(records the group is behind, records in the topic)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    tps = [TopicPartition(VIEWS, p) for p in range(partitions)]
    ends = {tp.partition: f.result().offset
            for tp, f in admin.list_offsets({tp: OffsetSpec.latest() for tp in tps}).items()}
    result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(GROUP, tps)])[
        GROUP].result()
    committed = {tp.partition: max(tp.offset, 0) for tp in result.topic_partitions}
    return sum(ends[p] - committed.get(p, 0) for p in ends), sum(ends.values())


def run() -> None:
    started = time.perf_counter()
    data_dir = tempfile.mkdtemp(prefix="brook-spark-demo-")
    broker = Broker(data_dir)
    spark = None
    try:
        say(f"a brook broker on {data_dir}")
        broker.start()
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 2})
        for future in admin.create_topics([
                NewTopic(VIEWS, 4, 1),
                NewTopic(COUNTS, 2, 1, config={"cleanup.policy": "compact"})]).values():
            future.result(30)
        print(f"  listening on {broker.bootstrap}; topics {VIEWS} (4 partitions) and {COUNTS} "
              f"(compacted)")

        say("Spark (local[2]) with format \"brook\"")
        from pyspark.sql import functions as F

        import brook.spark

        spark = brook.spark.local_session("brook-demo")
        print(f"  Spark {spark.version}")
        views = PageViews(broker.bootstrap)
        views.start()

        out = os.path.join(data_dir, "page-view-counts.parquet")
        say(f"a streaming query counts views per URL per minute -> topic {COUNTS} and {out}")
        events = (spark.readStream.format("brook")
                  .option("kafka.bootstrap.servers", broker.bootstrap)
                  .option("subscribe", VIEWS)
                  .option("startingOffsets", "earliest")
                  .option("maxOffsetsPerTrigger", "10000")
                  .option("group.id", GROUP)
                  .load())
        counts = (events
                  .select(F.get_json_object(F.col("value").cast("string"), "$.url").alias("url"),
                          "timestamp")
                  .groupBy(F.window("timestamp", "1 minute"), "url").count())

        def write_batch(batch, batch_id: int) -> None:
            minute = F.unix_millis(F.col("window.start"))
            rows = batch.select(
                F.concat_ws(" ", "url", minute.cast("string")).alias("key"),
                F.to_json(F.struct("url", minute.alias("minute"),
                                   F.col("count").alias("views"))).alias("value"),
                "url", F.col("window.start").alias("minute"), F.col("count").alias("views"),
                F.lit(batch_id).alias("batch")).cache()
            (rows.select("key", "value").write.format("brook").mode("append")
             .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", COUNTS).save())
            rows.drop("key", "value").write.mode("append").parquet(out)
            rows.unpersist()

        query = (counts.writeStream.outputMode("update").foreachBatch(write_batch)
                 .option("checkpointLocation", os.path.join(data_dir, "checkpoint")).start())

        say(f"the lag of consumer group {GROUP!r} on the broker, when it changes")
        t0 = time.monotonic()
        shown = None
        while True:
            time.sleep(0.5)
            if query.exception() is not None:
                raise RuntimeError(f"the query failed: {query.exception()}")
            lag, total = group_lag(admin, 4)
            batches = (query.lastProgress or {}).get("batchId", -1) + 1
            if (lag, total) != shown:
                print(f"  {time.monotonic() - t0:5.1f} s  {total:6,d} records in {VIEWS}, "
                      f"lag {lag:6,d}  ({batches} micro-batches done)", flush=True)
                shown = (lag, total)
            if lag == 0 and total == EVENTS and not views.is_alive():
                break
            if time.monotonic() - t0 > 150:
                raise RuntimeError("the query did not catch up within 150 s")
        with quiet_stderr():  # Spark's source runner prints a traceback when it is stopped
            query.stop()
        if views.errors:
            raise RuntimeError(f"{len(views.errors)} page views were not delivered")
        print(f"  lag 0: the group's committed offsets are the end of {VIEWS}")
        describe = subprocess.run([sys.executable, "-m", "brook", "groups", "describe", GROUP,
                                   "--bootstrap-server", broker.bootstrap],
                                  capture_output=True, text=True, timeout=60)
        print(f"  $ brook groups describe {GROUP}")
        for line in (describe.stdout or describe.stderr).splitlines():
            print(f"  {line}")

        say(f"the counts, read back from {COUNTS} (the latest value per key)")
        latest = (spark.read.format("brook").option("kafka.bootstrap.servers", broker.bootstrap)
                  .option("subscribe", COUNTS).load()
                  .selectExpr("cast(key AS string) AS key", "offset", "partition",
                              "cast(value AS string) AS value"))
        newest = latest.groupBy("key").agg(F.max(F.struct("offset", "value")).alias("last"))
        result = {}
        for row in newest.collect():
            record = json.loads(row["last"]["value"])
            result[(record["url"], record["minute"])] = record["views"]
        for (url, minute), n in sorted(result.items(), key=lambda kv: (kv[0][1], -kv[1]))[:8]:
            print(f"  {time.strftime('%H:%M', time.gmtime(minute / 1000))} UTC  {url:9s} "
                  f"{n:6,d} views")
        same = result == views.counts
        print(f"  {len(result)} (URL, minute) counts, {sum(result.values()):,} views in all; "
              f"equal to what was produced: {'yes' if same else 'NO'}")
        if not same:
            raise RuntimeError("the counts read back differ from the page views produced")

        parquet = spark.read.parquet(out)
        print(f"  {out}: {parquet.count()} rows of updates from "
              f"{parquet.select('batch').distinct().count()} micro-batches")
        say(f"stopped; Spark demo finished in {time.perf_counter() - started:.1f} s")
    finally:
        if spark is not None:
            for q in spark.streams.active:
                q.stop()
            spark.stop()
        broker.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


def main() -> None:
    run()


if __name__ == "__main__":
    main()
