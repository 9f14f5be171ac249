"""The cluster's controller: the one broker ZooKeeper names keeps every partition's leader and
ISR, and its pure decisions (elections, replica assignment, reassignment). It talks to
ZooKeeper and to brokers through `brook.cluster`; it knows nothing of logs or clients."""
