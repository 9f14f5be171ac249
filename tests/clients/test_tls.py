"""TLS listeners against a broker process: SSL with client certificates and SASL_SSL with
PLAIN and SCRAM-SHA-512; confluent-kafka, kafka-python, aiokafka and kcat produce, consume in
a group and commit; bad certificates, a plaintext client on a TLS port and the reverse, and a
huge frame before authentication are refused with one log line while others are served."""

from __future__ import annotations

import socket
import ssl
import struct
import subprocess
import time

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from tests.support import client_roundtrips as roundtrips
from tests.support.kafka_wire import WireClient
from tests.support.sasl_wire import handshake
from tests.support.tls_broker import TlsBroker
from tests.support.tls_certs import TlsFiles

@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return TlsFiles(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory, files):
    b = TlsBroker(tmp_path_factory.mktemp("tls"), files)
    b.proc.start()
    try:
        from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                           UserScramCredentialUpsertion)
        admin = AdminClient({"bootstrap.servers": b.plain})
        for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                "scram512", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"secret-512")]).values():
            assert f.result(30) is None
        yield b
    finally:
        b.proc.close()


# The client settings of each way in, in confluent-kafka's (librdkafka's) names.
def _ck_conf(b: TlsBroker, way: str, client: str = "alice") -> dict:
    f = b.files
    if way == "SSL":
        return {"bootstrap.servers": b.ssl, "security.protocol": "SSL", "ssl.ca.location": str(f.ca),
                "ssl.certificate.location": f.cert(client), "ssl.key.location": f.key(client)}
    mechanism, user, password = ({"SASL_SSL-PLAIN": ("PLAIN", "alice", "alice-secret"),
                                  "SASL_SSL-SCRAM": ("SCRAM-SHA-512", "scram512", "secret-512")}[way])
    return {"bootstrap.servers": b.sasl_ssl, "security.protocol": "SASL_SSL", "ssl.ca.location": str(f.ca),
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}


WAYS = ["SSL", "SASL_SSL-PLAIN", "SASL_SSL-SCRAM"]
PRINCIPALS = {"SSL": "User:alice", "SASL_SSL-PLAIN": "User:alice", "SASL_SSL-SCRAM": "User:scram512"}


def _kp_conf(b: TlsBroker, way: str) -> dict:
    ck = _ck_conf(b, way)
    conf = dict(bootstrap_servers=ck["bootstrap.servers"], security_protocol=ck["security.protocol"],
                ssl_cafile=ck["ssl.ca.location"])
    if way == "SSL":
        conf.update(ssl_certfile=ck["ssl.certificate.location"], ssl_keyfile=ck["ssl.key.location"])
    else:
        conf.update(sasl_mechanism=ck["sasl.mechanism"], sasl_plain_username=ck["sasl.username"],
                    sasl_plain_password=ck["sasl.password"])
    return conf


# ------------------------------------------------------------------ real clients


@pytest.mark.parametrize("way", WAYS)
def test_confluent_kafka_produces_consumes_in_a_group_and_commits(tls_broker, way):
    roundtrips.confluent(_ck_conf(tls_broker, way), f"ck-{way}", f"ck-group-{way}")
    tls_broker.wait_logged(f"authenticated {PRINCIPALS[way]} from")


def test_a_fetch_of_many_megabytes_arrives_whole_over_tls(tls_broker):
    """Fetch answers on TLS are read from the segment files and encrypted in chunks (no
    sendfile): several MB, compressed and not, come back byte for byte."""
    from confluent_kafka import Consumer, Producer
    conf = _ck_conf(tls_broker, "SSL")
    values = [bytes([i % 251]) * 100_000 + i.to_bytes(4, "big") for i in range(80)]  # 8 MB
    for codec in ("none", "zstd"):
        topic = f"big-{codec}"
        p = Producer({**conf, "compression.type": codec, "linger.ms": 50})
        for v in values:
            p.produce(topic, v)
        assert p.flush(60) == 0
        c = Consumer({**conf, "group.id": f"big-{codec}", "auto.offset.reset": "earliest",
                      "fetch.max.bytes": 50 * 1024 * 1024, "max.partition.fetch.bytes": 10 * 1024 * 1024})
        c.subscribe([topic])
        got = []
        deadline = time.monotonic() + 60
        while len(got) < len(values) and time.monotonic() < deadline:
            m = c.poll(1)
            if m is not None and m.error() is None:
                got.append(m.value())
        c.close()
        assert sorted(got) == sorted(values)


@pytest.mark.parametrize("way", WAYS)
def test_kafka_python_produces_consumes_in_a_group_and_commits(tls_broker, way):
    roundtrips.kafka_python(_kp_conf(tls_broker, way), f"kp-{way}", f"kp-group-{way}")


@pytest.mark.parametrize("way", ["SSL", "SASL_SSL-SCRAM"])
def test_aiokafka_produces_consumes_in_a_group_and_commits(tls_broker, way):
    from aiokafka.helpers import create_ssl_context
    kp = _kp_conf(tls_broker, way)
    context = create_ssl_context(cafile=kp["ssl_cafile"], certfile=kp.get("ssl_certfile"),
                                 keyfile=kp.get("ssl_keyfile"))
    conf = dict(bootstrap_servers=kp["bootstrap_servers"], security_protocol=kp["security_protocol"],
                ssl_context=context)
    if way != "SSL":
        conf.update(sasl_mechanism=kp["sasl_mechanism"], sasl_plain_username=kp["sasl_plain_username"],
                    sasl_plain_password=kp["sasl_plain_password"])
    roundtrips.aiokafka(conf, f"aio-{way}", f"aio-group-{way}")


@pytest.mark.skipif(roundtrips.KCAT is None, reason="kcat is not installed (make tools)")
@pytest.mark.parametrize("way", ["SSL", "SASL_SSL-SCRAM"])
def test_kcat_produces_and_consumes_in_a_group(tls_broker, way):
    roundtrips.kcat(_ck_conf(tls_broker, way), f"kcat-{way}", f"kcat-group-{way}")


# ------------------------------------------------------------------ refusals


def _context(files: TlsFiles, client: str | None = None, ca=None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca or files.ca))
    if client is not None:
        context.load_cert_chain(files.cert(client), files.key(client))
    return context


def _still_serves(b: TlsBroker) -> None:
    with WireClient(b.ssl, ssl_context=_context(b.files, "bob")) as c:
        r = c.request(load_request_schema(3, 12)(topics=None, allow_auto_topic_creation=False,
                                                 include_topic_authorized_operations=False))
        assert [x.port for x in r.brokers] == [b.ssl_port]  # the listener it came in on


@pytest.mark.parametrize("client,reason", [
    ("stranger", "certificate"),  # signed by a CA the broker does not trust
    ("expired", "certificate"),
    (None, "certificate"),  # ssl.client.auth=required, and no certificate
])
def test_a_client_certificate_the_broker_cannot_trust_is_refused(tls_broker, client, reason):
    from confluent_kafka import Producer
    conf = _ck_conf(tls_broker, "SSL", client or "alice")
    if client is None:
        del conf["ssl.certificate.location"], conf["ssl.key.location"]
    errors = []
    p = Producer({**conf, "error_cb": errors.append})
    deadline = time.monotonic() + 15
    while not errors and time.monotonic() < deadline:
        p.poll(0.2)
    assert errors, "the handshake was not refused"
    log = tls_broker.wait_logged("(SSL handshake failed)")
    assert reason in log.lower()
    _still_serves(tls_broker)


def test_a_broker_certificate_the_client_does_not_trust_fails_the_client_side(tls_broker):
    with pytest.raises(ssl.SSLCertVerificationError):
        WireClient(tls_broker.sasl_ssl, ssl_context=_context(tls_broker.files, ca=tls_broker.files.other_ca))
    _still_serves(tls_broker)


def test_a_plaintext_client_on_a_tls_port_is_closed_after_one_log_line(tls_broker):
    before = tls_broker.log().count("(SSL handshake failed)")
    with WireClient(tls_broker.ssl) as c:  # ApiVersions in clear, where a ClientHello belongs
        c.send(load_request_schema(18, 3)(client_software_name="t", client_software_version="1"))
        assert c.closed_by_peer()
    deadline = time.monotonic() + 10
    while tls_broker.log().count("(SSL handshake failed)") == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert tls_broker.log().count("(SSL handshake failed)") == before + 1
    _still_serves(tls_broker)


def test_a_tls_client_on_a_plaintext_port_is_closed_with_a_hint(tls_broker):
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        WireClient(tls_broker.plain, timeout=5, ssl_context=_context(tls_broker.files, "alice"))
    tls_broker.wait_logged("(a TLS client on a plaintext listener?)")
    _still_serves(tls_broker)


def test_a_100_mb_frame_before_sasl_authentication_is_refused_on_its_length(tls_broker):
    with WireClient(tls_broker.sasl_ssl, ssl_context=_context(tls_broker.files)) as c:
        c.send_raw(struct.pack(">i", 100 * 1024 * 1024) + b"x" * 1000)
        assert c.closed_by_peer()
    tls_broker.wait_logged("a frame of 104857600 bytes, over sasl.server.max.receive.size (524288)")
    _still_serves(tls_broker)


def test_a_wrong_password_over_sasl_ssl_gets_kafkas_error(tls_broker):
    with WireClient(tls_broker.sasl_ssl, ssl_context=_context(tls_broker.files)) as c:
        assert handshake(c, "PLAIN").error_code == ErrorCode.none
        from tests.support.sasl_wire import authenticate
        r = authenticate(c, b"\0alice\0wrong")
        assert (r.error_code, r.error_message) == (ErrorCode.sasl_authentication_failed,
                                                   "Authentication failed: Invalid username or password")
        assert c.closed_by_peer()
    _still_serves(tls_broker)


def test_a_connection_that_never_finishes_its_handshake_holds_up_no_one(tls_broker):
    with socket.create_connection(("127.0.0.1", tls_broker.ssl_port)) as silent:
        silent.sendall(b"\x16\x03\x01")  # the start of a ClientHello, and nothing more
        _still_serves(tls_broker)


# ------------------------------------------------------------------ brook's own clients


def _brook(*args, input=None) -> subprocess.CompletedProcess:
    import sys
    return subprocess.run([sys.executable, "-m", "brook", *args], input=input, capture_output=True,
                          text=True, timeout=90)


def test_brook_commands_take_kafkas_client_properties_with_command_config(tls_broker, tmp_path):
    """A Java client.properties (SASL_SSL, SCRAM, a PEM truststore) after the command's name, as
    Kafka's tools take it: confluent-kafka's admin calls and brook's own connection (OffsetDelete
    goes through it) both authenticate over TLS."""
    f = tls_broker.files
    config = tmp_path / "client.properties"
    config.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                      "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule "
                      'required username="scram512" password="secret-512";\n'
                      f"ssl.truststore.type=PEM\nssl.truststore.location={f.ca}\n")
    b = ["-b", tls_broker.sasl_ssl, "--command-config", str(config)]
    run = _brook("topics", "create", "cli-tls", "--partitions", "2", *b)
    assert run.returncode == 0, run.stderr
    run = _brook("produce", "cli-tls", *b, input="a\nb\nc\n")
    assert run.returncode == 0, run.stderr
    run = _brook("consume", "cli-tls", "--group", "cli-tls-group", "--from-beginning",
                 "--max-messages", "3", *b)
    assert run.returncode == 0, run.stderr
    assert sorted(run.stdout.split()) == ["a", "b", "c"]
    run = _brook("groups", "delete-offsets", "cli-tls-group", "--topic", "cli-tls", *b)
    assert run.returncode == 0, run.stderr
    tls_broker.wait_logged("with SCRAM-SHA-512")
    # the same before the command's name, and through the environment; without it, refused
    run = _brook("--command-config", str(config), "topics", "list", "-b", tls_broker.sasl_ssl)
    assert run.returncode == 0 and "cli-tls" in run.stdout, run.stderr
    run = _brook("topics", "list", "-b", tls_broker.sasl_ssl, "--timeout", "3")
    assert run.returncode != 0


def test_brook_commands_with_librdkafka_names_and_a_client_certificate(tls_broker, tmp_path):
    f = tls_broker.files
    config = tmp_path / "ssl.properties"
    config.write_text(f"security.protocol=SSL\nssl.ca.location={f.ca}\n"
                      f"ssl.certificate.location={f.cert('bob')}\nssl.key.location={f.key('bob')}\n")
    run = _brook("topics", "list", "-b", tls_broker.ssl, "--command-config", str(config))
    assert run.returncode == 0, run.stderr
    tls_broker.wait_logged("authenticated User:bob from")


def test_a_command_config_brook_cannot_use_is_an_argument_error(tls_broker, tmp_path):
    config = tmp_path / "kerberos.properties"
    config.write_text("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n")
    run = _brook("topics", "list", "-b", tls_broker.sasl_ssl, "--command-config", str(config))
    assert run.returncode == 2
    assert "sasl.mechanism=GSSAPI" in run.stderr


@pytest.mark.parametrize("way", WAYS)
def test_the_spark_connectors_bulk_reader_reads_over_tls_and_sasl(tls_broker, way):
    from confluent_kafka import Producer

    from brook.client import FetchSettings, RangeReader
    conf = _ck_conf(tls_broker, way)
    topic = f"reader-{way}"
    p = Producer(conf)
    for i in range(300):
        p.produce(topic, f"v{i}".encode(), partition=0)
    assert p.flush(30) == 0
    with RangeReader(FetchSettings.from_client(conf)) as reader:
        values = [v for b in reader.read(topic, 0, 0, 300) for v in b.column("value").to_pylist()]
    assert values == [f"v{i}".encode() for i in range(300)]


# ------------------------------------------------------------------ certificate rotation


def _served_certificate(b: TlsBroker) -> bytes:
    with socket.create_connection(("127.0.0.1", b.ssl_port)) as raw:
        with _context(b.files, "alice").wrap_socket(raw, server_hostname="127.0.0.1") as s:
            return s.getpeercert(binary_form=True)


def _der(pem: bytes) -> bytes:
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding
    return x509.load_pem_x509_certificate(pem).public_bytes(Encoding.DER)


def test_a_listeners_certificate_is_rotated_with_alter_configs_without_a_restart(tmp_path, files):
    """Kafka's dynamic keystore update (KIP-226): new connections get the new certificate,
    connections already open go on, a keystore that cannot be loaded is refused whole, and the
    new location survives a restart."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
    b = TlsBroker(tmp_path / "rotate", files)
    b.proc.start()
    try:
        assert _served_certificate(b) == _der(files.broker_cert_pem)
        open_before = WireClient(b.ssl, ssl_context=_context(files, "bob"))
        admin = AdminClient({"bootstrap.servers": b.plain})

        def alter(value: str):
            resource = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[ConfigEntry(
                "listener.name.ssl.ssl.keystore.location", value,
                incremental_operation=AlterConfigOpType.SET)])
            return admin.incremental_alter_configs([resource])[resource].result(30)

        with pytest.raises(Exception, match="cannot load the key and certificates"):
            alter(str(tmp_path / "missing.pem"))
        assert _served_certificate(b) == _der(files.broker_cert_pem)

        alter(str(files.renewed_keystore))
        assert _served_certificate(b) == _der(files.renewed_cert_pem)
        r = open_before.request(load_request_schema(18, 3)(client_software_name="t", client_software_version="1"))
        assert r.error_code == ErrorCode.none  # the connection made before goes on
        open_before.close()
        described = admin.describe_configs([ConfigResource(ResourceType.BROKER, "1")])
        entries = next(iter(described.values())).result(30)
        entry = entries["listener.name.ssl.ssl.keystore.location"]
        assert (entry.value, entry.is_read_only) == (str(files.renewed_keystore), False)

        b.proc.stop()
        b.proc.start()
        assert _served_certificate(b) == _der(files.renewed_cert_pem)
    finally:
        b.proc.close()
