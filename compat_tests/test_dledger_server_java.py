"""Our DLedger members in one group with Apache's own ``DLedgerServer`` (dledger 0.3.1.2), run when
``ROCKETMQ_BROKER_CLASSPATH`` names the broker's jars: {2 Java + 1 ours} and {1 Java + 2 ours} elect, replicate
appends made through DLedger's APPEND RPC, hand leadership from one side to the other, replace a killed leader,
and end with byte-identical data files over the committed range; Apache's ``DLedgerClient`` appends, reads and
transfers leadership on a group of ours."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import reactor, threads

from gateway.dledger.codes import DLedgerRequestCode, DLedgerResponseCode
from gateway.dledger.protocol import (
    AppendEntryRequest,
    AppendEntryResponse,
    LeadershipTransferRequest,
    LeadershipTransferResponse,
)
from gateway.dledger.store import DLedgerFileStore
from gateway.remoting.client import RemotingClient
from gateway.remoting.command import RemotingCommand
from tests.dledger.cluster import DATA_FILE, GROUP, INDEX_FILE, Cluster, until

from .apache_broker import CLASSPATH, CLASSPATH_ENV, LOGBACK, OPENS
from .servers import jdk_tool

if not CLASSPATH or "dledger" not in CLASSPATH:
    pytest.skip(f"DLedger not given: set {CLASSPATH_ENV} to Apache 4.9.8's jars", allow_module_level=True)

pytestmark = pytest.mark.compat

SOURCE = Path(__file__).resolve().parent / "java_dledger" / "DLedgerMember.java"
BODY_SIZE = 6000  # 15 entries cross a 64 KiB data file: the blank record at its end is compared too
OUTPUT = ("APPEND", "GET", "TRANSFER")  # DLedgerClientCalls' lines (logback's are not)
BATCH = 16 * 1024  # maxBatchPushSize when pushing in batches: three entries a push


class JavaMember:
    """Apache's DLedgerServer as a child process; its state read from the STATUS lines it prints."""

    def __init__(self, classes: Path, cluster: Cluster, member: str, batch: int | None) -> None:
        self.member = member
        self.log = cluster.base / f"{member}.log"
        logback = cluster.base / "logback.xml"
        logback.write_text(LOGBACK)
        peers = ";".join(f"{k}-{v}" for k, v in cluster.peers.items())
        argv = [
            jdk_tool("java"), "-Xmx128m", "-XX:MaxDirectMemorySize=128m", *OPENS,
            f"-Dlogback.configurationFile={logback}", "-cp", f"{classes}:{CLASSPATH}", "DLedgerMember",
            GROUP, member, peers, str(cluster.base / member), str(DATA_FILE), str(INDEX_FILE),
            *([str(batch)] if batch else []),
        ]  # fmt: skip
        with open(self.log, "ab") as out:
            self.since = out.tell()  # a restarted member's log goes on after its previous run's lines
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)

    def status(self) -> tuple[str, int, str | None, int, int] | None:
        if self.proc.poll() is not None:
            return None
        with open(self.log, "rb") as f:
            f.seek(max(self.since, os.path.getsize(self.log) - 8192))
            whole = f.read().decode(errors="replace").split("\n")[:-1]  # (the last one may be half written)
            lines = [line for line in whole if line.startswith("STATUS ")]
        if not lines:
            return None
        _, role, term, leader, end, committed = lines[-1].split()
        return role, int(term), None if leader == "null" else leader, int(end), int(committed)

    async def stop(self, sig: int = signal.SIGTERM) -> None:
        self.proc.send_signal(sig)
        await until(lambda: self.proc.poll() is not None, 20, f"Java member {self.member} to exit")


class MixedGroup:
    def __init__(self, cluster: Cluster, classes: Path, java: set[str], batch: int | None) -> None:
        self.cluster = cluster
        self.batch = batch
        self.classes = classes
        self.java_ids = java
        self.java: dict[str, JavaMember] = {}
        self.client = RemotingClient(reactor)

    def start(self, member: str) -> None:
        if member in self.java_ids:
            self.java[member] = JavaMember(self.classes, self.cluster, member, self.batch)
        else:
            self.cluster.start(member)

    async def stop(self, member: str, sig: int = signal.SIGTERM) -> None:
        if member in self.java:
            await self.java.pop(member).stop(sig)
        else:
            await self.cluster.stop(member)

    def running(self) -> list[str]:
        return sorted([*self.java, *self.cluster.servers])

    def view(self, member: str) -> tuple[str, int, str | None, int, int] | None:
        if member in self.java:
            return self.java[member].status()
        ms = self.cluster.servers[member].member_state
        return ms.role.name, ms.term, ms.leader_id, ms.ledger_end_index, ms.committed_index

    async def leader(self, timeout: float = 20) -> tuple[str, int]:
        def settled() -> tuple[str, int] | None:
            views = {m: self.view(m) for m in self.running()}
            if any(v is None for v in views.values()):
                return None
            leaders = [m for m, v in views.items() if v[0] == "LEADER"]
            if len(leaders) != 1:
                return None
            term = views[leaders[0]][1]
            if all(v[2] == leaders[0] and v[1] == term for v in views.values()):
                return leaders[0], term
            return None

        return await until(settled, timeout, f"one leader among {self.running()}")

    async def append(self, leader: str, body: bytes) -> AppendEntryResponse:
        request = AppendEntryRequest(group=GROUP, remote_id=leader, body=body)
        command = RemotingCommand.request(DLedgerRequestCode.APPEND, body=request.encode(), language="JAVA")
        answer = await self.client.invoke(self.cluster.peers[leader], command)
        return AppendEntryResponse.decode(answer.body)

    async def transfer(self, leader: str, term: int, to: str) -> LeadershipTransferResponse:
        request = LeadershipTransferRequest(
            group=GROUP, remote_id=leader, leader_id=leader, term=term, transfer_id=leader, transferee_id=to
        )
        command = RemotingCommand.request(
            DLedgerRequestCode.LEADERSHIP_TRANSFER, body=request.encode(), language="JAVA"
        )
        answer = await self.client.invoke(self.cluster.peers[leader], command, 10)
        return LeadershipTransferResponse.decode(answer.body)

    async def close(self) -> None:
        for member in list(self.java):
            await self.stop(member)
        await self.cluster.stop()
        await self.client.close()


@pytest.fixture(scope="module")
def classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dledger-member")
    javac = [jdk_tool("javac"), "-encoding", "UTF-8", "-nowarn", "-d", str(out), "-cp", CLASSPATH, str(SOURCE)]
    compiled = subprocess.run(javac, capture_output=True, text=True, timeout=120)
    assert compiled.returncode == 0, compiled.stderr
    return out


@pytest_twisted.async_yield_fixture(
    params=[({"n0", "n1"}, None), ({"n0"}, None), ({"n0"}, BATCH)],
    ids=["2java+1ours", "1java+2ours", "1java+2ours-batch-push"],
)
async def group(request: pytest.FixtureRequest, tmp_path: Path, classes: Path) -> AsyncIterator[MixedGroup]:
    java, batch = request.param
    cluster = Cluster(tmp_path, **({"enable_batch_push": True, "max_batch_push_size": batch} if batch else {}))
    mixed = MixedGroup(cluster, classes, java, batch)
    try:
        yield mixed
    finally:
        await mixed.close()


def body(i: int) -> bytes:
    return f"entry-{i:02d}-".encode().ljust(BODY_SIZE, b".")


@pytest_twisted.ensureDeferred
async def test_mixed_group_elects_replicates_hands_over_and_agrees_byte_for_byte(group: MixedGroup) -> None:
    members = list(group.cluster.peers)
    for member in members:
        group.start(member)
    first, term = await group.leader()
    count = 0

    async def append_five(leader: str) -> None:
        nonlocal count
        for _ in range(5):
            response = await group.append(leader, body(count))
            assert (response.code, response.index) == (DLedgerResponseCode.SUCCESS, count), response
            count += 1

    await append_five(first)
    # Hand over to the other side.
    other_side = [m for m in members if (m in group.java_ids) != (first in group.java_ids)]
    target = other_side[0]
    for _ in range(3):
        response = await group.transfer(first, term, target)
        # DLedger's transferee follows the old leader again when its heartbeat comes before the new term: try again.
        if response.code != DLedgerResponseCode.TAKE_LEADERSHIP_FAILED:
            break
        first, term = await group.leader()
    assert response.code == DLedgerResponseCode.SUCCESS, response
    second, second_term = await group.leader()
    assert second == target and second_term == term + 1
    await append_five(second)
    # Kill the leader: the two left elect one of them, which takes appends; the killed one comes back and catches up.
    await group.stop(second, signal.SIGKILL)
    third, third_term = await group.leader()
    assert third != second and third_term > second_term
    await append_five(third)
    group.start(second)
    last = count - 1
    await until(
        lambda: all((v := group.view(m)) is not None and v[3] == last and v[4] == last for m in members),
        30,
        f"every member holding and committing {last}",
    )
    for member in list(group.running()):
        await group.stop(member)
    # Every member's data files, as each side wrote them, over the committed range.
    reference = DLedgerFileStore(group.cluster.config(members[-1]).store)
    reference.open()
    end = reference.committed_pos
    assert reference.committed_index == last and [reference.get(i).body for i in range(count)] == [
        body(i) for i in range(count)
    ]
    reference.close()
    datas = {m: group.cluster.data_bytes(m, end) for m in members}
    assert all(len(d) == end for d in datas.values())
    assert len(set(datas.values())) == 1, {m: d[:64] for m, d in datas.items()}
    # The term and vote files, as each side writes them (no vote yet in the current term: an empty voteLeader).
    for member in members:
        text = (group.cluster.base / member / f"dledger-{member}" / "currterm").read_text()
        assert re.fullmatch(r"voteLeader=(n\d)?\ncurrTerm=\d+\n", text), (member, text)


@pytest_twisted.ensureDeferred
async def test_a_divergent_tail_is_truncated_across_implementations(group: MixedGroup) -> None:
    """The lone member of the smaller side gets an uncommitted tail of an old term written into its files (our
    store writes DLedger's format, so Java's directory takes it too); a leader of the other side cuts it."""
    members = list(group.cluster.peers)
    lone = next(iter(group.java_ids)) if len(group.java_ids) == 1 else members[-1]
    for member in members:
        group.start(member)
    leader, term = await group.leader()
    for i in range(3):
        assert (await group.append(leader, body(i))).code == DLedgerResponseCode.SUCCESS
    await until(lambda: all((v := group.view(m)) and v[4] == 2 for m in members), 20, "all committing 2")
    for member in members:
        await group.stop(member)
    store = DLedgerFileStore(group.cluster.config(lone).store)
    store.open()
    old_term = store.ledger_end_term
    for i in range(4):
        store.append_as_leader(f"divergent-{i}".encode() * 50, term=old_term)
    store.close()
    others = [m for m in members if m != lone]
    for member in others:
        group.start(member)
    leader, term = await group.leader()
    if term == old_term:  # re-elected in the term it led: move on one term
        other = next(m for m in others if m != leader)
        assert (await group.transfer(leader, term, other)).code == DLedgerResponseCode.SUCCESS
        leader, term = await group.leader()
    assert term > old_term
    for i in range(3, 5):
        assert (await group.append(leader, body(i))).code == DLedgerResponseCode.SUCCESS
    group.start(lone)
    await until(
        lambda: all((v := group.view(m)) is not None and v[3] == 4 and v[4] == 4 for m in members),
        30,
        "every member holding and committing 4, the divergent tail cut",
    )
    for member in list(group.running()):
        await group.stop(member)
    reference = DLedgerFileStore(group.cluster.config(lone).store)
    reference.open()
    assert [reference.get(i).body for i in range(5)] == [body(i) for i in range(5)]
    end = reference.committed_pos
    reference.close()
    assert len({group.cluster.data_bytes(m, end) for m in members}) == 1


@pytest_twisted.ensureDeferred
async def test_apache_dledger_client_appends_reads_and_transfers_on_our_group(tmp_path: Path) -> None:
    """DLedgerClient finds our leader (METADATA after a NOT_LEADER), appends, reads back (GET) and asks for a
    leadership transfer, all answered as DLedger answers them."""
    classes = tmp_path / "classes"
    source = SOURCE.with_name("DLedgerClientCalls.java")
    javac = [jdk_tool("javac"), "-encoding", "UTF-8", "-nowarn", "-d", str(classes), "-cp", CLASSPATH, str(source)]
    compiled = await threads.deferToThread(subprocess.run, javac, capture_output=True, text=True, timeout=120)
    assert compiled.returncode == 0, compiled.stderr
    cluster = Cluster(tmp_path)
    try:
        cluster.start()
        leader = await cluster.leader()
        lead, term = leader.member_state.self_id, leader.member_state.term
        transferee = next(m for m in cluster.peers if m != lead)
        peers = ";".join(f"{k}-{v}" for k, v in cluster.peers.items())
        logback = tmp_path / "logback.xml"
        logback.write_text(LOGBACK)
        argv = [
            jdk_tool("java"), f"-Dlogback.configurationFile={logback}", "-cp", f"{classes}:{CLASSPATH}",
            "DLedgerClientCalls", GROUP, peers, "5", lead, str(term), transferee,
        ]  # fmt: skip
        ran = await threads.deferToThread(subprocess.run, argv, capture_output=True, text=True, timeout=120)
        assert ran.returncode == 0, ran.stderr
        lines = [line.split(" ", 4) for line in ran.stdout.splitlines() if line.split(" ")[0] in OUTPUT]
        appends = [line for line in lines if line[0] == "APPEND"]
        assert [(int(c), int(i), int(p), who) for _, c, i, p, who in appends] == [
            (200, i, leader.store.get(i).pos, lead) for i in range(5)
        ]
        gets = [line for line in lines if line[0] == "GET"]
        assert [tuple(line[1:]) for line in gets] == [("200", str(i), f"client-{i}") for i in range(5)]
        assert lines[-1] == ["TRANSFER", "200"]
        new = await cluster.leader()
        assert new.member_state.self_id == transferee and new.member_state.term == term + 1
        assert all(s.store.get(4).body == b"client-4" for s in cluster.servers.values())
    finally:
        await cluster.stop()
