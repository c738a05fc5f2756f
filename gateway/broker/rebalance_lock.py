"""Queue locks of orderly consumer groups (RebalanceLockManager), kept in memory only.

A queue is granted to a client when nobody holds it, when the holder's lock expired (no renewal for
``lock_max_live_time`` ms, 60 s by default; clients renew every 20 s and stop consuming after 30 s
without renewal), or when the client already holds it (renewed). UNLOCK releases only the caller's own
locks. So two members of one group never both believe they own a queue, which keeps per-queue order.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gateway.remoting.bodies import MessageQueue


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


@dataclass(slots=True)
class LockEntry:
    client_id: str
    last_update_timestamp: int


class RebalanceLockManager:
    """group → queue → holder; ``clock`` returns milliseconds (monotonic)."""

    def __init__(self, lock_max_live_time: int = 60000, clock: Callable[[], int] = _now_ms) -> None:
        self.lock_max_live_time = lock_max_live_time
        self.clock = clock
        self.table: dict[str, dict[MessageQueue, LockEntry]] = {}

    def _expired(self, entry: LockEntry, now: int) -> bool:
        return now - entry.last_update_timestamp > self.lock_max_live_time

    def try_lock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> set[MessageQueue]:
        """Lock what can be locked for ``client_id``; returns the queues it holds now."""
        now = self.clock()
        locks = self.table.setdefault(group, {})
        granted = set()
        for mq in mqs:
            entry = locks.get(mq)
            if entry is None or entry.client_id == client_id or self._expired(entry, now):
                locks[mq] = LockEntry(client_id, now)
                granted.add(mq)
        return granted

    def unlock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> None:
        locks = self.table.get(group)
        if not locks:
            return
        for mq in mqs:
            entry = locks.get(mq)
            if entry is not None and entry.client_id == client_id:
                del locks[mq]
        if not locks:
            del self.table[group]
