"""The cluster as ZooKeeper holds it: brokers registered with Kafka's layout, the controller
elected through ``/controller`` (what it then does is `brook.controller`'s), the view of both
that the API handlers answer from, the metadata cache, and the channel brokers talk on.

Switched on only by ``zookeeper.connect``; without it the broker is the embedded single node
and nothing here that touches ZooKeeper (or imports kazoo) runs. The pure parts (paths, the
JSON of each znode, the view and its changes) import nothing beyond the standard library; the
kazoo-facing code is in `zk_client` and the asyncio side in `zk_cluster`. Knows nothing of
logs, replication or the controller's decisions.
"""
