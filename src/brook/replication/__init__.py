"""Replication of a partition between brokers: a partition's replica state (leader or follower,
high watermark, ISR, leader epochs), the replica manager that applies the controller's
decisions, the follower's fetcher, and the pure rules (the leader's view of its followers,
where a follower cuts its log). Knows nothing of ZooKeeper, groups or the request handlers."""
