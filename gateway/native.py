"""Loading the optional C extensions (see setup.py): a module when it was built and not refused with
``ROCKETMQ_GATEWAY_PURE_PYTHON=1``; else None, and the Python code runs. :class:`ThreadPipe` is the pipe on
which their threads wake the reactor."""

from __future__ import annotations

import contextlib
import importlib
import os
from types import ModuleType
from typing import Any

from twisted.internet.interfaces import IReadDescriptor
from zope.interface import implementer


def load_extension(name: str) -> ModuleType | None:
    """The extension module ``name`` (e.g. ``gateway.store._store``), or None."""
    if os.environ.get("ROCKETMQ_GATEWAY_PURE_PYTHON"):
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


@implementer(IReadDescriptor)
class ThreadPipe:
    """The reactor's end of a pipe on which a C thread (which never takes the GIL) says it has news: subclasses
    read the news in ``on_news``; ``close_pipe`` stops watching and closes both ends."""

    def __init__(self, reactor: Any, name: str) -> None:
        self._reactor = reactor
        self._name = name
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        os.set_blocking(self._write_fd, False)  # a full pipe already wakes the reactor: the thread never waits on it
        reactor.addReader(self)

    def on_news(self) -> None:
        """Read what the thread has to say (the pipe's bytes are only a wake-up)."""
        raise NotImplementedError

    def doRead(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.read(self._read_fd, 4096)
        self.on_news()

    def fileno(self) -> int:
        return self._read_fd

    def connectionLost(self, reason: Any) -> None:
        pass  # the reactor is going: the owner's stop or close cleans up

    def logPrefix(self) -> str:
        return self._name

    def close_pipe(self) -> None:
        """Stop watching the pipe and close both ends (once the thread is stopped: it writes to one)."""
        self._reactor.removeReader(self)
        os.close(self._read_fd)
        os.close(self._write_fd)
