"""A DLedger group of Apache 4.9.8 brokers (``enableDLegerCommitLog=true``) as child processes, for interop and
fault tests, registering with a NameServer of the test's (ours).

Each member listens for the broker protocol on its ``listenPort`` and for DLedger's RPCs on the port of its own
``dLegerPeers`` entry. With ``proxied=True`` every member reaches every other through a :class:`FaultProxy` of
its own (one per ordered pair), so a member's links can be cut both ways (``isolate``) while the test still
talks to it directly. The group is asked who leads with DLedger's METADATA RPC, encoded by our codec: Apache's
answers are the check of it. Needs ``ROCKETMQ_BROKER_CLASSPATH`` (see ``apache_broker``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from gateway.dledger.codes import DLedgerRequestCode, DLedgerResponseCode
from gateway.dledger.protocol import MetadataRequest, MetadataResponse
from gateway.remoting import fastjson
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from tests.faults import FaultProxy, Faults, Process, write_properties

from .apache_broker import apache_broker_argv
from .servers import call, free_port

GROUP = "RaftNode00"
BROKER_NAME = "RaftNode00"  # Apache's docs name the broker as the group (conf/dledger/broker-n0.conf)
CLUSTER = "RaftCluster"
# DLedger 0.3.1.2's defaults, which 4.9.8's broker does not let one change: a follower stands for election
# after maxHeartBeatLeak heartbeats of heartBeatTimeIntervalMs went missing, then waits up to maxVoteIntervalMs.
# A candidate whose vote reached a member still following the old leader (REJECT_ALREADY_HAS_LEADER) backs off
# the same time again before its next vote: the worst case of one election is twice the plain one.
HEARTBEAT_S = 2.0
ELECTION_TIMEOUT_S = 3 * HEARTBEAT_S + 1.0
ELECTION_WORST_S = 2 * ELECTION_TIMEOUT_S
# Small stores: 8 MiB data files and 60k-entry consume queue files instead of 1 GiB and 6 MB.
SMALL_STORE = {"mappedFileSizeCommitLog": str(8 << 20), "mappedFileSizeConsumeQueue": str(60_000 * 20)}


def metadata(dledger_addr: str, self_id: str, group: str = GROUP, timeout: float = 2.0) -> MetadataResponse:
    """DLedger's METADATA RPC to the member ``self_id`` of ``group`` at ``dledger_addr`` (any implementation's)."""
    request = MetadataRequest(group=group, remote_id=self_id)
    wire = RemotingCommand.request(DLedgerRequestCode.METADATA, body=request.encode())
    response = call(dledger_addr, wire, timeout)
    assert response.code == DLedgerResponseCode.SUCCESS, (response.code, response.remark)  # 200, not 0
    return MetadataResponse.decode(response.body)


def leader_seen(dledger_addr: str, self_id: str, group: str = GROUP) -> str | None:
    """The leader that member knows of; None if it knows none or does not answer."""
    try:
        answer = metadata(dledger_addr, self_id, group)
    except OSError:
        return None
    return answer.leader_id if answer.code == DLedgerResponseCode.SUCCESS else None


@dataclass
class Member:
    """One broker of the group: ``self_id`` (n0, n1...), its broker and (real) DLedger addresses."""

    self_id: str
    broker_addr: str
    dledger_addr: str
    root: Path
    process: Process | None = None
    # peer id -> the proxy this member reaches that peer through (proxied groups only)
    outbound: dict[str, FaultProxy] = field(default_factory=dict)

    @property
    def slave_id(self) -> int:
        """The brokerId Apache registers this member under as a follower: ``n<i>`` -> i + 1."""
        return int(self.self_id[1:]) + 1


class ApacheDLedgerGroup:
    """``size`` Apache brokers as one DLedger group (``group``), registering with ``namesrv``."""

    def __init__(
        self,
        root: Path,
        namesrv: str,
        faults: Faults,
        size: int = 3,
        *,
        group: str = GROUP,
        proxied: bool = False,
        settings: dict[str, str] | None = None,
    ) -> None:
        self.root, self.namesrv, self.faults, self.group = root, namesrv, faults, group
        self.settings = {**SMALL_STORE, **(settings or {})}
        self.members = [
            Member(f"n{i}", f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}", root / f"n{i}") for i in range(size)
        ]
        self.by_id = {m.self_id: m for m in self.members}
        if proxied:
            for member in self.members:
                for peer in self.members:
                    if peer is not member:
                        member.outbound[peer.self_id] = faults.proxy(peer.dledger_addr)

    def peers_of(self, member: Member) -> str:
        """``dLegerPeers`` as ``member`` is told it: its own real address, the others' through its proxies."""

        def addr(peer: Member) -> str:
            return peer.dledger_addr if peer is member or not member.outbound else member.outbound[peer.self_id].address

        return ";".join(f"{m.self_id}-{addr(m)}" for m in self.members)

    def start(self) -> ApacheDLedgerGroup:
        """Start every member (returns at once; see :meth:`leader`)."""
        for member in self.members:
            self.start_member(member)
        return self

    def start_member(self, member: Member) -> Process:
        """Start (or restart, on the same store) one member."""
        home = self.root / "home"
        member.root.mkdir(parents=True, exist_ok=True)
        conf = write_properties(
            self.root / f"{member.self_id}.conf",
            {
                "brokerClusterName": CLUSTER,
                "brokerName": BROKER_NAME,
                "listenPort": member.broker_addr.rpartition(":")[2],
                "namesrvAddr": self.namesrv,
                "brokerIP1": "127.0.0.1",
                "storePathRootDir": str(member.root / "store"),
                "storePathCommitLog": str(member.root / "store" / "commitlog"),
                "rocketmqHome": str(home),
                "autoCreateTopicEnable": "true",
                "enableDLegerCommitLog": "true",
                "dLegerGroup": self.group,
                "dLegerPeers": self.peers_of(member),
                "dLegerSelfId": member.self_id,
                **self.settings,
            },
        )
        member.process = self.faults.process("", conf, apache_broker_argv(conf, home))
        return member.process

    def alive(self) -> list[Member]:
        return [m for m in self.members if m.process is not None and m.process.alive]

    def metadata(self, member: Member, group: str | None = None, timeout: float = 2.0) -> MetadataResponse:
        """DLedger's METADATA RPC to ``member``'s DLedger port (the group's own unless ``group`` says another)."""
        return metadata(member.dledger_addr, member.self_id, group or self.group, timeout)

    def leader_seen_by(self, member: Member) -> str | None:
        """The leader ``member`` knows of, None if it knows none or does not answer."""
        return leader_seen(member.dledger_addr, member.self_id, self.group)

    def leader(self, timeout: float = 60.0, among: list[Member] | None = None) -> Member:
        """The leader every member of ``among`` (default: every live one) names, once they agree on one of them."""
        deadline = time.monotonic() + timeout
        while True:
            members = among if among is not None else self.alive()
            seen = {self.leader_seen_by(m) for m in members}
            if len(seen) == 1:
                (leader_id,) = seen
                if leader_id is not None and self.by_id[leader_id] in members:
                    return self.by_id[leader_id]
            assert time.monotonic() < deadline, f"no agreed leader in {timeout} s: {seen}"
            time.sleep(0.1)

    def isolate(self, member: Member) -> None:
        """Cut ``member``'s DLedger links both ways (a proxied group only); its broker port stays reachable."""
        for proxy in self._links_of(member):
            proxy.cut()

    def rejoin(self, member: Member) -> None:
        """Heal what :meth:`isolate` cut."""
        for proxy in self._links_of(member):
            proxy.heal()

    def _links_of(self, member: Member) -> list[FaultProxy]:
        assert member.outbound, "not a proxied group"
        inbound = [m.outbound[member.self_id] for m in self.members if m is not member]
        return [*member.outbound.values(), *inbound]

    def route(self, topic: str) -> dict[int, str]:
        """brokerId -> address of the group's broker in ``topic``'s route at the NameServer ({} if unrouted)."""
        response = call(self.namesrv, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}), 3)
        if response.code != ResponseCode.SUCCESS:
            return {}
        for data in fastjson.loads(response.body)["brokerDatas"]:
            if data["brokerName"] == BROKER_NAME:
                return {int(k): v for k, v in data["brokerAddrs"].items()}
        return {}

    def stop(self) -> None:
        """Stop every member (the ``faults`` fixture would too)."""
        for member in self.members:
            if member.process is not None:
                member.process.stop()
