"""Shared entry-point plumbing: running services until Ctrl-C (logging is :mod:`gateway.logs`)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from twisted.application.service import IService
from twisted.internet import defer, task

from gateway.config import ConfigError


def run_services(build: Callable[[Any], list[IService]], ready: Callable[[list[IService]], str]) -> None:
    """Build services with the reactor, start them, print the ready line once every service is ready,
    and stop them cleanly on Ctrl-C."""

    @defer.inlineCallbacks
    def main(reactor: Any) -> Any:
        try:
            services = build(reactor)
            for svc in services:
                svc.startService()
        except ConfigError as e:
            # Settings read at start (TLS files, plain_acl.yml) fail here: one line, exit code 1.
            print(f"configuration error: {e}", file=sys.stderr, flush=True)
            raise SystemExit(1) from None
        # A service may say when it is really ready (a broker: registered with its NameServers).
        yield defer.gatherResults([defer.maybeDeferred(getattr(s, "when_ready", lambda: None)) for s in services])
        # Not before the main loop runs: until then Twisted has not installed its SIGINT/SIGTERM handlers, and
        # whoever waits for this line may signal at once.
        yield task.deferLater(reactor, 0, lambda: None)
        print(ready(services), flush=True)

        @defer.inlineCallbacks
        def stop() -> Any:
            for svc in reversed(services):
                yield defer.maybeDeferred(svc.stopService)

        reactor.addSystemEventTrigger("before", "shutdown", stop)
        yield defer.Deferred()  # runs until the reactor is stopped (SIGINT/SIGTERM)

    try:
        task.react(main)
    except ConfigError as e:
        print(f"configuration error: {e}", file=sys.stderr)
        sys.exit(1)
