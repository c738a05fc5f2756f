"""NamesrvController: the name server as a Twisted service — listener, broker expiry scan, KV file.

``startService()`` listens at once (``port`` then tells the bound port, handy with ``listenPort=0``);
``stopService()`` returns a Deferred that fires once the port and every connection are closed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from twisted.application.service import Service
from twisted.internet.defer import Deferred, DeferredList, maybeDeferred
from twisted.internet.interfaces import IDelayedCall, IListeningPort, IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from gateway.acl.namesrv_acl import NamesrvAcl
from gateway.persist import corrupt_state_files
from gateway.remoting.budget import MemoryBudget
from gateway.remoting.dispatch import RequestDispatcher
from gateway.remoting.protocol import RemotingProtocol, RemotingServerFactory
from gateway.remoting.rpc_latency import RPC_LATENCY_BUCKETS_MS, Histograms
from gateway.tls.server import TlsServer

from .config import NamesrvConfig
from .kvconfig import KVConfigManager
from .processors import DefaultRequestProcessor
from .routes import RouteInfoManager

if TYPE_CHECKING:
    from gateway.console.server import ConsoleService
    from gateway.controller.config import ControllerConfig
    from gateway.controller.service import ControllerManager
    from gateway.otlp import MetricsPusher

log = Logger()

# Java's NamesrvController runs the first expiry scan 5 s after start.
FIRST_SCAN_DELAY = 5.0


class NamesrvController(Service):
    """A name server: route tables and KV config behind a remoting listener.

    ``reactor`` listens (default: the global reactor); ``clock`` times the expiry scan and the
    brokers' last-update stamps (default: ``reactor``; tests pass a ``task.Clock``).
    ``system_properties`` holds the ``tls.*`` and ``rocketmq.*`` settings Java takes as -D properties (TLS
    with Java's defaults; None serves plain connections only). With ``aclEnable`` the ACL files are loaded
    here (ConfigError if they cannot be).
    """

    def __init__(
        self,
        config: NamesrvConfig,
        reactor: Any = None,
        clock: IReactorTime | None = None,
        system_properties: Mapping[str, str] | None = None,
        controller_config: ControllerConfig | None = None,
    ) -> None:
        """``controller_config`` (with ``enableControllerInNamesrv``) embeds a controller on this port."""
        if reactor is None:
            from twisted.internet import reactor as global_reactor

            reactor = global_reactor
        self.config = config
        self.reactor = reactor
        self.clock: IReactorTime = clock if clock is not None else reactor
        self.kv_config_manager = KVConfigManager(config.kvConfigPath)
        self.route_info_manager = RouteInfoManager(
            now=lambda: int(self.clock.seconds() * 1000), broker_channel_expired_time=config.brokerChannelExpiredTime
        )
        self.dispatcher = RequestDispatcher()
        if config.metricsExporterType.upper() in ("PROM", "OTLP_GRPC", "LOG"):
            self.dispatcher.rpc_latency = Histograms(RPC_LATENCY_BUCKETS_MS)
        self.dispatcher.register_all(
            DefaultRequestProcessor(config, self.route_info_manager, self.kv_config_manager).handlers()
        )
        self.acl = NamesrvAcl.for_namesrv(config, system_properties, self.clock) if config.aclEnable else None
        if self.acl is not None:
            self.acl.install(self.dispatcher)
        # BrokerHousekeepingService: a broker's routes go with its connection.
        self.dispatcher.on_channel_closed.append(self._on_channel_closed)
        # Wrap or replace before startService to serve TLS.
        self.factory = RemotingServerFactory(self.dispatcher, budget=MemoryBudget(config.remotingMaxBufferedBytes))
        self.tls = TlsServer.from_system_properties(system_properties, reactor)
        self.controller: ControllerManager | None = None
        if config.enableControllerInNamesrv:
            # Imported here: Raft (PySyncObj) costs memory a NameServer without a controller does not need.
            from gateway.controller.config import ControllerConfig
            from gateway.controller.service import ControllerManager

            config_ = controller_config or ControllerConfig()
            self.controller = ControllerManager(config_, reactor, self.dispatcher, tls=self.tls)
        self._listening: IListeningPort | None = None
        self.console: ConsoleService | None = None
        self.metrics_pusher: MetricsPusher | None = None  # OTLP_GRPC, LOG
        self._metrics_port: IListeningPort | None = None
        self._scan = LoopingCall(self.scan_not_active_broker)
        self._scan.clock = self.clock
        self._first_scan: IDelayedCall | None = None

    @property
    def port(self) -> int:
        """The TCP port listened on (useful with ``listenPort=0``); only while started."""
        if self._listening is None:
            raise RuntimeError("the name server is not listening")
        return self._listening.getHost().port

    def startService(self) -> None:
        """Load the KV file (raises StateFileError if it and its .bak are unreadable), listen (raises
        CannotListenError), schedule the expiry scan."""
        with corrupt_state_files(start_empty=self.config.startWithCorruptStateFiles):
            self.kv_config_manager.load()
        self.tls.start()
        if self.acl is not None:
            self.acl.start()
        self._listening = self.reactor.listenTCP(
            self.config.listenPort, self.tls.wrap(self.factory), interface=self.config.bindAddress
        )
        super().startService()
        if self.controller is not None:
            self.controller.startService()
        kind = self.config.metricsExporterType.upper()
        if kind == "PROM":
            # prometheus-client only when asked for
            from gateway import prometheus

            from .metrics import metrics_site

            self._metrics_port = prometheus.listen(self.reactor, self.config, metrics_site(self))
        elif kind in ("OTLP_GRPC", "LOG"):
            from gateway.otlp import MetricsPusher

            from .metrics import NamesrvCollector

            self.metrics_pusher = MetricsPusher(NamesrvCollector(self), self.config, self.reactor, "namesrv-meter")
            self.metrics_pusher.start()
        host = self._listening.getHost()
        log.info("NameServer listening on {host}:{port}", host=host.host, port=host.port, console=True)
        if self.config.consoleEnable:
            self._start_console(host.port)
        self._first_scan = self.clock.callLater(
            FIRST_SCAN_DELAY, self._scan.start, self.config.scanNotActiveBrokerInterval / 1000, now=True
        )

    def _start_console(self, port: int) -> None:
        """The cluster console (consoleEnable=true), against this NameServer."""
        from gateway.console.server import ConsoleService  # Jinja2 and the pages only when asked for

        bind = self.config.bindAddress
        addr = f"{'127.0.0.1' if bind in ('', '0.0.0.0', '::') else bind}:{port}"
        self.console = ConsoleService(self.config.console_settings(addr, self.config.configStorePath), self.reactor)
        self.console.startService()

    def stopService(self) -> Deferred[None]:
        """Stop scanning, close the port and every connection; the Deferred fires when all are closed."""
        super().stopService()
        self.tls.stop()
        if self.acl is not None:
            self.acl.stop()
        if self._first_scan is not None and self._first_scan.active():
            self._first_scan.cancel()
        if self._scan.running:
            self._scan.stop()
        waits: list[Deferred[Any]] = []
        if self.console is not None:
            waits.append(maybeDeferred(self.console.stopService))
        if self.metrics_pusher is not None:
            waits.append(maybeDeferred(self.metrics_pusher.stop))
        if self.controller is not None:
            waits.append(maybeDeferred(self.controller.stopService))
        if self._metrics_port is not None:
            waits.append(maybeDeferred(self._metrics_port.stopListening))
            self._metrics_port = None
        if self._listening is not None:
            waits.append(maybeDeferred(self._listening.stopListening))
            self._listening = None
        waits.append(self.factory.close_all())
        return DeferredList(waits, consumeErrors=True).addCallback(
            lambda _: log.info("NameServer stopped", console=True)
        )

    def scan_not_active_broker(self) -> None:
        """Expire brokers silent for ``brokerChannelExpiredTime`` and close their connections."""
        for live in self.route_info_manager.scan_not_active_broker():
            if live.channel is not None:
                live.channel.close()

    def _on_channel_closed(self, channel: RemotingProtocol) -> None:
        self.route_info_manager.on_channel_destroy(channel.peer, channel)
