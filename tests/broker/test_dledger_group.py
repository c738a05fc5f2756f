"""Issue 27 items 4 and 5: three of our brokers as one DLedger group with our NameServer, all real processes.

The leader registers as master (brokerId 0), the others as slaves with their self id's number + 1; a send to
the master is acknowledged once a majority holds it and is read back, a follower refuses sends as an Apache
slave does; GET_BROKER_RUNTIME_INFO shows each member's role, term and indexes; when the leader is SIGKILLed a
new master is in the route within the election timeout and sends resume there, the acknowledged messages kept.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from compat_tests.servers import call, create_topic_request
from gateway.client import blocking
from gateway.client.producer import build_message
from gateway.dledger.codes import DLedgerRequestCode, DLedgerResponseCode
from gateway.dledger.protocol import LeadershipTransferRequest, LeadershipTransferResponse
from gateway.remoting.codes import ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.message import decode_records
from tests.broker.dledger_group import (
    ELECTION_TIMEOUT,
    GROUP,
    QUEUES,
    TOPIC,
    Group,
    assert_committed_identical,
    bootstrap,
    caught_up,
    runtime_info,
    send,
    settled_route,
)
from tests.broker.test_broker_server import pull_request
from tests.ha.procs import Producer, bodies, until

# SendMessageProcessor.handlePutMessageResult's words, with diskUtil's "CL: %5.2f CQ: %5.2f INDEX: %5.2f".
SLAVE_REFUSAL = re.compile(
    r"service not available now\. It may be caused by one of the following reasons: the broker's disk is full "
    r"\[CL: +-?\d\.\d\d CQ: +-?\d\.\d\d INDEX: +-?\d\.\d\d\], messages are put to the slave, message store has "
    r"been shut down, etc\."
)


@pytest.fixture
def group(tmp_path: Path) -> Iterator[Group]:
    g = Group(tmp_path)
    try:
        yield g.start()
    finally:
        g.stop()


def test_three_members_master_slaves_sends_and_failover(group: Group) -> None:
    create_topic_once = until(lambda: group.route() or bootstrap(group), 30, "the topic routed")
    assert create_topic_once
    route = settled_route(group, {"n0", "n1", "n2"})
    master = route[0]
    leader = group.member_at(master)
    followers = [i for i in group.brokers if i != leader]

    # Sends to the master are acknowledged once a majority holds them; the Python client finds it by route.
    for n in range(8):
        resp = send(master, b"before-%d" % n, n % QUEUES)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
    with blocking.Producer("dledger-pg", group.namesrv) as producer:
        result = producer.send(build_message(TOPIC, b"from-the-client"))
    assert result.queue.broker_name == GROUP
    acked = {b"before-%d" % n for n in range(8)} | {b"from-the-client"}
    assert set(bodies(master, TOPIC, QUEUES)) == acked

    # A follower refuses a send as an Apache slave does, and serves pulls of what is committed.
    resp = send(group.brokers[followers[0]], b"to-a-follower")
    assert resp.code == ResponseCode.SERVICE_NOT_AVAILABLE and SLAVE_REFUSAL.fullmatch(resp.remark), resp.remark
    until(lambda: set(bodies(group.brokers[followers[0]], TOPIC, QUEUES)) == acked, 10, "the follower dispatched")
    # ... and refuses to create a topic, as Apache's follower does (AdminBrokerProcessor.validateSlave).
    created = call(group.brokers[followers[0]], create_topic_request("Elsewhere"), 5)
    assert (created.code, created.remark) == (
        ResponseCode.SYSTEM_ERROR,
        "Can't modify topic or subscription group from slave broker, please execute it from master broker.",
    )

    # Operators see each member's role, term, leader and indexes.
    info = runtime_info(master)
    assert info["dLedgerRole"] == "LEADER" and info["dLedgerLeaderId"] == leader and info["dLedgerSelfId"] == leader
    term = int(info["dLedgerTerm"])
    assert term >= 1 and int(info["dLedgerCommittedIndex"]) == int(info["dLedgerLedgerEndIndex"]) >= 8
    follower = group.brokers[followers[0]]
    follower_info = runtime_info(follower)
    assert (follower_info["dLedgerRole"], follower_info["dLedgerLeaderId"]) == ("FOLLOWER", leader)
    assert int(follower_info["dLedgerTerm"]) == term
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{group.metrics[leader]}/metrics", timeout=5).read().decode()
    assert f'rocketmq_dledger_term{{cluster="DefaultCluster",node_id="{GROUP}",node_type="broker"}} {term}.0' in metrics
    assert "rocketmq_dledger_commit_lag" in metrics
    # mqadmin brokerStatus prints them.
    status = subprocess.run(
        [sys.executable, "-m", "gateway.admin", "brokerStatus", "-n", group.namesrv, "-b", follower],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert status.returncode == 0, status.stderr
    lines = {line.split()[0]: line.split()[-1] for line in status.stdout.splitlines() if line.startswith("dLedger")}
    assert lines["dLedgerRole"] == "FOLLOWER" and lines["dLedgerTerm"] == str(term)
    assert lines["dLedgerLeaderId"] == leader and lines["dLedgerSelfId"] == followers[0]
    # The console lists every member with its DLedger state (the others' asked of them).
    page = urllib.request.urlopen(f"http://127.0.0.1:{group.metrics[leader]}/console/", timeout=5).read().decode()
    section = page.split("<h2>DLedger group</h2>")[1]
    for i, addr in group.brokers.items():
        role = "LEADER" if i == leader else "FOLLOWER"
        assert f'<td>{addr}</td><td>{i}</td><td>{role}</td><td class="n">{term}</td><td>{leader}</td>' in section

    # SIGKILL the leader: a new master within the election timeout, the acknowledged messages all there.
    group.members[leader].kill()
    killed_at = time.monotonic()
    route = until(
        lambda: (r := group.route()).get(0) not in (None, master) and r, ELECTION_TIMEOUT, "a new master in the route"
    )
    failover = time.monotonic() - killed_at
    new_master = route[0]
    assert group.member_at(new_master) in followers, failover
    resp = send(new_master, b"after")
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert set(bodies(new_master, TOPIC, QUEUES)) == acked | {b"after"}
    info = runtime_info(new_master)
    assert info["dLedgerRole"] == "LEADER" and int(info["dLedgerTerm"]) > term


def test_leader_killed_under_load_loses_no_acknowledged_message(group: Group) -> None:
    until(lambda: group.route() or bootstrap(group), 30, "the topic routed")
    master = settled_route(group, {"n0", "n1", "n2"})[0]
    leader = group.member_at(master)
    current = {"master": master}

    def target() -> str:
        return current["master"]

    stop = threading.Event()
    producers = [Producer(n, TOPIC, QUEUES, target, stop) for n in range(2)]
    for p in producers:
        p.start()
    until(lambda: sum(len(p.acked) for p in producers) >= 50, 20, "50 sends acknowledged")
    group.members[leader].kill()
    route = until(lambda: (r := group.route()).get(0) not in (None, master) and r, ELECTION_TIMEOUT, "a new master")
    current["master"] = route[0]
    acked_at_failover = sum(len(p.acked) for p in producers)
    until(lambda: sum(len(p.acked) for p in producers) >= acked_at_failover + 50, 20, "sends resumed")
    stop.set()
    for p in producers:
        p.join(10)
    acked = [body for p in producers for body in p.acked]
    # Every acknowledged message is on the new master exactly once, at queue offsets that were never reused.
    held: dict[bytes, int] = {}
    for queue_id in range(QUEUES):
        resp = call(route[0], pull_request(TOPIC, queue_id, 0, sub="*", timeout_ms=0), 5)
        offsets = []
        while resp.code == ResponseCode.SUCCESS:
            msgs = decode_records(resp.body)
            for m in msgs:
                held[m.body] = held.get(m.body, 0) + 1
                offsets.append(m.queue_offset)
            resp = call(route[0], pull_request(TOPIC, queue_id, offsets[-1] + 1, sub="*", timeout_ms=0), 5)
        assert offsets == list(range(len(offsets))), queue_id
    lost = [body for body in acked if body not in held]
    assert not lost, f"{len(lost)} of {len(acked)} acknowledged messages lost"
    assert all(n == 1 for n in held.values())
    # A failed send is refused or times out: never acknowledged twice under another offset.
    assert len(acked) == len(set(acked))
    # The killed member starts again on its ledger, follows as a slave under its own id and catches up.
    group.restart(leader)
    route = settled_route(group, {"n0", "n1", "n2"})
    assert route[group.dledger_id(leader)] == master
    until(lambda: set(acked) <= set(bodies(master, TOPIC, QUEUES)), 20, "the restarted member caught up")
    caught_up(group)
    assert_committed_identical(group)


def test_leadership_transfer_moves_the_master_and_the_route_keeps_one(group: Group) -> None:
    until(lambda: group.route() or bootstrap(group), 30, "the topic routed")
    master = settled_route(group, {"n0", "n1", "n2"})[0]
    leader = group.member_at(master)
    transferee = next(i for i in group.brokers if i != leader)
    term = int(runtime_info(master)["dLedgerTerm"])
    # A member registers as a slave before it hears of a leader: the transferee must follow this one first, else it
    # answers INCONSISTENT_LEADER.
    until(
        lambda: runtime_info(group.brokers[transferee])["dLedgerLeaderId"] == leader,
        10,
        "the transferee following the leader",
    )
    # DLedger's own LEADERSHIP_TRANSFER RPC to the leader, as DLedger's admin tool sends it.
    request = LeadershipTransferRequest(
        group=GROUP, remote_id=leader, leader_id=leader, term=term, transfer_id=leader, transferee_id=transferee
    )
    command = RemotingCommand.request(DLedgerRequestCode.LEADERSHIP_TRANSFER, body=request.encode(), language="JAVA")
    response = LeadershipTransferResponse.decode(call(group.peers[leader], command, 10).body)
    assert response.code == DLedgerResponseCode.SUCCESS
    route = until(lambda: (r := group.route()).get(0) == group.brokers[transferee] and r, 10, "the new master routed")
    # The old master is now a slave under its own id; no unregistration took the new master's id 0 away.
    assert route[group.dledger_id(leader)] == master
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        assert group.route().get(0) == group.brokers[transferee]
        time.sleep(0.1)
    resp = send(group.brokers[transferee], b"after-transfer")
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    resp = send(master, b"to-the-old-master")
    assert resp.code == ResponseCode.SERVICE_NOT_AVAILABLE
    # As Apache's changeToSlave / changeToMaster: role changes only register. An UNREGISTER_BROKER of the old id
    # would remove whatever address holds it, maybe the new master's.
    assert "unregisterBroker" not in (group.root / "logs" / "rocketmqlogs" / "namesrv.log").read_text()


def test_a_send_no_majority_acknowledges_in_time_is_answered_as_apache(tmp_path: Path) -> None:
    # The wait for the quorum's acks ends before the leader, hearing no majority, steps down.
    group = Group(tmp_path, maxWaitAckTimeMs="200", heartBeatTimeIntervalMs="1000")
    try:
        group.start()
        until(lambda: group.route() or bootstrap(group), 30, "the topic routed")
        master = settled_route(group, {"n0", "n1", "n2"})[0]
        leader = group.member_at(master)
        assert send(master, b"in time").code == ResponseCode.SUCCESS
        followers = [proc for i, proc in group.members.items() if i != leader]
        for proc in followers:
            proc.proc.send_signal(signal.SIGSTOP)
        try:
            resp = send(master, b"no majority")
        finally:
            for proc in followers:
                proc.proc.send_signal(signal.SIGCONT)
        # DLedger's WAIT_QUORUM_ACK_TIMEOUT is OS_PAGECACHE_BUSY in 4.9.8's DLedgerCommitLog ("the ons client will
        # ignore" FLUSH_SLAVE_TIMEOUT), which a send is answered as SYSTEM_ERROR.
        assert (resp.code, resp.remark) == (
            ResponseCode.SYSTEM_ERROR,
            "[PC_SYNCHRONIZED]broker busy, start flow control for a while",
        )
    finally:
        group.stop()


def test_a_frozen_leader_is_replaced_and_when_thawed_follows_without_taking_the_route(tmp_path: Path) -> None:
    # Registrations every second: a thawed old leader's periodic one comes due at once.
    group = Group(tmp_path, registerNameServerPeriod="1000", registerNameServerPeriodMin="1000")
    try:
        group.start()
        until(lambda: group.route() or bootstrap(group), 30, "the topic routed")
        master = settled_route(group, {"n0", "n1", "n2"})[0]
        leader = group.member_at(master)
        frozen = group.members[leader].proc
        frozen.send_signal(signal.SIGSTOP)
        try:
            route = until(lambda: (r := group.route()).get(0) not in (None, master) and r, ELECTION_TIMEOUT, "a master")
            new_master = route[0]
            time.sleep(2.0)  # the old leader's registrations come due meanwhile
        finally:
            frozen.send_signal(signal.SIGCONT)
        # Thawed, it learns the new term and follows; the route keeps the new master all along.
        seen = []
        deadline = time.monotonic() + 4.0
        while time.monotonic() < deadline:
            seen.append(group.route().get(0))
            time.sleep(0.05)
        assert set(seen) == {new_master}, seen
        assert settled_route(group, {"n0", "n1", "n2"})[group.dledger_id(leader)] == master
        resp = send(master, b"to the thawed one")
        assert resp.code == ResponseCode.SERVICE_NOT_AVAILABLE
        assert send(new_master, b"to the new one").code == ResponseCode.SUCCESS
        caught_up(group)
        assert_committed_identical(group)
    finally:
        group.stop()
