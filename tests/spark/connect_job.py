"""brook's pipelines through Spark Connect: a client session of a Spark Connect server, run as a
process of its own (a Connect client keeps no JVM; the test's process may hold a classic
session).

    python -m tests.spark.connect_job SC_URL BROOK_ZIP BOOTSTRAP WORK_DIR

The pipelines of tests/spark/cluster_job.py on topic ``cin``, outputs and groups prefixed
``connect-``; brook is also shipped as Connect clients ship Python code,
``spark.addArtifacts(zip, pyfile=True)``. Prints one JSON line of what it saw.
"""

from __future__ import annotations

import json
import sys

from pyspark.sql import SparkSession

from tests.spark.cluster_job import pipelines


def main(url: str, brook_zip: str, bootstrap: str, work: str) -> None:
    spark = SparkSession.builder.remote(url).create()
    try:
        spark.addArtifacts(brook_zip, pyfile=True)
        result = pipelines(spark, bootstrap, work, source="cin", prefix="connect-")
        result["session"] = type(spark).__module__
    finally:
        spark.stop()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
