"""SaslHandshake and SaslAuthenticate once the connection is past authentication: a
re-authentication (KIP-368) when the connection's session has a lifetime
(connections.max.reauth.ms); on a listener without SASL in a cluster, a broker's login with
the cluster's inter-broker identity (SCRAM-SHA-512); else ILLEGAL_SASL_STATE. The exchanges
themselves are `broker.authenticator`'s."""

from __future__ import annotations

from datetime import timedelta

from kio.schema.errors import ErrorCode

from ...protocol.messages import SASL_AUTHENTICATE_KEY as AUTHENTICATE_KEY
from ...protocol.messages import SASL_HANDSHAKE_KEY as HANDSHAKE_KEY
from ...protocol.messages import make, response_class
from ...security import broker_identity
from ..auth.authenticator import BrokerLogin, Reauthentication
from .api import Api
from .common import CloseConnection


def mechanisms(broker, connection) -> tuple[str, ...]:
    security = broker.config.listener_security.get(getattr(connection, "listener_name", None))
    return security.mechanisms if security is not None else ()


async def handshake(broker, request, connection):
    enabled = mechanisms(broker, connection)
    login = _broker_login(broker, request, connection)
    if login is not None:
        connection.reauthentication = login
        return make(response_class(HANDSHAKE_KEY, request.api_version), error_code=ErrorCode.none,
                    mechanisms=(broker_identity.MECHANISM.name,))
    if request.api_version < 1 or getattr(connection, "session_expires", None) is None:
        return make(response_class(HANDSHAKE_KEY, request.api_version),
                    error_code=ErrorCode.illegal_sasl_state, mechanisms=enabled)
    if request.body.mechanism not in enabled:
        raise CloseConnection("re-authentication with an unsupported mechanism", make(
            response_class(HANDSHAKE_KEY, request.api_version),
            error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=enabled))
    security = broker.config.listener_security[connection.listener_name]
    connection.reauthentication = Reauthentication(connection, security, request.body.mechanism)
    return make(response_class(HANDSHAKE_KEY, request.api_version), error_code=ErrorCode.none,
                mechanisms=enabled)


def _broker_login(broker, request, connection):
    """A broker logging in to this one on a listener without SASL (a BrokerLogin), else None."""
    cluster = broker.cluster
    if (cluster is None or cluster.broker_secret is None or request.api_version < 1
            or request.body.mechanism != broker_identity.MECHANISM.name
            or getattr(connection, "peer_broker_id", None) is not None
            or getattr(connection, "reauthentication", None) is not None):
        return None
    security = broker.config.listener_security.get(getattr(connection, "listener_name", None))
    if security is not None and security.sasl:
        return None  # a SASL listener: logins go through its own exchange
    return BrokerLogin(connection, cluster.broker_secret)


async def authenticate(broker, request, connection):
    reauthentication = getattr(connection, "reauthentication", None)
    if reauthentication is not None:
        return await reauthentication.step(request)
    return make(response_class(AUTHENTICATE_KEY, request.api_version), error_code=ErrorCode.illegal_sasl_state,
                error_message="SaslAuthenticate request received after successful authentication",
                auth_bytes=b"", session_lifetime=timedelta(0))


APIS = [
    Api(HANDSHAKE_KEY, "SaslHandshake", 0, 1, handshake),
    Api(AUTHENTICATE_KEY, "SaslAuthenticate", 0, 2, authenticate),
]
