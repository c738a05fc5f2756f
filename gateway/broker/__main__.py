"""``python -m gateway.broker -c broker.conf [-n namesrvAddr]``: run a broker (mqbroker)."""

from __future__ import annotations

from gateway import lean_reactor

lean_reactor.install()  # before anything below imports the reactor

import argparse
import sys

from gateway.config import ConfigError, config_properties, properties_to_string, system_properties
from gateway.logs import LogSettings, add_log_arguments, start_logging
from gateway.runner import run_services

from .config import load_broker_config
from .controller import BrokerController


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="mqbroker", description="RocketMQ-compatible broker")
    parser.add_argument("-c", "--configFile", help="broker.conf with RocketMQ's keys")
    parser.add_argument("-n", "--namesrvAddr", help="name server address list, e.g. 127.0.0.1:9876;127.0.0.2:9876")
    parser.add_argument("-p", "--printConfigItem", action="store_true", help="print all config items and exit")
    add_log_arguments(parser)
    args = parser.parse_args(argv)
    overrides = {"namesrvAddr": args.namesrvAddr} if args.namesrvAddr else {}
    try:
        broker_cfg, store_cfg = load_broker_config(args.configFile, overrides)
        props = system_properties(args.configFile)
    except ConfigError as e:
        print(f"configuration error: {e}", file=sys.stderr)
        sys.exit(1)
    if args.printConfigItem:
        # As Java prints them: key=value lines, booleans lower-case, unset values left out.
        sys.stdout.write(properties_to_string(config_properties(store_cfg, broker_cfg)))
        return
    start_logging(LogSettings.from_args(args), "broker.log")

    def build(reactor: object) -> list:
        services = [BrokerController(broker_cfg, store_cfg, reactor, props)]
        if broker_cfg.enableGrpcServer:
            from gateway.proxy.server import broker_proxy

            services.append(broker_proxy(broker_cfg, reactor, props))
        return services

    run_services(
        build,
        lambda svcs: (
            f"The broker[{broker_cfg.brokerName}, {broker_cfg.broker_addr}] boot success. "
            f"serializeType=JSON and name server is:{broker_cfg.namesrvAddr}"
        ),
    )


if __name__ == "__main__":
    main()
