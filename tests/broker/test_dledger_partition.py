"""Issue 27's fault tests on three of our broker processes whose DLedger links go through fault proxies: a
partitioned minority cannot acknowledge a send, and an old leader (cut off, or frozen by SIGSTOP) that appended
an uncommitted tail follows the new leader once back and truncates that tail. After each, every member's
ledger files are byte-identical over the committed range."""

from __future__ import annotations

import signal
import threading
import time
import uuid
from pathlib import Path

from gateway.remoting.codes import ResponseCode
from gateway.remoting.command import RemotingCommand
from tests.broker.dledger_group import (
    ELECTION_TIMEOUT,
    Group,
    assert_committed_identical,
    bootstrap,
    caught_up,
    ledger_state,
    send,
    settled_route,
)
from tests.ha.procs import until

IDS = {"n0", "n1", "n2"}
# DLedgerCommitLog's answer to a send no majority acknowledged within maxWaitAckTimeMs (OS_PAGECACHE_BUSY).
NO_QUORUM = (ResponseCode.SYSTEM_ERROR, "[PC_SYNCHRONIZED]broker busy, start flow control for a while")


def started(tmp_path: Path, **extra: str) -> tuple[Group, str]:
    """A proxied group with the topic created; returns it and its leader's self id once routed."""
    group = Group(tmp_path, proxied=True, **extra)
    group.start()
    try:
        # Three brokers electing on a loaded machine (the full suite) took over 30 s once.
        until(lambda: group.route() or bootstrap(group), 60, "the topic routed")
        return group, group.member_at(settled_route(group, IDS)[0])
    except BaseException:
        group.stop()  # its processes and log files, not left to the next test
        raise


def new_master(group: Group, old: str) -> str:
    """The self id of the member that replaced ``old`` as master in the route."""
    route = until(
        lambda: (r := group.route()).get(0) not in (None, group.brokers[old]) and r,
        ELECTION_TIMEOUT,
        "a new master in the route",
    )
    return group.member_at(route[0])


def test_a_partitioned_leader_acknowledges_nothing_and_truncates_its_tail_after_heal(tmp_path: Path) -> None:
    # The wait for acks ends well before the cut-off leader, hearing no majority for 3 heartbeats, steps down.
    group, leader = started(tmp_path, maxWaitAckTimeMs="500")
    try:
        for n in range(6):
            assert send(group.brokers[leader], b"before-%d" % n, n % 4).code == ResponseCode.SUCCESS
        _, term, end, committed = ledger_state(group.brokers[leader])
        assert end == committed

        group.isolate(leader)
        tail = b"uncommitted-" + uuid.uuid4().hex.encode()
        sent_at = time.monotonic()
        resp = send(group.brokers[leader], tail)
        assert (resp.code, resp.remark) == NO_QUORUM
        assert time.monotonic() - sent_at >= 0.5
        # The minority appended it and holds it uncommitted.
        _, _, tail_end, tail_committed = ledger_state(group.brokers[leader])
        assert (tail_end, tail_committed) == (end + 1, committed)
        assert tail in group.data_bytes(leader)

        # The majority elects a new leader, routed as master, and commits sends the old one never saw.
        elected = new_master(group, leader)
        assert elected != leader
        for n in range(3):
            resp = send(group.brokers[elected], b"majority-%d" % n, n % 4)
            assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert ledger_state(group.brokers[elected])[1] > term

        group.rejoin(leader)
        states = caught_up(group)
        assert states[leader][0] == "FOLLOWER" and states[elected][0] == "LEADER"
        # The old leader's ledger is the new leader's: its tail truncated and replaced, its bytes gone.
        assert states[leader][2] == states[elected][2] == end + 3
        assert tail not in group.data_bytes(leader)
        assert_committed_identical(group)
        assert settled_route(group, IDS)[0] == group.brokers[elected]
    finally:
        group.stop()


def test_a_frozen_leader_with_an_uncommitted_tail_steps_down_and_truncates_it_when_thawed(tmp_path: Path) -> None:
    group, leader = started(tmp_path, registerNameServerPeriod="1000", registerNameServerPeriodMin="1000")
    try:
        for n in range(6):
            assert send(group.brokers[leader], b"before-%d" % n, n % 4).code == ResponseCode.SUCCESS
        _, _, end, committed = ledger_state(group.brokers[leader])

        # The leader's pushes are held in its proxies: it appends a send, then freezes before any follower has it.
        pushes = list(group.outbound[leader].values())
        for proxy in pushes:
            proxy.pause()
        tail = b"uncommitted-" + uuid.uuid4().hex.encode()
        answers: list[RemotingCommand | BaseException] = []
        sender = threading.Thread(target=lambda: answers.append(_try_send(group.brokers[leader], tail)))
        sender.start()
        until(lambda: tail in group.data_bytes(leader), 5, "the tail appended on the leader")
        frozen = group.members[leader]
        frozen.proc.send_signal(signal.SIGSTOP)
        try:
            for proxy in pushes:
                proxy.cut()  # what the proxies held is dropped, never delivered
                proxy.heal()
            elected = new_master(group, leader)
            for n in range(3):
                resp = send(group.brokers[elected], b"majority-%d" % n, n % 4)
                assert resp.code == ResponseCode.SUCCESS, resp.remark
            assert tail in group.data_bytes(leader)
        finally:
            frozen.proc.send_signal(signal.SIGCONT)
        sender.join(15)
        # Whatever the frozen leader answered, it was not a success.
        assert answers and not (isinstance(answers[0], RemotingCommand) and answers[0].code == ResponseCode.SUCCESS)

        states = caught_up(group)
        assert states[leader][0] == "FOLLOWER" and states[elected][0] == "LEADER"
        assert states[leader][2] == end + 3 and committed == end
        assert tail not in group.data_bytes(leader)
        assert_committed_identical(group)
        assert settled_route(group, IDS)[0] == group.brokers[elected]
    finally:
        group.stop()


def _try_send(addr: str, body: bytes) -> RemotingCommand | BaseException:
    try:
        return send(addr, body)
    except OSError as e:
        return e
