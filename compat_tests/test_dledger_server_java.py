"""Our DLedger members in one group with Apache's own ``DLedgerServer`` (dledger 0.3.1.2), run when
``ROCKETMQ_BROKER_CLASSPATH`` names the broker's jars: {2 Java + 1 ours} and {1 Java + 2 ours} elect, replicate
appends made through DLedger's APPEND RPC, hand leadership from one side to the other, replace a killed leader,
and end with byte-identical data files over the committed range."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import reactor

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
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)

    def status(self) -> tuple[str, int, str | None, int, int] | None:
        if self.proc.poll() is not None:
            return None
        with open(self.log, "rb") as f:
            f.seek(max(0, os.path.getsize(self.log) - 8192))
            lines = [line for line in f.read().decode(errors="replace").splitlines() if line.startswith("STATUS ")]
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
