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
    """A ``local[cores]`` session, quiet, without the web UI, with format "brook" registered.

    An existing session is reused (Spark allows one per process)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (SparkSession.builder.master(f"local[{cores}]").appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", str(cores))
               .config("spark.default.parallelism", str(cores))
               .config("spark.sql.session.timeZone", "UTC"))
    for key, value in (config or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    from . import register

    register(spark)
    return spark
