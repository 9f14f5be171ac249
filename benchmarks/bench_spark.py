"""The Spark source's throughput: rows per second through a streaming query of format "brook"
into Spark's no-op sink, against one Python process reading the same topic with
confluent-kafka, in the same run.

    .venv/bin/python benchmarks/run_all.py bench_spark
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent))
from brokers import (  # noqa: E402
    WORK_ROOT,
    process_cpu_seconds,
    Broker,
    brook_broker,
    machine_busy_seconds,
    own_cpu_seconds,
)

COMMAND = ".venv/bin/python benchmarks/run_all.py bench_spark"
RECORDS = 1_000_000
PARTITIONS = 4
VALUE_BYTES = 100
ROUNDS = 3
RUN_TIMEOUT = 300.0
FREE_BATCH_ROWS = 10_000
FREE_ROWS = RECORDS // (PARTITIONS * FREE_BATCH_ROWS) * PARTITIONS * FREE_BATCH_ROWS

TITLE = "Spark source throughput (streaming query vs one confluent-kafka reader)"
DESCRIPTION = f"""\
One brook broker holds a topic of {RECORDS:,} records ({PARTITIONS} partitions, keys of about 10
bytes, values of {VALUE_BYTES} random bytes, LZ4 batches), written once before timing.
- **Spark**: a Structured Streaming query, `format("brook")` with `startingOffsets=earliest`,
  `trigger(availableNow=True)`, into Spark's `noop` sink, on `local[2]` (the session is started
  once, before the rounds; every round is a new query with a new checkpoint). Timed from
  `start()` to the end of `awaitTermination()`, so the query's own start (the Python process
  that plans it, the first planning) is included; the notes also give the rate over the
  micro-batches alone (their `triggerExecution` times). The source splits each partition's
  range into input partitions of at most 250,000 records (the default `maxRecordsPerPartition`),
  read by 2 tasks at a time into Arrow record batches with all the source's columns.
- **Direct reader**: one Python process with a confluent-kafka `Consumer` assigned to every
  partition from the beginning, with the fetch settings of the source's readers (10 MiB per
  partition, `fetch.queue.backoff.ms=10`: with librdkafka's default of 1 s, a consumer that
  has 100,000 messages queued stops fetching for a second, which halves the rate of either
  side), `consume(10,000)` in a loop until it has every record, touching
  each message's key, value, offset and timestamp (what a row of the source holds). Timed from
  `assign()` to the last record.
- Rounds alternate which side goes first; the table gives medians of {ROUNDS} rounds. CPU use is
  per second of run (100 % is one core): the broker, this process (the direct reader, or Spark's
  driver), and the rest of the machine (Spark's JVM and Python workers on the Spark side);
  CPU per row splits the Spark side into its JVM and the rest of the machine (Spark's Python
  processes: the query's planning process and the readers; and the kernel's own time).
- **Spark alone** (informational): the same session runs a batch query into `noop` from a
  source whose reads only hand over a prebuilt Arrow batch (4 input partitions yielding one
  batch of 10,000 rows of the same columns and sizes again and again, {FREE_ROWS:,} rows in
  all): what the JVM costs per row whatever the source, and how fast Spark goes on these cores
  when reading costs next to nothing. With a real source both cores also run the reading: if
  the tasks read as cheaply as the direct reader, its CPU per row plus Spark's JVM CPU per row
  is what two cores must cover for Spark to keep up with it (the notes give that ceiling).
"""


@dataclass
class Run:
    seconds: float
    rows: int
    broker_cpu: float
    own_cpu: float
    other_cpu: float
    batch_seconds: float = 0.0  # Spark: the micro-batches alone
    jvm_cpu: float = 0.0  # Spark: its JVM's share of other_cpu

    def us_per_row(self, cpu_share: float) -> float:
        return cpu_share * self.seconds / self.rows * 1e6


class _Clock:
    def __init__(self, broker: Broker, jvm_pid: int | None = None) -> None:
        self.broker = broker
        self.jvm_pid = jvm_pid

    def _jvm(self) -> float:
        return process_cpu_seconds(self.jvm_pid) if self.jvm_pid else 0.0

    def start(self) -> None:
        self.b, self.c, self.m = self.broker.cpu(), own_cpu_seconds(), machine_busy_seconds()
        self.j = self._jvm()
        self.t = time.perf_counter()

    def stop(self, rows: int, batch_seconds: float = 0.0) -> Run:
        elapsed = time.perf_counter() - self.t
        b, c = self.broker.cpu() - self.b, own_cpu_seconds() - self.c
        m, j = machine_busy_seconds() - self.m, self._jvm() - self.j
        return Run(elapsed, rows, b / elapsed, c / elapsed, max(0.0, m - b - c) / elapsed,
                   batch_seconds, j / elapsed)


def fill(broker: Broker, topic: str) -> None:
    broker.create_topic(topic, PARTITIONS)
    broker.topics.remove(topic)  # kept for every round
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50,
                         "batch.size": 1_000_000, "compression.type": "lz4",
                         "queue.buffering.max.messages": 1_000_000})
    pool = [os.urandom(VALUE_BYTES) for _ in range(1024)]
    for i in range(RECORDS):
        while True:
            try:
                producer.produce(topic, pool[i % 1024], b"key-%d" % i, i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(RUN_TIMEOUT):
        raise RuntimeError("the topic could not be filled")


def direct(broker: Broker, topic: str) -> Run:
    # The fetch settings the source's readers use, so that both sides fetch alike.
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "bench-direct",
                         "enable.auto.commit": False, "fetch.max.bytes": 52_428_800,
                         "max.partition.fetch.bytes": 10_485_760,
                         "fetch.queue.backoff.ms": 10})
    try:
        consumer.list_topics(topic, timeout=30)
        clock = _Clock(broker)
        clock.start()
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        seen = 0
        deadline = time.perf_counter() + RUN_TIMEOUT
        while seen < RECORDS:
            for m in consumer.consume(10_000, 0.5):
                if m.error() is None:
                    m.key(), m.value(), m.offset(), m.timestamp()
                    seen += 1
            if time.perf_counter() > deadline:
                raise RuntimeError(f"the direct reader saw {seen:,} of {RECORDS:,} records")
        return clock.stop(seen)
    finally:
        consumer.close()


def _jvm_pid(spark) -> int:
    return int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())


def spark_query(spark, broker: Broker, topic: str, checkpoint: str) -> Run:
    import json

    clock = _Clock(broker, _jvm_pid(spark))
    clock.start()
    query = (spark.readStream.format("brook").option("kafka.bootstrap.servers", broker.bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest").load()
             .writeStream.format("noop").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    if not query.awaitTermination(RUN_TIMEOUT):
        query.stop()
        raise RuntimeError("the Spark query did not finish in time")
    progress = [json.loads(p.json) for p in query.recentProgress]
    rows = sum(p["numInputRows"] for p in progress)
    batches = sum(p["durationMs"].get("triggerExecution", 0) for p in progress
                  if p["numInputRows"] > 0) / 1000
    run = clock.stop(rows, batches)
    if rows != RECORDS:
        raise RuntimeError(f"the Spark query read {rows:,} rows, expected {RECORDS:,}")
    return run


def free_source(spark):
    """Register format "bench-free": reads that only hand over a prebuilt batch, rows of the
    source's shape."""
    from pyspark import cloudpickle
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from brook.spark.schema import spark_schema

    # Spark's Python processes cannot import this module: send its classes by value.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])

    class Share(InputPartition):
        def __init__(self, rows: int) -> None:
            self.rows = rows

    class Reader(DataSourceReader):
        def partitions(self):
            return [Share(FREE_ROWS // PARTITIONS) for _ in range(PARTITIONS)]

        def read(self, share):
            batch = _free_batch(FREE_BATCH_ROWS)
            for _ in range(share.rows // batch.num_rows):
                yield batch

    class Free(DataSource):
        @classmethod
        def name(cls) -> str:
            return "bench-free"

        def schema(self):
            return spark_schema(False)

        def reader(self, schema):
            return Reader()

    spark.dataSource.register(Free)


def _free_batch(n: int):
    import pyarrow as pa

    from brook.spark.schema import arrow_schema

    schema = arrow_schema(False)
    value = os.urandom(VALUE_BYTES)
    return pa.RecordBatch.from_arrays([
        pa.array([b"key-%d" % i for i in range(n)], pa.binary()),
        pa.array([value] * n, pa.binary()),
        pa.array(["bench-spark"] * n, pa.string()),
        pa.array([0] * n, pa.int32()),
        pa.array(range(n), pa.int64()),
        pa.array([1_700_000_000_000_000 + i for i in range(n)], pa.int64()).cast(
            schema.field("timestamp").type),
        pa.array([0] * n, pa.int32()),
    ], schema=schema)


def runner_start_cpu() -> float:
    """CPU seconds of a new Python process importing what the Python process Spark starts for
    every streaming query (its streaming-source runner) imports, with the PYTHONPATH Spark
    gives it: pyspark from its zip file, which Python compiles anew every time."""
    import resource
    import subprocess

    import pyspark

    lib = Path(pyspark.__file__).parent / "python" / "lib"
    path = os.pathsep.join(str(p) for p in sorted(lib.glob("*.zip")))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", "import pyspark.sql.streaming."
                    "python_streaming_source_runner, brook.spark.datasource"],
                   env={**os.environ, "PYTHONPATH": path}, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def spark_free(spark, broker: Broker) -> Run:
    clock = _Clock(broker, _jvm_pid(spark))
    clock.start()
    spark.read.format("bench-free").load().write.format("noop").mode("overwrite").save()
    return clock.stop(FREE_ROWS)


def run() -> list[dict]:
    import brook.spark

    WORK_ROOT.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="spark-", dir=WORK_ROOT))
    broker = brook_broker(work)
    spark = None
    runs: dict[str, list[Run]] = {"spark": [], "direct": [], "free": []}
    try:
        broker.start()
        topic = "bench-spark"
        fill(broker, topic)
        spark = brook.spark.local_session("brook-bench")
        free_source(spark)
        # warm-up: the Python workers, the JVM's code paths, the broker's page cache
        spark_query(spark, broker, topic, str(work / "warmup"))
        spark_free(spark, broker)
        direct(broker, topic)
        for rnd in range(ROUNDS):
            print(f"   round {rnd + 1} of {ROUNDS}", file=sys.stderr, flush=True)
            sides = ["spark", "direct"] if rnd % 2 == 0 else ["direct", "spark"]
            runs["free"].append(spark_free(spark, broker))
            for side in sides:
                if side == "spark":
                    runs["spark"].append(spark_query(spark, broker, topic,
                                                     str(work / f"checkpoint-{rnd}")))
                else:
                    runs["direct"].append(direct(broker, topic))
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    return results(runs)


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2]


def results(runs: dict[str, list[Run]]) -> list[dict]:
    spark, direct_runs, free = runs["spark"], runs["direct"], runs["free"]
    rate_s = [r.rows / r.seconds for r in spark]
    rate_d = [r.rows / r.seconds for r in direct_runs]
    rate_batches = [r.rows / r.batch_seconds for r in spark if r.batch_seconds]

    def cpu(rs: list[Run], own: str, other: str) -> str:
        return (f"broker {_median([r.broker_cpu for r in rs]):.0%}, {own} "
                f"{_median([r.own_cpu for r in rs]):.0%}, {other} "
                f"{_median([r.other_cpu for r in rs]):.0%}")

    notes = (f"{RECORDS:,} rows per run; rounds Spark {', '.join(f'{x:,.0f}' for x in rate_s)}, "
             f"direct {', '.join(f'{x:,.0f}' for x in rate_d)} rows/s; Spark over its "
             f"micro-batches alone {', '.join(f'{x:,.0f}' for x in rate_batches)} rows/s; "
             f"a query took {_median([r.seconds for r in spark]):.1f} s end to end, "
             f"{_median([r.seconds - r.batch_seconds for r in spark]):.1f} s of it outside its "
             f"micro-batches; CPU per second of run, Spark side: "
             f"{cpu(spark, 'driver', 'Spark JVM, workers and the rest')}; direct side: "
             f"{cpu(direct_runs, 'reader', 'rest of the machine')}; CPU per row: Spark side "
             f"JVM {_median([r.us_per_row(r.jvm_cpu) for r in spark]):.2f} µs, the rest "
             f"(Python processes, kernel) "
             f"{_median([r.us_per_row(max(0.0, r.other_cpu - r.jvm_cpu)) for r in spark]):.2f} "
             f"µs; direct reader {_median([r.us_per_row(r.own_cpu) for r in direct_runs]):.2f} "
             f"µs; each query starts a Python process of Spark's (its streaming-source runner, "
             f"which plans the query with brook's reader): its imports alone take "
             f"{runner_start_cpu():.2f} s CPU, pyspark being compiled from its zip file every "
             f"time; load average at the end {os.getloadavg()[0]:.1f}")
    jvm_free = _median([r.us_per_row(r.jvm_cpu) for r in free])
    direct_row = _median([r.us_per_row(r.own_cpu) for r in direct_runs])
    free_notes = (f"rounds {', '.join(f'{r.rows / r.seconds:,.0f}' for r in free)} "
                  f"rows/s; Spark's JVM {jvm_free:.2f} µs CPU per row with a free source; "
                  f"if the tasks read as cheaply as the direct reader ({direct_row:.2f} µs per "
                  f"row), two cores cover at most {2 / (jvm_free + direct_row) * 1e6:,.0f} "
                  f"rows/s; the direct reader's own rate is {_median(rate_d):,.0f} rows/s")
    return [
        dict(name="streaming source into noop, rows/s", value=_median(rate_s), unit="rows/s",
             peer="confluent-kafka, 1 process", peer_value=_median(rate_d), command=COMMAND,
             notes=notes),
        dict(name="streaming source, micro-batches alone, rows/s", value=_median(rate_batches),
             unit="rows/s", peer="confluent-kafka, 1 process", peer_value=_median(rate_d),
             command=COMMAND),
        # No brook code in this row: no peer, no ratio.
        dict(name="Spark alone: prebuilt Arrow batches, batch query into noop (informational)",
             value=_median([r.rows / r.seconds for r in free]), unit="rows/s", command=COMMAND,
             notes=free_notes),
    ]


if __name__ == "__main__":
    for r in run():
        print(r)
