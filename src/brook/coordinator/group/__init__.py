"""The group coordinator on ``__consumer_offsets``: classic groups and their protocol, offsets and
their cache, the topic's schemas, expiry, the partitioner, the shard and its part of loading and
writing. Runs on ``coordinator.common``; knows nothing of sockets, the broker or replication."""
