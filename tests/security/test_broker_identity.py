"""The brokers' inter-broker identity: names reserved per broker id, a credential only the
holders of the cluster's secret can compute, and a real SCRAM exchange between brook's
client and server with it."""

from __future__ import annotations

from brook.security import broker_identity as bi
from brook.security.client import ScramClient
from brook.security.errors import SaslError
from brook.security.scram import SHA_256, SHA_512, ScramServer

SECRET = bytes(range(32))


def test_names_are_reserved_and_canonical():
    assert bi.user_for(7) == "__brook_broker_7"
    assert bi.broker_id_of("__brook_broker_7") == 7
    assert bi.broker_id_of("__brook_broker_0") == 0
    for other in ("alice", "__brook_broker_", "__brook_broker_07", "__brook_broker_+7",
                  "__brook_broker_-1", "__brook_broker_٧", "__brook_broker_7 ", "__brook_broker_99999999999"):
        assert bi.broker_id_of(other) is None, other
    assert bi.is_reserved("__brook_broker_x") and not bi.is_reserved("brook_broker_1")


def test_the_credential_needs_the_secret_and_scram_sha_512():
    user = bi.user_for(1)
    assert bi.credential(None, user, SHA_512) is None  # a single node trusts no broker
    assert bi.credential(SECRET, user, SHA_256) is None
    assert bi.credential(SECRET, "alice", SHA_512) is None
    assert bi.credential(SECRET, user, SHA_512) == bi.credential(SECRET, user, SHA_512)
    assert bi.credential(SECRET, user, SHA_512) != bi.credential(bytes(32), user, SHA_512)
    assert bi.credential(SECRET, user, SHA_512) != bi.credential(SECRET, bi.user_for(2), SHA_512)
    assert bi.password(SECRET, user) != bi.password(SECRET, bi.user_for(2))


def _exchange(client_secret: bytes, broker_id: int, server_secret: bytes) -> ScramServer:
    creds = bi.client_credentials(client_secret, broker_id)
    server = ScramServer(SHA_512, lambda user: bi.credential(server_secret, user, SHA_512))
    steps = ScramClient(SHA_512, creds.username, creds.password).messages()
    reply = server.evaluate(next(steps))
    reply = server.evaluate(steps.send(reply))
    try:
        steps.send(reply)  # the client checks the server's signature
    except StopIteration:
        pass
    return server


def test_a_broker_logs_in_with_the_secret_and_nobody_without_it():
    server = _exchange(SECRET, 3, SECRET)
    assert server.complete and server.user == "__brook_broker_3"
    try:
        _exchange(bytes(32), 3, SECRET)
    except SaslError:
        pass
    else:
        raise AssertionError("a login without the secret succeeded")
