"""ACLs name the principal a client certificate maps to (ssl.principal.mapping.rules), as in
Kafka: over an SSL listener, alice's certificate is User:alice and bob's User:bob."""

from __future__ import annotations

import pytest

from tests.support.acl_broker import AUTHORIZER, acl
from tests.support.broker_harness import BROKER_DEFAULTS, BrokerProcess, free_port
from tests.support.tls_certs import TlsFiles

pytestmark = pytest.mark.broker


def test_acls_apply_to_certificate_principals(tmp_path):
    from confluent_kafka import KafkaError, Producer
    from confluent_kafka.admin import AdminClient

    files = TlsFiles(tmp_path)
    plain, ssl = free_port(), free_port()
    proc = BrokerProcess(tmp_path / "broker", port=plain, overrides={
        **BROKER_DEFAULTS,
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{ssl}",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(files.broker_keystore),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(files.ca),
        "listener.name.ssl.ssl.client.auth": "required",
        "listener.name.ssl.ssl.principal.mapping.rules": "RULE:^CN=(.*?),OU=.*$/$1/,DEFAULT",
        "authorizer.class.name": AUTHORIZER,
        "super.users": "User:ANONYMOUS",  # the PLAINTEXT listener (loopback) administers
    })
    with proc:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{plain}"})
        from confluent_kafka.admin import NewTopic
        for f in admin.create_topics([NewTopic("certified", 1, 1)]).values():
            assert f.result(30) is None
        for f in admin.create_acls([acl("TOPIC", "certified", "DESCRIBE")], request_timeout=30).values():
            assert f.result() is None

        def topic_error(client: str):
            p = Producer({"bootstrap.servers": f"127.0.0.1:{ssl}", "security.protocol": "SSL",
                          "ssl.ca.location": str(files.ca), "ssl.certificate.location": files.cert(client),
                          "ssl.key.location": files.key(client)})
            err = p.list_topics("certified", timeout=15).topics["certified"].error
            return None if err is None else err.code()

        assert topic_error("alice") is None
        assert topic_error("bob") == KafkaError.TOPIC_AUTHORIZATION_FAILED
