"""The client's side of PLAIN and SCRAM, for a broker authenticating to another broker on a
SASL inter-broker listener (sasl.mechanism.inter.broker.protocol)."""

from __future__ import annotations

import base64
import hmac
import secrets
from dataclasses import dataclass, field

from . import scram


@dataclass(frozen=True, slots=True)
class ClientCredentials:
    mechanism: str
    username: str
    password: str = field(repr=False)


class SaslClientError(Exception):
    pass


class PlainClient:
    def __init__(self, username: str, password: str) -> None:
        self.username, self.password = username, password

    def messages(self):
        """A generator: yields the messages to send, is sent the server's answers."""
        yield f"\0{self.username}\0{self.password}".encode()


class ScramClient:
    def __init__(self, mechanism: scram.Mechanism, username: str, password: str) -> None:
        self.m, self.username, self.password = mechanism, username, password

    def messages(self):
        m = self.m
        nonce = secrets.token_urlsafe(24)
        first_bare = f"n={scram.saslname(self.username)},r={nonce}"
        server_first = (yield ("n,," + first_bare).encode()).decode()
        fields = dict(f.split("=", 1) for f in server_first.split(",") if "=" in f)
        if not fields.get("r", "").startswith(nonce) or "s" not in fields or "i" not in fields:
            raise SaslClientError(f"invalid SCRAM server first message: {server_first!r}")
        salt, iterations = base64.b64decode(fields["s"]), int(fields["i"])
        salted = scram.salted_password(m, self.password, salt, iterations)
        cred = scram.credential_from_salted(m, salted, salt, iterations)
        client_key = hmac.new(salted, b"Client Key", m.hash_name).digest()
        without_proof = f"c=biws,r={fields['r']}"
        auth = f"{first_bare},{server_first},{without_proof}".encode()
        signature = hmac.new(cred.stored_key, auth, m.hash_name).digest()
        proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
        server_final = (yield f"{without_proof},p={proof}".encode()).decode()
        expected = "v=" + base64.b64encode(hmac.new(cred.server_key, auth, m.hash_name).digest()).decode()
        if not hmac.compare_digest(server_final, expected):
            raise SaslClientError("the server's SCRAM signature is not the expected one")


def client_for(credentials: ClientCredentials):
    if credentials.mechanism == "PLAIN":
        return PlainClient(credentials.username, credentials.password)
    return ScramClient(scram.MECHANISMS[credentials.mechanism], credentials.username, credentials.password)


def sasl_exchange(credentials: ClientCredentials):
    """A client's whole SASL exchange as a generator, for a blocking or an asyncio connection
    alike: it yields the requests to send (SaslHandshake v1, then a SaslAuthenticate v2 for
    each of the mechanism's messages) and is sent each answer; a refusal raises
    SaslClientError."""
    from kio.index import load_request_schema

    handshake = yield load_request_schema(17, 1)(mechanism=credentials.mechanism)
    if handshake.error_code.value != 0:
        raise SaslClientError(f"SaslHandshake: {handshake.error_code.name} (the broker has "
                              f"{', '.join(handshake.mechanisms)})")
    steps = client_for(credentials).messages()
    message = next(steps)
    while True:
        answer = yield load_request_schema(36, 2)(auth_bytes=message)
        if answer.error_code.value != 0:
            raise SaslClientError(f"authentication as {credentials.username} with "
                                  f"{credentials.mechanism} failed: {answer.error_message}")
        try:
            message = steps.send(answer.auth_bytes)
        except StopIteration:
            return
