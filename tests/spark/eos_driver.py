"""A streaming query copying one topic to another with the sink's exactlyOnce, run as its own
process so that a test can kill its driver (SIGKILL to its process group: Python and the JVM).

    python -m tests.spark.eos_driver BOOTSTRAP IN OUT CHECKPOINT MAX_PER_TRIGGER EXACTLY_ONCE EVENTS [SLOW_TASKS]

It runs with trigger(availableNow=True) and exits 0 once the input is written. Each
micro-batch's driver-side commit appends ``committed-tasks <batch id>`` to the file EVENTS
(Spark takes over the driver's stdout) and then waits a second
before Spark writes ``commits/<batch id>``: the window between the tasks' transactions and the
checkpoint's commit log, made wide enough for a test to kill the driver inside it.

With SLOW_TASKS=true each write task (in a Python worker) appends ``task-start <pid>``,
``task-txn <pid>`` (its transaction begun, a batch produced), ``task-written <pid>`` (committed)
and ``task-end <pid>`` to EVENTS and waits a little after each, so
that a test can kill the worker before, during and after the task's transaction, as an
executor dies.
"""

from __future__ import annotations

import os
import sys
import time

import brook.spark
from brook.spark.datasource import BrookDataSource
from brook.spark.sink import BrookStreamWriter

WINDOW_S = 1.0
TASK_PAUSE_S = 0.7
EVENTS = ""
SLOW_TASKS = False


def event(line: str, events: str | None = None) -> None:
    with open(events or EVENTS, "a") as f:
        f.write(line + "\n")


class SlowCommitWriter(BrookStreamWriter):
    def __init__(self, options, events: str = "", slow_tasks: bool = False) -> None:
        super().__init__(options)
        self.events = events  # (the workers do not see the driver's globals)
        self.slow_tasks = slow_tasks

    def write(self, iterator):
        if not self.slow_tasks:
            return super().write(iterator)
        event(f"task-start {os.getpid()}", self.events)
        time.sleep(TASK_PAUSE_S)
        message = super().write(self._paused_in_transaction(iterator))
        event(f"task-written {os.getpid()}", self.events)
        time.sleep(TASK_PAUSE_S)
        event(f"task-end {os.getpid()}", self.events)
        return message

    def _paused_in_transaction(self, batches):
        """The task's input, with a pause after its first batch: the sink has begun the
        transaction and produced that batch, and waits for the next one."""
        for i, batch in enumerate(batches):
            yield batch
            if i == 0:
                event(f"task-txn {os.getpid()}", self.events)
                time.sleep(TASK_PAUSE_S)

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
        return SlowCommitWriter(writer.options, EVENTS, SLOW_TASKS)


def main(bootstrap: str, source: str, out: str, checkpoint: str, per_trigger: str,
         exactly_once: str, events: str, slow_tasks: str = "false") -> None:
    global EVENTS, SLOW_TASKS
    EVENTS = events
    SLOW_TASKS = slow_tasks == "true"
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
