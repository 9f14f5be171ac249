"""brook topics in Apache Spark: format "brook" for batch and streaming reads and writes.

    import brook.spark
    brook.spark.register(spark)
    df = (spark.readStream.format("brook")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "page-views")
          .option("group.id", "page-view-counts")
          .load())

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


__all__ = ["FORMAT", "register", "local_session"]
