"""Groups of our DLedger members on loopback ports with real stores, for the consensus tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from twisted.internet import reactor, task

from compat_tests.servers import free_port
from gateway.dledger.config import DLedgerConfig
from gateway.dledger.member_state import MemberRole
from gateway.dledger.server import DLedgerServer
from gateway.dledger.store import DLedgerStoreConfig

GROUP = "g0"
# Small timings so an election takes a fraction of a second; a follower gives up on its leader after 1.5 s, so that
# a reactor starved by a busy machine (parallel test workers) does not look like a dead leader.
TIMINGS = {
    "heart_beat_time_interval_ms": 500,
    "max_heart_beat_leak": 3,
    "min_vote_interval_ms": 50,
    "max_vote_interval_ms": 150,
    "max_push_time_out_ms": 300,
}
DATA_FILE = 64 * 1024
INDEX_FILE = 32 * 1024


async def sleep(seconds: float) -> None:
    await task.deferLater(reactor, seconds, lambda: None)


async def until(check: Callable[[], Any], timeout: float = 10.0, what: str | Callable[[], str] = "condition") -> Any:
    """Poll ``check`` every 20 ms until it returns something truthy; ``what`` (or what it returns) names it."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what() if callable(what) else what}")
        await sleep(0.02)


class Cluster:
    """Members ``n0..n{size-1}`` of group g0, each with its own store directory under ``base``."""

    def __init__(self, base: Path, size: int = 3, ports: list[int] | None = None, **overrides: Any) -> None:
        self.base = base
        ports = ports or [free_port() for _ in range(size)]
        self.peers = {f"n{i}": f"127.0.0.1:{port}" for i, port in enumerate(ports)}
        self.timings = {**TIMINGS, **overrides}
        self.servers: dict[str, DLedgerServer] = {}

    def config(self, member: str) -> DLedgerConfig:
        store = DLedgerStoreConfig(
            store_base_dir=str(self.base / member),
            self_id=member,
            mapped_file_size_for_entry_data=DATA_FILE,
            mapped_file_size_for_entry_index=INDEX_FILE,
        )
        return DLedgerConfig(group=GROUP, self_id=member, peers=self.peers, store=store, **self.timings)

    def start(self, *members: str) -> None:
        for member in members or tuple(self.peers):
            server = DLedgerServer(self.config(member), reactor)
            server.startService()
            self.servers[member] = server

    async def stop(self, *members: str) -> None:
        for member in members or tuple(self.servers):
            server = self.servers.pop(member)
            await server.stopService()

    def leaders(self) -> list[DLedgerServer]:
        return [s for s in self.servers.values() if s.member_state.role is MemberRole.LEADER]

    async def leader(self, timeout: float = 10.0) -> DLedgerServer:
        """The one leader that every running member follows."""

        def settled() -> DLedgerServer | None:
            leaders = self.leaders()
            if len(leaders) != 1:
                return None
            lead = leaders[0]
            ms = lead.member_state
            followers_agree = all(
                s.member_state.leader_id == ms.self_id and s.member_state.term == ms.term for s in self.servers.values()
            )
            return lead if followers_agree else None

        return await until(settled, timeout, lambda: f"one leader followed by every member: {self.views()}")

    def views(self) -> dict[str, tuple[str, int, str | None, int, int]]:
        """Each running member's role, term, leader, ledger end and commit index (for failure messages)."""
        return {
            m: (
                s.member_state.role.name,
                s.member_state.term,
                s.member_state.leader_id,
                s.store.ledger_end_index,
                s.store.committed_index,
            )
            for m, s in self.servers.items()
        }

    def data_bytes(self, member: str, upto_pos: int) -> bytes:
        """The member's data files concatenated, cut at ``upto_pos``."""
        data = self.base / member / f"dledger-{member}" / "data"
        return b"".join(p.read_bytes() for p in sorted(data.iterdir()))[:upto_pos]
