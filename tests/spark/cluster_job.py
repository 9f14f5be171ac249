"""brook's Spark pipelines as an application of a Spark standalone cluster: run as a process of
its own (the driver), with brook shipped to the executors as a zip in ``spark.submit.pyFiles``.

    python -m tests.spark.cluster_job MASTER_URL BROOK_ZIP BOOTSTRAP WORK_DIR JOB [ARGS...]

JOB ``pipelines`` (topic ``in``, ``pipelines()``): batch reads with format brook and
brook.spark.read, a batch write, streaming queries (read_stream and format brook) into the sink
with group commits, each ``trigger(availableNow=True)``; prints one JSON line of what it saw.
JOB ``copy IN OUT CHECKPOINT PER_TRIGGER EVENTS``: a read_stream query copying IN to OUT with
the sink's exactlyOnce and group ``copy``, each task appending ``task <pid> <batch> <partition> <attempt> <executor id>`` to
the file EVENTS and then reading slowly, so that a test can kill its executor mid-batch.
"""

from __future__ import annotations

import json
import os
import sys
import time

from pyspark.sql import SparkSession


def session(master: str, brook_zip: str, app: str) -> SparkSession:
    # The Python that runs the tasks' functions, on the driver and on executors (the path must
    # exist on the executors' machines: here, the same machine).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master(master).appName(app)
             # how executors import brook: the zip, added to their Python workers' path
             .config("spark.submit.pyFiles", brook_zip)
             .config("spark.executor.memory", "512m")
             .config("spark.executor.cores", "1")
             .config("spark.cores.max", "2")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.python.authenticate.socketTimeout", "120s")
             .config("spark.task.maxFailures", "4")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    # wait for both executors (one core each), so that the tasks spread over both workers
    deadline = time.monotonic() + 120
    while (spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() < 3
           and time.monotonic() < deadline):
        time.sleep(0.2)
    return spark


def where_brook_is_imported(spark: SparkSession) -> list[str]:
    """Where the tasks' Python workers import brook from (mapInArrow: classic and Connect)."""
    def locate(batches):
        import pyarrow as pa

        import brook

        for _ in batches:
            yield pa.RecordBatch.from_pydict({"file": [brook.__file__]})

    return sorted({r.file for r in spark.range(0, 4, 1, 4).mapInArrow(locate, "file string")
                   .collect()})


def pipelines(spark: SparkSession, bootstrap: str, work: str, source: str = "in",
              prefix: str = "") -> dict:
    """Batch reads of ``source`` (format brook, brook.spark.read), a batch write to
    ``{prefix}batch-out``, and streaming queries (read_stream, format brook) into the sink
    (``{prefix}stream-out``, ``{prefix}format-out``) with groups ``{prefix}read-stream`` and
    ``{prefix}format``: what each saw, and where the tasks imported brook from."""
    import brook.spark

    brook.spark.register(spark)
    kafka = {"kafka.bootstrap.servers": bootstrap}
    out: dict = {"brook_files": where_brook_is_imported(spark)}
    # batch reads
    fmt = spark.read.format("brook").options(**kafka, subscribe=source).load()
    out["batch_format_rows"] = fmt.count()
    bulk = brook.spark.read(spark, {**kafka, "subscribe": source})
    out["batch_read_rows"] = bulk.count()
    out["batch_read_distinct"] = bulk.select("partition", "offset").distinct().count()
    # a batch write
    (fmt.selectExpr("key", "value").write.format("brook").options(**kafka)
     .option("topic", f"{prefix}batch-out").mode("append").save())
    # streaming: read_stream and format brook, into the sink, with group commits
    reading = {**kafka, "subscribe": source, "startingOffsets": "earliest",
               "maxOffsetsPerTrigger": "700"}
    queries = {
        "stream-out": brook.spark.read_stream(spark, {**reading,
                                                      "group.id": f"{prefix}read-stream"}),
        "format-out": (spark.readStream.format("brook").options(**reading)
                       .option("group.id", f"{prefix}format").load()),
    }
    for name, df in queries.items():
        query = (df.selectExpr("key", "value").writeStream.format("brook").options(**kafka)
                 .option("topic", prefix + name)
                 .option("checkpointLocation", os.path.join(work, f"checkpoint-{name}"))
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        progress = [p for p in query.recentProgress if p.numInputRows]
        out[f"{name}_input_rows"] = [p.numInputRows for p in progress]
        out[f"{name}_lag"] = [brook.spark.offsets_behind_latest(p.sources[0]) for p in progress]
    return out


def executor_id() -> str:
    """The id of the executor JVM this Python worker runs under (from its command line)."""
    pid = os.getpid()
    while pid > 1:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().split(b"\0")
        if b"--executor-id" in args:
            return args[args.index(b"--executor-id") + 1].decode()
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    return "?"


class SlowReads:
    """mapInArrow's function for ``copy``: the rows as they are, each task's start recorded and
    its batches slowed down, so that a test can kill the executor while the task runs."""

    def __init__(self, events: str) -> None:
        self.events = events

    def __call__(self, batches):
        from pyspark import TaskContext

        ctx = TaskContext.get()
        with open(self.events, "a") as f:
            f.write(f"task {os.getpid()} {ctx.getLocalProperty('streaming.sql.batchId')} "
                    f"{ctx.partitionId()} {ctx.attemptNumber()} {executor_id()}\n")
        for batch in batches:
            time.sleep(0.5)
            yield batch


def copy(spark: SparkSession, bootstrap: str, work: str, source: str, target: str,
         checkpoint: str, per_trigger: str, events: str) -> dict:
    import brook.spark
    from brook.spark.schema import spark_schema

    brook.spark.register(spark)
    kafka = {"kafka.bootstrap.servers": bootstrap}
    df = brook.spark.read_stream(spark, {**kafka, "subscribe": source,
                                         "startingOffsets": "earliest",
                                         "maxOffsetsPerTrigger": per_trigger,
                                         "group.id": "copy"})
    query = (df.mapInArrow(SlowReads(events), spark_schema(False))
             .selectExpr("key", "value").writeStream.format("brook").options(**kafka)
             .option("topic", target).option("exactlyOnce", "true")
             .option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    return {"input_rows": [p.numInputRows for p in query.recentProgress if p.numInputRows]}


def main(master: str, brook_zip: str, bootstrap: str, work: str, job: str, *args: str) -> None:
    spark = session(master, brook_zip, f"brook-{job}")
    try:
        if job == "pipelines":
            result = pipelines(spark, bootstrap, work, prefix="cluster-")
            result["executors"] = (spark.sparkContext._jsc.sc().getExecutorMemoryStatus()
                                   .size() - 1)
        else:
            result = copy(spark, bootstrap, work, *args)
    finally:
        spark.stop()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
