"""Serving the console: :class:`ConsoleService` (a twisted.application service, also run inside a NameServer with
``consoleEnable=true``) and ``rocketmq-gateway console -n NAMESRV`` (:func:`main`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from twisted.application.service import Service
from twisted.internet.defer import DeferredList, maybeDeferred
from twisted.logger import Logger
from twisted.web.server import Site

from gateway.config import ConfigError

from .charts import SAMPLE_SECONDS, Sampler
from .settings import DEFAULT_PORT, ConsoleSettings
from .web import ConsoleRequest, ConsoleResource

log = Logger()


class ConsoleService(Service):
    """The console on ``settings.host:settings.port`` (0: a free port, written back to ``settings.port``)."""

    def __init__(self, settings: ConsoleSettings, reactor: Any, sample_seconds: float = SAMPLE_SECONDS) -> None:
        self.settings = settings
        self.reactor = reactor
        self.sampler = Sampler(settings, reactor, sample_seconds)
        self.resource: ConsoleResource | None = None
        self._port: Any = None

    def startService(self) -> None:
        super().startService()
        self.resource = ConsoleResource(self.settings, self.sampler)
        site = Site(self.resource)
        site.requestFactory = ConsoleRequest
        site.displayTracebacks = False
        self._port = self.reactor.listenTCP(self.settings.port, site, interface=self.settings.host)
        self.settings.port = self._port.getHost().port
        self.sampler.start()
        log.info("console on {url}", url=self.url, console=True)

    @property
    def url(self) -> str:
        return f"http://{self.settings.host}:{self.settings.port}/"

    def stopService(self) -> Any:
        super().stopService()
        if self.resource is not None:
            self.resource.access.close()
        port, self._port = self._port, None
        waits = [self.sampler.stop()]
        if port is not None:
            waits.append(maybeDeferred(port.stopListening))
        return DeferredList(waits, consumeErrors=True)


def main(argv: list[str]) -> int:
    """``rocketmq-gateway console``: the console against the cluster of ``-n``, until Ctrl-C."""
    from gateway.admin.cli import CommandFailed, add_connection_arguments, tls_context
    from gateway.logs import LogSettings, add_log_arguments, start_logging
    from gateway.runner import run_services

    parser = argparse.ArgumentParser(
        prog="rocketmq-gateway console",
        description="A web console for a RocketMQ cluster (ours or Apache's), found through its NameServers",
    )
    parser.add_argument("-n", "--namesrvAddr", required=True, help="NameServer list, host:port[;host:port]")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    parser.add_argument("--writable", action="store_true", help="allow actions on a cluster without ACL")
    parser.add_argument("--allow-remote", action="store_true", help="listen on a non-loopback address without ACL")
    add_connection_arguments(parser)  # --accessKey/--secretKey: the account the console reads with; --tls...
    parser.add_argument("--history-hours", type=int, default=3, help="hours of chart samples kept (default 3)")
    add_log_arguments(parser)
    args = parser.parse_args(argv)
    try:
        settings = ConsoleSettings(
            args.namesrvAddr,
            host=args.host,
            port=args.port,
            writable=args.writable,
            allow_remote=args.allow_remote,
            access_key=args.accessKey,
            secret_key=args.secretKey,
            history_hours=args.history_hours,
            tls=tls_context(args),
        ).check()
    except (CommandFailed, ConfigError) as e:  # a setting or a TLS file the console cannot use: one line
        print(f"configuration error: {e}", file=sys.stderr)
        return 1
    start_logging(LogSettings.from_args(args), "console.log")
    run_services(
        lambda reactor: [ConsoleService(settings, reactor)],
        lambda services: f"rocketmq-gateway console ready: {services[0].url} for {settings.namesrv} (Ctrl-C stops)",
    )
    return 0
