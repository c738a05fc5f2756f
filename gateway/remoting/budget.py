"""A server's memory budget: the bytes all its connections hold in incomplete frames and unsent replies.

Nothing bounds what all connections together buffer (Netty's water marks only flag one channel
unwritable), so a thousand peers that each declare a 16 MiB frame and trickle it would take 16 GiB.
Here each connection charges what it holds to one budget per server (``remotingMaxBufferedBytes``):
the bytes of its incomplete frame as received (not as declared), and replies written while its
transport's buffer is full. When the total passes the cap, the newest connections holding bytes are
closed until it is back under. Long-lived clients (producers, consumers, brokers registering) are the
oldest, so a flood of new connections sheds itself first; the process is never at risk. Complete
frames being dispatched, and requests that arrive whole in one read, are never charged.

The hot path is one integer add and one comparison per charge; connections are only walked when the
cap is passed, and each walk closes at least one of them.
"""

from __future__ import annotations

from typing import Protocol

from gateway.config import ConfigError

MiB = 1024 * 1024
# For a server built without a setting; the broker and the NameServer pass their own.
DEFAULT_MAX_BUFFERED_BYTES = 512 * MiB


class BudgetHolder(Protocol):
    """A connection that charges a :class:`MemoryBudget`."""

    @property
    def held(self) -> int:
        """Bytes charged to the budget now."""
        ...

    def evict(self) -> None:
        """Give back everything held and close at once."""
        ...


class MemoryBudget:
    """The bytes held by a server's connections, capped at ``limit`` (always on: it must be positive)."""

    __slots__ = ("_holders", "limit", "used")

    def __init__(self, limit: int = DEFAULT_MAX_BUFFERED_BYTES) -> None:
        if limit <= 0:
            raise ConfigError(f"remotingMaxBufferedBytes must be a positive number of bytes, not {limit}")
        self.limit = limit
        self.used = 0
        # Open connections, oldest first (a dict keeps insertion order and removes in O(1)).
        self._holders: dict[BudgetHolder, None] = {}

    def join(self, holder: BudgetHolder) -> None:
        """A connection opened: it may charge from now on."""
        self._holders[holder] = None

    def leave(self, holder: BudgetHolder) -> None:
        """A connection closed (after giving back what it held)."""
        self._holders.pop(holder, None)

    def charge(self, delta: int) -> None:
        """Add ``delta`` bytes (negative when a holder shrank); past the cap, close the newest holders."""
        self.used += delta
        if self.used > self.limit:
            self._shed()

    def give_back(self, size: int) -> None:
        """A holder freed ``size`` bytes (drained, closed or evicted)."""
        self.used -= size

    def _shed(self) -> None:
        # A copy: evicting may close a connection (and so leave) synchronously.
        for holder in reversed(list(self._holders)):
            if holder.held:
                holder.evict()
                if self.used <= self.limit:
                    return
