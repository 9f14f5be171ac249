"""The rows of format "brook": Spark's Kafka source's columns, as Spark and as Arrow types."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

HEADERS = ArrayType(StructType([StructField("key", StringType()),
                                StructField("value", BinaryType())]))

ROW = StructType([
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
])
ROW_WITH_HEADERS = StructType(ROW.fields + [StructField("headers", HEADERS)])


def spark_schema(include_headers: bool) -> StructType:
    return ROW_WITH_HEADERS if include_headers else ROW


def arrow_schema(include_headers: bool) -> pa.Schema:
    """Exactly the Arrow schema Spark expects record batches of this source to have."""
    return to_arrow_schema(spark_schema(include_headers), timezone="UTC")
