"""Issue 27 interop at the broker level: our brokers and Apache 4.9.8's in one DLedger group (gated on
ROCKETMQ_BROKER_CLASSPATH), {2 Apache + 1 ours} and {1 Apache + 2 ours}, on our NameServer. Every member
registers as Apache's do (the leader as brokerId 0, n<i> as i + 1); a send to the master is acknowledged; every
member, ours and Apache's, serves the records the other side's leader wrote; then leadership moves to the other
side (DLedger's LEADERSHIP_TRANSFER), the route follows, and the new master's sends are read everywhere too.
With ROCKETMQ_JAVA_CLASSPATH the official Java client sends in each turn as well. At the end every member's
ledger, Apache's and ours, is byte-identical over the range all of them committed.
DLedger's own timings stay at their defaults (Apache's broker cannot set them): elections take seconds."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from compat_tests import java_producer
from compat_tests.apache_broker import CLASSPATH
from compat_tests.servers import call
from gateway.dledger.codes import DLedgerRequestCode, DLedgerResponseCode
from gateway.dledger.protocol import LeadershipTransferRequest, LeadershipTransferResponse
from gateway.dledger.store import DLedgerFileStore, DLedgerStoreConfig
from gateway.remoting.codes import ResponseCode
from gateway.remoting.command import RemotingCommand
from tests.broker.dledger_group import (
    COMMITLOG_SIZE,
    GROUP,
    QUEUES,
    TOPIC,
    Group,
    bootstrap,
    runtime_info,
    send,
    settled_route,
)
from tests.ha.procs import bodies, until

pytestmark = [
    pytest.mark.compat,
    pytest.mark.skipif(not CLASSPATH, reason="ROCKETMQ_BROKER_CLASSPATH (Apache 4.9.8's broker) is not set"),
]
MEMBERS = {"n0", "n1", "n2"}


def _transfer(group: Group, leader: str, transferee: str, term: int) -> None:
    request = LeadershipTransferRequest(
        group=GROUP, remote_id=leader, leader_id=leader, term=term, transfer_id=leader, transferee_id=transferee
    )
    command = RemotingCommand.request(DLedgerRequestCode.LEADERSHIP_TRANSFER, body=request.encode(), language="JAVA")
    response = LeadershipTransferResponse.decode(call(group.peers[leader], command, 10).body)
    assert response.code == DLedgerResponseCode.SUCCESS, response


@pytest.fixture(scope="module")
def java_classes(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """The Java client's FailoverProducer compiled, when ROCKETMQ_JAVA_CLASSPATH is given."""
    if not java_producer.CLASSPATH:
        return None
    return java_producer.compile_producer(tmp_path_factory.mktemp("java-producer"))


def _java_sends(classes: Path, group: Group, at_least: int) -> set[bytes]:
    """The official Java client sends through the route until ``at_least`` are acknowledged; their bodies."""
    run = uuid.uuid4().hex[:8]
    producer = java_producer.JavaProducer(classes, group.root, group.namesrv, run, TOPIC)
    try:
        until(lambda: len(producer.of("SENT")) >= at_least, 60, f"{at_least} Java sends acknowledged")
    finally:
        err = producer.finish()
    sent = producer.of("SENT")
    assert not producer.of("ERROR") and producer.of("DONE") == [[str(len(sent))]], err[-3000:]
    return {f"{run} message {i}".encode() for i, *_ in sent}


def _committed_ledgers_identical(group: Group) -> int:
    """Every member's ledger (read after the group stopped) byte-identical up to the smallest committed
    position; returns that position."""
    ends = []
    for i in group.brokers:
        ledger = DLedgerFileStore(
            DLedgerStoreConfig(
                store_base_dir=str(group.root / i), self_id=i, mapped_file_size_for_entry_data=COMMITLOG_SIZE
            )
        )
        ledger.open()
        ends.append(ledger.committed_pos)
        ledger.close()
    end = min(ends)
    datas = {i: group.data_bytes(i, end) for i in group.brokers}
    assert all(len(d) == end for d in datas.values()) and len(set(datas.values())) == 1, end
    return end


def _everyone_holds(group: Group, expected: set[bytes]) -> None:
    for i, addr in group.brokers.items():
        until(lambda addr=addr: set(bodies(addr, TOPIC, QUEUES)) == expected, 30, f"{i} serving every message")


@pytest.mark.parametrize("apache", [{"n0", "n1"}, {"n0"}], ids=["2-apache-1-ours", "1-apache-2-ours"])
def test_mixed_group_each_side_leads_in_turn(tmp_path: Path, apache: set[str], java_classes: Path | None) -> None:
    group = Group(tmp_path, apache=apache, timings={})
    try:
        group.start()
        until(lambda: group.route() or bootstrap(group), 120, "the topic routed")
        route = settled_route(group, MEMBERS)
        sent: set[bytes] = set()
        for turn in range(2):
            master = route[0]
            leader = group.member_at(master)
            for n in range(5):
                body = b"turn %d from %s %d" % (turn, leader.encode(), n)
                resp = send(master, body, n % QUEUES)
                assert resp.code == ResponseCode.SUCCESS, (leader, resp.remark)
                sent.add(body)
            if java_classes is not None:
                sent |= _java_sends(java_classes, group, 5)
            _everyone_holds(group, sent)
            if turn:
                break
            # Hand leadership to the other side: ours if Apache's leads, else Apache's.
            transferee = min(i for i in MEMBERS if (i in apache) != (leader in apache))
            ours = next(i for i in MEMBERS if i not in apache)
            term = int(runtime_info(group.brokers[ours])["dLedgerTerm"])
            _transfer(group, leader, transferee, term)
            new_master = group.brokers[transferee]
            route = until(
                lambda new_master=new_master: (r := group.route()).get(0) == new_master and len(r) == 3 and r,
                30,
                f"{transferee} the master in the route",
            )
            assert route[group.dledger_id(leader)] == master
    finally:
        group.stop()
    assert _committed_ledgers_identical(group) > 0
