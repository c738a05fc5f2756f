"""TlsHelper: TLS options for servers and clients from a :class:`~gateway.tls.config.TlsConfig`.

As Java does: in test mode a server uses a self-signed certificate and asks for (but does not need)
client certificates, and a client trusts any server. Otherwise ``authClient`` / ``authServer`` false
means "trust any certificate the peer shows" and true means "verify it against ``trustCertPath``"
(no host name check, as Netty does not make one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from OpenSSL import SSL
from OpenSSL.crypto import X509
from twisted.internet import ssl

from gateway.config import ConfigError

from . import certs
from .config import ClientAuth, TlsConfig


class TlsContextError(ConfigError):
    """A key or certificate file that cannot be used; the message names it."""


def load_private_key(path: str, password: str | None) -> PrivateKeyTypes:
    """A PEM private key (PKCS#8 as Java wants it, or PKCS#1/SEC1), decrypted with ``password``."""
    data = _read(path)
    try:
        key = load_pem_private_key(data, password.encode() if password else None)
    except (ValueError, TypeError) as e:
        raise TlsContextError(f"cannot load private key {path}: {e}") from None
    return key


def load_certificates(path: str) -> list[x509.Certificate]:
    """Every certificate of a PEM file (a chain, leaf first, or a CA bundle)."""
    try:
        return x509.load_pem_x509_certificates(_read(path))
    except ValueError as e:
        raise TlsContextError(f"cannot load certificates from {path}: {e}") from None


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise TlsContextError(f"cannot read {path}: {e.strerror}") from None


def _trust(path: str | None) -> Any:
    if not path:
        return ssl.platformTrust()
    # The trust store still takes pyOpenSSL's X509 (use_certificate takes cryptography's).
    return ssl.trustRootFromCertificates([ssl.Certificate(X509.from_cryptography(c)) for c in load_certificates(path)])


def _trust_any(options: ssl.CertificateOptions, mode: int) -> ssl.CertificateOptions:
    # InsecureTrustManagerFactory: ask for the peer's certificate but accept whatever it is.
    options.getContext().set_verify(mode | SSL.VERIFY_CLIENT_ONCE, lambda conn, cert, errno, depth, ok: True)
    return options


def server_options(config: TlsConfig) -> ssl.CertificateOptions:
    """The server side (TlsHelper.buildSslContext(false)); raises TlsContextError for unusable files."""
    if config.tlsTestModeEnable:
        pair = certs.self_signed()
        return _trust_any(ssl.CertificateOptions(privateKey=pair.key, certificate=pair.cert), SSL.VERIFY_PEER)
    if not (config.tlsServerCertPath and config.tlsServerKeyPath):
        raise TlsContextError("tls.server.certPath and tls.server.keyPath are needed unless tls.test.mode.enable")
    chain = load_certificates(config.tlsServerCertPath)
    if not chain:
        raise TlsContextError(f"no certificate in {config.tlsServerCertPath}")
    key = load_private_key(config.tlsServerKeyPath, config.tlsServerKeyPassword)
    auth = config.tlsServerNeedClientAuth
    identity = {"privateKey": key, "certificate": chain[0], "extraCertChain": chain[1:]}
    if auth is ClientAuth.NONE:
        return ssl.CertificateOptions(**identity)
    # Ask for a client certificate; with "require" a handshake without one fails.
    mode = SSL.VERIFY_PEER | (SSL.VERIFY_FAIL_IF_NO_PEER_CERT if auth is ClientAuth.REQUIRE else 0)
    if not config.tlsServerAuthClient:
        return _trust_any(ssl.CertificateOptions(**identity), mode)
    options = ssl.CertificateOptions(**identity, trustRoot=_trust(config.tlsServerTrustCertPath))
    options.getContext().set_verify(mode | SSL.VERIFY_CLIENT_ONCE)
    return options


def client_options(config: TlsConfig) -> ssl.CertificateOptions:
    """The client side (TlsHelper.buildSslContext(true)); raises TlsContextError for unusable files."""
    if config.tlsTestModeEnable:
        return ssl.CertificateOptions()
    identity: dict[str, object] = {}
    if config.tlsClientCertPath and config.tlsClientKeyPath:
        chain = load_certificates(config.tlsClientCertPath)
        identity = {
            "privateKey": load_private_key(config.tlsClientKeyPath, config.tlsClientKeyPassword),
            "certificate": chain[0] if chain else None,
            "extraCertChain": chain[1:],
        }
    if not config.tlsClientAuthServer:
        return ssl.CertificateOptions(**identity)  # type: ignore[arg-type]
    return ssl.CertificateOptions(**identity, trustRoot=_trust(config.tlsClientTrustCertPath))  # type: ignore[arg-type]
