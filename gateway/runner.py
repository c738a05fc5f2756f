"""Shared entry-point plumbing: running services until Ctrl-C (logging is :mod:`gateway.logs`)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from twisted.application.service import IService
from twisted.internet import defer, task
from twisted.internet.error import CannotListenError

from gateway.config import ConfigError


def startup_failure(error: BaseException) -> str | None:
    """One line for a start-up failure a user can cause and mend, or None for anything else (a bug: traceback).

    A listener's port in use, a store that is in use or cannot be written, a file that cannot be opened.
    """
    if isinstance(error, CannotListenError):
        reason = getattr(error.socketError, "strerror", None) or error.socketError
        return f"cannot listen on {error.interface or '0.0.0.0'}:{error.port}: {reason}"
    from gateway.store import StoreLoadError  # here: a NameServer does not load the store

    if isinstance(error, StoreLoadError):
        return f"cannot start the store: {error}"
    if isinstance(error, OSError) and error.filename is not None:
        return f"cannot start: {error.filename}: {error.strerror}"
    return None


def run_services(build: Callable[[Any], list[IService]], ready: Callable[[list[IService]], str]) -> None:
    """Build services with the reactor, start them, print the ready line once every service is ready,
    and stop them cleanly on Ctrl-C. A start-up failure the user can mend (a setting, a busy port, a store in
    use or not writable) prints one line on stderr and exits 1."""

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
        except Exception as e:
            line = startup_failure(e)
            if line is None:
                raise
            print(line, file=sys.stderr, flush=True)
            raise SystemExit(1) from None

        @defer.inlineCallbacks
        def stop() -> Any:
            for svc in reversed(services):
                yield defer.maybeDeferred(svc.stopService)

        # Stopped cleanly also when Ctrl-C comes before they are ready (a broker no NameServer has accepted yet).
        reactor.addSystemEventTrigger("before", "shutdown", stop)
        # A service may say when it is really ready (a broker: registered with a NameServer).
        yield defer.gatherResults([defer.maybeDeferred(getattr(s, "when_ready", lambda: None)) for s in services])
        # Not before the main loop runs: until then Twisted has not installed its SIGINT/SIGTERM handlers, and
        # whoever waits for this line may signal at once.
        yield task.deferLater(reactor, 0, lambda: None)
        print(ready(services), flush=True)
        yield defer.Deferred()  # runs until the reactor is stopped (SIGINT/SIGTERM)

    try:
        task.react(main)
    except ConfigError as e:
        print(f"configuration error: {e}", file=sys.stderr)
        sys.exit(1)
