"""Brokers that talk to each other over TLS: the controller's requests, the followers' Fetch
and AlterPartition go through an SSL inter-broker listener with client certificates, or a
SASL_SSL one where brokers also log in with SASL."""

from __future__ import annotations

import pytest

from tests.support.broker_harness import free_port
from tests.support.cluster_harness import brokers, wait_for, zk, zookeeper  # noqa: F401
from tests.support.tls_certs import TlsFiles

pytestmark = pytest.mark.broker

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
              'password="broker-secret" user_broker="broker-secret" user_alice="alice-secret";')


@pytest.mark.parametrize("protocol", ["SSL", "SASL_SSL"])
def test_brokers_replicate_over_a_tls_inter_broker_listener(zk, brokers, tmp_path, protocol):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    files = TlsFiles(tmp_path)
    ports = {i: free_port() for i in (1, 2)}
    tls = {"ssl.keystore.location": str(files.broker_keystore),
           "ssl.truststore.location": str(files.ca),
           "controlled.shutdown.retry.backoff.ms": 200}
    if protocol == "SSL":
        tls["ssl.client.auth"] = "required"
    else:
        tls.update({"sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN",
                    "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS})
    for i in (1, 2):
        brokers(i, {"listeners": f"{protocol}://127.0.0.1:{ports[i]}", **tls})
    wait_for(lambda: zk.broker_ids() == [1, 2], 30, "brokers registered", brokers)
    assert zk.json("/brokers/ids/1")["endpoints"] == [f"{protocol}://127.0.0.1:{ports[1]}"]
    client = {"bootstrap.servers": f"127.0.0.1:{ports[1]}", "security.protocol": protocol,
              "ssl.ca.location": str(files.ca)}
    if protocol == "SSL":
        client.update({"ssl.certificate.location": files.cert("alice"), "ssl.key.location": files.key("alice")})
    else:
        client.update({"sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret"})
    admin = AdminClient(client)
    for f in admin.create_topics([NewTopic("replicated", 1, replication_factor=2)]).values():
        assert f.result(30) is None

    def both_in_sync():
        t = admin.list_topics("replicated", timeout=10).topics["replicated"]
        return t.error is None and sorted(t.partitions[0].isrs) == [1, 2]

    wait_for(both_in_sync, 30, "both replicas in sync", brokers)
    p = Producer({**client, "acks": "all"})
    for i in range(100):
        p.produce("replicated", f"v{i}".encode())
    assert p.flush(30) == 0
    leader = admin.list_topics("replicated", timeout=10).topics["replicated"].partitions[0].leader
    # the follower's fetcher authenticated to the leader as a broker
    logged = ("authenticated User:CN=localhost,O=brook tests from" if protocol == "SSL"
              else "authenticated User:broker from")
    wait_for(lambda: logged in brokers[leader].stderr_path.read_text(), 10,
             "the leader logging its follower's login", brokers)
