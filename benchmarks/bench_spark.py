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
  driver), and the rest of the machine (Spark's JVM and Python workers on the Spark side).
"""


@dataclass
class Run:
    seconds: float
    rows: int
    broker_cpu: float
    own_cpu: float
    other_cpu: float
    batch_seconds: float = 0.0  # Spark: the micro-batches alone


class _Clock:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def start(self) -> None:
        self.b, self.c, self.m = self.broker.cpu(), own_cpu_seconds(), machine_busy_seconds()
        self.t = time.perf_counter()

    def stop(self, rows: int, batch_seconds: float = 0.0) -> Run:
        elapsed = time.perf_counter() - self.t
        b, c = self.broker.cpu() - self.b, own_cpu_seconds() - self.c
        m = machine_busy_seconds() - self.m
        return Run(elapsed, rows, b / elapsed, c / elapsed, max(0.0, m - b - c) / elapsed,
                   batch_seconds)


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


def spark_query(spark, broker: Broker, topic: str, checkpoint: str) -> Run:
    import json

    clock = _Clock(broker)
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


def run() -> list[dict]:
    import brook.spark

    WORK_ROOT.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="spark-", dir=WORK_ROOT))
    broker = brook_broker(work)
    spark = None
    runs: dict[str, list[Run]] = {"spark": [], "direct": []}
    try:
        broker.start()
        topic = "bench-spark"
        fill(broker, topic)
        spark = brook.spark.local_session("brook-bench")
        # warm-up: the Python workers, the JVM's code paths, the broker's page cache
        spark_query(spark, broker, topic, str(work / "warmup"))
        direct(broker, topic)
        for rnd in range(ROUNDS):
            print(f"   round {rnd + 1} of {ROUNDS}", file=sys.stderr, flush=True)
            sides = ["spark", "direct"] if rnd % 2 == 0 else ["direct", "spark"]
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
    spark, direct_runs = runs["spark"], runs["direct"]
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
             f"{cpu(direct_runs, 'reader', 'rest of the machine')}; load average at the end "
             f"{os.getloadavg()[0]:.1f}")
    return [
        dict(name="streaming source into noop, rows/s", value=_median(rate_s), unit="rows/s",
             peer="confluent-kafka, 1 process", peer_value=_median(rate_d), command=COMMAND,
             notes=notes),
        dict(name="streaming source, micro-batches alone, rows/s", value=_median(rate_batches),
             unit="rows/s", peer="confluent-kafka, 1 process", peer_value=_median(rate_d),
             command=COMMAND),
    ]


if __name__ == "__main__":
    for r in run():
        print(r)
