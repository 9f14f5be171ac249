"""Client quotas in a cluster, as Kafka's ZooKeeper mode keeps them: /config/users/<user>,
/config/users/<user>/clients/<client-id>, /config/clients/<client-id> (`<default>` for
defaults) with change notifications, so a quota set through one broker applies on every one;
a user's node keeps its SCRAM credentials beside its quotas."""

from __future__ import annotations

import pytest

from tests.clients.test_quotas import alter_quotas, describe_quotas
from tests.support.cluster_harness import brokers, wait_for, zk, zookeeper  # noqa: F401

pytestmark = pytest.mark.broker


def test_quotas_set_through_one_broker_apply_on_every_one(zk, brokers):
    from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                       UserScramCredentialUpsertion)
    for i in (1, 2):
        brokers(i)
    wait_for(lambda: zk.broker_ids() == [1, 2], 30, "brokers registered", brokers)
    admin = AdminClient({"bootstrap.servers": brokers[1].bootstrap})
    for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"alice-secret")]).values():
        assert f.result(30) is None

    alter_quotas(brokers[1].bootstrap, [
        ({"user": "alice"}, {"producer_byte_rate": 1024}),
        ({"user": "alice", "client-id": None}, {"request_percentage": 12.5}),
        ({"client-id": "app"}, {"consumer_byte_rate": 2048}),
        ({"user": None}, {"producer_byte_rate": 4096})])
    user = zk.json("/config/users/alice")["config"]
    assert user["producer_byte_rate"] == "1024" and user["SCRAM-SHA-256"].startswith("salt=")
    assert zk.json("/config/users/alice/clients/<default>")["config"] == {"request_percentage": "12.5"}
    assert zk.json("/config/clients/app")["config"] == {"consumer_byte_rate": "2048"}
    assert zk.json("/config/users/<default>")["config"] == {"producer_byte_rate": "4096"}
    changes = {zk.json(f"/config/changes/{c}")["entity_path"] for c in zk.children("/config/changes")}
    assert {"users/alice", "users/alice/clients/<default>", "clients/app", "users/<default>"} <= changes

    expected = {
        (("user", "alice"),): {"producer_byte_rate": 1024.0},
        (("user", "alice"), ("client-id", None)): {"request_percentage": 12.5},
        (("client-id", "app"),): {"consumer_byte_rate": 2048.0},
        (("user", None),): {"producer_byte_rate": 4096.0},
    }
    wait_for(lambda: describe_quotas(brokers[2].bootstrap) == expected, 15, "broker 2 knowing them", brokers)

    # removing a user's quota keeps its credentials
    alter_quotas(brokers[2].bootstrap, [({"user": "alice"}, {"producer_byte_rate": None})])
    assert set(zk.json("/config/users/alice")["config"]) == {"SCRAM-SHA-256"}
    del expected[(("user", "alice"),)]
    wait_for(lambda: describe_quotas(brokers[1].bootstrap) == expected, 15, "broker 1 seeing it go", brokers)

    # a broker that starts later, or again, reads them at start
    brokers(3)
    assert describe_quotas(brokers[3].bootstrap) == expected
    brokers[1].restart()
    assert describe_quotas(brokers[1].bootstrap) == expected
