"""Sends waiting for the commitlog to reach an offset somewhere: on disk (SYNC_FLUSH) or on a slave (SYNC_MASTER).

Apache's GroupCommitService and GroupTransferService: each waiter wants an offset and has a deadline; one
event (an fsync done, a slave's report) answers every waiter it covers, and one timer answers the rest
with False as their deadlines pass. Nothing blocks: a waiter is a callback.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from twisted.logger import Logger

log = Logger()


class OffsetWaiters:
    """Callbacks called with True once ``release`` reaches their offset, False at their deadline (or the values
    each waiter names instead: a send's final status, with nothing to map it)."""

    __slots__ = ("_clock", "_timer", "_waiters")

    def __init__(self, clock: Any) -> None:
        self._clock = clock
        # (offset, deadline, callback, value if reached, value if expired) in arrival order; with one timeout,
        # deadlines ascend too.
        self._waiters: deque[tuple[int, float, Callable[[Any], object], Any, Any]] = deque()
        self._timer: Any = None

    def __bool__(self) -> bool:
        return bool(self._waiters)

    def add(
        self, offset: int, timeout: float, callback: Callable[[Any], object], reached: Any = True, expired: Any = False
    ) -> None:
        """Call ``callback(reached)`` once released up to ``offset``, ``callback(expired)`` after ``timeout``
        seconds. A callback, not a Deferred: SYNC_FLUSH has one waiter a send."""
        self._waiters.append((offset, self._clock.seconds() + timeout, callback, reached, expired))
        if self._timer is None:
            self._timer = self._clock.callLater(timeout, self.expire)

    def release(self, reached: int) -> None:
        """Everything up to ``reached`` is there: answer True to the waiters it covers."""
        waiters = self._waiters
        if not waiters:
            return
        done = [w for w in waiters if w[0] <= reached]
        if not done:
            return
        self._waiters = deque(w for w in waiters if w[0] > reached)
        if not self._waiters and self._timer is not None:
            self._timer.cancel()
            self._timer = None
        _call_back((w[2], w[3]) for w in done)  # last: a callback may add a new waiter

    def expire(self, everything: bool = False) -> None:
        """Answer the waiters past their deadline (all of them with ``everything``) with their ``expired`` value."""
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
        now = self._clock.seconds()
        expired = []
        while self._waiters and (everything or self._waiters[0][1] <= now):
            expired.append(self._waiters.popleft())
        if self._waiters:
            self._timer = self._clock.callLater(max(self._waiters[0][1] - now, 0), self.expire)
        _call_back((w[2], w[4]) for w in expired)


def _call_back(answers: Iterable[tuple[Callable[[Any], object], Any]]) -> None:
    """Call each callback with its value; one that raises is logged, the rest still run."""
    for callback, value in answers:
        try:
            callback(value)
        except Exception:
            log.failure("a waiter's callback failed")
