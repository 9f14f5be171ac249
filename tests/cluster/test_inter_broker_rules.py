"""brook.cluster.inter_broker_rules: who may send the inter-broker requests, with which epochs."""

from __future__ import annotations

from kio.schema.errors import ErrorCode as E

from brook.cluster import inter_broker_rules as r

OK, ASK = r.Verdict.OK, r.Verdict.ASK_ZOOKEEPER


def code(verdict):
    return verdict.code if isinstance(verdict, r.Refusal) else verdict


def controller(peer, cid, epoch, known=(1, 5)):
    return code(r.controller_request(peer, cid, epoch, known_controller=known[0], known_epoch=known[1],
                                     what="LeaderAndIsr"))


def test_controller_requests_come_from_brokers_speaking_for_themselves():
    assert controller(None, 1, 5) == E.cluster_authorization_failed
    assert controller(2, 1, 5) == E.cluster_authorization_failed  # broker 2 as the controller 1
    assert controller(1, 1, 5) == OK
    assert controller(r.UNBOUND, 1, 5) == OK  # an operator's broker principal names no id


def test_controller_epochs_older_are_stale_newer_are_asked_of_zookeeper():
    assert controller(1, 1, 4) == E.stale_controller_epoch
    assert controller(2, 2, 5) == E.stale_controller_epoch  # another broker at the known epoch
    assert controller(1, 1, 2**31 - 1) == ASK
    assert controller(3, 3, 6) == ASK
    assert controller(1, 1, 0, known=(-1, -1)) == ASK  # the first one a broker hears of


def test_zookeeper_decides_a_newer_epoch():
    assert r.controller_from_zookeeper(3, 6, 3, 6, "x") is None
    assert r.controller_from_zookeeper(1, 2**31 - 1, 1, 5, "x").code == E.stale_controller_epoch
    assert r.controller_from_zookeeper(3, 6, 2, 6, "x").code == E.stale_controller_epoch
    assert r.controller_from_zookeeper(3, 6, 3, 7, "x").code == E.stale_controller_epoch  # deposed


def test_broker_epochs():
    assert code(r.broker_epoch(100, 100, "x")) == OK
    assert code(r.broker_epoch(99, 100, "x")) == E.stale_broker_epoch
    assert code(r.broker_epoch(-1, 100, "x")) == E.stale_broker_epoch
    assert code(r.broker_epoch(101, 100, "x")) == ASK  # registered again a moment ago?


def test_registered_brokers_at_the_controller():
    live = {1: 10, 2: 20}
    assert r.registered_broker(None, 2, 20, live, "x").code == E.cluster_authorization_failed
    assert r.registered_broker(1, 2, 20, live, "x").code == E.cluster_authorization_failed
    assert r.registered_broker(2, 2, 20, live, "x") is None
    assert r.registered_broker(r.UNBOUND, 2, 20, live, "x") is None
    assert r.registered_broker(2, 2, 19, live, "x").code == E.stale_broker_epoch
    assert r.registered_broker(2, 2, -1, live, "x").code == E.stale_broker_epoch
    assert r.registered_broker(3, 3, 30, live, "x").code == E.stale_broker_epoch
    assert r.registered_broker(3, 3, 30, live, "x", E.broker_not_available).code == E.broker_not_available


def test_followers():
    live = {1: None, 2: None}
    assert r.follower(None, 2, live).code == E.topic_authorization_failed
    assert r.follower(1, 2, live).code == E.topic_authorization_failed
    assert r.follower(2, 2, live) is None
    assert r.follower(r.UNBOUND, 2, live) is None
    assert r.follower(r.UNBOUND, 7, live).code == E.topic_authorization_failed  # not registered
    assert r.follower(r.UNBOUND, 7, None) is None  # a single node: no registrations to check
