"""The transaction coordinator on ``__transaction_state``, sans-I/O but for the marker sender's
asyncio tasks: Kafka's transaction states, the topic's schemas (Kafka's), the partitioner, the
shard (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, timeouts, expiry) and the
markers' interface. Runs on ``coordinator.common``; knows nothing of sockets, the broker, groups
or replication."""
