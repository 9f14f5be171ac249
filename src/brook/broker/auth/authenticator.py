"""The SASL exchange a connection on a SASL_PLAINTEXT listener goes through before its first
other request, as Kafka's SaslServerAuthenticator runs it:

- ApiVersions (at most once, before the handshake), then SaslHandshake naming an enabled
  mechanism; any other request closes the connection.
- After SaslHandshake v1, SaslAuthenticate requests carry the mechanism's messages; after
  v0 (old clients), the messages come as bare frames (a size, then the bytes).
- A failure is answered SASL_AUTHENTICATION_FAILED (v1) after
  connection.failed.authentication.delay.ms, and the connection is closed.

Frames are read one at a time, exactly (nothing of a later request is read ahead), and none
larger than sasl.server.max.receive.size is read at all: its size alone closes the
connection. Every outcome leaves one log line. Runs before `Connection.run`'s loop, so
authenticated and PLAINTEXT connections pay nothing for it.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from datetime import timedelta

from kio.schema.errors import ErrorCode

from ...protocol.log_text import loggable
from ...protocol.messages import (
    API_VERSIONS_KEY,
    SASL_AUTHENTICATE_KEY as AUTHENTICATE_KEY,
    SASL_HANDSHAKE_KEY as HANDSHAKE_KEY,
    MalformedRequestError,
    UnsupportedVersionError,
    encode_response,
    make,
    parse_request,
    peek_header,
    response_class,
)
from ...security import broker_identity, credentials, scram
from ...security.plain import PlainServer
from ...security.errors import SaslError
from ...security.scram import ScramServer
from ..handlers.api_versions import build_response as api_versions_response
from ..handlers.common import CloseConnection

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_READ_CHUNK = 64 * 1024


class Refused(Exception):
    """Close the connection, logging this."""


def _name(broker, api_key: int) -> str:
    api = broker.apis.get(api_key)
    return api.name if api is not None else f"(api key {api_key})"


def new_server(broker, mechanism: str, security):
    if mechanism == "PLAIN":
        return PlainServer(security.plain_users)
    m = scram.MECHANISMS[mechanism]
    return ScramServer(m, lambda user: _scram_credential(broker, user, m))


def _scram_credential(broker, user: str, m):
    """A user's stored credential; for the reserved names of brokers, only the one derived
    from the cluster's secret."""
    if broker_identity.is_reserved(user):
        cluster = broker.cluster
        return broker_identity.credential(cluster.broker_secret if cluster is not None else None, user, m)
    return credentials.lookup(broker.user_scram(), user, m)


def logged_in(conn, user: str) -> None:
    """The connection authenticated as `user`: its principal, and whether it is a broker's."""
    conn.principal = f"User:{user}"
    conn.peer_broker_id = broker_identity.broker_id_of(user)


async def authenticate(conn, security) -> bool:
    """True once the client has authenticated (conn.principal is set); False if the
    connection is to be closed (already logged)."""
    try:
        return await _exchange(conn, security)
    except Refused as exc:
        log.warning("closing connection from %s on listener %s before authentication: %s",
                    conn.peer, conn.listener_name, loggable(exc))
        return False
    except (OSError, asyncio.CancelledError):
        raise  # the connection's own end (run() knows these)
    except Exception:  # a bug here must cost one connection, never the broker
        log.exception("closing connection from %s on listener %s: authentication failed",
                      conn.peer, conn.listener_name)
        return False


async def _read_frame(conn) -> bytes | None:
    size_bytes = await _read_exact(conn, 4)
    if size_bytes is None:
        return None
    (size,) = _SIZE.unpack(size_bytes)
    limit = conn.broker.config.sasl_server_max_receive_size
    if size < 0 or size > limit:
        raise Refused(f"a frame of {size} bytes, over sasl.server.max.receive.size ({limit})")
    return await _read_exact(conn, size)


async def _read_exact(conn, n: int) -> bytes | None:
    """`n` bytes, held as they come (an announced size costs nothing until it is sent)."""
    buf = bytearray()
    scratch = memoryview(bytearray(min(n, _READ_CHUNK)))
    while len(buf) < n:
        try:
            k = conn.sock.recv_into(scratch[:n - len(buf)])
        except BlockingIOError:
            await conn._readable()
            continue
        if k == 0:
            return None
        buf += scratch[:k]
    conn.last_active = conn.loop.time()
    return bytes(buf)


async def _send(conn, data: bytes) -> None:
    conn._write(data)
    await conn._drain()


async def _fail_later(conn, data: bytes | None) -> None:
    """Kafka's connection.failed.authentication.delay.ms: a client guessing passwords waits."""
    await asyncio.sleep(conn.broker.config.connection_failed_authentication_delay_ms / 1000)
    if data is not None:
        await _send(conn, data)


async def _exchange(conn, security) -> bool:
    broker = conn.broker
    versions_seen = False
    while True:  # ApiVersions, then SaslHandshake
        frame = await _read_frame(conn)
        if frame is None:
            return False
        try:
            api_key, _, _ = peek_header(frame)
        except MalformedRequestError as exc:
            raise Refused(str(exc)) from None
        if api_key not in (API_VERSIONS_KEY, HANDSHAKE_KEY) or (api_key == API_VERSIONS_KEY and versions_seen):
            raise Refused(f"unexpected request of type {_name(broker, api_key)} during SASL "
                          "handshake")
        try:
            request = parse_request(frame, broker.supported_versions)
        except UnsupportedVersionError as exc:
            if exc.api_key != API_VERSIONS_KEY:
                raise Refused(str(exc)) from None
            body = api_versions_response(broker, 0, ErrorCode.unsupported_version)
            await _send(conn, encode_response(API_VERSIONS_KEY, 0, exc.correlation_id, body))
            continue
        except MalformedRequestError as exc:
            raise Refused(str(exc)) from None
        if api_key == API_VERSIONS_KEY:
            versions_seen = True
            body = api_versions_response(broker, request.api_version)
            await _send(conn, encode_response(api_key, request.api_version, request.correlation_id, body))
            continue
        break
    mechanism = request.body.mechanism
    ok = mechanism in security.mechanisms
    body = make(response_class(HANDSHAKE_KEY, request.api_version),
                error_code=ErrorCode.none if ok else ErrorCode.unsupported_sasl_mechanism,
                mechanisms=security.mechanisms)
    data = encode_response(HANDSHAKE_KEY, request.api_version, request.correlation_id, body)
    if not ok:
        await _fail_later(conn, data)
        raise Refused(f"Unsupported SASL mechanism {mechanism}")
    await _send(conn, data)
    server = new_server(broker, mechanism, security)
    framed = request.api_version >= 1  # v0: bare tokens, no SaslAuthenticate around them
    while not server.complete:
        frame = await _read_frame(conn)
        if frame is None:
            log.info("connection from %s closed during %s authentication", conn.peer, mechanism)
            return False
        if framed:
            try:
                api_key, _, _ = peek_header(frame)
                if api_key != AUTHENTICATE_KEY:
                    raise Refused(f"unexpected request of type {_name(broker, api_key)} during "
                                  "SASL authentication")
                request = parse_request(frame, broker.supported_versions)
            except (MalformedRequestError, UnsupportedVersionError) as exc:
                raise Refused(str(exc)) from None
            token = request.body.auth_bytes
        else:
            token = frame
        try:
            reply = server.evaluate(token)
        except SaslError as exc:
            message = (str(exc) if exc.public else "Authentication failed during authentication due "
                       f"to invalid credentials with SASL mechanism {mechanism}")
            user = getattr(server, "user", None)
            log.warning("failed authentication from %s on listener %s with %s%s: %s", conn.peer,
                        conn.listener_name, mechanism, f" (user {loggable(user, 64)})" if user else "",
                        loggable(exc))
            await _fail_later(conn, _authenticate_response(request, ErrorCode.sasl_authentication_failed,
                                                           message, b"") if framed else None)
            return False
        lifetime_ms = _start_session(conn, security, mechanism) if server.complete else 0
        if framed:
            await _send(conn, _authenticate_response(request, ErrorCode.none, None, reply, lifetime_ms))
        else:
            await _send(conn, _SIZE.pack(len(reply)) + reply)
    logged_in(conn, server.user)
    log.info("authenticated %s from %s on listener %s with %s%s", conn.principal, conn.peer,
             conn.listener_name, mechanism, "" if framed else " (SaslHandshake v0, bare tokens)")
    return True


def _start_session(conn, security, mechanism: str) -> int:
    """The session's lifetime in ms (connections.max.reauth.ms of the mechanism; 0: the
    connection's), from now."""
    conn.sasl_mechanism = mechanism
    lifetime_ms = security.max_reauth_ms.get(mechanism, 0)
    conn.session_expires = conn.loop.time() + lifetime_ms / 1000 if lifetime_ms else None
    return lifetime_ms


def _authenticate_body(api_version: int, code: ErrorCode, message: str | None, auth_bytes: bytes,
                       lifetime_ms: int = 0):
    return make(response_class(AUTHENTICATE_KEY, api_version), error_code=code,
                error_message=message, auth_bytes=auth_bytes,
                session_lifetime=timedelta(milliseconds=lifetime_ms))


def _authenticate_response(request, code: ErrorCode, message: str | None, auth_bytes: bytes,
                           lifetime_ms: int = 0) -> bytes:
    body = _authenticate_body(request.api_version, code, message, auth_bytes, lifetime_ms)
    return encode_response(AUTHENTICATE_KEY, request.api_version, request.correlation_id, body)


class Reauthentication:
    """KIP-368: an authenticated connection whose session has a lifetime authenticates again
    on the same connection, with SaslHandshake (v1) and SaslAuthenticate requests in its
    ordinary request stream, before its session expires. The mechanism and the principal must
    stay the same; a failure is answered (after connection.failed.authentication.delay.ms)
    and closes the connection."""

    def __init__(self, conn, security, mechanism: str) -> None:
        self.conn, self.security, self.mechanism = conn, security, mechanism
        self.server = new_server(conn.broker, mechanism, security)

    async def step(self, request):
        """The answer to one SaslAuthenticate (CloseConnection carrying it on failure)."""
        conn = self.conn
        if self.mechanism != conn.sasl_mechanism:
            await self._fail(request, f"SASL mechanism '{self.mechanism}' requested by client is not "
                                      f"supported for re-authentication of mechanism '{conn.sasl_mechanism}'")
        try:
            reply = self.server.evaluate(request.body.auth_bytes)
        except SaslError as exc:
            await self._fail(request, str(exc) if exc.public else
                             "Authentication failed during re-authentication due to invalid "
                             f"credentials with SASL mechanism {self.mechanism}", exc)
        if not self.server.complete:
            return _authenticate_body(request.api_version, ErrorCode.none, None, reply)
        principal = f"User:{self.server.user}"
        if principal != conn.principal:
            await self._fail(request, "Cannot change principals during re-authentication from "
                                      f"{conn.principal.replace(':', '.', 1)}: {principal.replace(':', '.', 1)}")
        conn.reauthentication = None
        lifetime_ms = _start_session(conn, self.security, self.mechanism)
        log.info("re-authenticated %s from %s on listener %s with %s", principal, conn.peer,
                 conn.listener_name, self.mechanism)
        return _authenticate_body(request.api_version, ErrorCode.none, None, reply, lifetime_ms)

    async def _fail(self, request, message: str, exc: Exception | None = None):
        conn = self.conn
        log.warning("failed re-authentication of %s from %s on listener %s with %s: %s", conn.principal,
                    conn.peer, conn.listener_name, self.mechanism, loggable(exc or message))
        await asyncio.sleep(conn.broker.config.connection_failed_authentication_delay_ms / 1000)
        raise CloseConnection("re-authentication failed", _authenticate_body(
            request.api_version, ErrorCode.sasl_authentication_failed, message, b""))


class BrokerLogin:
    """A broker's login on a listener without SASL (PLAINTEXT, SSL): SaslHandshake v1 naming
    SCRAM-SHA-512, then SaslAuthenticate requests in the ordinary request stream, where only
    the cluster's inter-broker identity is known (brook.security.broker_identity). Ordinary
    clients never send SaslHandshake on such a listener (they are answered
    ILLEGAL_SASL_STATE, as before). A failure is answered after
    connection.failed.authentication.delay.ms and closes the connection."""

    def __init__(self, conn, secret: bytes) -> None:
        self.conn = conn
        m = broker_identity.MECHANISM
        self.server = ScramServer(m, lambda user: broker_identity.credential(secret, user, m))

    async def step(self, request):
        """The answer to one SaslAuthenticate (CloseConnection carrying it on failure)."""
        conn = self.conn
        try:
            reply = self.server.evaluate(request.body.auth_bytes)
        except SaslError as exc:
            user = self.server.user
            log.warning("failed broker login from %s on listener %s%s: %s", conn.peer, conn.listener_name,
                        f" (user {user})" if user else "", exc)
            await asyncio.sleep(conn.broker.config.connection_failed_authentication_delay_ms / 1000)
            raise CloseConnection("broker login failed", _authenticate_body(
                request.api_version, ErrorCode.sasl_authentication_failed,
                "Authentication failed during authentication due to invalid credentials with SASL "
                f"mechanism {broker_identity.MECHANISM.name}", b""))
        if self.server.complete:
            conn.reauthentication = None
            logged_in(conn, self.server.user)
            log.info("authenticated %s (broker %d) from %s on listener %s with %s", conn.principal,
                     conn.peer_broker_id, conn.peer, conn.listener_name, broker_identity.MECHANISM.name)
        return _authenticate_body(request.api_version, ErrorCode.none, None, reply)
