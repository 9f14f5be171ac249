"""TLS for SSL and SASL_SSL listeners, from Kafka's ``ssl.*`` keys (each one also as
``listener.name.<name>.ssl.*`` for one listener), through Python's `ssl`:

- the broker's key and certificate chain as PEM: ``ssl.keystore.location`` (one file holding
  both), or inline ``ssl.keystore.key`` and ``ssl.keystore.certificate.chain``; an encrypted
  key's password is ``ssl.key.password``;
- the certificates it trusts as PEM: ``ssl.truststore.location`` or inline
  ``ssl.truststore.certificates`` (else the system's);
- ``ssl.client.auth`` (none, requested, required), ``ssl.enabled.protocols`` (TLSv1.2 and
  TLSv1.3) and ``ssl.principal.mapping.rules`` for the principal of a client certificate.

The contexts are built when the configuration is read, so a missing or unreadable key stops
the broker at start with the key's name, never at a client's first handshake.
"""

from __future__ import annotations

import os
import re
import ssl
import tempfile
from dataclasses import dataclass, field

CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


class TlsConfigError(ValueError):
    pass


def prop(props: dict[str, str], listener: str, key: str) -> str | None:
    """A listener's own value of `key` (listener.name.<name lowercased>.<key>), else the
    broker-wide one."""
    own = props.get(f"listener.name.{listener.lower()}.{key}")
    return own if own is not None else props.get(key)


# ---------------------------------------------------------------- principals


class NoMatchingRule(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""  # "L", "U" or ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        name = self.pattern.sub(self.replacement, dn)
        return name.lower() if self.case == "L" else name.upper() if self.case == "U" else name


_RULE = re.compile(r"\s*(?:(DEFAULT)|RULE:((?:\\/|[^/])*)/((?:\\/|[^/])*)/([LU]?))\s*(?:,|$)")


def _java_replacement(text: str) -> str:
    """Java's `$1` group references as Python's `\\g<1>`; a backslash escapes the next character."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            out.append(text[i + 1].replace("\\", "\\\\"))
            i += 2
        elif c == "$" and i + 1 < len(text) and text[i + 1].isdigit():
            j = i + 1
            while j < len(text) and text[j].isdigit():
                j += 1
            out.append(f"\\g<{text[i + 1:j]}>")
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


@dataclass(frozen=True, slots=True)
class PrincipalMapper:
    """Kafka's ssl.principal.mapping.rules: the first rule whose pattern matches the whole
    distinguished name gives the principal's name (`RULE:pattern/replacement/[LU]`, or
    `DEFAULT`, the name itself); a name no rule matches is refused."""

    rules: tuple[_Rule, ...]

    @classmethod
    def parse(cls, text: str | None) -> "PrincipalMapper":
        text = (text or "DEFAULT").strip()
        rules, pos = [], 0
        while pos < len(text):
            m = _RULE.match(text, pos)
            if m is None or m.end() == pos:
                raise TlsConfigError(f"ssl.principal.mapping.rules: cannot parse {text[pos:]!r} "
                                     "(rules are RULE:pattern/replacement/[LU] or DEFAULT, "
                                     "separated by commas)")
            if m.group(1):
                rules.append(_Rule(None))
            else:
                try:
                    pattern = re.compile(m.group(2).replace("\\/", "/"))
                except re.error as exc:
                    raise TlsConfigError(f"ssl.principal.mapping.rules: {m.group(2)!r}: {exc}") from None
                rules.append(_Rule(pattern, _java_replacement(m.group(3).replace("\\/", "/")),
                                   m.group(4)))
            pos = m.end()
        return cls(tuple(rules))

    def name(self, dn: str) -> str:
        for rule in self.rules:
            name = rule.apply(dn)
            if name is not None:
                return name
        raise NoMatchingRule(f"No rules apply to {dn}, rules {self}")


# RFC 2253's keywords for the attribute names Python's `getpeercert` gives; other attributes
# keep their OID (Java writes `oid=#<DER hex>`; brook writes the value as text).
_KEYWORDS = {
    "commonName": "CN", "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
    "organizationName": "O", "organizationalUnitName": "OU", "streetAddress": "STREET",
    "domainComponent": "DC", "userId": "UID",
}
_OIDS = {
    "emailAddress": "1.2.840.113549.1.9.1", "serialNumber": "2.5.4.5", "title": "2.5.4.12",
    "surname": "2.5.4.4", "givenName": "2.5.4.42", "initials": "2.5.4.43",
    "generationQualifier": "2.5.4.44", "dnQualifier": "2.5.4.46", "pseudonym": "2.5.4.65",
    "businessCategory": "2.5.4.15", "postalCode": "2.5.4.17",
}


def _escape(value: str) -> str:
    out = re.sub(r'([,+"\\<>;=])', r"\\\1", value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def distinguished_name(subject) -> str:
    """A certificate subject as `ssl.SSLSocket.getpeercert` gives it, in RFC 2253's string
    form as Java's X500Principal.getName() writes it (the last RDN first): the name Kafka's
    principal mapping rules are written against, e.g. ``CN=alice,OU=eng,O=example,C=GB``."""
    rdns = []
    for rdn in reversed(subject):
        rdns.append("+".join(f"{_KEYWORDS.get(k) or _OIDS.get(k, k)}={_escape(v)}" for k, v in rdn))
    return ",".join(rdns)


# ---------------------------------------------------------------- contexts


@dataclass(frozen=True, slots=True)
class TlsServer:
    """What a TLS listener needs: its context, and how a client certificate names a user."""

    context: ssl.SSLContext = field(compare=False, repr=False)
    client_auth: str
    mapper: PrincipalMapper

    def principal(self, sock) -> str:
        """Kafka's principal of a TLS connection: User:<mapped subject> of the client's
        certificate, User:ANONYMOUS without one (NoMatchingRule if no rule maps it)."""
        cert = sock.getpeercert() if self.client_auth != "none" else None
        if not cert:
            return "User:ANONYMOUS"
        return "User:" + self.mapper.name(distinguished_name(cert.get("subject", ())))


def _versions(props: dict[str, str], listener: str, context: ssl.SSLContext) -> None:
    text = prop(props, listener, "ssl.enabled.protocols") or "TLSv1.2,TLSv1.3"
    names = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [n for n in names if n not in _VERSIONS]
    if unknown or not names:
        raise TlsConfigError(f"ssl.enabled.protocols of listener {listener}: "
                             f"{', '.join(unknown) or 'none'} not supported (brook has TLSv1.2, TLSv1.3)")
    versions = sorted(_VERSIONS[n] for n in names)
    context.minimum_version, context.maximum_version = versions[0], versions[-1]


def _check_pem_type(props: dict[str, str], listener: str, which: str) -> None:
    kind = prop(props, listener, f"ssl.{which}.type")
    if kind is not None and kind.strip().upper() != "PEM":
        raise TlsConfigError(f"ssl.{which}.type={kind} on listener {listener}: brook reads PEM "
                             f"{which}s only (set ssl.{which}.type=PEM; convert a JKS or PKCS12 "
                             "store with keytool -importkeystore and openssl pkcs12)")


def load_inline_chain(context: ssl.SSLContext, key: str, chain: str, password: str | None) -> None:
    """A private key and certificate chain given as PEM text: `ssl` loads them from files
    only, so from a private file that lives for the call."""
    with tempfile.TemporaryDirectory(prefix="brook-tls-") as tmp:
        path = os.path.join(tmp, "keystore.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(key.strip() + "\n" + chain.strip() + "\n")
        context.load_cert_chain(path, password=password)


def _load_keystore(props: dict[str, str], listener: str, context: ssl.SSLContext, required: bool) -> bool:
    _check_pem_type(props, listener, "keystore")
    location = prop(props, listener, "ssl.keystore.location")
    key = prop(props, listener, "ssl.keystore.key")
    chain = prop(props, listener, "ssl.keystore.certificate.chain")
    password = prop(props, listener, "ssl.key.password")
    if location is None and (key is None or chain is None):
        if (key is None) != (chain is None):
            raise TlsConfigError(f"listener {listener}: ssl.keystore.key and "
                                 "ssl.keystore.certificate.chain go together")
        if required:
            raise TlsConfigError(f"listener {listener} uses TLS: set ssl.keystore.location (a PEM "
                                 "file with the key and its certificate chain), or "
                                 "ssl.keystore.key and ssl.keystore.certificate.chain")
        return False
    try:
        if location is not None:
            context.load_cert_chain(location, password=password)
        else:
            load_inline_chain(context, key, chain, password)
    except (OSError, ssl.SSLError, ValueError) as exc:
        where = f"ssl.keystore.location={location}" if location else "ssl.keystore.key"
        raise TlsConfigError(f"listener {listener}: cannot load the key and certificates of "
                             f"{where}: {exc}") from None
    return True


def _load_truststore(props: dict[str, str], listener: str, context: ssl.SSLContext,
                     purpose: ssl.Purpose) -> None:
    _check_pem_type(props, listener, "truststore")
    location = prop(props, listener, "ssl.truststore.location")
    inline = prop(props, listener, "ssl.truststore.certificates")
    try:
        if location is not None:
            context.load_verify_locations(cafile=location)
        elif inline is not None:
            context.load_verify_locations(cadata=inline)
        else:
            context.load_default_certs(purpose)
    except (OSError, ssl.SSLError, ValueError) as exc:
        where = f"ssl.truststore.location={location}" if location else "ssl.truststore.certificates"
        raise TlsConfigError(f"listener {listener}: cannot load the trusted certificates of "
                             f"{where}: {exc}") from None


def server_tls(props: dict[str, str], listener: str) -> TlsServer:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _versions(props, listener, context)
    context.options |= getattr(ssl, "OP_NO_RENEGOTIATION", 0)  # TLS 1.2 renegotiation: never needed
    _load_keystore(props, listener, context, required=True)
    client_auth = (prop(props, listener, "ssl.client.auth") or "none").strip().lower()
    if client_auth not in CLIENT_AUTH:
        raise TlsConfigError(f"ssl.client.auth={client_auth} on listener {listener}: one of "
                             f"{', '.join(CLIENT_AUTH)}")
    context.verify_mode = CLIENT_AUTH[client_auth]
    if client_auth != "none":
        _load_truststore(props, listener, context, ssl.Purpose.CLIENT_AUTH)
    mapper = PrincipalMapper.parse(prop(props, listener, "ssl.principal.mapping.rules"))
    return TlsServer(context, client_auth, mapper)


def client_context(props: dict[str, str], listener: str) -> ssl.SSLContext:
    """How a broker connects to the others on a TLS inter-broker listener: it trusts the
    listener's truststore, presents its keystore (for ssl.client.auth), and checks the host
    name unless ssl.endpoint.identification.algorithm is empty (Kafka's default is https)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _versions(props, listener, context)
    algorithm = prop(props, listener, "ssl.endpoint.identification.algorithm")
    context.check_hostname = (algorithm if algorithm is not None else "https").strip().lower() == "https"
    _load_truststore(props, listener, context, ssl.Purpose.SERVER_AUTH)
    _load_keystore(props, listener, context, required=False)
    return context
