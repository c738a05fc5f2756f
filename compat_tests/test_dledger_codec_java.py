"""Our DLedger codec against DLedger 0.3.1.2's own (the jar Apache 4.9.8 ships), run when
``ROCKETMQ_BROKER_CLASSPATH`` names the broker's jars: a tiny Java program prints what DLedgerEntryCoder and
fastjson write for fixed values, and ours must write the same bytes and read them back."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gateway.dledger.entry import DLedgerEntry, IndexEntry
from gateway.dledger.protocol import PushEntryRequest, VoteRequest, VoteResponse, VoteResult

from .apache_broker import CLASSPATH, CLASSPATH_ENV
from .servers import jdk_tool

if not CLASSPATH or "dledger" not in CLASSPATH:
    pytest.skip(f"DLedger not given: set {CLASSPATH_ENV} to Apache 4.9.8's jars", allow_module_level=True)

pytestmark = pytest.mark.compat

SOURCE = Path(__file__).resolve().parent / "java_dledger" / "DLedgerCodec.java"


def test_entry_and_bodies_byte_identical_to_dledger(tmp_path: Path) -> None:
    javac = [jdk_tool("javac"), "-encoding", "UTF-8", "-nowarn", "-d", str(tmp_path), "-cp", CLASSPATH, str(SOURCE)]
    compiled = subprocess.run(javac, capture_output=True, text=True, timeout=120)
    assert compiled.returncode == 0, compiled.stderr
    ran = subprocess.run(
        [jdk_tool("java"), "-cp", f"{tmp_path}:{CLASSPATH}", "DLedgerCodec"], capture_output=True, timeout=60
    )
    assert ran.returncode == 0, ran.stderr.decode()
    data_hex, index_hex, vote, answer, push = ran.stdout.decode().splitlines()

    entry = DLedgerEntry(index=5, term=2, pos=480, channel=7, body="héllo".encode())
    assert entry.encode().hex() == data_hex
    assert DLedgerEntry.decode(bytes.fromhex(data_hex)) == entry
    assert entry.index_entry().encode().hex() == index_hex
    assert IndexEntry.decode(bytes.fromhex(index_hex)) == entry.index_entry()

    base = {"group": "RaftNode00", "local_id": "n0", "remote_id": "n1", "term": 3}
    request = VoteRequest(**base, ledger_end_index=7, ledger_end_term=2)
    assert request.encode().decode() == vote
    assert VoteRequest.decode(vote.encode()) == request
    response = VoteResponse(**base, vote_result=VoteResult.REJECT_ALREADY_VOTED)
    assert response.encode().decode() == answer
    assert VoteResponse.decode(answer.encode()) == response
    pushed = PushEntryRequest(**base, leader_id="n0", commit_index=4, batch_entry=[entry])
    assert pushed.encode().decode() == push
    assert PushEntryRequest.decode(push.encode()) == pushed
