"""Certificates for tests and development: a CA, server and client certificates, test mode's self-signed one.

Keys are EC P-256 and written as PKCS#8 PEM (optionally encrypted), the form Java's Netty reads.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gateway.config import format_properties

PrivateKey = ec.EllipticCurvePrivateKey


@dataclass(frozen=True)
class KeyPair:
    """A private key and its certificate."""

    key: PrivateKey
    cert: x509.Certificate

    def key_pem(self, password: str | None = None) -> bytes:
        """The key as PKCS#8 PEM, encrypted when ``password`` is given."""
        encryption = (
            serialization.BestAvailableEncryption(password.encode()) if password else serialization.NoEncryption()
        )
        return self.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)

    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "rocketmq-gateway"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _validity(days: int, not_before: datetime.datetime | None) -> tuple[datetime.datetime, datetime.datetime]:
    start = not_before or datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
    return start, start + datetime.timedelta(days=days)


def _san(hosts: Sequence[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def make_ca(common_name: str = "rocketmq-gateway dev CA", days: int = 3650) -> KeyPair:
    """A self-signed CA that may sign end-entity certificates."""
    key = ec.generate_private_key(ec.SECP256R1())
    start, end = _validity(days, None)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(key, cert)


def issue(
    ca: KeyPair | None,
    common_name: str,
    hosts: Sequence[str] = (),
    *,
    client: bool = False,
    days: int = 825,
    not_before: datetime.datetime | None = None,
) -> KeyPair:
    """A server (or, with ``client``, client) certificate signed by ``ca``; self-signed when ``ca`` is None."""
    key = ec.generate_private_key(ec.SECP256R1())
    start, end = _validity(days, not_before)
    issuer = ca.cert.subject if ca else _name(common_name)
    usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if hosts:
        builder = builder.add_extension(_san(hosts), critical=False)
    if ca:
        ski = ca.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False
        )
    return KeyPair(key, builder.sign(ca.key if ca else key, hashes.SHA256()))


def self_signed(common_name: str = "localhost") -> KeyPair:
    """tls.test.mode.enable's certificate (Netty's SelfSignedCertificate)."""
    return issue(None, common_name, ["localhost", "127.0.0.1", "::1"], days=365)


def write_pair(pair: KeyPair, cert_path: Path, key_path: Path, password: str | None = None) -> None:
    """Write the certificate and the key (mode 0600)."""
    cert_path.write_bytes(pair.cert_pem())
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pair.key_pem(password))


@dataclass(frozen=True)
class DevPki:
    """Where :func:`write_dev_pki` put its files, and the CA (to issue more certificates)."""

    directory: Path
    ca: KeyPair

    def path(self, name: str) -> str:
        return str(self.directory / name)

    def server_properties(self, key_password: str | None = None) -> dict[str, str]:
        """``tls.*`` settings for a server with these files (mutual TLS required)."""
        props = {
            "tls.server.mode": "enforcing",
            "tls.test.mode.enable": "false",
            "tls.server.need.client.auth": "require",
            "tls.server.keyPath": self.path("server.key"),
            "tls.server.certPath": self.path("server.pem"),
            "tls.server.authClient": "true",
            "tls.server.trustCertPath": self.path("ca.pem"),
        }
        if key_password:
            props["tls.server.keyPassword"] = key_password
        return props

    def client_properties(self, key_password: str | None = None) -> dict[str, str]:
        """``tls.*`` settings for a client (or a broker's outgoing links) with these files."""
        props = {
            "tls.enable": "true",
            "tls.test.mode.enable": "false",
            "tls.client.keyPath": self.path("client.key"),
            "tls.client.certPath": self.path("client.pem"),
            "tls.client.authServer": "true",
            "tls.client.trustCertPath": self.path("ca.pem"),
        }
        if key_password:
            props["tls.client.keyPassword"] = key_password
        return props


def write_dev_pki(
    directory: str | Path, hosts: Sequence[str] = ("localhost", "127.0.0.1"), key_password: str | None = None
) -> DevPki:
    """A CA plus a server and a client certificate under ``directory``, with sample properties files."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    ca = make_ca()
    write_pair(ca, out / "ca.pem", out / "ca.key")
    server = issue(ca, hosts[0] if hosts else "localhost", hosts)
    write_pair(server, out / "server.pem", out / "server.key", key_password)
    write_pair(issue(ca, "rocketmq-client", client=True), out / "client.pem", out / "client.key", key_password)
    pki = DevPki(out, ca)
    for name, props in (
        ("tls-server.properties", pki.server_properties(key_password)),
        ("tls-client.properties", pki.client_properties(key_password)),
    ):
        (out / name).write_text(format_properties(props))
    return pki
