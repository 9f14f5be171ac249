"""Brokers that talk to each other over TLS with client certificates: the controller's
requests, the followers' Fetch and AlterPartition go through an SSL inter-broker listener."""

from __future__ import annotations

import pytest

from tests.support.broker_harness import free_port
from tests.support.cluster_harness import brokers, wait_for, zk, zookeeper  # noqa: F401
from tests.support.tls_certs import TlsFiles

pytestmark = pytest.mark.broker


def test_brokers_replicate_over_an_ssl_inter_broker_listener_with_client_certificates(zk, brokers, tmp_path):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    files = TlsFiles(tmp_path)
    ports = {i: free_port() for i in (1, 2)}
    for i in (1, 2):
        brokers(i, {"listeners": f"SSL://127.0.0.1:{ports[i]}",
                    "ssl.keystore.location": str(files.broker_keystore),
                    "ssl.truststore.location": str(files.ca),
                    "ssl.client.auth": "required",
                    "controlled.shutdown.retry.backoff.ms": 200})
    wait_for(lambda: zk.broker_ids() == [1, 2], 30, "brokers registered", brokers)
    assert zk.json("/brokers/ids/1")["endpoints"] == [f"SSL://127.0.0.1:{ports[1]}"]
    client = {"bootstrap.servers": f"127.0.0.1:{ports[1]}", "security.protocol": "SSL",
              "ssl.ca.location": str(files.ca), "ssl.certificate.location": files.cert("alice"),
              "ssl.key.location": files.key("alice")}
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
    follower = 2 if admin.list_topics("replicated", timeout=10).topics["replicated"].partitions[0].leader == 1 else 1
    wait_for(lambda: "authenticated User:CN=localhost,O=brook tests from"
             in brokers[3 - follower].stderr_path.read_text(), 10, "the leader logging its follower's certificate", brokers)
