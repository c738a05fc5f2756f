"""Blocking work done now and then off the reactor: a LoopingCall that runs it in the reactor's thread pool, one
run at a time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import LoopingCall
from twisted.internet.threads import deferToThread
from twisted.logger import Logger

log = Logger()


class PoolLoop:
    """``work`` every ``interval`` seconds in the thread pool. A tick that finds the last run still going is
    skipped, so a slow peer never piles up threads; a run that fails is logged (``what``) and the next tick
    runs again."""

    def __init__(self, reactor: Any, interval: float, work: Callable[[], Any], what: str) -> None:
        self.interval = interval
        self.work = work
        self.what = what
        self._running: Deferred[Any] | None = None
        self._loop = LoopingCall(self._tick)
        self._loop.clock = reactor

    @property
    def busy(self) -> bool:
        """Whether a run is in progress."""
        return self._running is not None

    def start(self, now: bool = False) -> None:
        self._loop.start(self.interval, now=now)

    def stop(self) -> Deferred[None]:
        """No more runs; fires once the run in progress, if any, has ended."""
        if self._loop.running:
            self._loop.stop()
        if self._running is None:
            return succeed(None)
        ended: Deferred[None] = Deferred()
        self._running.addBoth(lambda result: (ended.callback(None), result)[1])
        return ended

    def _tick(self) -> None:
        if self._running is not None:
            return
        running = deferToThread(self.work)
        running.addErrback(lambda failure: log.failure("{what} failed", failure, what=self.what))
        running.addBoth(self._ended)
        self._running = running if not running.called else None

    def _ended(self, result: Any) -> Any:
        self._running = None
        return result
