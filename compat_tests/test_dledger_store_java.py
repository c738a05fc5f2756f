"""Our DLedger file store against DLedger 0.3.1.2's ``DLedgerMmapFileStore``, run when ``ROCKETMQ_BROKER_CLASSPATH``
names the broker's jars: the same appends make byte-identical files, a directory Java wrote opens in ours, and one
ours extended opens in Java's."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.dledger.test_store import DATA_FILE, INDEX_FILE, open_store

from .apache_broker import CLASSPATH, CLASSPATH_ENV
from .servers import jdk_tool

if not CLASSPATH or "dledger" not in CLASSPATH:
    pytest.skip(f"DLedger not given: set {CLASSPATH_ENV} to Apache 4.9.8's jars", allow_module_level=True)

pytestmark = pytest.mark.compat

SOURCE = Path(__file__).resolve().parent / "java_dledger" / "DLedgerStoreFiles.java"
COUNT, TERM = 20, 3


LOGBACK_LINE = re.compile(r"\d\d:\d\d:\d\d\.\d{3} \[")


def body(i: int) -> bytes:
    return f"java-{i}-".encode() * (1 + i % 3)  # what the Java program appends


def files(base: Path) -> dict[str, bytes]:
    root = base / "dledger-n0"
    return {
        str(p.relative_to(root)): p.read_bytes() for sub in ("data", "index") for p in sorted((root / sub).iterdir())
    }


def test_store_files_interchangeable_with_dledger(tmp_path: Path) -> None:
    javac = [jdk_tool("javac"), "-encoding", "UTF-8", "-nowarn", "-d", str(tmp_path), "-cp", CLASSPATH, str(SOURCE)]
    compiled = subprocess.run(javac, capture_output=True, text=True, timeout=120)
    assert compiled.returncode == 0, compiled.stderr

    def java(*args: object) -> list[str]:
        cmd = [jdk_tool("java"), "-cp", f"{tmp_path}:{CLASSPATH}", "DLedgerStoreFiles", *map(str, args)]
        ran = subprocess.run(cmd, capture_output=True, timeout=60)
        assert ran.returncode == 0, ran.stderr.decode()
        # A broker classpath brings logback, which logs DLedger's INFO lines to stdout: not the program's output.
        return [line for line in ran.stdout.decode().splitlines() if not LOGBACK_LINE.match(line)]

    theirs, ours = tmp_path / "java", tmp_path / "ours"
    java("write", theirs, DATA_FILE, INDEX_FILE, COUNT, TERM)
    store = open_store(ours)
    for i in range(COUNT):
        store.append_as_leader(body(i), term=TERM)
    store.update_committed_index(COUNT - 2)
    store.close()
    assert files(ours) == files(theirs)  # same appends, same bytes, blank records and file names included
    assert (ours / "dledger-n0" / "checkpoint").read_text() == (theirs / "dledger-n0" / "checkpoint").read_text()

    # Java's directory in ours: everything recovered; then ours appends a later term and Java reads it all back.
    store = open_store(theirs)
    assert (store.ledger_begin_index, store.ledger_end_index, store.committed_index) == (0, COUNT - 1, COUNT - 2)
    assert [store.get(i).body for i in range(COUNT)] == [body(i) for i in range(COUNT)]
    added = [store.append_as_leader(f"ours-{i}".encode(), term=TERM + 1) for i in range(5)]
    store.update_committed_index(COUNT + 4)
    store.close()
    head, *lines = java("read", theirs, DATA_FILE, INDEX_FILE)
    assert head == f"0 {COUNT + 4} {TERM + 1} {COUNT + 4}"
    assert lines[COUNT:] == [f"{e.index} {e.term} {e.pos} {e.body.hex()}" for e in added]
    assert [bytes.fromhex(line.split()[3]) for line in lines[:COUNT]] == [body(i) for i in range(COUNT)]
