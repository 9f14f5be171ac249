"""The console's own safety, pure: who may log in (HTTP basic authentication against a file of
users), and the token every change must carry (CSRF).

CSRF: each browser gets a random nonce in a cookie (HttpOnly, SameSite=Strict); the forms of
its pages carry HMAC(secret of this console process, nonce). A change (POST) is accepted only
when its form's token is that of its cookie's nonce. Another site can neither read the token
nor make one for the cookie's nonce, and a SameSite=Strict cookie is not even sent with its
requests.

The users file has one `user:password` a line (blank lines and `#` comments skipped), or
`user:pbkdf2_sha256$ITERATIONS$SALT$HEX` for a stored hash (`brook console --hash-password`
prints one).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path

CSRF_COOKIE = "brook_console_csrf"
CSRF_FIELD = "csrf_token"
PBKDF2_PREFIX = "pbkdf2_sha256$"
PBKDF2_ITERATIONS = 310_000


class AuthFileError(ValueError):
    """A users file that cannot be read or has a bad line (the message names the line, never
    a password)."""


def new_nonce() -> str:
    return secrets.token_urlsafe(24)


def csrf_token(secret: bytes, nonce: str) -> str:
    return hmac.new(secret, nonce.encode(), hashlib.sha256).hexdigest()


def csrf_valid(secret: bytes, nonce: str | None, token: str | None) -> bool:
    if not nonce or not token:
        return False
    return hmac.compare_digest(csrf_token(secret, nonce), token)


def same_origin(origin: str | None, host: str | None) -> bool:
    """Whether a request's Origin header (when it has one) names the host it was sent to."""
    if origin is None:
        return True  # not every browser sends it on a same-origin form post; the token decides
    if origin == "null" or host is None:
        return False
    return origin.split("://", 1)[-1].rstrip("/") == host


def hash_password(password: str, iterations: int = PBKDF2_ITERATIONS,
                  salt: bytes | None = None) -> str:
    salt = salt if salt is not None else os.urandom(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    return f"{PBKDF2_PREFIX}{iterations}${salt.hex()}${digest.hex()}"


def _check_stored(stored: str, password: str) -> bool:
    if stored.startswith(PBKDF2_PREFIX):
        _, iterations, salt, digest = stored.split("$")
        got = hashlib.pbkdf2_hmac("sha256", password.encode(), bytes.fromhex(salt),
                                  int(iterations))
        return hmac.compare_digest(got.hex(), digest)
    return hmac.compare_digest(stored.encode(), password.encode())


@dataclass(frozen=True)
class Users:
    """The users who may log in; empty: no login asked for."""

    passwords: dict[str, str] = field(default_factory=dict, repr=False)
    verified: set[bytes] = field(default_factory=set, repr=False, compare=False)

    def __bool__(self) -> bool:
        return bool(self.passwords)

    @classmethod
    def parse(cls, text: str, source: str = "the users file") -> "Users":
        out: dict[str, str] = {}
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            user, sep, stored = line.partition(":")
            if not sep or not user.strip() or not stored:
                raise AuthFileError(f"{source} line {number}: expected user:password")
            if stored.startswith(PBKDF2_PREFIX):
                parts = stored.split("$")
                try:
                    ok = len(parts) == 4 and int(parts[1]) > 0 and bytes.fromhex(parts[2]) \
                        and len(bytes.fromhex(parts[3])) == 32
                except ValueError:
                    ok = False
                if not ok:
                    raise AuthFileError(f"{source} line {number}: a pbkdf2_sha256 hash is "
                                        "pbkdf2_sha256$ITERATIONS$SALT$HEX")
            out[user.strip()] = stored
        if not out:
            raise AuthFileError(f"{source} has no user")
        return cls(out)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> tuple["Users", str | None]:
        """The users of a file, and a warning when others than its owner may read it."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
            mode = path.stat().st_mode
        except (OSError, UnicodeDecodeError) as exc:
            raise AuthFileError(f"cannot read {path}: "
                                f"{getattr(exc, 'strerror', None) or exc}") from None
        warning = None
        if mode & (stat.S_IRGRP | stat.S_IROTH):
            warning = f"{path} may be read by other users (chmod 600 it)"
        return cls.parse(text, str(path)), warning

    def check(self, authorization: str | None) -> str | None:
        """The user an `Authorization: Basic ...` header logs in, else None."""
        if not authorization:
            return None
        scheme, _, encoded = authorization.partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        user, sep, password = decoded.partition(":")
        if not sep:
            return None
        key = hashlib.sha256(authorization.encode()).digest()
        if key in self.verified:  # a stored hash is slow to check on every request
            return user
        stored = self.passwords.get(user)
        if stored is None or not _check_stored(stored, password):
            return None
        if len(self.verified) < 1024:
            self.verified.add(key)
        return user
