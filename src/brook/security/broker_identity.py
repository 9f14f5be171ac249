"""The identity brokers of one cluster prove to each other: a SCRAM-SHA-512 user per broker
id, ``__brook_broker_<id>``, whose password derives from the cluster's secret (kept in
ZooKeeper, see brook.cluster.zk_cluster). Any broker of the cluster can compute any broker's
credential, and nobody without the secret can; so a connection that completed this login is
a broker's, whatever its listener.

The names are reserved: a SCRAM credential stored for one in ZooKeeper is never used (the
derived one always is), so creating such a user through AlterUserScramCredentials gains
nothing. Sans-I/O."""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import secrets

from .client import ClientCredentials
from .scram import MIN_ITERATIONS, SHA_512, Credential, Mechanism, credential_from_salted

MECHANISM = SHA_512
PREFIX = "__brook_broker_"
SECRET_BYTES = 32


def new_secret() -> bytes:
    return secrets.token_bytes(SECRET_BYTES)


def user_for(broker_id: int) -> str:
    return f"{PREFIX}{broker_id}"


def is_reserved(user: str) -> bool:
    return user.startswith(PREFIX)


def broker_id_of(user: str) -> int | None:
    """The broker id a reserved name names (None for any other name)."""
    if not is_reserved(user):
        return None
    digits = user[len(PREFIX):]
    # canonical decimal only: "007" and "+7" would be second names for broker 7
    if not digits.isascii() or not digits.isdigit() or (digits != "0" and digits.startswith("0")):
        return None
    broker_id = int(digits)
    return broker_id if broker_id < 2**31 else None


def _derive(secret: bytes, label: str, user: str) -> bytes:
    return hmac.new(secret, f"brook inter-broker {label}\0{user}".encode(), hashlib.sha512).digest()


def password(secret: bytes, user: str) -> str:
    return base64.b64encode(_derive(secret, "password", user)).decode()


def client_credentials(secret: bytes, broker_id: int) -> ClientCredentials:
    """How broker `broker_id` logs in to the others."""
    user = user_for(broker_id)
    return ClientCredentials(MECHANISM.name, user, password(secret, user))


@functools.lru_cache(maxsize=256)
def _credential(secret: bytes, user: str) -> Credential:
    salt = _derive(secret, "salt", user)[:32]
    salted = hashlib.pbkdf2_hmac(MECHANISM.hash_name, password(secret, user).encode(), salt,
                                 MIN_ITERATIONS)
    return credential_from_salted(MECHANISM, salted, salt, MIN_ITERATIONS)


def credential(secret: bytes | None, user: str, mechanism: Mechanism) -> Credential | None:
    """The server's credential for a reserved user (None: not a broker name, another
    mechanism, or no secret known: a single node has no brokers to trust)."""
    if secret is None or mechanism != MECHANISM or broker_id_of(user) is None:
        return None
    return _credential(secret, user)
