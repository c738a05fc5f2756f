"""``python -m gateway.controller -c controller.properties``: a standalone controller (``mqcontroller``).

Logs go to controller.log under the log directory (:mod:`gateway.logs`); SIGINT or SIGTERM stops it cleanly;
a bad configuration prints the key and file on stderr and exits 1.
"""

from __future__ import annotations

from gateway import lean_reactor

lean_reactor.install()  # before anything below imports the reactor

import argparse
import sys

from gateway.config import ConfigError, system_properties
from gateway.logs import LogSettings, add_log_arguments, start_logging
from gateway.runner import run_services
from gateway.tls.server import TlsServer

from .config import load_controller_config
from .service import ControllerManager


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m gateway.controller``; exits the process."""
    parser = argparse.ArgumentParser(prog="mqcontroller", description="RocketMQ-compatible controller")
    parser.add_argument("-c", "--configFile", metavar="FILE", help="Controller config properties file")
    add_log_arguments(parser)
    args = parser.parse_args(argv)
    try:
        config = load_controller_config(args.configFile)
        props = system_properties(args.configFile)
    except ConfigError as e:
        print(f"mqcontroller: {e}", file=sys.stderr)
        sys.exit(1)
    start_logging(LogSettings.from_args(args), "controller.log")
    run_services(
        lambda reactor: [ControllerManager(config, reactor, tls=TlsServer.from_system_properties(props, reactor))],
        lambda services: f"controller {config.controllerDLegerSelfId} ready on port {services[0].port}",
    )


if __name__ == "__main__":
    main()
