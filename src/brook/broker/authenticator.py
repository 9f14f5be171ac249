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

from ..protocol.messages import (
    API_VERSIONS_KEY,
    MalformedRequestError,
    UnsupportedVersionError,
    encode_response,
    make,
    parse_request,
    peek_header,
    response_class,
)
from ..security import credentials, scram
from ..security.plain import PlainServer
from ..security.errors import SaslError
from ..security.scram import ScramServer
from .handlers.api_versions import build_response as api_versions_response
from .handlers.sasl import AUTHENTICATE_KEY, HANDSHAKE_KEY

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")


class Refused(Exception):
    """Close the connection, logging this."""


def _name(broker, api_key: int) -> str:
    api = broker.apis.get(api_key)
    return api.name if api is not None else f"(api key {api_key})"


def new_server(broker, mechanism: str, security):
    if mechanism == "PLAIN":
        return PlainServer(security.plain_users)
    m = scram.MECHANISMS[mechanism]
    return ScramServer(m, lambda user: credentials.lookup(broker.user_scram(), user, m))


async def authenticate(conn, security) -> bool:
    """True once the client has authenticated (conn.principal is set); False if the
    connection is to be closed (already logged)."""
    try:
        return await _exchange(conn, security)
    except Refused as exc:
        log.warning("closing connection from %s on listener %s before authentication: %s",
                    conn.peer, conn.listener_name, exc)
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
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        try:
            k = conn.sock.recv_into(view[got:])
        except BlockingIOError:
            await conn._readable()
            continue
        if k == 0:
            return None
        got += k
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
                        conn.listener_name, mechanism, f" (user {user})" if user else "", exc)
            await _fail_later(conn, _authenticate_response(request, ErrorCode.sasl_authentication_failed,
                                                           message, b"") if framed else None)
            return False
        if framed:
            await _send(conn, _authenticate_response(request, ErrorCode.none, None, reply))
        else:
            await _send(conn, _SIZE.pack(len(reply)) + reply)
    conn.principal = f"User:{server.user}"
    log.info("authenticated %s from %s on listener %s with %s%s", conn.principal, conn.peer,
             conn.listener_name, mechanism, "" if framed else " (SaslHandshake v0, bare tokens)")
    return True


def _authenticate_response(request, code: ErrorCode, message: str | None, auth_bytes: bytes) -> bytes:
    body = make(response_class(AUTHENTICATE_KEY, request.api_version), error_code=code,
                error_message=message, auth_bytes=auth_bytes, session_lifetime=timedelta(0))
    return encode_response(AUTHENTICATE_KEY, request.api_version, request.correlation_id, body)
