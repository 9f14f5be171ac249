"""A broker process with ACLs on: one SASL_PLAINTEXT listener, PLAIN users admin (a super
user), alice and bob, and Kafka's authorizer class name; helpers to reach it as any of them
(confluent-kafka settings, an AdminClient, a wire client authenticated with PLAIN) and to
grant and take back ACLs."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from tests.support.broker_harness import BROKER_DEFAULTS, BrokerProcess, free_port
from tests.support.kafka_wire import WireClient
from tests.support.sasl_wire import authenticate, handshake

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-secret" '
        + " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items()) + ";")
AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"


def acl_broker_settings(port: int, **extra) -> dict:
    return {**BROKER_DEFAULTS,
            "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "authorizer.class.name": AUTHORIZER,
            "super.users": "User:admin",
            "connection.failed.authentication.delay.ms": 0,
            **extra}


class AclBroker:
    def __init__(self, data_dir, **extra) -> None:
        port = free_port()
        self.proc = BrokerProcess(data_dir, port=port, overrides=acl_broker_settings(port, **extra))

    @property
    def bootstrap(self) -> str:
        return self.proc.bootstrap

    def conf(self, user: str, **extra) -> dict:
        """confluent-kafka settings for `user`."""
        return {"bootstrap.servers": self.bootstrap, "broker.address.family": "v4",
                "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                "sasl.username": user, "sasl.password": PASSWORDS[user], **extra}

    def admin(self, user: str = "admin"):
        from confluent_kafka.admin import AdminClient
        return AdminClient(self.conf(user))

    def wire(self, user: str) -> WireClient:
        """A raw protocol client, authenticated as `user` with PLAIN."""
        c = WireClient(self.bootstrap)
        assert handshake(c, "PLAIN").error_code == ErrorCode.none
        r = authenticate(c, f"\0{user}\0{PASSWORDS[user]}".encode())
        assert r.error_code == ErrorCode.none, r
        return c

    def grant(self, *bindings) -> None:
        """Create ACLs as admin (confluent AclBinding objects)."""
        admin = self.admin()  # kept: the futures die with the client
        for f in admin.create_acls(list(bindings), request_timeout=30).values():
            assert f.result() is None

    def revoke_all(self) -> None:
        from confluent_kafka.admin import (AclBindingFilter, AclOperation, AclPermissionType,
                                           ResourcePatternType, ResourceType)
        f = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
        admin = self.admin()
        for fut in admin.delete_acls([f], request_timeout=30).values():
            fut.result()


def acl(resource: str, name: str, operation: str, principal: str = "User:alice", *,
        pattern: str = "LITERAL", permission: str = "ALLOW", host: str = "*"):
    """A confluent-kafka AclBinding: acl("TOPIC", "t", "READ")."""
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, ResourcePatternType,
                                       ResourceType)
    rtype = ResourceType["BROKER" if resource == "CLUSTER" else resource]  # confluent's name
    return AclBinding(rtype, name, ResourcePatternType[pattern], principal, host,
                      AclOperation[operation], AclPermissionType[permission])
