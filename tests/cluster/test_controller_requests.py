"""Found by the nemesis: a LeaderAndIsr of a new controller arrived before the broker's watch
of /controller named that controller; the UpdateMetadata of the same epoch that followed was
refused as stale (the broker compared the sender with its view of /controller), the
controller dropped it, and the broker kept asking itself (the controller its metadata named)
for ISR changes for minutes: the ISR never grew back.

Now the broker compares a controller request with the controller it verified for that epoch
(`cluster.inter_broker_rules`, a newer epoch checked with ZooKeeper itself), the controller
asks again after a refusal as stale, and AlterPartition goes to the controller ZooKeeper
names."""

from __future__ import annotations

from brook.broker.broker import Broker
from brook.broker.config import BrokerConfig
from brook.replication.replica_manager import ReplicaManager
from brook.cluster import inter_broker_rules as rules
from brook.cluster.view import ClusterView
from brook.cluster.zk_cluster import ZkCluster


def test_the_controller_of_an_epoch_is_believed_whatever_the_view_of_controller_says():
    # verified once (through ZooKeeper) for epoch 4: its next requests of epoch 4 are taken
    assert rules.controller_request(2, 2, 4, known_controller=2, known_epoch=4,
                                    what="UpdateMetadata") is rules.Verdict.OK
    refused = rules.controller_request(1, 1, 4, known_controller=2, known_epoch=4,
                                       what="UpdateMetadata")
    assert isinstance(refused, rules.Refusal)


def test_isr_changes_are_asked_of_the_controller_zookeeper_names(tmp_path):
    config = BrokerConfig.from_props({"log.dirs": str(tmp_path), "broker.id": "1",
                                      "zookeeper.connect": "127.0.0.1:1/x"})
    broker = Broker(config)
    broker.cluster = ZkCluster(config)
    broker.replicas = ReplicaManager(broker)
    broker.replicas.cache.controller_id = 1  # the last UpdateMetadata named this broker
    broker.cluster.view = ClusterView(controller_id=3)  # ZooKeeper names broker 3 since
    assert broker.replicas.controller_to_ask() == 3
    broker.cluster.view = ClusterView()  # no controller known from ZooKeeper: the metadata's
    assert broker.replicas.controller_to_ask() == 1
