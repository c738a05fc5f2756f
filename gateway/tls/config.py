"""TLS settings under RocketMQ's own keys (TlsSystemConfig): ``tls.server.mode``, ``tls.enable``, ``tls.*Path``...

Java reads them as system properties and then from the file named by ``tls.config.file`` (default
``/etc/rocketmq/tls.properties``), whose values win — except ``tls.server.mode`` and ``tls.enable``,
which that file cannot set. We read them from broker.conf / namesrv.properties (or any properties
mapping) the same way.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from enum import StrEnum

from gateway.config import convert, load_properties

DEFAULT_CONFIG_FILE = "/etc/rocketmq/tls.properties"


class TlsMode(StrEnum):
    """``tls.server.mode``: what a server does with plain and TLS connections on its port."""

    DISABLED = "disabled"  # plain only; a TLS handshake closes the connection
    PERMISSIVE = "permissive"  # both, told apart by the first byte
    ENFORCING = "enforcing"  # TLS only; a plain connection is closed

    @classmethod
    def parse(cls, value: str | None) -> TlsMode:
        """Java's TlsMode.parse: exact lower-case names; anything else is permissive."""
        for mode in cls:
            if mode.value == value:
                return mode
        return cls.PERMISSIVE


class ClientAuth(StrEnum):
    """``tls.server.need.client.auth``: whether a server asks for client certificates."""

    NONE = "none"
    OPTIONAL = "optional"
    REQUIRE = "require"

    @classmethod
    def parse(cls, value: str | None) -> ClientAuth:
        """Netty's ClientAuth by name, any case; blank or unknown is none."""
        wanted = (value or "").strip().lower()
        for auth in cls:
            if auth.value == wanted:
                return auth
        return cls.NONE


@dataclass(frozen=True)
class TlsConfig:
    """One side's TLS settings; attribute names are the keys' Java field names."""

    tlsMode: TlsMode = TlsMode.PERMISSIVE
    tlsEnable: bool = False
    tlsConfigFile: str = DEFAULT_CONFIG_FILE
    # Java's default: a self-signed server certificate, and clients that trust any server.
    tlsTestModeEnable: bool = True
    tlsServerNeedClientAuth: ClientAuth = ClientAuth.NONE
    tlsServerKeyPath: str | None = None
    tlsServerKeyPassword: str | None = None
    tlsServerCertPath: str | None = None
    tlsServerAuthClient: bool = False
    tlsServerTrustCertPath: str | None = None
    tlsClientKeyPath: str | None = None
    tlsClientKeyPassword: str | None = None
    tlsClientCertPath: str | None = None
    tlsClientAuthServer: bool = False
    tlsClientTrustCertPath: str | None = None

    @classmethod
    def from_properties(cls, props: Mapping[str, str], source: str = "tls settings") -> TlsConfig:
        """Defaults, then the ``tls.*`` keys of ``props``, then the ``tls.config.file`` file if it exists.

        Raises :class:`~gateway.config.ConfigError` for a boolean that is neither true nor false.
        """
        config = cls()._with(props, source, KEYS)
        path = config.tlsConfigFile
        if path and os.path.isfile(path):
            config = config._with(load_properties(path), path, FILE_KEYS)
        return config

    def _with(self, props: Mapping[str, str], source: str, keys: Mapping[str, str]) -> TlsConfig:
        changes: dict[str, object] = {}
        for key, attr in keys.items():
            value = props.get(key)
            if value is None:
                continue
            if attr == "tlsMode":
                changes[attr] = TlsMode.parse(value.strip())
            elif attr == "tlsServerNeedClientAuth":
                changes[attr] = ClientAuth.parse(value)
            elif _BOOLEAN[attr]:
                changes[attr] = convert(value, bool, key, source)
            else:
                changes[attr] = value.strip() or None
        return replace(self, **changes)

    @property
    def server_files(self) -> list[str]:
        """The files a server context is built from (watched for changes); none in test mode."""
        if self.tlsTestModeEnable:
            return []
        paths = (self.tlsServerCertPath, self.tlsServerKeyPath, self.tlsServerTrustCertPath)
        return [p for p in paths if p]


# RocketMQ key -> attribute (TlsSystemConfig's constants and fields).
KEYS = {
    "tls.server.mode": "tlsMode",
    "tls.enable": "tlsEnable",
    "tls.config.file": "tlsConfigFile",
    "tls.test.mode.enable": "tlsTestModeEnable",
    "tls.server.need.client.auth": "tlsServerNeedClientAuth",
    "tls.server.keyPath": "tlsServerKeyPath",
    "tls.server.keyPassword": "tlsServerKeyPassword",
    "tls.server.certPath": "tlsServerCertPath",
    "tls.server.authClient": "tlsServerAuthClient",
    "tls.server.trustCertPath": "tlsServerTrustCertPath",
    "tls.client.keyPath": "tlsClientKeyPath",
    "tls.client.keyPassword": "tlsClientKeyPassword",
    "tls.client.certPath": "tlsClientCertPath",
    "tls.client.authServer": "tlsClientAuthServer",
    "tls.client.trustCertPath": "tlsClientTrustCertPath",
}
# TlsHelper.extractTlsConfigFromFile reads everything but these three from the file.
FILE_KEYS = {k: a for k, a in KEYS.items() if a not in ("tlsMode", "tlsEnable", "tlsConfigFile")}
_BOOLEAN = {f.name: f.type in ("bool", bool) for f in fields(TlsConfig)}
