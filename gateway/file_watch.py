"""FileWatchService: tell a listener when watched files change, appear or disappear (RocketMQ's srvutil).

Java hashes the TLS files every 500 ms and compares the ACL files' modification times every 5 s; we poll
``stat`` (modification time, size, inode) for both, so a file replaced by a rename is seen as well.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

from twisted.internet.task import LoopingCall
from twisted.logger import Logger

log = Logger()

Signature = tuple[int, int, int] | None


def file_signature(path: str) -> Signature:
    """What changes when a file is written or replaced; None for a missing file."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class FileWatchService:
    """Polls ``paths()`` every ``interval`` seconds; calls ``on_change(changed_paths)`` after a change.

    ``paths`` is called on every poll, so a watched directory's listing may grow or shrink.
    """

    def __init__(
        self,
        paths: Callable[[], Iterable[str]],
        on_change: Callable[[list[str]], None],
        interval: float,
        clock: Any = None,
    ) -> None:
        self._paths = paths
        self._on_change = on_change
        self._seen = self._snapshot()
        self._loop = LoopingCall(self.check)
        self.interval = interval
        if clock is not None:
            self._loop.clock = clock

    def _snapshot(self) -> dict[str, Signature]:
        return {p: file_signature(p) for p in self._paths()}

    def start(self) -> None:
        self._loop.start(self.interval, now=False).addErrback(lambda f: log.failure("file watch stopped", f))

    def stop(self) -> None:
        if self._loop.running:
            self._loop.stop()

    def check(self) -> None:
        """Compare the files with the last poll and report the changed ones (once per change)."""
        now = self._snapshot()
        if now == self._seen:
            return
        changed = sorted(p for p in now.keys() | self._seen.keys() if now.get(p) != self._seen.get(p))
        self._seen = now
        try:
            self._on_change(changed)
        except Exception:
            log.failure("file change listener failed for {paths}", paths=changed)
