"""Coalesced work: a burst of requests for the same job (write a config file, register with the NameServers)
costs one run, not one per request."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet import defer
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

log = Logger()


class Coalescer:
    """Runs ``work`` once for a burst of requests, never two runs at once.

    :meth:`request` asks for a run within ``delay`` seconds; requests made while a run is in flight cause
    exactly one more run after it. ``work`` may return a Deferred: the run lasts until it fires. Each run
    reads the state when it starts, so the last run always sees the last change. :meth:`flush` moves a
    wanted run to the next reactor turn and fires when everything requested before it is done, with the
    failure of the run that covered it, if any. A failed run is not retried on its own (a full disk would
    fail again at once); the next request or flush runs it again.
    """

    def __init__(self, clock: IReactorTime, work: Callable[[], Any], delay: float, what: str) -> None:
        """``what`` names the job in the log when a run nobody waits for fails."""
        self.clock = clock
        self.work = work
        self.delay = delay
        self.what = what
        self._wanted = False
        self._call: IDelayedCall | None = None
        self._running = False
        # Waiting for the run in flight, and for the next one.
        self._current: list[defer.Deferred[None]] = []
        self._next: list[defer.Deferred[None]] = []

    def request(self) -> None:
        """A run is wanted within ``delay`` seconds (or right after the one in flight)."""
        self._wanted = True
        if not self._running and self._call is None:
            self._call = self.clock.callLater(self.delay, self._run)

    def flush(self) -> defer.Deferred[None]:
        """Fires once everything requested so far has run; a wanted run starts in the next reactor turn
        (so all the callers of one turn share it)."""
        d: defer.Deferred[None] = defer.Deferred()
        if self._wanted:
            self._next.append(d)
            if self._call is not None:
                self._call.reset(0)
            elif not self._running:
                self._call = self.clock.callLater(0, self._run)
        elif self._running:
            self._current.append(d)
        else:
            d.callback(None)
        return d

    def cancel(self) -> None:
        """Forget a wanted run that has not started (the one in flight finishes)."""
        if self._call is not None:
            self._call.cancel()
            self._call = None
        self._wanted = False
        waiters, self._next = self._next, []
        for d in waiters:
            d.callback(None)

    def _run(self) -> None:
        self._call = None
        self._wanted = False
        self._running = True
        self._current, self._next = self._next, []
        defer.maybeDeferred(self.work).addBoth(self._done)

    def _done(self, result: Any) -> None:
        self._running = False
        waiters, self._current = self._current, []
        failed = isinstance(result, Failure)
        if failed and not waiters:
            log.failure("{what} failed", result, what=self.what)
        for d in waiters:
            if failed:
                d.errback(result)
            else:
                d.callback(None)
        if self._wanted and self._call is None:
            self._call = self.clock.callLater(0 if self._next else self.delay, self._run)
        elif failed:
            self._wanted = True
