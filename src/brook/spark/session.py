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
    from . import register

    register(spark)
    return spark
