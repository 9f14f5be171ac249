"""A small blocking Kafka client on brook's protocol layer (kio entities): connections, leader
discovery through Metadata, ListOffsets, and `RangeReader`, which fetches raw record batches
of offset ranges and decodes them into Arrow in bulk (brook.records.arrow). It is a client:
it knows nothing of the broker's internals and works with any Kafka-compatible broker."""

from .connection import BrokerConnection, KafkaClientError, parse_bootstrap
from .fetcher import DataLossError, FetchSettings, RangeReader

__all__ = ["BrokerConnection", "DataLossError", "FetchSettings", "KafkaClientError",
           "RangeReader", "parse_bootstrap"]
