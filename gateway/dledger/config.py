"""A DLedger member's settings: ``DLedgerConfig`` of dledger 0.3.1.2, with its names and defaults.

Apache 4.9.8's broker sets only some of them (``dLegerGroup``, ``dLegerPeers``, ``dLegerSelfId``,
``preferredLeaderId``, ``enableBatchPush``, the store paths and sizes); the timings keep DLedger's defaults there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gateway.dledger.store import DLedgerStoreConfig

# A member id (``n0``) and its peer address (``host:port``), as ``dLegerPeers`` lists them: ``n0-host:port;n1-...``.
_PEER = re.compile(r"^([A-Za-z0-9_.]+)-([^\s;:]+):(\d{1,5})$")


class DLedgerConfigError(ValueError):
    """A setting that cannot work; the message names the key and the value."""


def parse_peers(peers: str) -> dict[str, str]:
    """``n0-127.0.0.1:40911;n1-...`` as {id: "host:port"} in the order given."""
    members: dict[str, str] = {}
    for item in peers.split(";"):
        item = item.strip()
        if not item:
            continue
        m = _PEER.match(item)
        if m is None or not 0 < int(m.group(3)) < 65536:
            raise DLedgerConfigError(f"dLegerPeers: {item!r} is not id-host:port (as in n0-127.0.0.1:40911)")
        if m.group(1) in members:
            raise DLedgerConfigError(f"dLegerPeers: member {m.group(1)} is listed twice")
        members[m.group(1)] = f"{m.group(2)}:{m.group(3)}"
    if not members:
        raise DLedgerConfigError("dLegerPeers: no member listed (as in n0-127.0.0.1:40911;n1-127.0.0.1:40912)")
    return members


@dataclass(slots=True, kw_only=True)
class DLedgerConfig:
    """One member of a group: who it is, who its peers are, and DLedger's timings (milliseconds)."""

    group: str
    self_id: str
    peers: dict[str, str]
    store: DLedgerStoreConfig
    # Members that should lead when they can (``preferredLeaderIds``; the broker's ``preferredLeaderId``).
    preferred_leader_ids: list[str] = field(default_factory=list)
    max_pending_requests_num: int = 10000
    max_wait_ack_time_ms: int = 2500
    max_push_time_out_ms: int = 1000
    heart_beat_time_interval_ms: int = 2000
    max_heart_beat_leak: int = 3
    min_vote_interval_ms: int = 300
    max_vote_interval_ms: int = 1000
    flush_file_interval: int = 10
    check_point_interval: int = 3000
    enable_push_to_follower: bool = True
    peer_push_throttle_point: int = 300 * 1024 * 1024
    peer_push_quota: int = 20 * 1024 * 1024
    max_leadership_transfer_wait_index: int = 1000
    min_take_leadership_vote_interval_ms: int = 30
    max_take_leadership_vote_interval_ms: int = 100
    leadership_transfer_wait_timeout: int = 1000
    enable_batch_push: bool = False
    max_batch_push_size: int = 4 * 1024

    def __post_init__(self) -> None:
        if self.self_id not in self.peers:
            raise DLedgerConfigError(
                f"dLegerSelfId: {self.self_id!r} is not one of the members of dLegerPeers ({', '.join(self.peers)})"
            )
        for leader in self.preferred_leader_ids:
            if leader not in self.peers:
                raise DLedgerConfigError(
                    f"preferredLeaderId: {leader!r} is not one of the members of dLegerPeers ({', '.join(self.peers)})"
                )
        if self.min_vote_interval_ms > self.max_vote_interval_ms:
            raise DLedgerConfigError(
                f"minVoteIntervalMs {self.min_vote_interval_ms} is above maxVoteIntervalMs {self.max_vote_interval_ms}"
            )

    @property
    def self_addr(self) -> str:
        """This member's own peer address (where it listens for DLedger's RPCs)."""
        return self.peers[self.self_id]
