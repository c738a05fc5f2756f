"""DLedger's rules one request at a time, on a member that is not running (a task.Clock for its timers): how it
votes, how it takes a heartbeat, how a follower orders and answers the leader's pushes."""

from __future__ import annotations

from pathlib import Path

import pytest
from twisted.internet import task

from gateway.dledger.codes import DLedgerResponseCode
from gateway.dledger.entry import DLedgerEntry
from gateway.dledger.member_state import MemberRole
from gateway.dledger.protocol import HeartBeatRequest, PushEntryRequest, PushType, VoteRequest, VoteResult
from gateway.dledger.server import DLedgerServer

from .cluster import GROUP, Cluster

TERM = 5


@pytest.fixture
def member(tmp_path: Path) -> DLedgerServer:
    """n0 in term 5 with entries 0..2 of term 4, not running."""
    clock = task.Clock()
    server = DLedgerServer(Cluster(tmp_path, ports=[1, 2, 3]).config("n0"), clock)
    server.store.open()
    for i in range(3):
        server.store.append_as_leader(f"entry-{i}".encode(), term=4)
    server.member_state.term = TERM
    yield server
    server.store.close()


def vote(member: DLedgerServer, leader: str, term: int, end_term: int, end_index: int) -> VoteResult:
    request = VoteRequest(group=GROUP, remote_id="n0", leader_id=leader, term=term, ledger_end_term=end_term,
                          ledger_end_index=end_index)  # fmt: skip
    return member.elector.handle_vote(request).vote_result


@pytest.mark.parametrize(
    ("leader", "term", "end_term", "end_index", "result"),
    [
        ("n9", TERM, 4, 2, VoteResult.REJECT_UNKNOWN_LEADER),
        ("n0", TERM, 4, 2, VoteResult.REJECT_UNEXPECTED_LEADER),
        ("n1", TERM, 3, 9, VoteResult.REJECT_EXPIRED_LEDGER_TERM),
        ("n1", TERM, 4, 1, VoteResult.REJECT_SMALL_LEDGER_END_INDEX),
        ("n1", TERM - 1, 4, 2, VoteResult.REJECT_EXPIRED_VOTE_TERM),
        ("n1", TERM + 1, 4, 2, VoteResult.REJECT_TERM_NOT_READY),
        ("n1", TERM, 4, 2, VoteResult.ACCEPT),
        ("n1", TERM, 5, 0, VoteResult.ACCEPT),
    ],
)
def test_how_a_member_votes(
    member: DLedgerServer, leader: str, term: int, end_term: int, end_index: int, result: VoteResult
) -> None:
    assert vote(member, leader, term, end_term, end_index) is result


def test_one_vote_a_term_and_a_larger_term_first_taken(member: DLedgerServer) -> None:
    assert vote(member, "n1", TERM, 4, 2) is VoteResult.ACCEPT
    assert vote(member, "n2", TERM, 4, 5) is VoteResult.REJECT_ALREADY_VOTED
    member.elector.change_role_to_follower(TERM, "n1")
    assert vote(member, "n2", TERM, 4, 5) is VoteResult.REJECT_ALREADY_HAS_LEADER
    assert vote(member, "n2", TERM + 3, 4, 5) is VoteResult.REJECT_TERM_NOT_READY
    assert member.member_state.role is MemberRole.CANDIDATE and member.elector.need_increase_term_immediately
    assert member.member_state.next_term() == TERM + 3
    assert vote(member, "n2", TERM + 3, 4, 5) is VoteResult.ACCEPT


def heart_beat(member: DLedgerServer, leader: str, term: int) -> DLedgerResponseCode:
    request = HeartBeatRequest(group=GROUP, remote_id="n0", leader_id=leader, term=term)
    return DLedgerResponseCode(member.elector.handle_heart_beat(request).code)


def test_how_a_member_takes_heartbeats(member: DLedgerServer) -> None:
    assert heart_beat(member, "n9", TERM) is DLedgerResponseCode.UNKNOWN_MEMBER
    assert heart_beat(member, "n0", TERM) is DLedgerResponseCode.UNEXPECTED_MEMBER
    assert heart_beat(member, "n1", TERM - 1) is DLedgerResponseCode.EXPIRED_TERM
    assert heart_beat(member, "n1", TERM) is DLedgerResponseCode.SUCCESS  # a candidate follows it
    assert (member.member_state.role, member.member_state.leader_id) == (MemberRole.FOLLOWER, "n1")
    assert heart_beat(member, "n2", TERM) is DLedgerResponseCode.INCONSISTENT_LEADER
    assert heart_beat(member, "n2", TERM + 1) is DLedgerResponseCode.TERM_NOT_READY
    assert member.member_state.role is MemberRole.CANDIDATE


def push(member: DLedgerServer, push_type: PushType, entry: DLedgerEntry | None, commit: int = -1) -> list:
    request = PushEntryRequest(group=GROUP, remote_id="n0", leader_id="n1", term=TERM, type=push_type, entry=entry,
                               commit_index=commit)  # fmt: skip
    answers: list = []
    member.pusher.handle_push(request).addCallback(answers.append)
    return answers


def leader_entry(index: int, pos: int, body: bytes) -> DLedgerEntry:
    return DLedgerEntry(index=index, term=TERM, body=body, pos=pos)


def test_a_follower_writes_pushes_in_index_order(member: DLedgerServer) -> None:
    member.elector.change_role_to_follower(TERM, "n1")
    handler = member.pusher.entry_handler
    end = member.store.data.wrote_where
    third = leader_entry(3, end, b"three")
    fourth = leader_entry(4, end + third.size, b"four")
    late = push(member, PushType.APPEND, fourth, commit=3)
    handler.do_work()
    assert late == [] and member.store.ledger_end_index == 2  # 4 waits for 3
    early = push(member, PushType.APPEND, third, commit=3)
    handler.do_work()
    assert [(a.code, a.index, a.end_index) for a in early + late] == [(200, 3, 3), (200, 4, 4)]
    assert member.store.get(4).body == b"four" and member.store.committed_index == 3
    # A push far ahead waits for its gap; after a second, DLedger answers INCONSISTENT_STATE so the leader compares.
    far = push(member, PushType.APPEND, leader_entry(9, 999_999, b"far"))
    handler.do_work()
    assert far == []
    member.reactor.advance(1.1)
    handler.do_work()
    assert [a.code for a in far] == [DLedgerResponseCode.INCONSISTENT_STATE]
    # COMPARE: the same entry or not; TRUNCATE: the log ends at the leader's entry.
    same = push(member, PushType.COMPARE, member.store.get(3))
    other = push(member, PushType.COMPARE, leader_entry(3, third.pos, b"not three"))
    handler.do_work()
    assert [(a.code, a.end_index) for a in same + other] == [(200, 4), (DLedgerResponseCode.INCONSISTENT_STATE, 4)]
    cut = push(member, PushType.TRUNCATE, member.store.get(3))
    handler.do_work()
    assert [(a.code, a.end_index) for a in cut] == [(200, 3)] and member.store.ledger_end_index == 3
    # From anyone but our leader in our term: refused.
    stranger = PushEntryRequest(group=GROUP, remote_id="n0", leader_id="n2", term=TERM, type=PushType.TRUNCATE,
                                entry=member.store.get(1))  # fmt: skip
    answers: list = []
    member.pusher.handle_push(stranger).addCallback(answers.append)
    handler.do_work()
    assert [a.code for a in answers] == [DLedgerResponseCode.INCONSISTENT_STATE] and member.store.ledger_end_index == 3
