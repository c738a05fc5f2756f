"""``python -m gateway.proxy -n 127.0.0.1:9876 [--port 8081] [-c proxy.properties]``: the gRPC proxy (mqproxy)."""

from __future__ import annotations

from gateway import lean_reactor

lean_reactor.install()  # before anything below imports the reactor

import argparse
import sys

from gateway.config import ConfigError, system_properties
from gateway.logs import LogSettings, add_log_arguments, start_logging
from gateway.runner import run_services

from .config import load_proxy_config
from .server import ProxyServer


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="mqproxy", description="RocketMQ 5 gRPC proxy (cluster mode)")
    parser.add_argument("-c", "--configFile", help="proxy settings (ProxyConfig keys, tls.* keys) as properties")
    parser.add_argument("-n", "--namesrvAddr", help="name server address list, e.g. 127.0.0.1:9876;127.0.0.2:9876")
    parser.add_argument("--port", help="gRPC port (default 8081, or the file's grpcServerPort)")
    parser.add_argument("--bind", help="address to listen on (default 0.0.0.0, or the file's bindAddress)")
    add_log_arguments(parser)
    args = parser.parse_args(argv)
    overrides = {}
    if args.namesrvAddr:
        overrides["namesrvAddr"] = args.namesrvAddr
    if args.port is not None:
        overrides["grpcServerPort"] = args.port
    if args.bind:
        overrides["bindAddress"] = args.bind
    try:
        config = load_proxy_config(args.configFile, overrides)
        props = system_properties(args.configFile) if args.configFile else None
    except ConfigError as e:
        print(f"configuration error: {e}", file=sys.stderr)
        sys.exit(1)
    start_logging(LogSettings.from_args(args), "proxy.log")
    run_services(
        lambda reactor: [ProxyServer(config, reactor, props)],
        lambda svcs: (
            f"rocketmq-gateway proxy ready: gRPC on {config.bindAddress}:{svcs[0].listen_port}, "
            f"name server {config.namesrvAddr} (Ctrl-C stops)"
        ),
    )


if __name__ == "__main__":
    main()
