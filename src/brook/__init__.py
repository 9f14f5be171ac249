"""brook: a Kafka-protocol-compatible message log broker."""

__version__ = "0.1.0"
