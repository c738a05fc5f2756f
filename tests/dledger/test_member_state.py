"""A member before it runs: the term and vote on disk (a restarted member never votes twice in one term), a port
that is taken."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from twisted.internet import reactor, task

from gateway.dledger.config import DLedgerConfigError
from gateway.dledger.member_state import TERM_PERSIST_FILE, MemberRole
from gateway.dledger.protocol import VoteRequest, VoteResult
from gateway.dledger.server import DLedgerServer
from gateway.persist import StateFileError

from .cluster import GROUP, Cluster


def member(tmp_path: Path, member_id: str = "n0") -> DLedgerServer:
    # Not started: no port, no timers; the elector's vote handling works on the member state alone.
    return DLedgerServer(Cluster(tmp_path, ports=[1, 2, 3]).config(member_id), task.Clock())


def vote(server: DLedgerServer, candidate: str, term: int) -> VoteResult:
    request = VoteRequest(group=GROUP, remote_id="n0", leader_id=candidate, term=term)
    return server.elector.handle_vote(request).vote_result


def test_a_vote_survives_a_restart(tmp_path: Path) -> None:
    first = member(tmp_path)
    assert (first.member_state.term, first.member_state.vote_for, first.member_state.role) == (
        0,
        None,
        MemberRole.CANDIDATE,
    )
    assert vote(first, "n1", 3) is VoteResult.REJECT_TERM_NOT_READY  # a larger term: taken at the next vote
    assert first.member_state.next_term() == 3  # straight to the largest term heard of
    assert vote(first, "n1", 3) is VoteResult.ACCEPT
    path = Path(first.member_state.term_path)
    assert path.name == TERM_PERSIST_FILE and path.read_text() == "voteLeader=n1\ncurrTerm=3\n"
    again = member(tmp_path)
    assert (again.member_state.term, again.member_state.vote_for) == (3, "n1")
    assert vote(again, "n2", 3) is VoteResult.REJECT_ALREADY_VOTED
    assert vote(again, "n1", 3) is VoteResult.ACCEPT  # the same candidate asking again
    assert vote(again, "n2", 2) is VoteResult.REJECT_EXPIRED_VOTE_TERM


def test_an_unreadable_term_file_stops_the_member(tmp_path: Path) -> None:
    first = member(tmp_path)
    first.member_state.set_vote_for("n0")
    path = Path(first.member_state.term_path)
    path.write_text("currTerm=not-a-number\n")
    Path(f"{path}.bak").unlink(missing_ok=True)
    with pytest.raises(StateFileError, match="currterm"):
        member(tmp_path)


def test_a_taken_port_is_one_clear_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = DLedgerServer(Cluster(tmp_path, ports=[port, 2, 3]).config("n0"), reactor)
        with pytest.raises(DLedgerConfigError, match=rf"member n0 cannot listen on 127.0.0.1:{port}: "):
            server.startService()
    assert not server.running
