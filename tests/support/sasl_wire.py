"""SASL over the wire for tests: a SCRAM client's messages (RFC 5802, written from the RFC
for the tests, independent of brook's server) and SaslHandshake/SaslAuthenticate requests
through `WireClient`."""

from __future__ import annotations

import base64
import hashlib
import hmac

from kio.index import load_request_schema

from tests.support.kafka_wire import WireClient


class ScramClient:
    def __init__(self, hash_name: str, user: str, password: str, nonce: str = "fyko+d2lbbFgONRv9qkxdawL") -> None:
        self.hash_name, self.user, self.password, self.nonce = hash_name, user, password, nonce
        self.first_bare = f"n={user},r={nonce}"

    def first(self) -> bytes:
        return ("n,," + self.first_bare).encode()

    def final(self, server_first: bytes) -> bytes:
        fields = dict(f.split("=", 1) for f in server_first.decode().split(","))
        salted = hashlib.pbkdf2_hmac(self.hash_name, self.password.encode(), base64.b64decode(fields["s"]),
                                     int(fields["i"]))
        client_key = hmac.new(salted, b"Client Key", self.hash_name).digest()
        stored_key = hashlib.new(self.hash_name, client_key).digest()
        without_proof = f"c=biws,r={fields['r']}"
        auth = f"{self.first_bare},{server_first.decode()},{without_proof}".encode()
        signature = hmac.new(stored_key, auth, self.hash_name).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        server_key = hmac.new(salted, b"Server Key", self.hash_name).digest()
        self.expected_server_final = b"v=" + base64.b64encode(hmac.new(server_key, auth, self.hash_name).digest())
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def handshake(client: WireClient, mechanism: str, version: int = 1):
    return client.request(load_request_schema(17, version)(mechanism=mechanism))


def authenticate(client: WireClient, token: bytes, version: int = 2):
    return client.request(load_request_schema(36, version)(auth_bytes=token))
