"""The failure of a SASL exchange, whatever the mechanism."""

from __future__ import annotations


class SaslError(Exception):
    """The exchange failed. ``public`` says whether the message may go to the client (Kafka's
    SaslAuthenticationException); otherwise the client gets the generic message, so whether a
    user exists is never revealed."""

    def __init__(self, message: str, public: bool = False) -> None:
        super().__init__(message)
        self.public = public
