"""A local SparkSession for brook pipelines, tests, the demo and benchmarks.

Spark runs Python workers for the data source in separate processes: they must use an
interpreter that can import brook, so ``PYSPARK_PYTHON`` (and the driver's) default to the
interpreter running this code.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession


def local_session(app_name: str = "brook", cores: int = 2, *,
                  config: dict[str, str] | None = None) -> SparkSession:
    """A local session of ``cores`` cores, quiet, without the web UI, with format "brook"
    registered.

    An existing session is reused (Spark allows one per process)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # local[cores, 3]: a failed task is tried three times, as on a cluster (plain local mode
    # never retries), so one Python worker that starts too slowly does not fail a job.
    builder = (SparkSession.builder.master(f"local[{cores},3]").appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", str(cores))
               .config("spark.default.parallelism", str(cores))
               .config("spark.sql.session.timeZone", "UTC")
               # Python workers connecting back to the JVM: 15 s by default is too short on a
               # small machine that is busy with other work.
               .config("spark.python.authenticate.socketTimeout", "120s"))
    for key, value in (config or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    _checkpoint_without_forks(spark)
    from .datasource import BrookDataSource  # (the package's register(), which imports us)

    spark.dataSource.register(BrookDataSource)
    return spark


#: Spark's checkpoint file manager on Hadoop's FileSystem API (its older package name second).
_FILE_SYSTEM_MANAGERS = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
    "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager",
)
_MANAGER_KEY = "spark.sql.streaming.checkpointFileManagerClass"


def _checkpoint_without_forks(spark: SparkSession) -> None:
    """Streaming checkpoints written through Hadoop's FileSystem API, unless the session's
    configuration names a manager itself. Spark's default (FileContext) manager, without
    Hadoop's native library (pip's pyspark has none), forks a `chmod` for each file it creates
    and a `readlink` for each rename: three or four processes forked from the JVM for each of
    a micro-batch's two checkpoint writes, measured at 60-110 ms a write against 20-30 ms with
    the FileSystem one. Both rename a complete temporary file into place, which is atomic on
    local and HDFS file systems."""
    if spark.conf.get(_MANAGER_KEY, None):
        return
    jvm = spark.sparkContext._jvm
    for name in _FILE_SYSTEM_MANAGERS:
        try:
            jvm.java.lang.Class.forName(name)
        except Exception:  # noqa: BLE001 - py4j's error for a class this Spark lacks
            continue
        spark.conf.set(_MANAGER_KEY, name)
        return

