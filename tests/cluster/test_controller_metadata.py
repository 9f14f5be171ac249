"""What the controller tells brokers in UpdateMetadata: every partition it knows, always.

A broker replaces its picture of the cluster with each UpdateMetadata, so a partition left out
of one is, to that broker, a partition that does not exist: its Metadata answers drop it, and
a transaction coordinator there takes the markers owed to it for not owed (a transaction was
completed with its ABORT marker never written, found by the nemesis). The controller drops a
partition's state when a write of it is refused, to read it again; until then it still tells
brokers the state it told them last."""

from __future__ import annotations

from brook.cluster.metadata_cache import MetadataCache
from brook.cluster.view import ClusterView, LiveBroker
from brook.cluster.zk_data import BrokerRegistration, Endpoint, PartitionState, TopicAssignment
from brook.controller.controller import Controller


def _controller() -> Controller:
    brokers = {b: LiveBroker(BrokerRegistration(b, (Endpoint("PLAINTEXT", "127.0.0.1", 9090 + b,
                                                             "PLAINTEXT"),)), epoch=b)
               for b in (1, 2, 3)}
    c = Controller(None, 1, 1, 0, ClusterView(brokers=brokers, controller_id=1),
                   listener="PLAINTEXT")
    c.assignments["t"] = TopicAssignment(None, {0: (1, 2, 3), 1: (3, 1, 2), 2: (2, 3, 1)})
    for p, leader in ((0, 1), (1, 3), (2, 2)):
        c.states[("t", p)] = PartitionState(leader, 3, (1, 2, 3), 1, zk_version=5)
    return c


def _told(request) -> dict[int, tuple[int, int]]:
    (topic,) = request.topic_states
    return {p.partition_index: (p.leader, p.leader_epoch) for p in topic.partition_states}


def test_a_partition_whose_state_is_being_read_again_is_still_told_as_it_was():
    c = _controller()
    assert _told(c._update_metadata()) == {0: (1, 3), 1: (3, 3), 2: (2, 3)}
    del c.states[("t", 1)]  # a refused write: read again at the next reconcile
    c.states[("t", 0)] = PartitionState(2, 4, (2, 3), 1, zk_version=6)  # elected meanwhile
    assert _told(c._update_metadata()) == {0: (2, 4), 1: (3, 3), 2: (2, 3)}
    c.states[("t", 1)] = PartitionState(1, 4, (1, 2), 1, zk_version=7)  # read again
    assert _told(c._update_metadata()) == {0: (2, 4), 1: (1, 4), 2: (2, 3)}


def test_a_partition_never_elected_is_not_told():
    c = _controller()
    c.assignments["t"] = TopicAssignment(None, {**c.assignments["t"].partitions, 3: (1, 2, 3)})
    assert set(_told(c._update_metadata())) == {0, 1, 2}


def test_a_deleted_topic_is_no_longer_told():
    c = _controller()
    c._update_metadata()
    del c.assignments["t"]
    for p in range(3):
        del c.states[("t", p)]
    assert c._update_metadata().topic_states == ()


def test_a_broker_takes_a_partition_for_gone_only_when_the_controller_no_longer_tells_it():
    c = _controller()
    cache = MetadataCache()
    assert cache.may_exist("t", 1) and cache.may_exist("other", 0)  # nothing told yet
    cache.update(c._update_metadata())
    assert cache.may_exist("t", 1) and not cache.may_exist("other", 0)
    assert not cache.may_exist("t", 3)
    del c.states[("t", 1)]  # being read again: still there for the brokers
    cache.update(c._update_metadata())
    assert cache.may_exist("t", 1)
    del c.assignments["t"]  # deleted
    cache.update(c._update_metadata())
    assert not cache.may_exist("t", 1)
