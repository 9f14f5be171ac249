"""SaslHandshake and SaslAuthenticate once the connection is past authentication (or on a
listener without SASL): Kafka answers ILLEGAL_SASL_STATE. The exchange itself, before
authentication, is `broker.authenticator`'s."""

from __future__ import annotations

from datetime import timedelta

from kio.schema.errors import ErrorCode

from ...protocol.messages import make, response_class
from . import Api

HANDSHAKE_KEY = 17
AUTHENTICATE_KEY = 36


def mechanisms(broker, connection) -> tuple[str, ...]:
    security = broker.config.listener_security.get(getattr(connection, "listener_name", None))
    return security.mechanisms if security is not None else ()


async def handshake(broker, request, connection):
    return make(response_class(HANDSHAKE_KEY, request.api_version), error_code=ErrorCode.illegal_sasl_state,
                mechanisms=mechanisms(broker, connection))


async def authenticate(broker, request, connection):
    return make(response_class(AUTHENTICATE_KEY, request.api_version), error_code=ErrorCode.illegal_sasl_state,
                error_message="SaslAuthenticate request received after successful authentication",
                auth_bytes=b"", session_lifetime=timedelta(0))


APIS = [
    Api(HANDSHAKE_KEY, "SaslHandshake", 0, 1, handshake),
    Api(AUTHENTICATE_KEY, "SaslAuthenticate", 0, 2, authenticate),
]
