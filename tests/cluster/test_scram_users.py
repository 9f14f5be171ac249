"""SCRAM credentials in a cluster, as Kafka's ZooKeeper mode keeps them: /config/users/<user>
({"version":1,"config":{"SCRAM-SHA-256":"salt=...,stored_key=...,server_key=...,iterations=..."}})
with a change notification, so a user created through one broker authenticates on another."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from tests.support.broker_harness import free_port
from tests.support.cluster_harness import brokers, wait_for, zk, zookeeper  # noqa: F401
from tests.support.kafka_wire import WireClient
from tests.support.sasl_wire import ScramClient, authenticate, handshake

pytestmark = pytest.mark.broker


def _login(bootstrap: str, user: str, password: str) -> bool:
    with WireClient(bootstrap) as c:
        assert handshake(c, "SCRAM-SHA-256").error_code == ErrorCode.none
        scram = ScramClient("sha256", user, password)
        first = authenticate(c, scram.first())
        if first.error_code != ErrorCode.none:
            return False
        return authenticate(c, scram.final(first.auth_bytes)).error_code == ErrorCode.none


def test_a_user_created_on_one_broker_authenticates_on_another(zk, brokers):
    from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                       UserScramCredentialUpsertion)
    sasl = {}
    for i in (1, 2):
        sasl[i], plain = free_port(), free_port()
        brokers(i, {"listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl[i]}",
                    "sasl.enabled.mechanisms": "SCRAM-SHA-256", "inter.broker.listener.name": "PLAINTEXT"})
    wait_for(lambda: zk.broker_ids() == [1, 2], 30, "brokers registered", brokers)
    registration = zk.json("/brokers/ids/1")
    assert registration["listener_security_protocol_map"]["SASL_PLAINTEXT"] == "SASL_PLAINTEXT"

    admin = AdminClient({"bootstrap.servers": brokers[1].bootstrap})
    for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"dave-secret")]).values():
        assert f.result(30) is None
    stored = zk.json("/config/users/dave")
    assert stored["version"] == 1
    assert set(stored["config"]) == {"SCRAM-SHA-256"}
    assert stored["config"]["SCRAM-SHA-256"].startswith("salt=")
    assert "dave-secret" not in str(stored)
    assert any(zk.json(f"/config/changes/{c}")["entity_path"] == "users/dave"
               for c in zk.children("/config/changes"))
    for i in (1, 2):
        wait_for(lambda: _login(f"127.0.0.1:{sasl[i]}", "dave", "dave-secret"), 15,
                 f"broker {i} knowing dave", brokers)
    assert not _login(f"127.0.0.1:{sasl[2]}", "dave", "wrong")

    # a broker that starts later reads them at start
    sasl[3], plain = free_port(), free_port()
    brokers(3, {"listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl[3]}",
                "sasl.enabled.mechanisms": "SCRAM-SHA-256", "inter.broker.listener.name": "PLAINTEXT"})
    assert _login(f"127.0.0.1:{sasl[3]}", "dave", "dave-secret")


PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret";')
SCRAM_JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" '
              'password="broker-secret";')


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_brokers_replicate_over_a_sasl_inter_broker_listener(zk, brokers, mechanism):
    """Only a SASL_PLAINTEXT listener: the controller's requests, the followers' Fetch and
    AlterPartition all authenticate. The brokers' SCRAM user is written to ZooKeeper before
    they start, as Kafka's operators do with kafka-configs.sh --zookeeper."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from brook.cluster.zk_data import encode_broker_config
    from brook.security.scram import SHA_512, new_credential
    if mechanism != "PLAIN":
        zk.kz.create(zk.chroot + "/config/users/broker", encode_broker_config(
            {"SCRAM-SHA-512": new_credential(SHA_512, "broker-secret").to_kafka()}), makepath=True)
    ports = {i: free_port() for i in (1, 2)}
    for i in (1, 2):
        brokers(i, {"listeners": f"SASL_PLAINTEXT://127.0.0.1:{ports[i]}",
                    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
                    "sasl.mechanism.inter.broker.protocol": mechanism,
                    "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
                    "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
                    # the last broker to stop cannot hand its leadership to anyone: not 3 x 5 s
                    "controlled.shutdown.retry.backoff.ms": 200})
    wait_for(lambda: zk.broker_ids() == [1, 2], 30, "brokers registered", brokers)
    client = {"bootstrap.servers": f"127.0.0.1:{ports[1]}", "security.protocol": "SASL_PLAINTEXT",
              "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": "admin-secret"}
    admin = AdminClient(client)
    for f in admin.create_topics([NewTopic("replicated", 1, replication_factor=2)]).values():
        assert f.result(30) is None

    def both_in_sync():
        t = admin.list_topics("replicated", timeout=10).topics["replicated"]
        return t.error is None and sorted(t.partitions[0].isrs) == [1, 2]

    wait_for(both_in_sync, 30, "both replicas in sync", brokers)
    p = Producer({**client, "acks": "all"})
    p.produce("replicated", b"v")
    assert p.flush(30) == 0
    wait_for(lambda: "authenticated User:" + ("admin" if mechanism == "PLAIN" else "broker")
             in brokers[2].stderr_path.read_text(), 10, "broker 2 logging a broker's login", brokers)
