"""Issue 27 item 6: Apache's path from a Master/Slave group to a DLedger group, with real processes.

A master's commitlog and config, copied into three members' stores, become the first range of their ledger: the old
messages stay readable on whichever member leads, new ones are replicated after them, and the members' ledger files
are byte-identical.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from compat_tests.servers import free_port
from gateway.remoting.codes import ResponseCode
from tests.broker.dledger_group import COMMITLOG_SIZE, QUEUES, TOPIC, Group, create_topic, send, settled_route
from tests.ha.procs import Proc, bodies, until, write_properties


def _master_slave_store(root: Path) -> set[bytes]:
    """A master's store under ``root`` with a few messages in each queue; returns their bodies."""
    root.mkdir()
    port = free_port()
    props = {
        "brokerName": "broker-a",
        "brokerIP1": "127.0.0.1",
        "bindAddress": "127.0.0.1",
        "listenPort": str(port),
        "namesrvAddr": "",
        "storePathRootDir": str(root),
        "mappedFileSizeCommitLog": str(COMMITLOG_SIZE),
    }
    master = Proc("gateway.broker", write_properties(root / "broker.conf", props), root)
    addr = f"127.0.0.1:{port}"
    try:
        until(lambda: create_topic(addr) or True, 30, "the master serving")
        old = {b"old-%d" % n for n in range(12)}
        for n, body in enumerate(sorted(old)):
            resp = send(addr, body, n % QUEUES)
            assert resp.code == ResponseCode.SUCCESS, resp.remark
    finally:
        master.stop()
    return old


def test_master_slave_store_becomes_the_first_range_of_a_dledger_group(tmp_path: Path) -> None:
    old = _master_slave_store(tmp_path / "master-slave")
    group = Group(tmp_path)
    for i in ("n0", "n1", "n2"):
        for part in ("commitlog", "config"):
            shutil.copytree(tmp_path / "master-slave" / part, tmp_path / i / part)
    try:
        group.start()
        master = settled_route(group, {"n0", "n1", "n2"})[0]
        until(lambda: set(bodies(master, TOPIC, QUEUES)) == old, 20, "the old messages served by the leader")

        new = {b"new-%d" % n for n in range(8)}
        for n, body in enumerate(sorted(new)):
            resp = send(master, body, n % QUEUES)
            assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert set(bodies(master, TOPIC, QUEUES)) == old | new
        for i, addr in group.brokers.items():
            until(lambda a=addr: set(bodies(a, TOPIC, QUEUES)) == old | new, 20, f"member {i} serving both ranges")
    finally:
        group.stop()

    # The ledger began where the old commitlog ends, at the same offset and with the same bytes on every member.
    ledgers = {i: sorted((tmp_path / i / f"dledger-{i}" / "data").iterdir()) for i in ("n0", "n1", "n2")}
    names = {i: [f.name for f in files] for i, files in ledgers.items()}
    assert names["n0"] == names["n1"] == names["n2"] and names["n0"][0] == f"{COMMITLOG_SIZE:020d}"
    contents = {i: [f.read_bytes() for f in files] for i, files in ledgers.items()}
    assert contents["n0"] == contents["n1"] == contents["n2"]
