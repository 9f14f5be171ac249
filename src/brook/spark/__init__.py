"""brook topics in Apache Spark: format "brook" for batch and streaming reads and writes.

    import brook.spark
    brook.spark.register(spark)
    df = (spark.readStream.format("brook")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "page-views")
          .option("group.id", "page-view-counts")
          .load())

``brook.spark.read(spark, options)`` and ``brook.spark.read_stream(spark, options)`` give the
same DataFrames with the rows reaching Spark as Arrow batches (faster; see docs/spark.md).

Rows and options are those of Spark's built-in Kafka source, plus ``group.id`` (commit each
micro-batch's offsets to a consumer group) and ``startingOffsets=group``. docs/spark.md has
the details.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

FORMAT = "brook"


def register(spark: "SparkSession") -> None:
    """Make ``format("brook")`` available to this session's readers and writers."""
    from .datasource import BrookDataSource

    spark.dataSource.register(BrookDataSource)


def local_session(*args, **kwargs) -> "SparkSession":
    """A local SparkSession with format "brook" registered (see brook.spark.session)."""
    from .session import local_session as make

    return make(*args, **kwargs)


def read(spark: "SparkSession", options=None, **more):
    """A batch read with format brook's options and rows, read inside mapInArrow."""
    from .bulk import read as bulk_read

    return bulk_read(spark, options, **more)


def read_stream(spark: "SparkSession", options=None, **more):
    """A streaming read with format brook's options, rows and group commits, read inside
    mapInArrow."""
    from .bulk import read_stream as bulk_read_stream

    return bulk_read_stream(spark, options, **more)


def offsets_behind_latest(source) -> dict[str, str]:
    """``minOffsetsBehindLatest``, ``maxOffsetsBehindLatest`` and ``avgOffsetsBehindLatest``
    of one source of a streaming progress report (``query.lastProgress.sources[0]``, or its
    JSON as a dict), as Spark's Kafka source reports them in ``sources[].metrics``: Spark 4.3
    takes no metrics from Python sources (docs/spark.md, *Progress reports*)."""
    from .offsets import offsets_behind_latest as behind

    if isinstance(source, dict):
        return behind(source.get("endOffset"), source.get("latestOffset"))
    return behind(source.endOffset, source.latestOffset)


__all__ = ["FORMAT", "register", "local_session", "read", "read_stream",
           "offsets_behind_latest"]
