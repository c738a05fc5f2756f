"""Three of our brokers as one DLedger group with our NameServer, as real processes, for the group and fault
tests of issue 27: start-up, the route, sends, each member's DLedger state, and its ledger files.

With ``proxied=True`` every member reaches every other member's DLedger port through a :class:`FaultProxy` of its
own (one per ordered pair, as ``compat_tests/apache_dledger.py`` does for Apache's), so links can be cut one way
or a member isolated while the test still talks to every broker directly.
"""

from __future__ import annotations

import struct
from collections.abc import Collection
from pathlib import Path

from compat_tests.servers import call, free_port
from gateway.dledger.elector import VOTE_WAIT_MS
from gateway.dledger.entry import INDEX_UNIT_SIZE
from gateway.remoting import fastjson
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from tests.broker.test_broker_server import send_header
from tests.faults import FaultProxy
from tests.ha.procs import Proc, until, write_properties
from tests.namesrv.support import route_request

GROUP = "broker-a"
TOPIC = "DLedgerTopic"
QUEUES = 4
COMMITLOG_SIZE = 4 * 1024 * 1024  # mappedFileSizeCommitLog, the size of a ledger's data files too
HEARTBEAT_MS = 400
MAX_HEARTBEAT_LEAK = 3
MAX_VOTE_INTERVAL_MS = 300
# A follower calls an election after MAX_HEARTBEAT_LEAK missed heartbeats, then waits up to one vote interval; a
# vote sent to a frozen member is waited for VOTE_WAIT_MS (DLedger's fixed latch) before the next round; the rest
# is for a loaded machine (two cores shared by many: 4 s was short with six test workers) and the route's update.
FAST_TIMINGS = {
    "heartBeatTimeIntervalMs": str(HEARTBEAT_MS),
    "maxHeartBeatLeak": str(MAX_HEARTBEAT_LEAK),
    "minVoteIntervalMs": "100",
    "maxVoteIntervalMs": str(MAX_VOTE_INTERVAL_MS),
}
ELECTION_TIMEOUT = (HEARTBEAT_MS * MAX_HEARTBEAT_LEAK + VOTE_WAIT_MS + 2 * MAX_VOTE_INTERVAL_MS) / 1000 + 10.0


class Group:
    """Our NameServer and three brokers of one DLedger group, as processes under ``root``."""

    def __init__(
        self,
        root: Path,
        apache: Collection[str] = (),
        timings: dict[str, str] | None = None,
        proxied: bool = False,
        **extra: str,
    ):
        """``apache``: the members that run Apache 4.9.8's broker (ROCKETMQ_BROKER_CLASSPATH); ``timings``:
        DLedger's for ours (short by default; Apache's broker keeps DLedger's defaults); ``proxied``: the
        members reach each other through proxies (:attr:`outbound`); ``extra``: more lines for every member."""
        self.root = root
        self.apache = set(apache)
        self.proxied = proxied
        self.outbound: dict[str, dict[str, FaultProxy]] = {}  # self id → peer id → the proxy it reaches it by
        self.timings = FAST_TIMINGS if timings is None else timings
        self.extra = extra
        self.procs: list[Proc] = []
        self.namesrv = ""
        self.brokers: dict[str, str] = {}  # self id → broker address
        self.peers: dict[str, str] = {}  # self id → DLedger address
        self.members: dict[str, Proc] = {}
        self.metrics: dict[str, int] = {}  # self id → /metrics port

    def start(self) -> Group:
        port = free_port()
        conf = write_properties(
            self.root / "namesrv.properties",
            {"listenPort": str(port), "bindAddress": "127.0.0.1", "kvConfigPath": str(self.root / "kv.json")},
        )
        self.procs.append(Proc("gateway.namesrv", conf, self.root))
        self.namesrv = f"127.0.0.1:{port}"
        ids = ["n0", "n1", "n2"]
        self.peers = {i: f"127.0.0.1:{free_port()}" for i in ids}
        if self.proxied:
            self.outbound = {i: {j: FaultProxy(self.peers[j]).start() for j in ids if j != i} for i in ids}
        for i in ids:
            peers = ";".join(
                f"{j}-{self.outbound[i][j].address if j in self.outbound.get(i, {}) else addr}"
                for j, addr in self.peers.items()
            )
            port = free_port()
            self.metrics[i] = free_port()
            props = {
                "brokerClusterName": "DefaultCluster",
                "brokerName": GROUP,
                "brokerIP1": "127.0.0.1",
                "bindAddress": "127.0.0.1",
                "listenPort": str(port),
                "namesrvAddr": self.namesrv,
                "storePathRootDir": str(self.root / i),
                "mappedFileSizeCommitLog": str(COMMITLOG_SIZE),
                "metricsExporterType": "PROM",
                "metricsPromExporterHost": "127.0.0.1",
                "metricsPromExporterPort": str(self.metrics[i]),
                "enableDLegerCommitLog": "true",
                "dLegerGroup": GROUP,
                "dLegerPeers": peers,
                "dLegerSelfId": i,
                **self.timings,
                **self.extra,
            }
            conf = self.root / f"broker-{i}.conf"
            if i in self.apache:
                from compat_tests.apache_broker import apache_broker_argv

                home = self.root / f"home-{i}"
                write_properties(conf, props | {"rocketmqHome": str(home)})
                proc = Proc("", conf, self.root, apache_broker_argv(conf, home))
            else:
                proc = Proc("gateway.broker", write_properties(conf, props), self.root)
            self.procs.append(proc)
            self.members[i] = proc
            self.brokers[i] = f"127.0.0.1:{port}"
        return self

    def route(self) -> dict[int, str]:
        """The group's brokerAddrs as the NameServer routes TOPIC (id → address); empty until routed."""
        resp = call(self.namesrv, route_request(TOPIC), 3)
        if resp.code != ResponseCode.SUCCESS:
            return {}
        for data in fastjson.loads(resp.body)["brokerDatas"]:
            if data["brokerName"] == GROUP:
                return {int(k): v for k, v in data["brokerAddrs"].items()}
        return {}

    @staticmethod
    def dledger_id(self_id: str) -> int:
        """The brokerId a member registers with as a slave."""
        return int(self_id[1:]) + 1

    def member_at(self, addr: str) -> str:
        return next(i for i, a in self.brokers.items() if a == addr)

    def restart(self, self_id: str) -> None:
        """Start a member again with its configuration and store (after a kill)."""
        proc = Proc("gateway.broker", self.root / f"broker-{self_id}.conf", self.root)
        self.procs.append(proc)
        self.members[self_id] = proc

    def links_of(self, self_id: str) -> list[FaultProxy]:
        """The proxies of a member's DLedger links, both ways (a proxied group only)."""
        assert self.outbound, "not a proxied group"
        inbound = [links[self_id] for i, links in self.outbound.items() if i != self_id]
        return [*self.outbound[self_id].values(), *inbound]

    def isolate(self, self_id: str) -> None:
        """Cut a member's DLedger links both ways; its broker port stays reachable."""
        for proxy in self.links_of(self_id):
            proxy.cut()

    def rejoin(self, self_id: str) -> None:
        """Heal what :meth:`isolate` cut."""
        for proxy in self.links_of(self_id):
            proxy.heal()

    def ledger_dir(self, self_id: str) -> Path:
        """The member's DLedger store (``storePathRootDir/dledger-<id>``): ``data/``, ``index/``, checkpoint."""
        return self.root / self_id / f"dledger-{self_id}"

    def data_bytes(self, self_id: str, upto: int | None = None) -> bytes:
        """The member's DLedger data files as one run of bytes, cut at ``upto``."""
        return _segments(self.ledger_dir(self_id) / "data", upto)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()
        for links in self.outbound.values():
            for proxy in links.values():
                proxy.close()


def send(addr: str, body: bytes, queue_id: int = 0, timeout: float = 10.0) -> RemotingCommand:
    req = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, send_header(TOPIC, {}, queue_id), body)
    return call(addr, req, timeout)


def runtime_info(addr: str) -> dict[str, str]:
    resp = call(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 5)
    assert resp.code == ResponseCode.SUCCESS
    return fastjson.loads(resp.body)["table"]


def settled_route(group: Group, live: set[str]) -> dict[int, str]:
    """The route once it holds a master and every live member as a slave under its own id."""

    def settled() -> dict[int, str] | None:
        route = group.route()
        if 0 not in route or set(route.values()) != {group.brokers[i] for i in live}:
            return None
        master = group.member_at(route[0])
        slaves = {int(i[1:]) + 1: group.brokers[i] for i in live if i != master}
        return route if {k: v for k, v in route.items() if k} == slaves else None

    return until(settled, 30, "a master and its slaves in the route")


def create_topic(master: str) -> None:
    header = {
        "topic": TOPIC,
        "defaultTopic": "TBW102",
        "readQueueNums": str(QUEUES),
        "writeQueueNums": str(QUEUES),
        "perm": "6",
        "topicFilterType": "SINGLE_TAG",
    }
    resp = call(master, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header), 5)
    assert resp.code == ResponseCode.SUCCESS, resp.remark


def bootstrap(group: Group) -> bool:
    """Create the topic on the master once the group has one (auto-created topics would do too)."""
    route = group.route() or {}
    resp = call(group.namesrv, route_request("TBW102"), 3)
    if resp.code != ResponseCode.SUCCESS:
        return False
    for data in fastjson.loads(resp.body)["brokerDatas"]:
        master = data["brokerAddrs"].get("0")
        if data["brokerName"] == GROUP and master:
            create_topic(master)
            return True
    return bool(route)


def _segments(directory: Path, upto: int | None) -> bytes:
    """A queue of mapped files (each full size, named by its start offset) read as one run up to ``upto``."""
    out = bytearray()
    for path in sorted(directory.iterdir()):
        if upto is not None and len(out) >= upto:
            break
        with path.open("rb") as f:
            out += f.read(-1 if upto is None else upto - len(out))
    return bytes(out)


_INDEX_POS_SIZE = struct.Struct(">4xqi")  # an index unit's magic, then the entry's position and size


def ledger_state(addr: str) -> tuple[str, int, int, int]:
    """A member's DLedger role, term, ledger end index and committed index, as GET_BROKER_RUNTIME_INFO shows."""
    info = runtime_info(addr)
    return (
        info["dLedgerRole"],
        int(info["dLedgerTerm"]),
        int(info["dLedgerLedgerEndIndex"]),
        int(info["dLedgerCommittedIndex"]),
    )


def caught_up(group: Group, timeout: float = 30.0) -> dict[str, tuple[str, int, int, int]]:
    """Every member's :func:`ledger_state` once one leads and all hold and have committed the same ledger end."""

    def settled() -> dict[str, tuple[str, int, int, int]] | None:
        states = {i: ledger_state(addr) for i, addr in group.brokers.items()}
        roles = sorted(state[0] for state in states.values())
        ends = {(term, end, committed) for _, term, end, committed in states.values()}
        return states if roles == ["FOLLOWER", "FOLLOWER", "LEADER"] and len(ends) == 1 else None

    return until(settled, timeout, "one leader, every member at its ledger end and commit index")


def assert_committed_identical(group: Group) -> tuple[int, int]:
    """Every member's data and index files byte-identical over the range all of them committed; returns that
    range's last index and its end position in the data files."""
    committed = min(ledger_state(addr)[3] for addr in group.brokers.values())
    assert committed >= 0, "nothing committed"
    units = (committed + 1) * INDEX_UNIT_SIZE
    indexes = {i: _segments(group.ledger_dir(i) / "index", units) for i in group.brokers}
    pos, size = _INDEX_POS_SIZE.unpack_from(indexes["n0"], committed * INDEX_UNIT_SIZE)
    end = pos + size
    datas = {i: group.data_bytes(i, end) for i in group.brokers}
    for i in group.brokers:
        assert len(indexes[i]) == units and len(datas[i]) == end, (i, len(indexes[i]), len(datas[i]))
        assert indexes[i] == indexes["n0"], f"index files of {i} and n0 differ below committed index {committed}"
        assert datas[i] == datas["n0"], f"data files of {i} and n0 differ below position {end}"
    return committed, end
