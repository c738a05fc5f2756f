"""``python -m gateway.controller -c controller.properties``: a standalone controller (``mqcontroller``).

Logs go to stdout; SIGINT or SIGTERM stops it cleanly; a bad configuration prints the key and file on stderr
and exits 1.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from twisted.internet import task
from twisted.internet.defer import Deferred
from twisted.internet.error import CannotListenError
from twisted.logger import (
    FilteringLogObserver,
    Logger,
    LogLevel,
    LogLevelFilterPredicate,
    globalLogBeginner,
    textFileLogObserver,
)

from gateway.config import ConfigError

from .config import ControllerConfig, load_controller_config
from .service import ControllerManager

log = Logger()


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m gateway.controller``; exits the process."""
    parser = argparse.ArgumentParser(prog="mqcontroller", description="RocketMQ-compatible controller")
    parser.add_argument("-c", "--configFile", metavar="FILE", help="Controller config properties file")
    args = parser.parse_args(argv)
    try:
        config = load_controller_config(args.configFile)
    except ConfigError as e:
        print(f"mqcontroller: {e}", file=sys.stderr)
        sys.exit(1)
    observer = textFileLogObserver(sys.stdout)
    globalLogBeginner.beginLoggingTo(
        [FilteringLogObserver(observer, [LogLevelFilterPredicate(defaultLogLevel=LogLevel.info)])],
        redirectStandardIO=False,
    )
    task.react(_serve, (config,))


async def _serve(reactor: Any, config: ControllerConfig) -> None:
    controller = ControllerManager(config, reactor)
    try:
        controller.startService()
    except CannotListenError as e:
        log.critical("cannot listen: {error}", error=e)
        raise SystemExit(1) from None
    reactor.addSystemEventTrigger("before", "shutdown", controller.stopService)
    await Deferred()


if __name__ == "__main__":
    main()
