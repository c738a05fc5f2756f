"""Apache 4.9.8's own DLedger groups (three brokers, ``enableDLegerCommitLog=true``) registering with our
NameServer, run when ``ROCKETMQ_BROKER_CLASSPATH`` names its jars: what our DLedger implementation must do the
same way. The group elects; our METADATA RPC finds the leader (our codec against Apache's); the route shows the
leader as brokerId 0 and the followers as n<i> -> i + 1; our Python client's sends are acked and read back;
a SIGKILLed leader is replaced within DLedger's election timeout and, restarted, follows; a leader cut off from
the others by the fault proxy acknowledges nothing, steps down to a slave, and once it rejoins it follows and its
unacknowledged entry is gone; a frozen leader (SIGSTOP) is replaced and, thawed, follows.

Apache 4.9.8 cannot bind to loopback only: its ports listen on every interface while the tests run."""

from __future__ import annotations

import time

import pytest

from .apache_broker import CLASSPATH, CLASSPATH_ENV

if not CLASSPATH or "dledger" not in CLASSPATH:
    pytest.skip(f"Apache broker not given: set {CLASSPATH_ENV} to 4.9.8's lib/* jars", allow_module_level=True)

from gateway.client import SendStatus, blocking, build_message
from gateway.dledger.codes import DLedgerRequestCode, DLedgerResponseCode
from gateway.dledger.protocol import AppendEntryRequest, AppendEntryResponse, MetadataRequest, MetadataResponse
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from tests.broker.test_broker_server import send_header
from tests.faults import Faults, faults  # noqa: F401 - the fixture
from tests.ha.procs import bodies, has_topic, until

from .apache_dledger import ELECTION_WORST_S, GROUP, ApacheDLedgerGroup, Member
from .servers import call, create_topic_request, free_port

pytestmark = pytest.mark.compat
TOPIC = "DLedgerTopic"
QUEUES = 4
# Three JVMs on two shared cores: a thread may be descheduled for a second or two past the timeout.
SLACK_S = 4.0
SLAVE_REFUSES_ADMIN = (
    "Can't modify topic or subscription group from slave broker, please execute it from master broker."
)
# What Apache's followers answer a send (PutMessageStatus.SERVICE_NOT_AVAILABLE), and a leader that cannot get
# a quorum's ack within maxWaitAckTimeMs (DLedger's WAIT_QUORUM_ACK_TIMEOUT, which 4.9.8's DLedgerCommitLog
# turns into OS_PAGECACHE_BUSY "for the ons client will ignore" FLUSH_SLAVE_TIMEOUT).
FOLLOWER_REFUSES_SEND = "service not available now. It may be caused by one of the following reasons"
NO_QUORUM = "[PC_SYNCHRONIZED]broker busy, start flow control for a while"
MAX_WAIT_ACK_S = 2.5


def _namesrv(faults: Faults) -> str:  # noqa: F811
    addr = f"127.0.0.1:{free_port()}"
    conf = {"listenPort": addr.rpartition(":")[2], "bindAddress": "127.0.0.1", "kvConfigPath": str(faults.root / "kv")}
    faults.python("gateway.namesrv", "namesrv", conf)
    until(lambda: call(addr, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), 1), 20, "our NameServer")
    return addr


def _group(faults: Faults, proxied: bool = False) -> tuple[ApacheDLedgerGroup, Member]:  # noqa: F811
    group = ApacheDLedgerGroup(faults.root, _namesrv(faults), faults, proxied=proxied).start()
    leader = group.leader(90)
    until(lambda: call(leader.broker_addr, create_topic_request(TOPIC, QUEUES), 3).code == 0, 30, "the topic")
    # Followers refuse to create it and take it from the master (SlaveSynchronize): whoever leads later serves it.
    for member in group.members:
        until(lambda m=member: has_topic(m.broker_addr, TOPIC), 60, f"the topic on {member.self_id}")
    until(lambda: group.route(TOPIC).get(0) == leader.broker_addr, 30, "the leader routed as master")
    return group, leader


def _send(addr: str, body: bytes, queue_id: int = 0, timeout: float = 10.0) -> RemotingCommand:
    header = send_header(TOPIC, {}, queue_id)
    return call(addr, RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header, body), timeout)


def _routed(group: ApacheDLedgerGroup, leader: Member) -> dict[int, str]:
    return {0: leader.broker_addr} | {m.slave_id: m.broker_addr for m in group.alive() if m is not leader}


def test_apache_group_elects_routes_serves_and_fails_over(faults: Faults) -> None:  # noqa: F811
    group, leader = _group(faults)
    followers = [m for m in group.members if m is not leader]

    # METADATA: every member names the leader and the same peer ids; the wrong group or member is refused.
    for member in group.members:
        answer = group.metadata(member)
        assert (answer.code, answer.leader_id, set(answer.peers or {})) == (200, leader.self_id, {"n0", "n1", "n2"})
    wrong = group.metadata(followers[0], group="OtherGroup")
    assert (wrong.code, wrong.leader_id) == (DLedgerResponseCode.UNKNOWN_GROUP, leader.self_id)
    request = MetadataRequest(group=GROUP, remote_id="n9")
    wire = RemotingCommand.request(DLedgerRequestCode.METADATA, body=request.encode())
    stranger = MetadataResponse.decode(call(followers[0].dledger_addr, wire, 3).body)
    assert (stranger.code, stranger.remote_id) == (DLedgerResponseCode.UNKNOWN_MEMBER, "n9")
    # A follower's DLedger port refuses an append, naming the leader (nothing is written).
    append = AppendEntryRequest(group=GROUP, remote_id=followers[0].self_id, body=b"x")
    wire = RemotingCommand.request(DLedgerRequestCode.APPEND, body=append.encode())
    refused = AppendEntryResponse.decode(call(followers[0].dledger_addr, wire, 3).body)
    assert (refused.code, refused.leader_id) == (DLedgerResponseCode.NOT_LEADER, leader.self_id)

    assert group.route(TOPIC) == _routed(group, leader)
    with blocking.Producer("dledger-pg", group.namesrv) as producer:
        sent = [b"before-%d" % i for i in range(20)]
        for body in sent:
            result = producer.send(build_message(TOPIC, body))
            assert result.status == SendStatus.SEND_OK
            assert result.queue.broker_name == "RaftNode00"
    assert sorted(bodies(leader.broker_addr, TOPIC, QUEUES)) == sorted(sent)
    # A follower's broker refuses a send outright, and a topic's creation.
    created = call(followers[0].broker_addr, create_topic_request("Elsewhere", QUEUES), 3)
    assert (created.code, created.remark) == (ResponseCode.SYSTEM_ERROR, SLAVE_REFUSES_ADMIN)
    follower_answer = _send(followers[0].broker_addr, b"to a follower")
    assert follower_answer.code == ResponseCode.SERVICE_NOT_AVAILABLE
    assert follower_answer.remark.startswith(FOLLOWER_REFUSES_SEND), follower_answer.remark

    killed = time.monotonic()
    leader.process.kill()
    new_leader = group.leader(ELECTION_WORST_S + SLACK_S + 30, among=followers)
    failover = time.monotonic() - killed
    print(f"failover after SIGKILL of {leader.self_id}: {new_leader.self_id} leads after {failover:.1f} s")
    assert failover < ELECTION_WORST_S + SLACK_S
    until(lambda: group.route(TOPIC).get(0) == new_leader.broker_addr, 30, "the new leader routed as master")
    print(f"routed as master {time.monotonic() - killed:.1f} s after the kill")
    with blocking.Producer("dledger-pg2", group.namesrv) as producer:
        result = producer.send(build_message(TOPIC, b"after"))
        assert result.status == SendStatus.SEND_OK
    found = bodies(new_leader.broker_addr, TOPIC, QUEUES)
    assert sorted(found) == sorted([*sent, b"after"]) and set(found.values()) == {1}

    # Restarted on its store, the killed leader follows and is routed as a slave again.
    restarted = time.monotonic()
    group.start_member(leader)
    until(lambda: group.leader_seen_by(leader) == new_leader.self_id, 90, "the restarted member following")
    until(lambda: group.route(TOPIC) == _routed(group, new_leader), 60, "the restarted member routed as a slave")
    print(f"the restarted {leader.self_id} follows and is routed {time.monotonic() - restarted:.1f} s after start")


def test_apache_group_leader_cut_off_acknowledges_nothing(faults: Faults) -> None:  # noqa: F811
    group, leader = _group(faults, proxied=True)
    assert _send(leader.broker_addr, b"acked").code == ResponseCode.SUCCESS
    others = [m for m in group.members if m is not leader]

    group.isolate(leader)
    cut = time.monotonic()
    answer = _send(leader.broker_addr, b"never acked")
    waited = time.monotonic() - cut
    print(f"send to the cut-off leader: code {answer.code} remark {answer.remark!r} after {waited:.1f} s")
    assert (answer.code, answer.remark) == (ResponseCode.SYSTEM_ERROR, NO_QUORUM)
    assert MAX_WAIT_ACK_S <= waited < MAX_WAIT_ACK_S + SLACK_S
    # It steps down by itself (no heartbeat reached a majority): its broker registers as a slave, refuses sends.
    until(lambda: group.route(TOPIC).get(leader.slave_id) == leader.broker_addr, 30, "the cut-off leader a slave")
    print(f"the cut-off leader routed as slave {leader.slave_id} {time.monotonic() - cut:.1f} s after the cut")
    refused = _send(leader.broker_addr, b"refused")
    assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE, (refused.code, refused.remark)
    new_leader = group.leader(ELECTION_WORST_S + SLACK_S + 30, among=others)
    print(f"the majority elected {new_leader.self_id} {time.monotonic() - cut:.1f} s after the cut")
    assert time.monotonic() - cut < ELECTION_WORST_S + SLACK_S
    until(lambda: group.route(TOPIC).get(0) == new_leader.broker_addr, 30, "the new leader routed as master")
    print(f"routed as master {time.monotonic() - cut:.1f} s after the cut")
    acked = _send(new_leader.broker_addr, b"acked by the majority")
    assert acked.code == ResponseCode.SUCCESS, (acked.code, acked.remark)

    group.rejoin(leader)
    healed = time.monotonic()
    until(lambda: group.leader_seen_by(leader) == new_leader.self_id, 60, "the old leader following")
    print(f"the old leader follows {new_leader.self_id} {time.monotonic() - healed:.1f} s after the heal")
    found = bodies(new_leader.broker_addr, TOPIC, QUEUES)
    assert sorted(found) == [b"acked", b"acked by the majority"] and set(found.values()) == {1}

    # A frozen leader (SIGSTOP) is replaced; thawed, it follows the new one.
    frozen = new_leader
    frozen.process.freeze()
    stopped = time.monotonic()
    third = group.leader(ELECTION_WORST_S + SLACK_S + 30, among=[m for m in group.members if m is not frozen])
    replaced = time.monotonic() - stopped
    print(f"frozen {frozen.self_id}: {third.self_id} leads after {replaced:.1f} s")
    assert replaced < ELECTION_WORST_S + SLACK_S
    frozen.process.thaw()
    thawed = time.monotonic()
    until(lambda: group.leader_seen_by(frozen) == third.self_id, 60, "the thawed leader following")
    print(f"thawed {frozen.self_id} follows {third.self_id} {time.monotonic() - thawed:.1f} s after SIGCONT")
    until(lambda: group.route(TOPIC) == _routed(group, third), 60, "the thawed leader routed as a slave")
