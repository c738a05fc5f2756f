"""A client's TLS and ACL settings: what Java's client takes as ``useTLS`` + ``tls.client.*`` and an AclClientRPCHook.

Give one to a producer, consumer or admin (``security=``), e.g. a client that signs its requests and
verifies the servers against a CA::

    ClientSecurity(
        SessionCredentials("ak", "sk"),
        TlsConfig.from_properties({"tls.enable": "true", "tls.test.mode.enable": "false",
                                   "tls.client.authServer": "true", "tls.client.trustCertPath": "ca.pem"}),
    )
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.acl.signer import SessionCredentials
from gateway.remoting.client import RemotingClient
from gateway.remoting.command import RemotingCommand
from gateway.tls.client import client_endpoint_factory
from gateway.tls.config import TlsConfig


@dataclass(frozen=True)
class ClientSecurity:
    """Sign every request with ``credentials``; speak TLS when ``tls.tlsEnable``."""

    credentials: SessionCredentials | None = None
    tls: TlsConfig | None = None

    def install(self, remoting: RemotingClient) -> None:
        """Apply to a remoting client before its first connection (raises ConfigError for unusable TLS files)."""
        if self.tls is not None and self.tls.tlsEnable:
            remoting.endpoint_factory = client_endpoint_factory(self.tls)
        if self.credentials is not None:
            remoting.request_hooks.append(self._sign)

    def _sign(self, addr: str, request: RemotingCommand) -> None:
        assert self.credentials is not None
        self.credentials.sign(request)
