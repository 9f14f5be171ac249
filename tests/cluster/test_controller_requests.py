"""Which controller requests a broker believes (`handlers.replication`), on a real broker's
objects (not opened: the rule needs its replication state and its view of the cluster).

Found by the nemesis: a LeaderAndIsr of a new controller arrived before the broker's watch of
/controller named that controller; the UpdateMetadata of the same epoch that followed was
refused as stale, the controller dropped it, and the broker kept asking itself (the controller
its metadata named) for ISR changes for minutes."""

from __future__ import annotations

import asyncio
import dataclasses

from kio.schema.errors import ErrorCode

from brook.broker.broker import Broker
from brook.broker.config import BrokerConfig
from brook.broker.handlers.replication import handle_update_metadata
from brook.broker.replica_manager import ReplicaManager
from brook.cluster.view import ClusterView
from brook.cluster.zk_cluster import ZkCluster
from brook.protocol import inter_broker as ib


def _broker(tmp_path, view_controller: int) -> Broker:
    config = BrokerConfig.from_props({"log.dirs": str(tmp_path), "broker.id": "1",
                                      "zookeeper.connect": "127.0.0.1:1/x"})
    broker = Broker(config)
    broker.cluster = ZkCluster(config)
    broker.cluster.view = ClusterView(controller_id=view_controller)
    broker.replicas = ReplicaManager(broker)
    return broker


def _update_metadata(controller: int, epoch: int) -> ib.UpdateMetadataRequest:
    return ib.UpdateMetadataRequest(controller_id=controller, controller_epoch=epoch,
                                    topic_states=(), live_brokers=())


@dataclasses.dataclass
class _Request:
    body: object


def _code(broker, body) -> ErrorCode:
    return asyncio.run(handle_update_metadata(broker, _Request(body), None)).error_code


def test_a_controller_that_used_its_epoch_is_believed_before_the_watch_names_it(tmp_path):
    broker = _broker(tmp_path, view_controller=1)  # the watch has not fired yet
    # controller 2's first request of epoch 4 (a LeaderAndIsr, or this UpdateMetadata) is
    # newer than anything the broker saw: taken, and the epoch noted as controller 2's
    assert _code(broker, _update_metadata(2, 4)) == ErrorCode.none
    # its next request of the same epoch: still taken (it was refused as stale before)
    assert _code(broker, _update_metadata(2, 4)) == ErrorCode.none
    assert broker.replicas.cache.controller_id == 2


def test_an_older_epoch_or_another_controller_at_the_same_epoch_is_refused(tmp_path):
    broker = _broker(tmp_path, view_controller=2)
    assert _code(broker, _update_metadata(2, 4)) == ErrorCode.none
    assert _code(broker, _update_metadata(1, 3)) == ErrorCode.stale_controller_epoch
    assert _code(broker, _update_metadata(3, 4)) == ErrorCode.stale_controller_epoch


def test_isr_changes_are_asked_of_the_controller_zookeeper_names(tmp_path):
    broker = _broker(tmp_path, view_controller=3)
    # the last UpdateMetadata named broker 1 (this one); ZooKeeper names 3 since
    assert _code(broker, _update_metadata(1, 2)) == ErrorCode.none
    assert broker.replicas.cache.controller_id == 1
    broker.cluster.view = ClusterView(controller_id=3)
    assert broker.replicas.controller_to_ask() == 3
