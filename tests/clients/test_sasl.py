"""SASL_PLAINTEXT with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 against a broker process:
confluent-kafka, kafka-python, aiokafka and kcat produce, consume in a group and commit;
refusals get Kafka's errors, one log line, and the broker goes on serving others."""

from __future__ import annotations

import re
import struct
import subprocess
import sys
import time

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from tests.support import client_roundtrips as roundtrips
from tests.support.broker_harness import BROKER_DEFAULTS, BrokerProcess, free_port
from tests.support.kafka_wire import WireClient
from tests.support.sasl_wire import ScramClient, authenticate, handshake

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
DELAY_MS = 250


class SaslBroker:
    def __init__(self, data_dir) -> None:
        self.sasl_port, self.plain_port = free_port(), free_port()
        self.proc = BrokerProcess(data_dir, port=self.sasl_port, overrides={
            **BROKER_DEFAULTS,
            "listeners": f"SASL_PLAINTEXT://127.0.0.1:{self.sasl_port},PLAINTEXT://127.0.0.1:{self.plain_port}",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "connection.failed.authentication.delay.ms": DELAY_MS,
        })

    @property
    def sasl(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"

    @property
    def plain(self) -> str:
        return f"127.0.0.1:{self.plain_port}"

    def log(self) -> str:
        return self.proc.stderr_path.read_text()


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory):
    b = SaslBroker(tmp_path_factory.mktemp("sasl"))
    b.proc.start()
    try:
        _create_scram_users(b.plain)
        yield b
    finally:
        b.proc.close()


def _create_scram_users(bootstrap: str) -> None:
    """scram256 and scram512, through confluent-kafka's AdminClient."""
    from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                       UserScramCredentialUpsertion)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion("scram256", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                     b"secret-256"),
        UserScramCredentialUpsertion("scram512", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                     b"secret-512"),
    ])
    for f in futures.values():
        assert f.result(30) is None


USERS = {"PLAIN": ("alice", "alice-secret"), "SCRAM-SHA-256": ("scram256", "secret-256"),
         "SCRAM-SHA-512": ("scram512", "secret-512")}
MECHANISMS = list(USERS)


def _wait_logged(b: SaslBroker, text: str, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log = b.log()
        if text in log:
            return log
        time.sleep(0.05)
    raise AssertionError(f"{text!r} not in the broker's log:\n{b.log()[-3000:]}")


# ------------------------------------------------------------------ real clients


def _ck(b: SaslBroker, mechanism: str) -> dict:
    user, password = USERS[mechanism]
    return {"bootstrap.servers": b.sasl, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}


def _kp(b: SaslBroker, mechanism: str) -> dict:
    user, password = USERS[mechanism]
    return dict(bootstrap_servers=b.sasl, security_protocol="SASL_PLAINTEXT",
                sasl_mechanism=mechanism, sasl_plain_username=user, sasl_plain_password=password)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_kafka_produces_consumes_in_a_group_and_commits(sasl_broker, mechanism):
    roundtrips.confluent(_ck(sasl_broker, mechanism), f"ck-{mechanism}", f"ck-group-{mechanism}")
    _wait_logged(sasl_broker, f"authenticated User:{USERS[mechanism][0]} from")


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_produces_consumes_in_a_group_and_commits(sasl_broker, mechanism):
    roundtrips.kafka_python(_kp(sasl_broker, mechanism), f"kp-{mechanism}", f"kp-group-{mechanism}")


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_kafka_python_told_kafka_0_10_2_uses_handshake_v0_and_bare_tokens(sasl_broker, mechanism):
    from kafka import KafkaProducer
    user, password = USERS[mechanism]
    p = KafkaProducer(bootstrap_servers=sasl_broker.sasl, security_protocol="SASL_PLAINTEXT",
                      sasl_mechanism=mechanism, sasl_plain_username=user, sasl_plain_password=password,
                      api_version=(0, 10, 2))
    try:
        assert p.send(f"kp-old-{mechanism}", b"v").get(30).offset == 0
    finally:
        p.close()
    _wait_logged(sasl_broker, f"User:{user} from")
    assert re.search(rf"authenticated User:{user} .* with {mechanism} \(SaslHandshake v0, bare tokens\)",
                     sasl_broker.log())


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_aiokafka_produces_consumes_in_a_group_and_commits(sasl_broker, mechanism):
    roundtrips.aiokafka(_kp(sasl_broker, mechanism), f"aio-{mechanism}", f"aio-group-{mechanism}")


@pytest.mark.skipif(roundtrips.KCAT is None, reason="kcat is not installed (make tools)")
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kcat_produces_and_consumes_in_a_group(sasl_broker, mechanism):
    roundtrips.kcat(_ck(sasl_broker, mechanism), f"kcat-{mechanism}", f"kcat-group-{mechanism}")


def test_a_user_made_with_brook_users_authenticates_and_survives_a_restart(tmp_path):
    b = SaslBroker(tmp_path / "b")
    b.proc.start()
    try:
        run = subprocess.run([sys.executable, "-m", "brook", "users", "set-scram", "carol",
                              "--mechanism", "SCRAM-SHA-256", "--password", "carol-secret",
                              "--bootstrap-server", b.plain], capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        listing = subprocess.run([sys.executable, "-m", "brook", "users", "list", "--bootstrap-server", b.plain],
                                 capture_output=True, text=True, timeout=60)
        assert "carol" in listing.stdout and "SCRAM-SHA-256" in listing.stdout, listing.stdout
        _scram_login(b.sasl, "sha256", "SCRAM-SHA-256", "carol", "carol-secret")
        b.proc.stop()
        b.proc.start()
        _scram_login(b.sasl, "sha256", "SCRAM-SHA-256", "carol", "carol-secret")
        run = subprocess.run([sys.executable, "-m", "brook", "users", "delete", "carol",
                              "--mechanism", "SCRAM-SHA-256", "--bootstrap-server", b.plain],
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        with WireClient(b.sasl) as c:
            assert handshake(c, "SCRAM-SHA-256").error_code == ErrorCode.none
            scram = ScramClient("sha256", "carol", "carol-secret")
            first = authenticate(c, scram.first())  # challenged as any user is, then refused
            assert authenticate(c, scram.final(first.auth_bytes)).error_code == ErrorCode.sasl_authentication_failed
    finally:
        b.proc.close()


def _scram_login(bootstrap, hash_name, mechanism, user, password) -> None:
    with WireClient(bootstrap) as c:
        assert handshake(c, mechanism).error_code == ErrorCode.none
        scram = ScramClient(hash_name, user, password)
        first = authenticate(c, scram.first())
        assert first.error_code == ErrorCode.none, first
        final = authenticate(c, scram.final(first.auth_bytes))
        assert final.error_code == ErrorCode.none, final
        assert final.auth_bytes == scram.expected_server_final
        assert final.session_lifetime.total_seconds() == 0


# ------------------------------------------------------------------ refusals


def _still_serves(b: SaslBroker) -> None:
    _scram_login(b.sasl, "sha512", "SCRAM-SHA-512", "scram512", "secret-512")


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_wrong_password_is_refused_with_kafkas_error_and_closed(sasl_broker, mechanism):
    from confluent_kafka import KafkaError, Producer
    user, _ = USERS[mechanism]
    errors = []
    p = Producer({"bootstrap.servers": sasl_broker.sasl, "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": "wrong",
                  "error_cb": errors.append})
    deadline = time.monotonic() + 15
    while not errors and time.monotonic() < deadline:
        p.poll(0.2)
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors
    expected = ("Authentication failed: Invalid username or password" if mechanism == "PLAIN" else
                f"Authentication failed during authentication due to invalid credentials with SASL "
                f"mechanism {mechanism}")
    assert expected in errors[0].str()
    _wait_logged(sasl_broker, "failed authentication from")
    _still_serves(sasl_broker)


@pytest.mark.parametrize("mechanism,hash_name", [("SCRAM-SHA-256", "sha256"), ("SCRAM-SHA-512", "sha512")])
def test_scram_an_unknown_user_gets_the_same_answer_as_a_wrong_password(sasl_broker, mechanism, hash_name):
    with WireClient(sasl_broker.sasl) as c:
        assert handshake(c, mechanism).error_code == ErrorCode.none
        client = ScramClient(hash_name, "nobody", "x")
        first = authenticate(c, client.first())
        assert first.error_code == ErrorCode.none  # challenged as a known user would be
        r = authenticate(c, client.final(first.auth_bytes))
        assert r.error_code == ErrorCode.sasl_authentication_failed
        assert r.error_message == ("Authentication failed during authentication due to invalid "
                                   f"credentials with SASL mechanism {mechanism}")
        assert c.closed_by_peer()
    _wait_logged(sasl_broker, "(user nobody): Authentication failed: Invalid user credentials")
    _still_serves(sasl_broker)


def test_plain_unknown_user_is_refused_after_the_delay(sasl_broker):
    with WireClient(sasl_broker.sasl) as c:
        assert handshake(c, "PLAIN").error_code == ErrorCode.none
        started = time.monotonic()
        r = authenticate(c, b"\0mallory\0alice-secret")
        assert time.monotonic() - started >= DELAY_MS / 1000
        assert (r.error_code, r.error_message) == (ErrorCode.sasl_authentication_failed,
                                                   "Authentication failed: Invalid username or password")
        assert c.closed_by_peer()
    _still_serves(sasl_broker)


def test_a_request_other_than_sasl_before_authentication_closes_the_connection(sasl_broker):
    metadata = load_request_schema(3, 1)(topics=None)
    with WireClient(sasl_broker.sasl) as c:  # a PLAINTEXT client on the SASL port
        c.send(metadata)
        assert c.closed_by_peer()
    _wait_logged(sasl_broker, "unexpected request of type Metadata during SASL handshake")
    with WireClient(sasl_broker.sasl) as c:  # after the handshake, before SaslAuthenticate
        assert handshake(c, "PLAIN").error_code == ErrorCode.none
        c.send(metadata)
        assert c.closed_by_peer()
    _wait_logged(sasl_broker, "unexpected request of type Metadata during SASL authentication")
    _still_serves(sasl_broker)


def test_api_versions_is_answered_before_the_handshake(sasl_broker):
    with WireClient(sasl_broker.sasl) as c:
        r = c.request(load_request_schema(18, 3)(client_software_name="t", client_software_version="1"))
        assert r.error_code == ErrorCode.none
        assert {17, 36, 50, 51} <= {k.api_key for k in r.api_keys}
        r = handshake(c, "GSSAPI")
        assert r.error_code == ErrorCode.unsupported_sasl_mechanism
        assert r.mechanisms == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
        assert c.closed_by_peer()


def test_an_oversized_frame_before_authentication_is_refused_on_its_length(sasl_broker):
    with WireClient(sasl_broker.sasl) as c:
        c.send_raw(struct.pack(">i", 100 * 1024 * 1024))  # 100 MB announced, none sent
        assert c.closed_by_peer()
    _wait_logged(sasl_broker, "a frame of 104857600 bytes, over sasl.server.max.receive.size (524288)")
    _still_serves(sasl_broker)


def test_a_scram_exchange_replayed_on_another_connection_fails(sasl_broker):
    scram = ScramClient("sha512", "scram512", "secret-512")
    with WireClient(sasl_broker.sasl) as c:
        handshake(c, "SCRAM-SHA-512")
        first = authenticate(c, scram.first())
        final_message = scram.final(first.auth_bytes)
        assert authenticate(c, final_message).error_code == ErrorCode.none
    with WireClient(sasl_broker.sasl) as c:  # the recorded messages again: a new server nonce
        handshake(c, "SCRAM-SHA-512")
        assert authenticate(c, scram.first()).error_code == ErrorCode.none
        r = authenticate(c, final_message)
        assert r.error_code == ErrorCode.sasl_authentication_failed
        assert c.closed_by_peer()
    _wait_logged(sasl_broker, "Invalid client nonce in the final client message.")
    _still_serves(sasl_broker)


def test_a_scram_exchange_cut_short_leaves_the_broker_serving(sasl_broker):
    scram = ScramClient("sha512", "scram512", "secret-512")
    c = WireClient(sasl_broker.sasl)
    handshake(c, "SCRAM-SHA-512")
    authenticate(c, scram.first())
    c.close()
    _wait_logged(sasl_broker, "closed during SCRAM-SHA-512 authentication")
    with WireClient(sasl_broker.sasl) as c:  # and half a frame, then gone
        handshake(c, "SCRAM-SHA-512")
        c.send_raw(struct.pack(">i", 50) + b"\0\x24")
    _still_serves(sasl_broker)


def test_sasl_requests_after_authentication_get_illegal_sasl_state(sasl_broker):
    with WireClient(sasl_broker.plain) as c:
        r = handshake(c, "PLAIN")
        assert r.error_code == ErrorCode.illegal_sasl_state
        assert authenticate(c, b"x").error_code == ErrorCode.illegal_sasl_state


def test_handshake_v0_takes_bare_tokens(sasl_broker):
    with WireClient(sasl_broker.sasl) as c:
        assert handshake(c, "PLAIN", version=0).error_code == ErrorCode.none
        token = b"\0alice\0alice-secret"
        c.send_raw(struct.pack(">i", len(token)) + token)
        assert c.recv_frame() == b""  # PLAIN's empty answer, framed
        r = c.request(load_request_schema(3, 1)(topics=None))  # authenticated: served
        assert r.brokers


def test_metadata_advertises_the_listener_the_client_came_in_on(sasl_broker):
    from confluent_kafka.admin import AdminClient
    user, password = USERS["PLAIN"]
    admin = AdminClient({"bootstrap.servers": sasl_broker.sasl, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": password})
    brokers = admin.list_topics(timeout=20).brokers
    assert [(b.host, b.port) for b in brokers.values()] == [("127.0.0.1", sasl_broker.sasl_port)]
    plain = AdminClient({"bootstrap.servers": sasl_broker.plain}).list_topics(timeout=20).brokers
    assert [(b.host, b.port) for b in plain.values()] == [("127.0.0.1", sasl_broker.plain_port)]


def test_describe_user_scram_credentials_shows_mechanisms_and_iterations(sasl_broker):
    from confluent_kafka.admin import AdminClient, ScramMechanism
    admin = AdminClient({"bootstrap.servers": sasl_broker.plain})
    described = admin.describe_user_scram_credentials(["scram512"])["scram512"].result(20)
    infos = described.scram_credential_infos
    assert [(i.mechanism, i.iterations) for i in infos] == [(ScramMechanism.SCRAM_SHA_512, 8192)]
    everyone = admin.describe_user_scram_credentials().result(20)
    assert {"scram256", "scram512"} <= set(everyone)
    unknown = admin.describe_user_scram_credentials(["nobody"])["nobody"]
    with pytest.raises(Exception, match="RESOURCE_NOT_FOUND|does not exist"):
        unknown.result(20)


def test_describe_configs_shows_the_mechanisms_and_hides_the_jaas_config(sasl_broker):
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType
    admin = AdminClient({"bootstrap.servers": sasl_broker.plain})
    (future,) = admin.describe_configs([ConfigResource(ResourceType.BROKER, "1")]).values()
    configs = future.result(20)
    assert configs["sasl.enabled.mechanisms"].value == "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
    assert not configs["sasl.enabled.mechanisms"].is_sensitive
    jaas = configs["listener.name.sasl_plaintext.plain.sasl.jaas.config"]
    assert jaas.is_sensitive and jaas.value is None


# ------------------------------------------------------------------ re-authentication (KIP-368)

REAUTH_MS = 1500


@pytest.fixture(scope="module")
def reauth_broker(tmp_path_factory):
    b = SaslBroker(tmp_path_factory.mktemp("reauth"))
    b.proc.overrides["connections.max.reauth.ms"] = REAUTH_MS
    b.proc.start()
    try:
        _create_scram_users(b.plain)
        yield b
    finally:
        b.proc.close()


def _login(c: WireClient, user="scram512", password="secret-512"):
    assert handshake(c, "SCRAM-SHA-512").error_code == ErrorCode.none
    scram = ScramClient("sha512", user, password)
    first = authenticate(c, scram.first())
    return authenticate(c, scram.final(first.auth_bytes))


def _metadata(c: WireClient):
    return c.request(load_request_schema(3, 1)(topics=None))


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_librdkafka_re_authenticates_on_its_connections_and_keeps_producing(reauth_broker, mechanism):
    from confluent_kafka import Producer
    user, password = USERS[mechanism]
    p = Producer({"bootstrap.servers": reauth_broker.sasl, "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password,
                  "linger.ms": 5})
    delivered = []
    deadline = time.monotonic() + 3.5 * REAUTH_MS / 1000  # sessions expire twice meanwhile
    i = 0
    while time.monotonic() < deadline:
        p.produce(f"reauth-{mechanism}", f"m{i}".encode(), on_delivery=lambda e, m: delivered.append(e))
        p.poll(0.05)
        i += 1
    assert p.flush(30) == 0
    assert len(delivered) == i and all(e is None for e in delivered)
    log = reauth_broker.log()
    assert re.search(rf"re-authenticated User:{user} from .* with {mechanism}", log), log[-3000:]
    assert "its SASL session expired" not in log


def test_the_session_lifetime_is_given_and_an_expired_session_closes_on_its_next_request(reauth_broker):
    with WireClient(reauth_broker.sasl) as c:
        final = _login(c)
        assert final.error_code == ErrorCode.none
        assert final.session_lifetime.total_seconds() * 1000 == REAUTH_MS
        assert _metadata(c).brokers  # within the session: served
        time.sleep(REAUTH_MS / 1000 + 0.2)
        c.send(load_request_schema(3, 1)(topics=None))
        assert c.closed_by_peer()
    _wait_logged(reauth_broker, "its SASL session expired without re-authentication")


def test_re_authenticating_in_time_extends_the_session(reauth_broker):
    with WireClient(reauth_broker.sasl) as c:
        assert _login(c).error_code == ErrorCode.none
        time.sleep(REAUTH_MS / 1000 * 0.7)
        again = _login(c)  # the same exchange, on the same connection
        assert again.error_code == ErrorCode.none
        assert again.session_lifetime.total_seconds() * 1000 == REAUTH_MS
        time.sleep(REAUTH_MS / 1000 * 0.7)  # past the first session's end
        assert _metadata(c).brokers
    _wait_logged(reauth_broker, "re-authenticated User:scram512")


def test_re_authenticating_as_someone_else_is_refused_and_closes(reauth_broker):
    with WireClient(reauth_broker.sasl) as c:
        assert handshake(c, "PLAIN").error_code == ErrorCode.none
        assert authenticate(c, b"\0alice\0alice-secret").error_code == ErrorCode.none
        assert handshake(c, "PLAIN").error_code == ErrorCode.none
        r = authenticate(c, b"\0admin\0admin-secret")
        assert (r.error_code, r.error_message) == (
            ErrorCode.sasl_authentication_failed,
            "Cannot change principals during re-authentication from User.alice: User.admin")
        assert c.closed_by_peer()
    with WireClient(reauth_broker.sasl) as c:  # another mechanism: refused too
        assert handshake(c, "PLAIN").error_code == ErrorCode.none
        assert authenticate(c, b"\0alice\0alice-secret").error_code == ErrorCode.none
        assert handshake(c, "SCRAM-SHA-512").error_code == ErrorCode.none
        r = authenticate(c, ScramClient("sha512", "alice", "x").first())
        assert r.error_code == ErrorCode.sasl_authentication_failed
        assert r.error_message == ("SASL mechanism 'SCRAM-SHA-512' requested by client is not supported "
                                   "for re-authentication of mechanism 'PLAIN'")
        assert c.closed_by_peer()
    _wait_logged(reauth_broker, "failed re-authentication of User:alice")


def test_without_a_session_lifetime_a_second_handshake_is_an_illegal_state(sasl_broker):
    with WireClient(sasl_broker.sasl) as c:
        final = _login(c)
        assert final.session_lifetime.total_seconds() == 0
        assert handshake(c, "SCRAM-SHA-512").error_code == ErrorCode.illegal_sasl_state
