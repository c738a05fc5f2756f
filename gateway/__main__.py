"""``python -m gateway``: a NameServer and a Broker in one process, on an embedded store.

Defaults: NameServer on 127.0.0.1:9876, Broker on 127.0.0.1:10911, store under ./store. A config file's value
wins over a default, an option given wins over the file.
"""

from __future__ import annotations

from gateway import lean_reactor

lean_reactor.install()  # before anything below imports the reactor

import argparse
import sys
from typing import Any

from twisted.application.service import Service
from twisted.internet.defer import inlineCallbacks

from gateway.broker.config import load_broker_config
from gateway.broker.controller import BrokerController
from gateway.config import ConfigError, system_properties
from gateway.logs import LogSettings, add_log_arguments, start_logging
from gateway.namesrv.config import load_namesrv_config
from gateway.namesrv.service import NamesrvController
from gateway.proxy.server import ProxyServer, broker_proxy
from gateway.runner import run_services


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["admin"]:  # rocketmq-gateway admin <subcommand>: mqadmin's tools
        from gateway.admin.cli import main as admin_main

        sys.exit(admin_main(argv[1:]))
    if argv[:1] == ["console"]:  # rocketmq-gateway console -n NAMESRV: the cluster console
        from gateway.console.server import main as console_main

        sys.exit(console_main(argv[1:]))
    parser = argparse.ArgumentParser(
        prog="rocketmq-gateway",
        description="NameServer + Broker in one process ('rocketmq-gateway admin --help' for the admin tools, "
        "'rocketmq-gateway console --help' for the cluster console)",
    )
    # Options given win over the files; the files win over these defaults.
    parser.add_argument("--bind", help="address both servers listen on (default 127.0.0.1, or the files' bindAddress)")
    parser.add_argument("--namesrv-port", type=int, help="NameServer port (default 9876, or the file's listenPort)")
    parser.add_argument("--namesrv-config", help="namesrv.properties with RocketMQ's keys")
    parser.add_argument("--broker-config", help="broker.conf with RocketMQ's keys")
    parser.add_argument("--store", help="storePathRootDir (default ./store, or the broker.conf value)")
    add_log_arguments(parser)
    args = parser.parse_args(argv)
    try:
        defaults = {"bindAddress": "127.0.0.1"}
        bind = {"bindAddress": args.bind} if args.bind else {}
        namesrv_port = {"listenPort": str(args.namesrv_port)} if args.namesrv_port is not None else {}
        namesrv_cfg = load_namesrv_config(args.namesrv_config, bind | namesrv_port, defaults)
        store = {"storePathRootDir": args.store} if args.store else {}
        # The gRPC endpoint is on by default here: an SDK given only the endpoint 127.0.0.1:8081 works.
        broker_defaults = defaults | {"enableGrpcServer": "true"}
        broker_cfg, store_cfg = load_broker_config(args.broker_config, bind | store, broker_defaults)
        namesrv_props, broker_props = system_properties(args.namesrv_config), system_properties(args.broker_config)
    except ConfigError as e:
        print(f"configuration error: {e}", file=sys.stderr)
        sys.exit(1)
    start_logging(LogSettings.from_args(args), "gateway.log")

    service = None

    def build(reactor: object) -> list:
        nonlocal service
        broker = BrokerController(broker_cfg, store_cfg, reactor, broker_props)
        service = GatewayService(
            NamesrvController(namesrv_cfg, reactor, system_properties=namesrv_props),
            broker,
            broker_proxy(broker_cfg, reactor, broker_props, broker.grpc_latency)
            if broker_cfg.enableGrpcServer
            else None,
        )
        return [service]

    def ready(services: list) -> str:
        proxy = services[0].proxy
        grpc = f"grpc {broker_cfg.bindAddress}:{proxy.listen_port} " if proxy is not None else ""
        return (
            f"rocketmq-gateway ready: namesrv {broker_cfg.namesrvAddr} broker {broker_cfg.broker_addr} "
            f"store {store_cfg.storePathRootDir} {grpc}(Ctrl-C stops)"
        )

    run_services(build, ready)


class GatewayService(Service):
    """The NameServer, then a Broker registered with it, then the gRPC endpoint if any; stopped in reverse order."""

    def __init__(self, namesrv: NamesrvController, broker: BrokerController, proxy: ProxyServer | None = None) -> None:
        self.namesrv = namesrv
        self.broker = broker
        self.proxy = proxy

    def startService(self) -> None:
        super().startService()
        self.namesrv.startService()
        bind = self.namesrv.config.bindAddress
        host = "127.0.0.1" if bind in ("0.0.0.0", "::", "") else bind
        self.broker.config.namesrvAddr = f"{host}:{self.namesrv.port}"
        self.broker.startService()
        if self.proxy is not None:
            self.proxy.config.namesrvAddr = self.broker.config.namesrvAddr
            self.proxy.startService()

    def when_ready(self) -> Any:
        return self.broker.when_ready()

    @inlineCallbacks
    def stopService(self) -> Any:
        super().stopService()
        if self.proxy is not None:
            yield self.proxy.stopService()
        yield self.broker.stopService()
        yield self.namesrv.stopService()


if __name__ == "__main__":
    main()
