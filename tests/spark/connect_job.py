"""brook's pipelines through Spark Connect: a client session of a Spark Connect server, run as a
process of its own (a Connect client keeps no JVM; the test's process may hold a classic
session).

    python -m tests.spark.connect_job SC_URL BROOK_ZIP BOOTSTRAP WORK_DIR

brook reaches the server as Connect clients ship Python code: ``spark.addArtifacts(zip,
pyfile=True)``. Topic ``cin``: batch reads with format brook and brook.spark.read, a batch
write, streaming queries (read_stream and format brook) into the sink with group commits;
prints one JSON line of what it saw.
"""

from __future__ import annotations

import json
import os
import sys

from pyspark.sql import SparkSession


def where_brook_is_imported(spark) -> list[str]:
    def locate(batches):
        import pyarrow as pa

        import brook

        for _ in batches:
            yield pa.RecordBatch.from_pydict({"file": [brook.__file__]})

    return sorted({r.file for r in spark.range(2).mapInArrow(locate, "file string").collect()})


def main(url: str, brook_zip: str, bootstrap: str, work: str) -> None:
    import brook.spark

    spark = SparkSession.builder.remote(url).create()
    spark.addArtifacts(brook_zip, pyfile=True)
    brook.spark.register(spark)
    kafka = {"kafka.bootstrap.servers": bootstrap}
    out: dict = {"session": type(spark).__module__, "brook_files": where_brook_is_imported(spark)}
    fmt = spark.read.format("brook").options(**kafka, subscribe="cin").load()
    out["batch_format_rows"] = fmt.count()
    out["batch_read_rows"] = brook.spark.read(spark, {**kafka, "subscribe": "cin"}).count()
    (fmt.selectExpr("key", "value").write.format("brook").options(**kafka)
     .option("topic", "connect-batch-out").mode("append").save())
    queries = {
        "connect-stream-out": brook.spark.read_stream(spark, {
            **kafka, "subscribe": "cin", "startingOffsets": "earliest",
            "maxOffsetsPerTrigger": "700", "group.id": "connect-read-stream"}),
        "connect-format-out": (spark.readStream.format("brook").options(**kafka, subscribe="cin")
                               .option("startingOffsets", "earliest")
                               .option("maxOffsetsPerTrigger", "700")
                               .option("group.id", "connect-format").load()),
    }
    for topic, df in queries.items():
        query = (df.selectExpr("key", "value").writeStream.format("brook").options(**kafka)
                 .option("topic", topic)
                 .option("checkpointLocation", os.path.join(work, f"checkpoint-{topic}"))
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        progress = [p for p in query.recentProgress if p.numInputRows]
        out[f"{topic}_input_rows"] = [p.numInputRows for p in progress]
        out[f"{topic}_lag"] = [brook.spark.offsets_behind_latest(p.sources[0])
                               for p in progress]
    spark.stop()
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
