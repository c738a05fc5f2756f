"""TLS on outgoing connections (clients, and a broker's links to NameServers): ``tls.enable`` and ``tls.client.*``.

As Java's NettyRemotingClient does with ``tls.enable=true``, every connection speaks TLS from its first
byte. A connection is handed to its caller once the handshake is done (a refused certificate fails
the connection attempt): a remoting protocol registers itself as its transport's producer, and
Twisted's TLS pauses that producer while it holds writes made before the handshake — which would stop
the reads the handshake needs.
"""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IHandshakeListener, IProtocolFactory, IStreamClientEndpoint
from twisted.internet.protocol import Factory, Protocol
from zope.interface import implementer

from gateway.remoting.client import EndpointFactory, tcp_endpoint

from .config import TlsConfig

if TYPE_CHECKING:
    from twisted.internet.ssl import CertificateOptions

# pyOpenSSL and Twisted's TLS modules are imported only with tls.enable (gateway.lean_reactor).


def client_endpoint_factory(config: TlsConfig | None) -> EndpointFactory:
    """A :class:`~gateway.remoting.client.RemotingClient` endpoint factory for ``config``.

    Plain TCP unless ``tlsEnable``. Raises :class:`~gateway.tls.context.TlsContextError` for unusable files.
    """
    if config is None or not config.tlsEnable:
        return tcp_endpoint
    from .context import client_options

    options = client_options(config)

    def tls_endpoint(reactor: Any, host: str, port: int) -> IStreamClientEndpoint:
        return TlsClientEndpoint(reactor, options, tcp_endpoint(reactor, host, port))

    return tls_endpoint


@implementer(IStreamClientEndpoint)
class TlsClientEndpoint:
    """``wrapped`` with TLS; ``connect`` fires with the application protocol after the handshake."""

    def __init__(self, reactor: Any, options: CertificateOptions, wrapped: IStreamClientEndpoint) -> None:
        self.reactor = reactor
        self.options = options
        self.wrapped = wrapped

    def connect(self, protocolFactory: IProtocolFactory) -> Deferred[Any]:
        from twisted.protocols.tls import TLSMemoryBIOFactory

        established: Deferred[Any] = Deferred()
        # The clock flushes TLS writes: the connection's own reactor, which need not be the global one.
        tls_factory = TLSMemoryBIOFactory(
            self.options, True, _HandshakeFirstFactory(protocolFactory, established), self.reactor
        )
        self.wrapped.connect(tls_factory).addErrback(established.errback)
        return established


class _HandshakeFirstFactory(Factory):
    def __init__(self, factory: IProtocolFactory, established: Deferred[Any]) -> None:
        self.factory = factory
        self.established = established

    def buildProtocol(self, addr: Any) -> Protocol | None:
        inner = self.factory.buildProtocol(addr)
        return None if inner is None else _HandshakeFirst(inner, self.established)


@implementer(IHandshakeListener)
class _HandshakeFirst(Protocol):
    """Connects ``inner`` to the TLS transport once the handshake completes, then steps aside."""

    def __init__(self, inner: Protocol, established: Deferred[Any]) -> None:
        self.inner = inner
        self.established = established
        self.handshaken = False

    def handshakeCompleted(self) -> None:
        self.handshaken = True
        self.dataReceived = self.inner.dataReceived  # type: ignore[method-assign]
        self.inner.makeConnection(self.transport)
        self.established.callback(self.inner)

    def connectionLost(self, reason: Any = None) -> None:
        if self.handshaken:
            self.inner.connectionLost(reason)
        else:
            self.established.errback(reason)


def ssl_client_context(config: TlsConfig) -> ssl.SSLContext:
    """The same client settings for Python's ``ssl`` (a :class:`~gateway.remoting.blocking.BlockingConnection`):
    the server verified against ``tls.client.trustCertPath`` only with ``tls.client.authServer`` (Java checks no
    host name), a client certificate when ``tls.client.certPath`` is set; neither in test mode."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if config.tlsTestModeEnable:  # as client_options: no certificate of its own, any server
        return context
    if config.tlsClientAuthServer:
        context.verify_mode = ssl.CERT_REQUIRED
        if config.tlsClientTrustCertPath:
            context.load_verify_locations(config.tlsClientTrustCertPath)
    if config.tlsClientCertPath and config.tlsClientKeyPath:
        context.load_cert_chain(config.tlsClientCertPath, config.tlsClientKeyPath, config.tlsClientKeyPassword)
    return context
