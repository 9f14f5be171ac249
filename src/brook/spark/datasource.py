"""Format "brook": the Python data source tying options, readers and writers together."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from .options import OptionError, SinkOptions, SourceOptions
from .schema import spark_schema
from .sink import BrookStreamWriter, BrookWriter, check_schema
from .source import BrookBatchReader, BrookStreamReader


class BrookDataSource(DataSource):
    """Reads and writes brook (or any Kafka) topics with the rows and options of Spark's
    Kafka source; see docs/spark.md."""

    @classmethod
    def name(cls) -> str:
        return "brook"

    def schema(self) -> StructType:
        # Spark asks for the schema when a read is loaded: options are checked here first.
        return spark_schema(SourceOptions.parse(self.options, streaming=None).include_headers)

    def reader(self, schema: StructType) -> BrookBatchReader:
        options = SourceOptions.parse(self.options, streaming=False)
        _check_read_schema(schema, options)
        return BrookBatchReader(options)

    def streamReader(self, schema: StructType) -> BrookStreamReader:
        options = SourceOptions.parse(self.options, streaming=True)
        _check_read_schema(schema, options)
        return BrookStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> BrookWriter:
        options = SinkOptions.parse(self.options)
        if options.exactly_once:
            raise OptionError("exactlyOnce is for streaming writes (df.writeStream): a batch "
                              "write has no micro-batch id to record, and a retried job "
                              "writes again")
        check_schema(schema, options)
        return BrookWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> BrookStreamWriter:
        options = SinkOptions.parse(self.options)
        check_schema(schema, options)
        return BrookStreamWriter(options)


def _check_read_schema(schema: StructType, options: SourceOptions) -> None:
    expected = spark_schema(options.include_headers)
    if schema != expected:
        raise OptionError(f"format brook has a fixed schema and cannot read with another one: "
                          f"{expected.simpleString()}, not {schema.simpleString()}")
