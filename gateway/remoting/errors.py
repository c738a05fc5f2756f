"""Remoting failures shared by the Twisted client and the blocking admin connections."""

from __future__ import annotations

from collections.abc import Sequence


class NameServerUnreachable(ConnectionError):
    """No name server of ``addrs`` answered; the message names them and the last one's failure."""

    def __init__(self, addrs: Sequence[str], error: BaseException | None) -> None:
        super().__init__(f"no name server answered ({';'.join(addrs)}): {error}")
        self.addrs = list(addrs)
