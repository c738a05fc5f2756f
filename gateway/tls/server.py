"""TLS on a server's port: the mode (disabled / permissive / enforcing), first-byte sniffing, certificate reload.

Java's HandshakeHandler looks at the first byte of a new connection: 0x16 (a TLS handshake record)
starts TLS, anything else is plain remoting (a plain frame starts with its length, which is never
0x16xxxxxx: that exceeds the 16 MiB frame limit). Here a :class:`HandshakeProtocol` sits under each
new connection until its first bytes arrive, then hands the connection to a remoting protocol,
directly or through :class:`~twisted.protocols.tls.TLSMemoryBIOProtocol`, and steps aside: after that
the transport feeds the chosen protocol with no extra call, and the protocol writes to the transport.

The server's options are rebuilt when the key, certificate or trust files change. Open connections
keep the options they started with; new handshakes use the new ones. A change that does not load
(e.g. a certificate written before its key) keeps the previous options until the files load again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from twisted.internet.interfaces import IOpenSSLServerConnectionCreator, IProtocolFactory
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from twisted.protocols.policies import TimeoutMixin
from zope.interface import implementer

from gateway.file_watch import FileWatchService

from .config import TlsConfig, TlsMode

if TYPE_CHECKING:
    from OpenSSL import SSL
    from twisted.internet import ssl
    from twisted.protocols.tls import TLSMemoryBIOProtocol

# pyOpenSSL and Twisted's TLS modules are imported only when a TLS mode is on (gateway.lean_reactor).

log = Logger()

HANDSHAKE_MAGIC_CODE = 0x16
# Java's FileWatchService polls the TLS files every 500 ms.
WATCH_INTERVAL = 0.5
# How long a new connection may stay silent before it is closed (NettyServerConfig's idle time).
FIRST_BYTE_TIMEOUT = 120.0


@implementer(IOpenSSLServerConnectionCreator)
class TlsServer:
    """A server's TLS settings and current options; :meth:`wrap` puts a listening factory behind them.

    ``clock`` is the server's reactor: it flushes TLS writes and polls the files.
    """

    def __init__(self, config: TlsConfig, clock: Any = None, watch_interval: float = WATCH_INTERVAL) -> None:
        self.config = config
        self.options: ssl.CertificateOptions | None = None
        self.clock = clock
        self._watch: FileWatchService | None = None
        self._watch_interval = watch_interval
        # Test mode's self-signed certificate is made for the first TLS client, so a process that no TLS client
        # reaches never loads pyOpenSSL (about 13 MB); configured files are loaded now, so a bad one shows at start.
        self._self_signed_pending = config.tlsMode is not TlsMode.DISABLED and config.tlsTestModeEnable
        if config.tlsMode is not TlsMode.DISABLED and not self._self_signed_pending:
            self.reload()

    @classmethod
    def from_system_properties(cls, props: Mapping[str, str] | None, clock: Any = None) -> TlsServer:
        """Java's defaults overridden by ``props``; ``None`` (no config file at all) serves plain connections only."""
        if props is None:
            return cls(TlsConfig(tlsMode=TlsMode.DISABLED), clock)
        return cls(TlsConfig.from_properties(props), clock)

    def reload(self) -> bool:
        """Rebuild the options from the files; on failure keep the current ones and log why."""
        from OpenSSL import SSL

        from .context import TlsContextError, server_options

        try:
            self.options = server_options(self.config)
        except (TlsContextError, SSL.Error) as e:
            log.error("TLS server context not (re)loaded, new TLS connections keep the previous one: {error}", error=e)
            return False
        log.info("TLS server context loaded (mode {mode})", mode=self.config.tlsMode.value)
        return True

    def current_options(self) -> ssl.CertificateOptions | None:
        """The options a new TLS connection starts with (None: none could be loaded)."""
        if self._self_signed_pending:
            self._self_signed_pending = False
            self.reload()
        return self.options

    def start(self) -> None:
        """Watch the key, certificate and trust files (nothing to watch in test mode)."""
        files = self.config.server_files
        if self.config.tlsMode is TlsMode.DISABLED or not files:
            return
        self._watch = FileWatchService(lambda: files, self._files_changed, self._watch_interval, self.clock)
        self._watch.start()

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.stop()
            self._watch = None

    def _files_changed(self, paths: list[str]) -> None:
        log.info("TLS files changed: {paths}", paths=", ".join(paths))
        self.reload()

    def serverConnectionForTLS(self, tlsProtocol: TLSMemoryBIOProtocol) -> SSL.Connection:
        assert self.options is not None  # HandshakeProtocol closes TLS connections while there are none
        return self.options.serverConnectionForTLS(tlsProtocol)

    def wrap(self, factory: IProtocolFactory) -> IProtocolFactory:
        """The factory to listen with: ``factory`` itself when disabled (a TLS hello then fails as a bad frame)."""
        if self.config.tlsMode is TlsMode.DISABLED:
            return factory
        return TlsModeFactory(self, factory)


class TlsModeFactory(Factory):
    """Builds a :class:`HandshakeProtocol` per connection; closes those still silent when the port stops."""

    noisy = False

    def __init__(self, tls: TlsServer, wrapped: IProtocolFactory) -> None:
        self.tls = tls
        self.wrapped = wrapped
        self._tls_factory: Factory | None = None
        self.undecided: set[HandshakeProtocol] = set()

    @property
    def tls_factory(self) -> Factory:
        """Wraps ``wrapped`` in TLS; made (and Twisted's TLS imported) for the first TLS client."""
        if self._tls_factory is None:
            from twisted.protocols.tls import TLSMemoryBIOFactory

            self._tls_factory = TLSMemoryBIOFactory(self.tls, False, self.wrapped, self.tls.clock)
        return self._tls_factory

    def startFactory(self) -> None:
        self.wrapped.doStart()

    def stopFactory(self) -> None:
        for proto in list(self.undecided):
            proto.transport.abortConnection()
        self.wrapped.doStop()

    def buildProtocol(self, addr: Any) -> HandshakeProtocol:
        return HandshakeProtocol(self, addr)


class HandshakeProtocol(Protocol, TimeoutMixin):
    """Waits for a connection's first byte, then hands the connection over (or closes it)."""

    def __init__(self, factory: TlsModeFactory, addr: Any) -> None:
        self.factory = factory
        self.addr = addr
        self.inner: Protocol | None = None

    def connectionMade(self) -> None:
        self.factory.undecided.add(self)
        self.setTimeout(FIRST_BYTE_TIMEOUT)

    def timeoutConnection(self) -> None:
        self.transport.abortConnection()

    def dataReceived(self, data: bytes) -> None:
        self.setTimeout(None)
        self.factory.undecided.discard(self)
        tls = self.factory.tls
        mode = tls.config.tlsMode
        if data[0] == HANDSHAKE_MAGIC_CODE:
            if tls.current_options() is None:
                log.error("TLS handshake from {addr} but no TLS context loaded; closing it", addr=self.addr)
                self.transport.abortConnection()
                return
            inner = self.factory.tls_factory.buildProtocol(self.addr)
        elif mode is TlsMode.ENFORCING:
            log.warn(
                "Clients intend to establish an insecure connection while this server is running in SSL enforcing "
                "mode; closing {addr}",
                addr=self.addr,
            )
            self.transport.abortConnection()
            return
        else:
            inner = self.factory.wrapped.buildProtocol(self.addr)
        if inner is None:
            self.transport.loseConnection()
            return
        self.inner = inner
        # From now on the transport calls the chosen protocol directly.
        self.dataReceived = inner.dataReceived  # type: ignore[method-assign]
        inner.makeConnection(self.transport)
        inner.dataReceived(data)

    def connectionLost(self, reason: Any = None) -> None:
        self.setTimeout(None)
        self.factory.undecided.discard(self)
        if self.inner is not None:
            self.inner.connectionLost(reason)
