"""The Spark sink's cost of exactlyOnce: rows per second of a streaming query copying a topic
to another through format "brook", with and without the option, in the same run.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_spark_sink_eos.py [RECORDS] [PER_TRIGGER]

One brook broker; an input topic of RECORDS records (4 partitions, values of 100 bytes); each
round is a new query with a new checkpoint and a new output topic, `trigger(availableNow=True)`
with `maxOffsetsPerTrigger=PER_TRIGGER` (so RECORDS / PER_TRIGGER micro-batches of 2 tasks each,
on local[2]), timed from start() to the end of awaitTermination(). Rounds alternate the order.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from brokers import brook_broker  # noqa: E402

import brook.spark  # noqa: E402

PARTITIONS = 4
ROUNDS = 3


def copy(spark, bootstrap: str, out: str, checkpoint: str, per_trigger: int,
         exactly_once: bool) -> float:
    query = (spark.readStream.format("brook").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", "bench-in").option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", str(per_trigger)).load()
             .selectExpr("key", "value")
             .writeStream.format("brook").option("kafka.bootstrap.servers", bootstrap)
             .option("topic", out).option("exactlyOnce", str(exactly_once).lower())
             .option("checkpointLocation", checkpoint).trigger(availableNow=True))
    start = time.monotonic()
    q = query.start()
    q.awaitTermination()
    if q.exception() is not None:
        raise RuntimeError(q.exception())
    return time.monotonic() - start


def main(records: int = 200_000, per_trigger: int = 20_000) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-sink-eos-"))
    broker = brook_broker(work, {"num.partitions": str(PARTITIONS),
                                 "group.initial.rebalance.delay.ms": "0"})
    broker.start()
    spark = brook.spark.local_session("bench-sink-eos")
    try:
        broker.create_topic("bench-in", PARTITIONS)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20})
        value = os.urandom(100)
        for i in range(records):
            while True:
                try:
                    producer.produce("bench-in", value, key=b"k%d" % i)
                    break
                except BufferError:
                    producer.poll(0.1)
        producer.flush()
        times: dict[bool, list[float]] = {True: [], False: []}
        load = os.getloadavg()[0]
        for r in range(ROUNDS):
            for eos in ((False, True) if r % 2 == 0 else (True, False)):
                out = f"bench-out-{r}-{eos}"
                broker.create_topic(out, PARTITIONS)
                times[eos].append(copy(spark, broker.bootstrap, out, str(work / f"ck-{r}-{eos}"),
                                       per_trigger, eos))
                print(f"round {r} exactlyOnce={eos}: {records / times[eos][-1]:,.0f} rows/s",
                      flush=True)
        plain, eos = statistics.median(times[False]), statistics.median(times[True])
        print(f"{records:,} records, {records // per_trigger} micro-batches, load average "
              f"{load:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        print(f"at least once: {records / plain:,.0f} rows/s; exactlyOnce: {records / eos:,.0f} "
              f"rows/s ({plain / eos:.2f}x); {(eos - plain) / (records // per_trigger):.2f} s "
              f"more per micro-batch")
    finally:
        spark.stop()
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
