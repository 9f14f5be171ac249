"""What any coordinator runs on: the runtime (a shard per partition of its topic, by partition and
leader epoch), keyed timers, results and the write outcome, loading and batch writing. Knows
nothing of groups, offsets or any coordinator's records (a shard decodes its own), nor sockets."""
