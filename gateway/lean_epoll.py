"""Twisted's epoll reactor without the legacy log context around each ready descriptor.

Twisted's ``EPollReactor`` wraps the handling of every ready descriptor in ``log.callWithLogger``: the descriptor's
``logPrefix()``, a copy of the legacy log context and a ``ContextTracker`` call, for the ``system`` key of
``twisted.python.log`` messages, which nothing here writes. Under a send load that wrapping was about a tenth of the
broker's reactor thread. :class:`LeanEPollReactor` hands each descriptor to ``_doReadOrWrite`` directly, which
catches and logs what ``doRead`` and ``doWrite`` raise and disconnects the descriptor, as before.

Imported by :func:`gateway.lean_reactor.install`, with pyOpenSSL hidden (Twisted's reactor modules import it).
"""

from __future__ import annotations

import errno

from twisted.internet.epollreactor import EPollReactor
from twisted.python import log


class LeanEPollReactor(EPollReactor):
    """Twisted's epoll reactor, each ready descriptor served without ``log.callWithLogger``."""

    def doPoll(self, timeout: float | None) -> None:
        """Poll for ready descriptors and serve each (``EPollReactor.doPoll`` without the log context)."""
        try:
            ready = self._poller.poll(-1 if timeout is None else timeout, len(self._selectables))
        except OSError as err:
            if err.errno == errno.EINTR:
                return
            raise
        selectables = self._selectables
        serve = self._doReadOrWrite
        for fd, event in ready:
            selectable = selectables.get(fd)
            if selectable is None:
                continue
            try:
                serve(selectable, fd, event)
            except BaseException:  # as callWithLogger: logged, and the other descriptors are still served
                log.err()

    doIteration = doPoll  # as EPollReactor's: mainLoop calls doIteration
