"""The gRPC endpoint as a service: a listening port (TLS with ALPN ``h2`` and plaintext on the same port, as
the ``tls.*`` settings say) in front of a :class:`~gateway.proxy.service.MessagingService`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from twisted.application.service import Service
from twisted.internet.defer import maybeDeferred

from gateway.acl.plain_permission_manager import PlainPermissionManager
from gateway.client.instance import ClientInstance
from gateway.tls.server import TlsServer

from .config import ProxyConfig
from .service import MessagingService

H2 = b"h2"


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


class ProxyServer(Service):
    """Serves ``apache.rocketmq.v2.MessagingService`` on ``config.grpcServerPort``.

    ``system_properties`` carries the ``tls.*`` keys (None: plaintext only); ``instance`` is the remoting
    client to reach the NameServer and brokers with (default: a new one for ``config.namesrvAddr``).
    """

    def __init__(
        self,
        config: ProxyConfig,
        reactor: Any,
        system_properties: Mapping[str, str] | None = None,
        instance: ClientInstance | None = None,
    ) -> None:
        self.config = config
        self.reactor = reactor
        self.tls = GrpcTlsServer.from_system_properties(system_properties, reactor)
        self.instance = instance
        self.system_properties = system_properties
        self.service: MessagingService | None = None
        self.port: Any = None

    @property
    def listen_port(self) -> int:
        """The port listened on (the configured one, or the one the system chose for port 0)."""
        return self.port.getHost().port if self.port is not None else self.config.grpcServerPort

    def startService(self) -> None:
        from .auth import AclAuthenticator

        instance = self.instance or ClientInstance(self.config.namesrvAddr, reactor=self.reactor)
        authenticator = None
        if self.config.aclEnable:
            manager = PlainPermissionManager.for_server(self.config.rocketmqHome, self.system_properties, self.reactor)
            authenticator = AclAuthenticator(manager)
        service = MessagingService(self.config, instance, self.reactor, authenticator)
        factory = self.tls.wrap(service.factory())
        self.port = self.reactor.listenTCP(self.config.grpcServerPort, factory, interface=self.config.bindAddress)
        # QueryRoute answers with our port: the real one when the system chose it.
        self.config.grpcServerPort = self.port.getHost().port
        self.service = service
        self.tls.start()
        if authenticator is not None:
            authenticator.manager.start()
        service.start()
        super().startService()

    def stopService(self) -> Any:
        super().stopService()
        self.tls.stop()
        service, self.service = self.service, None
        port, self.port = self.port, None
        if service is not None and service.authenticator is not None:
            service.authenticator.manager.stop()
        d = maybeDeferred(port.stopListening) if port is not None else maybeDeferred(lambda: None)
        if service is not None:
            d.addCallback(lambda _: service.stop())
        return d


def broker_proxy(broker_config: Any, reactor: Any, system_properties: Mapping[str, str] | None) -> ProxyServer:
    """The gRPC endpoint a broker runs beside itself (``enableGrpcServer``): on its bind address, with its ACL
    and TLS settings, reaching the NameServers the broker registers with (read when the service starts)."""
    config = ProxyConfig(
        namesrvAddr=broker_config.namesrvAddr,
        grpcServerPort=broker_config.grpcServerPort,
        bindAddress=broker_config.bindAddress,
        aclEnable=broker_config.aclEnable,
        rocketmqHome=broker_config.rocketmqHome,
    )
    return ProxyServer(config, reactor, system_properties)
