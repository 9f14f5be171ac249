"""A client's security settings, as users already write them: Kafka's client.properties keys
(``security.protocol``, ``sasl.mechanism``, ``sasl.jaas.config``, ``ssl.truststore.location``
of type PEM, ...) or librdkafka's (``sasl.username``, ``ssl.ca.location``, ...), both read
into one `ClientSecurity`. It gives librdkafka's settings (for confluent-kafka's clients in the
`brook` command and the Spark connector), and the TLS context and SASL credentials brook's own
client connections use."""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import Mapping

from . import jaas
from .client import ClientCredentials
from .tls import load_inline_chain

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class ClientSecurityError(ValueError):
    pass


@dataclass(frozen=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    mechanism: str = "GSSAPI"  # Kafka's and librdkafka's default, which brook lacks
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_location: str | None = None  # PEM file of trusted certificates
    ca_pem: str | None = None  # the same, inline
    certificate_location: str | None = None  # PEM file: the client's certificate (chain)
    key_location: str | None = None  # PEM file: its private key
    certificate_pem: str | None = None
    key_pem: str | None = field(default=None, repr=False)
    key_password: str | None = field(default=None, repr=False)
    check_hostname: bool = True

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> "ClientSecurity":
        """From client settings in Kafka's or librdkafka's names (others are ignored)."""
        get = lambda key: (props.get(key) or "").strip() or None  # noqa: E731
        protocol = (get("security.protocol") or "PLAINTEXT").upper()
        if protocol not in PROTOCOLS:
            raise ClientSecurityError(f"security.protocol={protocol}: one of {', '.join(PROTOCOLS)}")
        mechanism = (get("sasl.mechanism") or get("sasl.mechanisms") or "GSSAPI").upper()
        username, password = get("sasl.username"), props.get("sasl.password")
        text = get("sasl.jaas.config")
        if text is not None:
            try:
                options = jaas.parse_one(text).options
            except jaas.JaasError as exc:
                raise ClientSecurityError(f"sasl.jaas.config: {exc}") from None
            username = options.get("username", username)
            password = options.get("password", password)
        if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            if mechanism not in MECHANISMS:
                raise ClientSecurityError(f"sasl.mechanism={mechanism}: brook's clients have "
                                          f"{', '.join(MECHANISMS)}")
            if username is None or password is None:
                raise ClientSecurityError(f"{protocol} needs a username and password (sasl.jaas.config, "
                                          "or sasl.username and sasl.password)")
        for kind in ("truststore", "keystore"):
            t = get(f"ssl.{kind}.type")
            if t is not None and t.upper() != "PEM":
                raise ClientSecurityError(f"ssl.{kind}.type={t}: brook's clients read PEM "
                                          "(or librdkafka's ssl.ca.location, ssl.certificate.location, "
                                          "ssl.key.location)")
        keystore = get("ssl.keystore.location")  # a PEM keystore: key and chain in one file
        algorithm = props.get("ssl.endpoint.identification.algorithm")
        return cls(
            protocol=protocol, mechanism=mechanism, username=username, password=password,
            ca_location=get("ssl.ca.location") or get("ssl.truststore.location"),
            ca_pem=get("ssl.ca.pem") or get("ssl.truststore.certificates"),
            certificate_location=get("ssl.certificate.location") or keystore,
            key_location=get("ssl.key.location") or keystore,
            certificate_pem=get("ssl.certificate.pem") or get("ssl.keystore.certificate.chain"),
            key_pem=get("ssl.key.pem") or get("ssl.keystore.key"),
            key_password=get("ssl.key.password"),
            check_hostname=(algorithm if algorithm is not None else "https").strip().lower() == "https",
        )

    @classmethod
    def from_file(cls, path: str) -> "ClientSecurity":
        from ..properties import parse_properties
        try:
            with open(path, encoding="utf-8") as f:
                props = parse_properties(f.read())
        except OSError as exc:
            raise ClientSecurityError(f"cannot read {path}: {exc.strerror}") from None
        return cls.from_properties(props)

    def librdkafka(self) -> dict[str, str]:
        """The same settings in librdkafka's names (nothing for PLAINTEXT)."""
        conf: dict[str, str] = {}
        if self.protocol == "PLAINTEXT":
            return conf
        conf["security.protocol"] = self.protocol
        if self.sasl:
            conf.update({"sasl.mechanism": self.mechanism, "sasl.username": self.username or "",
                         "sasl.password": self.password or ""})
        if self.tls:
            optional = {"ssl.ca.location": self.ca_location, "ssl.ca.pem": self.ca_pem,
                        "ssl.certificate.location": self.certificate_location,
                        "ssl.key.location": self.key_location,
                        "ssl.certificate.pem": self.certificate_pem, "ssl.key.pem": self.key_pem,
                        "ssl.key.password": self.key_password}
            conf.update({k: v for k, v in optional.items() if v is not None})
            conf["ssl.endpoint.identification.algorithm"] = "https" if self.check_hostname else "none"
        return conf

    def credentials(self) -> ClientCredentials | None:
        if not self.sasl:
            return None
        return ClientCredentials(self.mechanism, self.username or "", self.password or "")

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        context = ssl.create_default_context(cafile=self.ca_location, cadata=self.ca_pem)
        context.check_hostname = self.check_hostname
        if self.certificate_location is not None:
            context.load_cert_chain(self.certificate_location, self.key_location,
                                    password=self.key_password)
        elif self.certificate_pem is not None:
            load_inline_chain(context, self.key_pem or "", self.certificate_pem, self.key_password)
        return context
