"""Sending inter-broker requests by hand as a broker does: read the cluster's inter-broker
secret from ZooKeeper and log a wire connection in as broker N (SCRAM-SHA-512 through
SaslHandshake and SaslAuthenticate, with the tests' own SCRAM client), then the epochs the
brokers hold in ZooKeeper to put in the requests."""

from __future__ import annotations

import contextlib

from brook.cluster import zk_data, zk_paths
from brook.security import broker_identity
from tests.support.kafka_wire import WireClient
from tests.support.sasl_wire import ScramClient, authenticate, handshake


def cluster_secret(zk) -> bytes:
    """The secret the brokers of `zk`'s chroot share (a ZkView)."""
    return zk_data.decode_broker_secret(zk.get(zk_paths.BROKER_SECRET)[0])


def broker_epoch(zk, broker_id: int) -> int:
    """The czxid of /brokers/ids/<id>: the broker epoch controller requests are addressed to."""
    return zk.get(zk_paths.broker_path(broker_id))[1].czxid


def log_in(wire: WireClient, secret: bytes, broker_id: int) -> None:
    user = broker_identity.user_for(broker_id)
    assert handshake(wire, "SCRAM-SHA-512").error_code == 0
    scram = ScramClient("sha512", user, broker_identity.password(secret, user))
    first = authenticate(wire, scram.first())
    assert first.error_code == 0, first.error_message
    final = authenticate(wire, scram.final(first.auth_bytes))
    assert final.error_code == 0, final.error_message
    assert final.auth_bytes == scram.expected_server_final


@contextlib.contextmanager
def as_broker(zk, bootstrap: str, broker_id: int, timeout: float = 10.0):
    """A WireClient to `bootstrap` logged in as broker `broker_id` of `zk`'s cluster."""
    with WireClient(bootstrap, timeout) as wire:
        log_in(wire, cluster_secret(zk), broker_id)
        yield wire
