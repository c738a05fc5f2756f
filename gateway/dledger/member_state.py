"""A member's view of its group (``MemberState`` of dledger 0.3.1.2): role, term, vote, leader and peers.

The term and the vote are persisted before they are acted upon, as DLedger does, in the properties file
``currterm`` (keys ``currTerm`` and ``voteLeader``) of the member's directory ``storeBaseDir/dledger-<selfId>``, so a
restarted member never votes twice in one term. Unlike DLedger, a ``currterm`` that neither it nor its ``.bak`` can
be read stops the member (DLedger starts over at term 0 and may vote again in a term it voted in).
"""

from __future__ import annotations

import os
from enum import Enum

from gateway.config import format_properties, parse_properties
from gateway.dledger.codes import DLedgerError, DLedgerResponseCode
from gateway.dledger.config import DLedgerConfig
from gateway.dledger.store import DLedgerFileStore
from gateway.persist import load_with_backup, write_atomically

TERM_PERSIST_FILE = "currterm"
TERM_PERSIST_KEY_TERM = "currTerm"
TERM_PERSIST_KEY_VOTE_FOR = "voteLeader"


class MemberRole(Enum):
    """``MemberState.Role``: a member starts as CANDIDATE."""

    CANDIDATE = "CANDIDATE"
    LEADER = "LEADER"
    FOLLOWER = "FOLLOWER"


def _parse_term(data: bytes) -> tuple[int, str | None]:
    props = parse_properties(data.decode("latin-1"))
    term = int(props.get(TERM_PERSIST_KEY_TERM, "0").strip())
    if term < 0:
        raise ValueError(f"{TERM_PERSIST_KEY_TERM}={term} is negative")
    return term, props.get(TERM_PERSIST_KEY_VOTE_FOR) or None


class MemberState:
    """Role, term and vote of one member; the ledger end and commit index read through to its store."""

    def __init__(self, config: DLedgerConfig, store: DLedgerFileStore) -> None:
        self.config = config
        self.store = store
        self.group = config.group
        self.self_id = config.self_id
        self.peers: dict[str, str] = dict(config.peers)
        self.role = MemberRole.CANDIDATE
        self.leader_id: str | None = None
        self.term = 0
        self.vote_for: str | None = None
        # The largest term a peer told us of; a candidate jumps to it rather than counting up to it.
        self.known_max_term_in_group = -1
        # Peers that answered the leader's last heartbeat (``peersLiveTable``).
        self.peers_live: dict[str, bool] = {}
        # Leadership transfer: the member the leader hands over to, and the term a transferee aims at.
        self.transferee: str | None = None
        self.term_to_take_leadership = -1
        self.term_path = os.path.join(config.store.default_path, TERM_PERSIST_FILE)
        loaded = load_with_backup(self.term_path, _parse_term)
        if loaded is not None:
            self.term, self.vote_for = loaded

    # -- the ledger, as the store has it

    @property
    def ledger_end_index(self) -> int:
        return self.store.ledger_end_index

    @property
    def ledger_end_term(self) -> int:
        """The term of the last entry, -1 when the ledger is empty (DLedger's initial value)."""
        return self.store.ledger_end_term if self.store.ledger_end_index != -1 else -1

    @property
    def committed_index(self) -> int:
        return self.store.committed_index

    # -- term and vote

    def _persist_term(self) -> None:
        # The order Java 9+ writes them in (DLedger iterates a Properties).
        props = {TERM_PERSIST_KEY_VOTE_FOR: self.vote_for or "", TERM_PERSIST_KEY_TERM: str(self.term)}
        write_atomically(self.term_path, format_properties(props).encode())

    def set_vote_for(self, member_id: str | None) -> None:
        """Record (durably) whom this member voted for in the current term."""
        self.vote_for = member_id
        self._persist_term()

    def next_term(self) -> int:
        """A candidate's next term: the largest one heard of, else one more; the vote starts empty."""
        self._check(self.role is MemberRole.CANDIDATE, f"{self.role.name} != CANDIDATE")
        if self.known_max_term_in_group > self.term:
            self.term = self.known_max_term_in_group
        else:
            self.term += 1
        self.vote_for = None
        self._persist_term()
        return self.term

    # -- roles

    def change_to_leader(self, term: int) -> None:
        self._check(self.term == term, f"{self.term} != {term}")
        self.role = MemberRole.LEADER
        self.leader_id = self.self_id
        self.peers_live.clear()

    def change_to_follower(self, term: int, leader_id: str) -> None:
        self._check(self.term == term, f"{self.term} != {term}")
        self.role = MemberRole.FOLLOWER
        self.leader_id = leader_id
        self.transferee = None

    def change_to_candidate(self, term: int) -> None:
        self._check(term >= self.term, f"should {term} >= {self.term}")
        self.known_max_term_in_group = max(self.known_max_term_in_group, term)
        # The term itself moves when the candidate next votes (next_term).
        self.role = MemberRole.CANDIDATE
        self.leader_id = None
        self.transferee = None

    @staticmethod
    def _check(ok: bool, message: str) -> None:
        if not ok:
            raise DLedgerError(DLedgerResponseCode.ILLEGAL_MEMBER_STATE, message)

    # -- the group

    def is_quorum(self, num: int) -> bool:
        return num >= len(self.peers) // 2 + 1

    def is_peer_member(self, member_id: str | None) -> bool:
        return member_id is not None and member_id in self.peers

    @property
    def peer_size(self) -> int:
        return len(self.peers)
