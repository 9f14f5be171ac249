"""A streaming query copying one topic to another with the sink's exactlyOnce, run as its own
process so that a test can kill its driver (SIGKILL to its process group: Python and the JVM).

    python -m tests.spark.eos_driver BOOTSTRAP IN OUT CHECKPOINT MAX_PER_TRIGGER EXACTLY_ONCE EVENTS

It runs with trigger(availableNow=True) and exits 0 once the input is written. Each
micro-batch's driver-side commit appends ``committed-tasks <batch id>`` to the file EVENTS
(Spark takes over the driver's stdout) and then waits a second
before Spark writes ``commits/<batch id>``: the window between the tasks' transactions and the
checkpoint's commit log, made wide enough for a test to kill the driver inside it.
"""

from __future__ import annotations

import sys
import time

import brook.spark
from brook.spark.datasource import BrookDataSource
from brook.spark.sink import BrookStreamWriter

WINDOW_S = 1.0
EVENTS = ""


def event(line: str) -> None:
    with open(EVENTS, "a") as f:
        f.write(line + "\n")


class SlowCommitWriter(BrookStreamWriter):
    def commit(self, messages, batchId):
        super().commit(messages, batchId)
        event(f"committed-tasks {batchId}")
        time.sleep(WINDOW_S)


class SlowCommitSource(BrookDataSource):
    @classmethod
    def name(cls):
        return "brook-slow-commit"

    def streamWriter(self, schema, overwrite):
        writer = super().streamWriter(schema, overwrite)
        return SlowCommitWriter(writer.options)


def main(bootstrap: str, source: str, out: str, checkpoint: str, per_trigger: str,
         exactly_once: str, events: str) -> None:
    global EVENTS
    EVENTS = events
    spark = brook.spark.local_session("brook-eos-driver")
    spark.dataSource.register(SlowCommitSource)
    query = (spark.readStream.format("brook").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", source).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", per_trigger).load()
             .selectExpr("key", "value")
             .writeStream.format("brook-slow-commit")
             .option("kafka.bootstrap.servers", bootstrap).option("topic", out)
             .option("exactlyOnce", exactly_once).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    event("done")
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
