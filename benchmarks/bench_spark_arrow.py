"""The bulk Arrow reader and the Spark path built on it (brook.spark.read_stream: descriptor
rows, the reading inside mapInArrow), against one direct confluent-kafka reader in a process
of its own, in the same run.

    .venv/bin/python benchmarks/run_all.py bench_spark_arrow
    .venv/bin/python benchmarks/bench_spark_arrow.py          # prints the results only
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_spark import (  # noqa: E402
    PARTITIONS,
    RECORDS,
    RUN_TIMEOUT,
    _Clock,
    _jvm_pid,
    _median,
    fill,
)
from brokers import WORK_ROOT, brook_broker  # noqa: E402

COMMAND = ".venv/bin/python benchmarks/run_all.py bench_spark_arrow"
ROUNDS = 3

TITLE = "Spark through mapInArrow, and the bulk Arrow reader (vs one confluent-kafka reader)"
DESCRIPTION = f"""\
The topic of bench_spark: {RECORDS:,} records, {PARTITIONS} partitions, keys of about 10 bytes,
values of 100 random bytes, LZ4 batches, written once before timing.
- **Direct reader**: a Python process of its own (no Spark in it) with one confluent-kafka
  `Consumer` assigned to every partition (10 MiB per partition and fetch,
  `fetch.queue.backoff.ms=10`), `consume(10,000)` until it has every record, touching each
  message's key, value, offset and timestamp. Timed from `assign()` to the last record.
- **Bulk reader**: a Python process of its own reading the 4 partitions one after the other
  with `brook.client.RangeReader` (Fetch requests of 10 MiB per partition, record batches
  decoded into Arrow batches of the source's columns by `brook.records.arrow`).
- **read_stream**: a Structured Streaming query `brook.spark.read_stream(...)`
  (`startingOffsets=earliest`, `trigger(availableNow=True)`) into Spark's `noop` sink on
  `local[2]`, timed from `start()` to the end of `awaitTermination()` (the query's own start
  included); the notes give the rate over its micro-batches alone.
- **format("brook")**: the same query through the Python data source (which now reads with the
  bulk reader too), for comparison.
- Medians of {ROUNDS} rounds; the sides take turns going first.
"""


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def side_direct(bootstrap: str, topic: str) -> dict:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-direct",
                         "enable.auto.commit": False, "fetch.max.bytes": 52_428_800,
                         "max.partition.fetch.bytes": 10_485_760, "fetch.queue.backoff.ms": 10})
    try:
        consumer.list_topics(topic, timeout=30)
        t, c = time.perf_counter(), _cpu()
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        seen = 0
        deadline = t + RUN_TIMEOUT
        while seen < RECORDS:
            for m in consumer.consume(10_000, 0.5):
                if m.error() is None:
                    m.key(), m.value(), m.offset(), m.timestamp()
                    seen += 1
            if time.perf_counter() > deadline:
                raise RuntimeError(f"the direct reader saw {seen:,} of {RECORDS:,} records")
        return {"seconds": time.perf_counter() - t, "cpu": _cpu() - c, "rows": seen}
    finally:
        consumer.close()


def side_bulk(bootstrap: str, topic: str) -> dict:
    from brook.client import FetchSettings, RangeReader

    t, c = time.perf_counter(), _cpu()
    rows = 0
    with RangeReader(FetchSettings.from_client({"bootstrap.servers": bootstrap})) as reader:
        for p in range(PARTITIONS):
            for batch in reader.read(topic, p, 0, RECORDS // PARTITIONS):
                rows += batch.num_rows
    return {"seconds": time.perf_counter() - t, "cpu": _cpu() - c, "rows": rows}


def in_own_process(side: str, bootstrap: str, topic: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--side", side, bootstrap, topic],
                         capture_output=True, text=True, timeout=RUN_TIMEOUT + 60)
    if out.returncode:
        raise RuntimeError(f"the {side} reader failed: {out.stderr[-2000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if result["rows"] != RECORDS:
        raise RuntimeError(f"the {side} reader read {result['rows']:,} rows")
    return result


_TICK = os.sysconf("SC_CLK_TCK")


def _stat(path: str) -> tuple[str, list[str]]:
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    return text[text.index("(") + 1 : text.rindex(")")], text.rsplit(")", 1)[1].split()


def jvm_threads(pid: int) -> dict[str, float]:
    """CPU seconds of the JVM's threads: its tasks' threads, the JIT compilers, the rest."""
    out = {"tasks": 0.0, "jit": 0.0, "other": 0.0}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            name, fields = _stat(f"/proc/{pid}/task/{tid}/stat")
        except OSError:
            continue
        kind = ("tasks" if name.startswith("Executor task") else
                "jit" if "CompilerThre" in name else "other")
        out[kind] += (int(fields[11]) + int(fields[12])) / _TICK
    return out


def python_workers(jvm: int) -> float:
    """CPU seconds of the Python processes running Spark's tasks (``pyspark.worker``: the
    reading inside mapInArrow, the data source's reads), children of the JVM's daemon."""
    parents, cpu = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            _, fields = _stat(f"/proc/{entry}/stat")
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                command = f.read()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        if b"pyspark.worker" in command and b"pyspark.sql.worker" not in command:
            cpu[int(entry)] = sum(int(x) for x in fields[11:15]) / _TICK

    def under_jvm(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == jvm:
                return True
        return False

    return sum(c for pid, c in cpu.items() if under_jvm(pid))


def spark_query(spark, broker, topic: str, checkpoint: str, bulk: bool) -> dict:
    import brook.spark

    options = {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic,
               "startingOffsets": "earliest"}
    jvm = _jvm_pid(spark)
    clock = _Clock(broker, jvm)
    threads, workers = jvm_threads(jvm), python_workers(jvm)
    clock.start()
    df = (brook.spark.read_stream(spark, options) if bulk
          else spark.readStream.format("brook").options(**options).load())
    query = (df.writeStream.format("noop").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    if not query.awaitTermination(RUN_TIMEOUT):
        query.stop()
        raise RuntimeError("the Spark query did not finish in time")
    progress = [json.loads(p.json) for p in query.recentProgress]
    rows = sum(p["numInputRows"] for p in progress)
    batches = sum(p["durationMs"].get("triggerExecution", 0) for p in progress
                  if p["numInputRows"] > 0) / 1000
    run = clock.stop(rows, batches)
    threads = {k: v - threads[k] for k, v in jvm_threads(jvm).items()}
    workers = python_workers(jvm) - workers
    if rows != RECORDS:  # the progress reports count records, read_stream's too
        raise RuntimeError(f"the Spark query read {rows:,} rows, expected {RECORDS:,}")
    return {"seconds": run.seconds, "batch_seconds": run.batch_seconds, "rows": rows,
            "jvm_cpu": run.jvm_cpu * run.seconds, "broker_cpu": run.broker_cpu * run.seconds,
            "jvm_tasks": threads["tasks"], "jvm_jit": threads["jit"], "workers": workers}


def run() -> list[dict]:
    import brook.spark

    WORK_ROOT.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="spark-arrow-", dir=WORK_ROOT))
    broker = brook_broker(work)
    spark = None
    runs: dict[str, list[dict]] = {"direct": [], "bulk": [], "read_stream": [], "format": []}
    loads = []
    try:
        broker.start()
        topic = "bench-spark-arrow"
        fill(broker, topic)
        spark = brook.spark.local_session("brook-bench-arrow")
        # warm-up: the Python workers, the JVM's code paths, the broker's page cache
        spark_query(spark, broker, topic, str(work / "warmup"), bulk=True)
        counted = brook.spark.read(spark, {"kafka.bootstrap.servers": broker.bootstrap,
                                           "subscribe": topic}).count()
        if counted != RECORDS:  # the streaming side's rows are taken from this check
            raise RuntimeError(f"brook.spark.read returned {counted:,} rows")
        in_own_process("direct", broker.bootstrap, topic)
        for rnd in range(ROUNDS):
            print(f"   round {rnd + 1} of {ROUNDS}", file=sys.stderr, flush=True)
            sides = ["direct", "bulk", "read_stream", "format"]
            if rnd % 2:
                sides.reverse()
            for side in sides:
                if side in ("direct", "bulk"):
                    runs[side].append(in_own_process(side, broker.bootstrap, topic))
                else:
                    runs[side].append(spark_query(spark, broker, topic,
                                                  str(work / f"checkpoint-{side}-{rnd}"),
                                                  bulk=side == "read_stream"))
                loads.append(os.getloadavg()[0])
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    return results(runs, loads)


def _rate(r: dict) -> float:
    return r["rows"] / r["seconds"]


def _batch_rate(r: dict) -> float:
    return r["rows"] / r["batch_seconds"] if r.get("batch_seconds") else 0.0


def _us(r: dict, key: str = "cpu") -> float:
    return r[key] / r["rows"] * 1e6


def results(runs: dict[str, list[dict]], loads: list[float]) -> list[dict]:
    direct = _median([_rate(r) for r in runs["direct"]])

    def rounds(side: str, rate=_rate) -> str:
        return ", ".join(f"{rate(r):,.0f}" for r in runs[side])

    load = (f"load average {min(loads):.1f}-{max(loads):.1f} during the rounds" if loads
            else "")
    stream, fmt = runs["read_stream"], runs["format"]
    notes = (f"{RECORDS:,} rows per run; rounds: direct {rounds('direct')}, bulk reader "
             f"{rounds('bulk')}, read_stream {rounds('read_stream')} (micro-batches alone "
             f"{rounds('read_stream', _batch_rate)}), format brook {rounds('format')} "
             f"(micro-batches alone {rounds('format', _batch_rate)}) rows/s; CPU per row: direct "
             f"{_median([_us(r) for r in runs['direct']]):.2f} µs, bulk reader "
             f"{_median([_us(r) for r in runs['bulk']]):.2f} µs, Spark's JVM "
             f"{_median([_us(r, 'jvm_cpu') for r in stream]):.2f} µs (read_stream) and "
             f"{_median([_us(r, 'jvm_cpu') for r in fmt]):.2f} µs (format brook), of which its "
             f"task threads {_median([_us(r, 'jvm_tasks') for r in stream]):.2f} and "
             f"{_median([_us(r, 'jvm_tasks') for r in fmt]):.2f} µs and its JIT compiler "
             f"threads {_median([_us(r, 'jvm_jit') for r in stream]):.2f} and "
             f"{_median([_us(r, 'jvm_jit') for r in fmt]):.2f} µs (compiling Spark's planning "
             f"code, still warming up after several queries: a cost per query, not per row); "
             f"Spark's Python workers "
             f"{_median([_us(r, 'workers') for r in stream]):.2f} µs (read_stream) and "
             f"{_median([_us(r, 'workers') for r in fmt]):.2f} µs (format brook); a "
             f"read_stream query spent {_median([r['seconds'] - r['batch_seconds'] for r in stream]):.1f} s "
             f"outside its micro-batches (start-up and planning); {load}")
    peer = "confluent-kafka, 1 process"
    return [
        dict(name="bulk reader (brook.client), 1 process, rows/s",
             value=_median([_rate(r) for r in runs["bulk"]]), unit="rows/s", peer=peer,
             peer_value=direct, command=COMMAND, notes=notes),
        dict(name="read_stream into noop, micro-batches alone, rows/s",
             value=_median([_batch_rate(r) for r in stream]), unit="rows/s", peer=peer,
             peer_value=direct, command=COMMAND),
        dict(name="read_stream into noop, end to end, rows/s",
             value=_median([_rate(r) for r in stream]), unit="rows/s", peer=peer,
             peer_value=direct, command=COMMAND),
        dict(name='format("brook") stream into noop, micro-batches alone, rows/s',
             value=_median([_batch_rate(r) for r in fmt]), unit="rows/s", peer=peer,
             peer_value=direct, command=COMMAND),
        dict(name='format("brook") stream into noop, end to end, rows/s',
             value=_median([_rate(r) for r in fmt]), unit="rows/s", peer=peer,
             peer_value=direct, command=COMMAND),
    ]


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--side":
        side = {"direct": side_direct, "bulk": side_bulk}[sys.argv[2]]
        print(json.dumps(side(sys.argv[3], sys.argv[4])))
    else:
        print(f"load average at the start {os.getloadavg()[0]:.1f}", flush=True)
        for r in run():
            ratio = r["value"] / r["peer_value"] if r.get("peer_value") else None
            print(f"{r['name']}: {r['value']:,.0f} {r['unit']} vs {r.get('peer')} "
                  f"{r.get('peer_value') or 0:,.0f}: ratio {ratio:.2f}" if ratio else r)
            if r.get("notes"):
                print("   ", r["notes"])
