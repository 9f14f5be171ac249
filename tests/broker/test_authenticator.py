"""The SASL exchange before authentication, in process: whatever bytes a client sends, the
connection ends with an answer or a close and one log line, never an error of the broker's."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema

from brook.broker.broker import Broker
from brook.broker.config import BrokerConfig
from brook.broker.connection import Connection
from tests.support.examples import examples
from tests.support.kafka_wire import frame

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_alice="alice-secret";')


def _broker(tmp_path) -> Broker:
    # Not opened: the exchange needs the config, the API table and the credentials only.
    return Broker(BrokerConfig.from_props({
        "log.dirs": str(tmp_path), "listeners": "SASL_PLAINTEXT://127.0.0.1:9093",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256", "connection.failed.authentication.delay.ms": "0",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS}))


def _exchange(broker: Broker, data: bytes) -> tuple[bytes, str | None]:
    """Send `data`, then close our end; (what the broker answered, the principal if authenticated)."""
    async def main():
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        conn = Connection(broker, ours, "test", "SASL_PLAINTEXT")
        task = conn.task = asyncio.ensure_future(conn.run())
        theirs.sendall(data)
        theirs.shutdown(socket.SHUT_WR)
        await asyncio.wait_for(task, 10)  # raises whatever escaped run()
        theirs.setblocking(False)
        received = b""
        try:
            while chunk := theirs.recv(65536):
                received += chunk
        except (BlockingIOError, ConnectionResetError):  # reset: closed with our bytes unread
            pass
        theirs.close()
        return received, conn.principal
    return asyncio.run(main())


def _handshake(mechanism: str) -> bytes:
    return frame(load_request_schema(17, 1)(mechanism=mechanism), 1)


def _authenticate(token: bytes) -> bytes:
    return frame(load_request_schema(36, 2)(auth_bytes=token), 2)


def test_plain_authenticates_and_the_principal_is_kept(tmp_path):
    _, principal = _exchange(_broker(tmp_path), _handshake("PLAIN") + _authenticate(b"\0alice\0alice-secret"))
    assert principal == "User:alice"


def test_a_failed_one_leaves_the_anonymous_principal(tmp_path):
    _, principal = _exchange(_broker(tmp_path), _handshake("PLAIN") + _authenticate(b"\0alice\0nope"))
    assert principal == "User:ANONYMOUS"


def test_an_oversized_frame_is_refused_unread(tmp_path, caplog):
    broker = _broker(tmp_path)
    with caplog.at_level(logging.WARNING):
        received, _ = _exchange(broker, struct.pack(">i", 524_289) + b"x" * 100)
    assert received == b""
    assert [r.getMessage() for r in caplog.records if "over sasl.server.max.receive.size" in r.getMessage()]


_FRAMES = st.one_of(
    st.binary(max_size=64),
    st.builds(lambda b: struct.pack(">i", len(b)) + b, st.binary(max_size=64)),
    st.builds(_authenticate, st.binary(max_size=64)),
    st.sampled_from([_handshake("PLAIN"), _handshake("SCRAM-SHA-256"), _handshake("GSSAPI"),
                     frame(load_request_schema(18, 3)(client_software_name="x", client_software_version="1"), 3)]),
)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_FRAMES, max_size=5))
def test_any_bytes_end_in_an_answer_or_a_close_never_a_broker_error(tmp_path, frames):
    broker = _broker(tmp_path)
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("brook").addHandler(handler)
    try:
        _, principal = _exchange(broker, b"".join(frames))
    finally:
        logging.getLogger("brook").removeHandler(handler)
    assert not [r for r in records if r.levelno >= logging.ERROR], [r.getMessage() for r in records]
    assert principal == "User:ANONYMOUS"


def test_a_frame_announced_before_authentication_costs_only_what_is_sent(tmp_path):
    # Before authenticating, a client may announce up to sasl.server.max.receive.size
    # (512 KiB); the broker holds the bytes as they come, not the size announced.
    import tracemalloc
    broker = _broker(tmp_path)
    data = _handshake("PLAIN") + struct.pack(">i", 500_000) + b"\1" * 100
    _exchange(broker, data)  # warm: imports and the event loop's first allocations
    tracemalloc.start()
    try:
        received, principal = _exchange(broker, data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert principal in (None, "User:ANONYMOUS") and received  # answered, then closed
    assert peak < 300_000, peak


def test_what_a_failed_login_logs_from_the_wire_is_escaped_and_cut_short(tmp_path, caplog):
    # A 60 KB user name with a newline in it: the log line quotes a short, escaped part of it.
    broker = _broker(tmp_path)
    user = "mallory\nFAKE LOG LINE " + "x" * 60_000
    with caplog.at_level(logging.INFO, logger="brook.broker.auth.authenticator"):
        _exchange(broker, _handshake("PLAIN") + _authenticate(f"\0{user}\0guess".encode()))
    lines = [r.getMessage() for r in caplog.records if "failed authentication" in r.getMessage()]
    assert len(lines) == 1
    assert len(lines[0]) < 1000
    assert "\n" not in lines[0] and "mallory\\nFAKE" in lines[0]
    assert "more characters" in lines[0]
