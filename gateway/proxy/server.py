"""The gRPC endpoint as a service: a listening port (TLS with ALPN ``h2`` and plaintext on the same port, as
the ``tls.*`` settings say) in front of a :class:`~gateway.proxy.service.MessagingService`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from twisted.application.service import Service
from twisted.internet.defer import maybeDeferred
from twisted.logger import Logger
from twisted.protocols.policies import ProtocolWrapper, WrappingFactory

from gateway.acl.plain_permission_manager import PlainPermissionManager
from gateway.client.instance import ClientInstance
from gateway.client.security import ClientSecurity
from gateway.remoting.rpc_latency import Histograms
from gateway.tls.config import TlsConfig
from gateway.tls.server import TlsServer

from .config import ProxyConfig, parse_credentials
from .service import MessagingService

H2 = b"h2"

log = Logger()


class GrpcTlsServer(TlsServer):
    """TLS settings of the gRPC port: gRPC clients insist on ALPN ``h2``."""

    def reload(self) -> bool:
        loaded = super().reload()
        if loaded and self.options is not None:
            self.options.getContext().set_alpn_select_callback(_select_h2)
        return loaded


def _select_h2(connection: Any, offered: list[bytes]) -> bytes:
    from OpenSSL import SSL

    return H2 if H2 in offered else SSL.NO_OVERLAPPING_PROTOCOLS


class ConnectionLimit(WrappingFactory):
    """Closes a connection beyond ``limit`` open ones as soon as it is accepted (TLS or not, before any byte);
    warns once per burst of such refusals."""

    noisy = False

    def __init__(self, wrapped: Any, limit: int) -> None:
        super().__init__(wrapped)
        self.limit = limit
        self.refusing = False

    def buildProtocol(self, addr: Any) -> ProtocolWrapper | None:
        if len(self.protocols) >= self.limit:
            if not self.refusing:
                self.refusing = True
                log.warn(
                    "gRPC port at grpcMaxConnections={limit} open connections: closing new ones (first: {addr})",
                    limit=self.limit,
                    addr=f"{getattr(addr, 'host', '?')}:{getattr(addr, 'port', 0)}",
                )
            return None
        self.refusing = False
        return super().buildProtocol(addr)


class ProxyServer(Service):
    """Serves ``apache.rocketmq.v2.MessagingService`` on ``config.grpcServerPort``.

    ``system_properties`` carries the ``tls.*`` keys (None: plaintext only); ``security`` is how the proxy's
    remoting client reaches NameServers and brokers (TLS, signing); by default as ``config`` and the ``tls.*``
    client keys say. ``rpc_latency`` counts the calls' latency for another's /metrics (a broker's).
    """

    def __init__(
        self,
        config: ProxyConfig,
        reactor: Any,
        system_properties: Mapping[str, str] | None = None,
        security: ClientSecurity | None = None,
        rpc_latency: Histograms | None = None,
    ) -> None:
        self.config = config
        self.reactor = reactor
        self.tls = GrpcTlsServer.from_system_properties(system_properties, reactor)
        self.security = security
        self.system_properties = system_properties
        self.rpc_latency = rpc_latency
        self.service: MessagingService | None = None
        self.port: Any = None
        self.metrics_port: Any = None

    @property
    def listen_port(self) -> int:
        """The port listened on (the configured one, or the one the system chose for port 0)."""
        return self.port.getHost().port if self.port is not None else self.config.grpcServerPort

    def startService(self) -> None:
        from .auth import AclAuthenticator

        security = self.security or self.default_security()
        instance = ClientInstance(self.config.namesrvAddr, reactor=self.reactor, security=security)
        authenticator = None
        if self.config.aclEnable:
            manager = PlainPermissionManager.for_server(self.config.rocketmqHome, self.system_properties, self.reactor)
            authenticator = AclAuthenticator(manager)
        service = MessagingService(self.config, instance, self.reactor, authenticator, self.rpc_latency)
        factory = ConnectionLimit(self.tls.wrap(service.factory()), self.config.grpcMaxConnections)
        self.port = self.reactor.listenTCP(self.config.grpcServerPort, factory, interface=self.config.bindAddress)
        # QueryRoute answers with our port: the real one when the system chose it.
        self.config.grpcServerPort = self.port.getHost().port
        self.service = service
        self.tls.start()
        if authenticator is not None:
            authenticator.manager.start()
        service.start()
        if self.config.metricsExporterType.upper() == "PROM":
            from gateway import prometheus  # prometheus-client only when asked for

            from .metrics import metrics_site

            self.metrics_port = prometheus.listen(self.reactor, self.config, metrics_site(self.config, service))
        super().startService()

    def default_security(self) -> ClientSecurity:
        config = self.config
        credentials = None
        if config.enableAclRpcHookForClusterMode and config.innerClientAuthenticationCredentials:
            credentials = parse_credentials(config.innerClientAuthenticationCredentials)
        tls = TlsConfig.from_properties(self.system_properties) if self.system_properties else None
        return ClientSecurity(credentials, tls)

    def stopService(self) -> Any:
        super().stopService()
        self.tls.stop()
        service, self.service = self.service, None
        port, self.port = self.port, None
        if service is not None and service.authenticator is not None:
            service.authenticator.manager.stop()
        d = maybeDeferred(port.stopListening) if port is not None else maybeDeferred(lambda: None)
        metrics_port, self.metrics_port = self.metrics_port, None
        if metrics_port is not None:
            d.addCallback(lambda _: metrics_port.stopListening())
        if service is not None:
            d.addCallback(lambda _: service.stop())
        return d


def broker_proxy(
    broker_config: Any,
    reactor: Any,
    system_properties: Mapping[str, str] | None,
    rpc_latency: Histograms | None = None,
) -> ProxyServer:
    """The gRPC endpoint a broker runs beside itself (``enableGrpcServer``): on its bind address, with its ACL
    and TLS settings, reaching the NameServers the broker registers with (read when the service starts).
    With ``aclEnable`` the broker checks the proxy's own requests too: set ``innerClientAuthenticationCredentials``
    to an account that may use the topics and groups of the SDK clients."""
    config = ProxyConfig(
        namesrvAddr=broker_config.namesrvAddr,
        grpcServerPort=broker_config.grpcServerPort,
        bindAddress=broker_config.bindAddress,
        grpcMaxConnections=broker_config.grpcMaxConnections,
        aclEnable=broker_config.aclEnable,
        rocketmqHome=broker_config.rocketmqHome,
    )
    # Its requests reach the broker like any client's: signed as the broker signs its own, when it checks ACL.
    tls = TlsConfig.from_properties(system_properties) if system_properties else None
    security = ClientSecurity(broker_config.inner_credentials, tls)
    return ProxyServer(config, reactor, system_properties, security, rpc_latency)
