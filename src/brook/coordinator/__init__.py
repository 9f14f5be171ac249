"""Group coordination and offset management on the __consumer_offsets topic: the classic
group protocol, committed offsets and their expiry, sans-I/O, and the runtime that runs them per
partition. Knows nothing of sockets, the broker or replication: it writes through a narrow
writer interface."""
