"""The log: a partition's segments of record batches with their offset and time indexes,
recovery, flush, retention, compaction, producer state and leader epochs, on files. Knows
nothing of the wire protocol, replication between brokers or groups."""
