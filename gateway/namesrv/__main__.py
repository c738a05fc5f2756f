"""``python -m gateway.namesrv [-c namesrv.properties] [-p]``: the name server, with ``mqnamesrv``'s flags.

Logs go to namesrv.log (and the other component files) under the log directory (:mod:`gateway.logs`); the
console shows the start and stop lines, warnings and errors. SIGINT or SIGTERM closes the port and every
connection, then exits 0; a bad configuration, an unreadable kvConfig.json or a port in use prints one line
(naming the key, the file or the address) on stderr and exits 1.
"""

from __future__ import annotations

from gateway import lean_reactor

lean_reactor.install()  # before anything below imports the reactor

import argparse
import sys
from dataclasses import fields, replace
from typing import Any

from twisted.internet import task
from twisted.internet.defer import Deferred

from gateway.config import ConfigError, properties_to_string, system_properties
from gateway.controller.config import ControllerConfig, load_controller_config
from gateway.logs import LogSettings, add_log_arguments, start_logging
from gateway.runner import startup_failure

from .config import NamesrvConfig, load_namesrv_config
from .service import NamesrvController


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``mqnamesrv``."""
    parser = argparse.ArgumentParser(prog="mqnamesrv", description="RocketMQ-compatible name server")
    parser.add_argument("-c", "--configFile", metavar="FILE", help="Name server config properties file")
    parser.add_argument("-p", "--printConfigItem", action="store_true", help="Print all config items")
    return parser


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m gateway.namesrv`` and the ``mqnamesrv`` script; exits the process."""
    parser = build_parser()
    add_log_arguments(parser)
    args = parser.parse_args(argv)
    try:
        config = load_namesrv_config(args.configFile)
        props = system_properties(args.configFile)
        controller = (
            # configStorePath in this file is the NameServer's: an embedded controller's updates stay in memory.
            replace(
                load_controller_config(args.configFile, ignore=("tls.", *(f.name for f in fields(NamesrvConfig)))),
                configStorePath="",
            )
            if config.enableControllerInNamesrv
            else None
        )
    except ConfigError as e:
        print(f"mqnamesrv: {e}", file=sys.stderr)
        sys.exit(1)
    if args.printConfigItem:
        sys.stdout.write(properties_to_string(config.to_properties()))
        return
    start_logging(LogSettings.from_args(args), "namesrv.log")
    task.react(_serve, (config, props, controller))


async def _serve(
    reactor: Any, config: NamesrvConfig, props: dict[str, str], controller_config: ControllerConfig | None
) -> None:
    try:
        controller = NamesrvController(config, reactor, system_properties=props, controller_config=controller_config)
        controller.startService()
    except ConfigError as e:
        # What start-up reads (kvConfig.json, the TLS and ACL files) cannot be used: one line naming it, exit 1.
        print(f"mqnamesrv: {e}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    except Exception as e:
        # A busy port, a KV file that cannot be written: one line too.
        line = startup_failure(e)
        if line is None:
            raise
        print(f"mqnamesrv: {line}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    # The reactor waits for this Deferred when SIGINT/SIGTERM stops it.
    reactor.addSystemEventTrigger("before", "shutdown", controller.stopService)
    # Serve until the reactor stops.
    await Deferred()


if __name__ == "__main__":
    main()
