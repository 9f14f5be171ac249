"""SASL/PLAIN (RFC 4616) against the users of a listener's JAAS config (``user_<name>``
options of PlainLoginModule), with Kafka's PlainSaslServer messages."""

from __future__ import annotations

import hmac

from .errors import SaslError


class PlainServer:
    def __init__(self, users: dict[str, str]) -> None:
        self.users = users
        self.user: str | None = None
        self.complete = False

    def evaluate(self, message: bytes) -> bytes:
        if self.complete:
            raise SaslError("Unexpected challenge in Sasl server state COMPLETE")
        text = message.decode("utf-8", "replace")
        tokens = text.split("\0", 3)
        if len(tokens) != 3:
            raise SaslError(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}",
                            public=True)
        authzid, user, password = tokens
        if not user:
            raise SaslError("Authentication failed: username not specified", public=True)
        if not password:
            raise SaslError("Authentication failed: password not specified", public=True)
        self.user = user  # who tried (for the log); authenticated only once complete
        expected = self.users.get(user)
        # compare_digest on the unknown user too: no shortcut that tells users apart by time
        ok = hmac.compare_digest((expected or "\0").encode(), password.encode())
        if expected is None or not ok:
            raise SaslError("Authentication failed: Invalid username or password", public=True)
        if authzid and authzid != user:
            raise SaslError("Authentication failed: Client requested an authorization id that is "
                            "different from username", public=True)
        self.complete = True
        return b""
