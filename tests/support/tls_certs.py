"""Certificates for TLS tests, made with `cryptography`: a CA, a broker certificate for
127.0.0.1 and localhost, client certificates, and the bad ones (another CA's, expired)."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _name(**attrs) -> x509.Name:
    oids = {"C": NameOID.COUNTRY_NAME, "O": NameOID.ORGANIZATION_NAME,
            "OU": NameOID.ORGANIZATIONAL_UNIT_NAME, "CN": NameOID.COMMON_NAME}
    return x509.Name([x509.NameAttribute(oids[k], v) for k, v in attrs.items()])


def _pem_key(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


@dataclass
class Issued:
    key_pem: bytes
    cert_pem: bytes


class Authority:
    def __init__(self, cn: str) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.name = _name(O="brook tests", CN=cn)
        now = datetime.datetime.now(datetime.timezone.utc)
        self.cert = (x509.CertificateBuilder().subject_name(self.name).issuer_name(self.name)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - datetime.timedelta(days=1))
                     .not_valid_after(now + datetime.timedelta(days=30))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .sign(self.key, hashes.SHA256()))

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(self, subject: x509.Name, *, server: bool, expired: bool = False) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        start, end = ((now - datetime.timedelta(days=10), now - datetime.timedelta(days=1)) if expired
                      else (now - datetime.timedelta(days=1), now + datetime.timedelta(days=30)))
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(self.name)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(start).not_valid_after(end)
                   .add_extension(x509.ExtendedKeyUsage(  # a broker is its peers' client too
                       [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH] if server
                       else [ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
        if server:
            import ipaddress
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return Issued(_pem_key(key), cert.public_bytes(serialization.Encoding.PEM))


class TlsFiles:
    """PEM files in `directory`: ca.pem, broker.pem (key and chain, a Kafka PEM keystore),
    broker-renewed.pem (the same subject, a new key and certificate), and client-<name>-key.pem / -cert.pem for each client
    (alice, bob; `stranger` signed by another CA; `expired`)."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        ca, other = Authority("brook test CA"), Authority("another CA")
        self.ca = self._write("ca.pem", ca.cert_pem)
        broker = ca.issue(_name(O="brook tests", CN="localhost"), server=True)
        self.broker_key_pem, self.broker_cert_pem = broker.key_pem, broker.cert_pem
        self.broker_keystore = self._write("broker.pem", broker.key_pem + broker.cert_pem)
        renewed = ca.issue(_name(O="brook tests", CN="localhost"), server=True)  # a new key too
        self.renewed_cert_pem = renewed.cert_pem
        self.renewed_keystore = self._write("broker-renewed.pem", renewed.key_pem + renewed.cert_pem)
        self.clients: dict[str, tuple[Path, Path]] = {}
        for name, issuer, expired in (("alice", ca, False), ("bob", ca, False),
                                      ("stranger", other, False), ("expired", ca, True)):
            issued = issuer.issue(_name(C="GB", O="example", OU="eng", CN=name), server=False,
                                  expired=expired)
            self.clients[name] = (self._write(f"client-{name}-key.pem", issued.key_pem),
                                  self._write(f"client-{name}-cert.pem", issued.cert_pem))
        self.other_ca = self._write("other-ca.pem", other.cert_pem)

    def _write(self, name: str, data: bytes) -> Path:
        path = self.dir / name
        path.write_bytes(data)
        return path

    def key(self, client: str) -> str:
        return str(self.clients[client][0])

    def cert(self, client: str) -> str:
        return str(self.clients[client][1])
