"""The security of each listener, from Kafka's keys: ``listener.security.protocol.map``
(Kafka's default map names PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL as themselves),
``sasl.enabled.mechanisms`` (or ``listener.name.<name>.sasl.enabled.mechanisms``), the
PLAIN users of ``listener.name.<name>.plain.sasl.jaas.config``, and the ``ssl.*`` keys of TLS
listeners (see tls.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from . import jaas
from .client import ClientCredentials
from .scram import MECHANISMS as SCRAM_MECHANISMS
from .tls import TlsConfigError, TlsServer, prop as _prop, server_tls

DEFAULT_PROTOCOL_MAP = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SUPPORTED_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS)
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"


class SecurityConfigError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class ListenerSecurity:
    name: str
    protocol: str
    mechanisms: tuple[str, ...] = ()
    plain_users: dict[str, str] = field(default_factory=dict, repr=False)  # never logged
    tls: TlsServer | None = None  # SSL and SASL_SSL
    #: connections.max.reauth.ms by mechanism (KIP-368): how long a SASL session lasts before
    #: the client must authenticate again on its connection; absent or 0, for ever.
    max_reauth_ms: dict[str, int] = field(default_factory=dict)

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def parse_protocol_map(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name or protocol not in PROTOCOLS:
            raise SecurityConfigError(f"listener.security.protocol.map: {item!r} is not "
                                      f"LISTENER:PROTOCOL with a protocol of {', '.join(PROTOCOLS)}")
        out[name] = protocol
    return out


def listener_security(props: dict[str, str], name: str, protocols: dict[str, str]) -> ListenerSecurity:
    protocol = protocols.get(name)
    if protocol is None:
        raise SecurityConfigError(f"No security protocol defined for listener {name} (add it to "
                                  "listener.security.protocol.map)")
    tls = None
    if protocol in ("SSL", "SASL_SSL"):
        try:
            tls = server_tls(props, name)
        except TlsConfigError as exc:
            raise SecurityConfigError(str(exc)) from None
    if protocol in ("PLAINTEXT", "SSL"):
        return ListenerSecurity(name, protocol, tls=tls)
    text = _prop(props, name, "sasl.enabled.mechanisms")
    if text is None:
        raise SecurityConfigError(
            f"listener {name} is {protocol} but sasl.enabled.mechanisms is not set (Kafka's "
            f"default, GSSAPI, is not supported: use {', '.join(SUPPORTED_MECHANISMS)})")
    mechanisms = tuple(m.strip().upper() for m in text.split(",") if m.strip())
    unknown = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
    if unknown or not mechanisms:
        raise SecurityConfigError(
            f"sasl.enabled.mechanisms of listener {name}: {', '.join(unknown) or 'none'} not "
            f"supported (brook has {', '.join(SUPPORTED_MECHANISMS)})")
    users: dict[str, str] = {}
    if "PLAIN" in mechanisms:
        key = f"listener.name.{name.lower()}.plain.sasl.jaas.config"
        text = props.get(key)
        if text is None:
            raise SecurityConfigError(f"listener {name} enables PLAIN but {key} is not set (its "
                                      f"{PLAIN_LOGIN_MODULE} options user_<name>=<password> are "
                                      "the users)")
        try:
            module = jaas.parse_one(text)
        except jaas.JaasError as exc:
            raise SecurityConfigError(f"{key}: {exc}") from None
        if module.name != PLAIN_LOGIN_MODULE:
            raise SecurityConfigError(f"{key}: login module {module.name} is not {PLAIN_LOGIN_MODULE}")
        users = {k[len("user_"):]: v for k, v in module.options.items() if k.startswith("user_")}
    return ListenerSecurity(name, protocol, mechanisms, users, tls, _max_reauth_ms(props, name, mechanisms))


def _max_reauth_ms(props: dict[str, str], listener: str, mechanisms) -> dict[str, int]:
    """connections.max.reauth.ms of each mechanism: listener.name.<l>.<mechanism>.connections.
    max.reauth.ms (Kafka's only per-listener form), else the broker-wide key."""
    out = {}
    for m in mechanisms:
        key = f"listener.name.{listener.lower()}.{m.lower()}.connections.max.reauth.ms"
        text = props.get(key, props.get("connections.max.reauth.ms", "0"))
        try:
            value = int(str(text).strip())
        except ValueError:
            raise SecurityConfigError(f"connections.max.reauth.ms={text} is not a number of "
                                      "milliseconds") from None
        if value > 0:
            out[m] = value
    return out


def inter_broker_credentials(props: dict[str, str], security: ListenerSecurity) -> ClientCredentials:
    """How a broker authenticates to the others on a SASL inter-broker listener: with
    sasl.mechanism.inter.broker.protocol and the username and password options of that
    mechanism's JAAS config on the listener (as Kafka's brokers do)."""
    mechanism = props.get("sasl.mechanism.inter.broker.protocol", "GSSAPI").strip().upper()
    if mechanism not in security.mechanisms:
        raise SecurityConfigError(
            f"sasl.mechanism.inter.broker.protocol ({mechanism}) must be included in "
            f"sasl.enabled.mechanisms of listener {security.name} when SASL is used for "
            "inter-broker communication")
    key = f"listener.name.{security.name.lower()}.{mechanism.lower()}.sasl.jaas.config"
    text = props.get(key)
    if text is None:
        raise SecurityConfigError(f"the inter-broker listener {security.name} is SASL: {key} must "
                                  "give this broker's username and password")
    try:
        options = jaas.parse_one(text).options
    except jaas.JaasError as exc:
        raise SecurityConfigError(f"{key}: {exc}") from None
    if "username" not in options or "password" not in options:
        raise SecurityConfigError(f"{key}: username and password are needed for inter-broker "
                                  "authentication")
    return ClientCredentials(mechanism, options["username"], options["password"])
