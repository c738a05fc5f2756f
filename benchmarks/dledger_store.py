"""The store on a DLedger ledger beside the normal commitlog, in one process, without the network.

    python -m benchmarks.dledger_store                 # puts/s: normal commitlog, DLedger (one-member ledger)
    python -m benchmarks.dledger_store --normal-only   # only what needs no DLedger code (to run on older trees)

``normal``: ``put_message`` on the Master/Slave commitlog (dispatched as it appends).  ``dledger``: the same
messages through ``DLedgerCommitLog`` on a one-member ledger that commits each entry at once, then the reput
dispatches it, as the broker runs it on each commit.  ``reput``: a slave dispatching records replicated into its
commitlog (``dispatch_appended``).  Each figure is the best of ``--rounds``.
"""

from __future__ import annotations

import argparse
import functools
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twisted.internet import defer

from benchmarks.store import make_messages
from gateway.store import DefaultMessageStore, StoreConfig
from gateway.store.config import SLAVE

MiB = 1 << 20


def normal_puts(root: str, msgs: list) -> float:
    store = DefaultMessageStore(StoreConfig(storePathRootDir=root, mappedFileSizeCommitLog=64 * MiB))
    store.start()
    start = time.perf_counter()
    for msg in msgs:
        store.put_message(msg)
    elapsed = time.perf_counter() - start
    store.shutdown()
    return len(msgs) / elapsed


def slave_reput(root: str, msgs: list) -> float:
    """Records written by a master, handed to a slave's commitlog in 1 MiB transfers, then dispatched."""
    master = DefaultMessageStore(StoreConfig(storePathRootDir=root + "/m", mappedFileSizeCommitLog=64 * MiB))
    master.start()
    for msg in msgs:
        master.put_message(msg)
    end = master.max_phy_offset
    slave = DefaultMessageStore(
        StoreConfig(storePathRootDir=root + "/s", mappedFileSizeCommitLog=64 * MiB, brokerRole=SLAVE)
    )
    slave.start()
    for offset in range(0, end, MiB):
        slave.append_to_commit_log(offset, master.select_one_message_by_offset(offset, min(MiB, end - offset)))
    start = time.perf_counter()
    slave.dispatch_appended()
    elapsed = time.perf_counter() - start
    assert slave.get_max_offset_in_queue("BenchmarkStore", 0) == len(msgs) // 8
    master.shutdown()
    slave.shutdown()
    return len(msgs) / elapsed


@dataclass
class _Appended:
    entry: Any
    committed: defer.Deferred[Any]


def dledger_puts(root: str, msgs: list) -> float:
    from gateway.dledger.commitlog import DLedgerCommitLog
    from gateway.dledger.store import DLedgerFileStore, DLedgerStoreConfig

    ledger = DLedgerFileStore(
        DLedgerStoreConfig(store_base_dir=root, self_id="n0", mapped_file_size_for_entry_data=64 * MiB)
    )
    store: DefaultMessageStore

    def append(body: bytes) -> _Appended:
        """A one-member group's leader: committed at once, then the reput runs (the broker's commit listener)."""
        entry = ledger.append_as_leader(body, 1)
        ledger.update_committed_index(entry.index)
        store.dispatch_appended()
        return _Appended(entry, defer.succeed(entry))

    config = StoreConfig(storePathRootDir=root, mappedFileSizeCommitLog=64 * MiB)
    store = DefaultMessageStore(config, functools.partial(DLedgerCommitLog, ledger=ledger, appender=append))
    store.start()
    ok: list[Any] = []
    start = time.perf_counter()
    for msg in msgs:
        store.put_message(msg).addCallback(ok.append)
    elapsed = time.perf_counter() - start
    assert len(ok) == len(msgs) and store.get_max_offset_in_queue("BenchmarkStore", 0) == len(msgs) // 8
    store.shutdown()
    return len(msgs) / elapsed


def best(run: Callable[[str, list], float], msgs: list, rounds: int) -> float:
    figures = []
    for _ in range(rounds):
        root = tempfile.mkdtemp(prefix="bench-dledger-")
        try:
            figures.append(run(root, msgs))
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return max(figures)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024, help="body bytes")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--normal-only", action="store_true")
    args = parser.parse_args()
    msgs = make_messages(args.messages, args.size)
    runs = {"normal": normal_puts, "reput": slave_reput}
    if not args.normal_only:
        runs["dledger"] = dledger_puts
    for name, run in runs.items():
        print(f"{name:8s} {best(run, msgs, args.rounds):>10,.0f} msgs/s  ({args.messages} x {args.size} B)")


if __name__ == "__main__":
    main()
