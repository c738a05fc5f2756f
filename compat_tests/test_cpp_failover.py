"""The C++ client (PyPI ``rocketmq==0.4.4``) sending through a controller-mode failover.

A NameServer with its embedded controller and two brokers in controller mode (SYNC_MASTER, SYNC_FLUSH,
allAckInSyncStateSet) run as processes; two unmodified C++ producers send synchronously to the master, which
is SIGKILLed or SIGSTOPped under that load. The producers know nothing of controllers: they find the new master when
their periodic route update (30 s in this client) names it, as against Apache 5. Every message the client
reported SEND_OK must be on the new master; duplicates (a send retried after a lost answer) are counted.
"""

from __future__ import annotations

import importlib.util
import signal
import time
from pathlib import Path

import pytest

if importlib.util.find_spec("rocketmq") is None:
    pytest.skip("PyPI rocketmq==0.4.4 (the C++ client) is not installed", allow_module_level=True)

from tests.ha.procs import bodies, until
from tests.ha.test_failover_processes import QUEUES, TOPIC, Cluster, _master_addr

from .cpp_client import expected
from .test_cpp_client import Background, _unique

pytestmark = [pytest.mark.compat, pytest.mark.chaos]


def _acked(producers: list[Background]) -> list[int]:
    return [e["i"] for p in producers for e in p.events() if e.get("event") == "sent"]


@pytest.mark.parametrize("fault", [signal.SIGKILL, signal.SIGSTOP], ids=["SIGKILL", "SIGSTOP"])
def test_cpp_producers_lose_no_acknowledged_message_when_the_master_fails(tmp_path: Path, fault: int) -> None:
    cluster = Cluster(tmp_path)
    try:
        master = cluster.ready_with_topic()
        run_id = _unique("failover")
        producers = [
            Background(
                tmp_path / f"home-producer-{n}",
                cluster,
                TOPIC,
                _unique("cpp_failover_pg"),
                "--run",
                run_id,
                "--start",
                n * 1_000_000,  # the two producers' message numbers never overlap
                "--retries",
                1000,  # 0.2 s apart: longer than the client's 30 s route update
                "--send-timeout-ms",
                3000,
                timeout=150,
                command="produce",
            )
            for n in range(2)
        ]
        try:
            until(lambda: len(_acked(producers)) >= 100, 60, "100 messages acknowledged to the C++ producers")
            killed_at = time.monotonic()
            cluster.brokers[master].proc.send_signal(fault)
            new_master = until(lambda: (m := _master_addr(cluster.namesrv)) and m != master and m, 30, "a new master")
            to_new_master = time.monotonic() - killed_at
            acked_at_kill = len(_acked(producers))
            until(lambda: len(_acked(producers)) >= acked_at_kill + 20, 90, "sends accepted by the new master")
            to_sends = time.monotonic() - killed_at
        finally:
            runs = [p.finish() for p in producers]
        acked = [e["i"] for run in runs for e in run.of("sent")]
        retried = sum(len(run.of("send_error")) for run in runs)
        found = bodies(new_master, TOPIC, QUEUES)
        wanted = {expected(run_id, i)["body"].encode(): i for i in acked}
        lost = sorted(i for body, i in wanted.items() if body not in found)
        duplicates = sum(found[body] - 1 for body in wanted if found[body] > 1)
        print(
            f"\nC++ producers through a failover after {signal.Signals(fault).name}: {len(acked)} acknowledged, "
            f"{len(lost)} lost, {duplicates} duplicates, {retried} failed attempts retried; "
            f"new master after {to_new_master:.2f} s, 20 sends accepted by it after {to_sends:.2f} s"
        )
        assert len(wanted) == len(acked), "a message number acknowledged twice"
        assert not lost, f"{len(lost)} acknowledged messages lost, e.g. {lost[:5]}\n" + runs[0].describe()
    finally:
        cluster.stop()
