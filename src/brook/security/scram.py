"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka speaks them: its message
grammar (ScramMessages), its stored credential (salt, stored key, server key, iterations;
never the password) in its text form, and the server's side of the exchange.

Built on hashlib and hmac; the only composition here is the RFC's. (scramp, the maintained
SCRAM library on PyPI, was not used: Kafka's grammar differs in what it accepts (extensions
such as ``tokenauth``, its error messages), and brook needs credentials built from a salted
password that AlterUserScramCredentials sends, which is two HMACs.)
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from .errors import SaslError

MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384  # Kafka's limit for AlterUserScramCredentials


@dataclass(frozen=True, slots=True)
class Mechanism:
    name: str  # SCRAM-SHA-256
    hash_name: str  # sha256
    type: int  # the ScramMechanism code of the admin APIs (1, 2)


SHA_256 = Mechanism("SCRAM-SHA-256", "sha256", 1)
SHA_512 = Mechanism("SCRAM-SHA-512", "sha512", 2)
MECHANISMS = {m.name: m for m in (SHA_256, SHA_512)}
BY_TYPE = {m.type: m for m in (SHA_256, SHA_512)}


def _hmac(m: Mechanism, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, m.hash_name).digest()


def _h(m: Mechanism, data: bytes) -> bytes:
    return hashlib.new(m.hash_name, data).digest()


def salted_password(m: Mechanism, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) of RFC 5802: PBKDF2 with HMAC."""
    return hashlib.pbkdf2_hmac(m.hash_name, password.encode(), salt, iterations)


@dataclass(frozen=True, slots=True)
class Credential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_kafka(self) -> str:
        """ScramCredentialUtils.credentialToString: what /config/users/<user> holds."""
        b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
        return (f"salt={b64(self.salt)},stored_key={b64(self.stored_key)},"
                f"server_key={b64(self.server_key)},iterations={self.iterations}")

    @classmethod
    def from_kafka(cls, text: str) -> "Credential":
        props = {}
        for token in text.split(","):
            key, sep, value = token.partition("=")
            if not key or not sep:
                raise ValueError(f"Credentials not valid: {text}")
            props[key] = value
        if set(props) != {"salt", "stored_key", "server_key", "iterations"}:
            raise ValueError(f"Credentials not valid: {text}")
        try:
            return cls(base64.b64decode(props["salt"], validate=True),
                       base64.b64decode(props["stored_key"], validate=True),
                       base64.b64decode(props["server_key"], validate=True), int(props["iterations"]))
        except (binascii.Error, ValueError):
            raise ValueError(f"Credentials not valid: {text}") from None


def credential_from_salted(m: Mechanism, salted: bytes, salt: bytes, iterations: int) -> Credential:
    client_key = _hmac(m, salted, b"Client Key")
    return Credential(salt, _h(m, client_key), _hmac(m, salted, b"Server Key"), iterations)


def new_credential(m: Mechanism, password: str, iterations: int = MIN_ITERATIONS,
                   salt: bytes | None = None) -> Credential:
    salt = secrets.token_bytes(32) if salt is None else salt
    return credential_from_salted(m, salted_password(m, password, salt, iterations), salt, iterations)


# ---------------------------------------------------------------- messages (Kafka's grammar)

_VALUE = r"[\x01-\x2B\x2D-\x7F]+"  # \x01-\x7F but ','
_SASLNAME = r"(?:[\x01-\x2B\x2D-\x3C\x3E-\x7F]|=2C|=3D)+"  # '=' only as =2C or =3D
_PRINTABLE = r"[\x21-\x2B\x2D-\x7E]+"
_BASE64 = r"(?:[a-zA-Z0-9/+]{4})*(?:[a-zA-Z0-9/+]{3}=|[a-zA-Z0-9/+]{2}==)?"
_EXTENSIONS = rf"(?:,[A-Za-z]+={_VALUE})*"
_CLIENT_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,(?:m={_VALUE},)?n=(?P<saslname>{_SASLNAME}),"
    rf"r=(?P<nonce>{_PRINTABLE})(?P<extensions>{_EXTENSIONS})", re.ASCII)
_CLIENT_FINAL = re.compile(
    rf"c=(?P<channel>{_BASE64}),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS},p=(?P<proof>{_BASE64})",
    re.ASCII)


def _decode(message: bytes) -> str:
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError:
        return message.decode("utf-8", "replace")


def username(saslname: str) -> str:
    """ScramFormatter.username: =2C and =3D stand for ',' and '='."""
    return saslname.replace("=2C", ",").replace("=3D", "=")


def saslname(user: str) -> str:
    return user.replace("=", "=3D").replace(",", "=2C")


@dataclass(frozen=True, slots=True)
class ClientFirst:
    authzid: str
    saslname: str
    nonce: str
    extensions: dict[str, str]
    bare: str  # client-first-message-bare, part of the AuthMessage

    @classmethod
    def parse(cls, message: bytes) -> "ClientFirst":
        text = _decode(message)
        m = _CLIENT_FIRST.fullmatch(text)
        if m is None:
            raise SaslError(f"Invalid SCRAM client first message format: {text}")
        ext = dict(e.split("=", 1) for e in m["extensions"].split(",")[1:])
        bare = text.split(",", 2)[2]  # after the gs2 header ("n,", authzid, ",")
        return cls(m["authzid"] or "", m["saslname"], m["nonce"], ext, bare)


@dataclass(frozen=True, slots=True)
class ClientFinal:
    channel_binding: bytes
    nonce: str
    proof: bytes
    without_proof: str  # client-final-message-without-proof

    @classmethod
    def parse(cls, message: bytes) -> "ClientFinal":
        text = _decode(message)
        m = _CLIENT_FINAL.fullmatch(text)
        if m is None:
            raise SaslError(f"Invalid SCRAM client final message format: {text}")
        return cls(base64.b64decode(m["channel"]), m["nonce"], base64.b64decode(m["proof"]),
                   text[:text.rindex(",p=")])


#: Keys the made-up salts of unknown users: the same user gets the same salt every time (a
#: salt that changed between tries would tell an unknown user apart).
_UNKNOWN_USER_KEY = secrets.token_bytes(32)


def _made_up_credential(m: Mechanism, user: str) -> Credential:
    """A credential no password matches, with a salt stable per user and the usual count."""
    salt = hmac.new(_UNKNOWN_USER_KEY, f"{m.name}\0{user}".encode(), hashlib.sha256).digest()
    size = hashlib.new(m.hash_name).digest_size
    return Credential(salt, secrets.token_bytes(size), secrets.token_bytes(size), MIN_ITERATIONS)


class ScramServer:
    """One exchange: client-first -> server-first, client-final -> server-final. Any error
    fails it for good (a replayed or out-of-order message gets an error, never a second
    success). ``lookup(user)`` gives the user's Credential or None."""

    def __init__(self, mechanism: Mechanism, lookup, new_nonce=lambda: secrets.token_urlsafe(24)) -> None:
        self.mechanism = mechanism
        self.lookup = lookup
        self.new_nonce = new_nonce
        self.state = "first"
        self.user: str | None = None
        self._first: ClientFirst | None = None
        self._server_first = ""
        self._nonce = ""
        self._credential: Credential | None = None
        self._unknown_user = False

    @property
    def complete(self) -> bool:
        return self.state == "complete"

    def evaluate(self, message: bytes) -> bytes:
        try:
            if self.state == "first":
                return self._client_first(message)
            if self.state == "final":
                return self._client_final(message)
            raise SaslError(f"Unexpected challenge in Sasl server state {self.state.upper()}")
        except SaslError:
            self.state = "failed"
            self._credential = None
            raise

    def _client_first(self, message: bytes) -> bytes:
        first = ClientFirst.parse(message)
        user = username(first.saslname)
        self.user = user  # who tried (for the log); authenticated only once complete
        credential = self.lookup(user)
        if credential is None:
            # An unknown user gets a challenge like a known one's, and fails where a wrong
            # password fails: the answers do not tell which users exist.
            credential = _made_up_credential(self.mechanism, user)
            self._unknown_user = True
        if first.authzid and first.authzid != user:
            raise SaslError("Authentication failed: Client requested an authorization id that is "
                             "different from username", public=True)
        if credential.iterations < MIN_ITERATIONS:
            raise SaslError(f"Iterations {credential.iterations} is less than the minimum "
                             f"{MIN_ITERATIONS} for {self.mechanism.name}")
        self._first, self._credential = first, credential
        self._nonce = first.nonce + self.new_nonce()
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        self.state = "final"
        return self._server_first.encode()

    def _client_final(self, message: bytes) -> bytes:
        final = ClientFinal.parse(message)
        # Kafka accepts a nonce that ends with the server-first one (librdkafka before 2.1
        # sends the client nonce twice); the server's part is what makes a replay fail.
        if not final.nonce.endswith(self._nonce):
            raise SaslError("Invalid client nonce in the final client message.")
        m, cred = self.mechanism, self._credential
        auth_message = f"{self._first.bare},{self._server_first},{final.without_proof}".encode()
        signature = _hmac(m, cred.stored_key, auth_message)
        if len(final.proof) != len(signature):
            raise SaslError("Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(final.proof, signature))
        if not hmac.compare_digest(_h(m, client_key), cred.stored_key):
            # the client is answered the same either way (the message is not public)
            raise SaslError("Authentication failed: Invalid user credentials" if self._unknown_user
                            else "Invalid client credentials")
        server_signature = _hmac(m, cred.server_key, auth_message)
        self.state = "complete"
        self._credential = None
        return b"v=" + base64.b64encode(server_signature)
