"""The C++ client (PyPI ``rocketmq==0.4.4``) against three of our brokers in one DLedger group (issue 27 item 4):
it finds the master (brokerId 0) by route, its sends are acknowledged once a majority holds them, and its pull
consumer reads them back, each exactly once; with the leader SIGKILLed under its load, no acknowledged message
is lost."""

from __future__ import annotations

import importlib.util
import itertools
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

if importlib.util.find_spec("rocketmq") is None:
    pytest.skip("PyPI rocketmq==0.4.4 (the C++ client) is not installed", allow_module_level=True)

from tests.broker.dledger_group import TOPIC, Group, bootstrap, settled_route
from tests.ha.procs import until

from .test_cpp_client import Background, _unique, check_messages, produce, pull_all

pytestmark = [pytest.mark.compat]


def _group(tmp_path: Path) -> tuple[Group, SimpleNamespace]:
    # DLedger's default timings: a loaded machine's pauses do not make the group elect again mid-run.
    group = Group(tmp_path / "group", timings={})
    group.root.mkdir()
    try:
        group.start()
        until(lambda: group.route() or bootstrap(group), 30, "the topic routed")
        settled_route(group, {"n0", "n1", "n2"})
    except BaseException:
        group.stop()
        raise
    return group, SimpleNamespace(namesrv_addr=group.namesrv)


def _acked(producer: Background) -> int:
    return sum(1 for e in producer.events() if e.get("event") == "sent")


def test_cpp_producer_and_pull_consumer_on_a_dledger_group(tmp_path: Path) -> None:
    group, servers = _group(tmp_path)
    try:
        run_id = _unique("dledger")
        produce(tmp_path, servers, TOPIC, run_id, 20)
        check_messages(pull_all(tmp_path, servers, TOPIC).messages, run_id, range(20), TOPIC, "pulled")
    finally:
        group.stop()


def test_cpp_producer_loses_no_acknowledged_message_when_the_leader_is_sigkilled(tmp_path: Path) -> None:
    """Sync sends one after another; the leader is SIGKILLed mid-run. The client knows nothing of DLedger: its
    sends fail until its periodic route update (every 30 s in this client) names the new master, then go on
    there. Every acknowledged message is read back exactly once, at the queue offset its SendResult named."""
    group, servers = _group(tmp_path)
    try:
        master = group.route()[0]
        run_id = _unique("dledger_kill")
        producer = Background(
            tmp_path / "home-producer",
            servers,
            TOPIC,
            _unique("cpp_dledger_pg"),
            "--run",
            run_id,
            "--retries",
            1000,  # 0.2 s apart: longer than the client's route update
            "--send-timeout-ms",
            3000,
            timeout=90,
            command="produce",
        )
        try:
            until(lambda: _acked(producer) >= 30, 30, "30 sends acknowledged to the C++ producer")
            killed_at = time.time()
            group.members[group.member_at(master)].kill()
            route = until(lambda: (r := group.route()).get(0) not in (None, master) and r, 30, "a new master")
            routed = time.time() - killed_at
            acked_at_kill = _acked(producer)
            until(lambda: _acked(producer) >= acked_at_kill + 50, 60, "sends acknowledged by the new master")
        finally:
            run = producer.finish()
        sent = run.of("sent")
        pulled = pull_all(tmp_path, servers, TOPIC).messages
        by_id = Counter(m["msg_id"] for m in pulled)
        held = {m["msg_id"]: m for m in pulled}
        lost = [s["i"] for s in sent if s["msg_id"] not in held]
        assert not lost, f"{len(lost)} of {len(sent)} acknowledged messages lost, e.g. {lost[:5]}\n" + run.describe()
        assert all(by_id[s["msg_id"]] == 1 for s in sent), "an acknowledged message read back twice"
        assert [s["offset"] for s in sent] == [held[s["msg_id"]]["queue_offset"] for s in sent]
        # Queue offsets are never reused: each queue's read back as 0, 1, 2, ...
        for queue_id in {m["queue_id"] for m in pulled}:
            offsets = sorted(m["queue_offset"] for m in pulled if m["queue_id"] == queue_id)
            assert offsets == list(range(len(offsets))), queue_id
        # A send the client retried after a failed attempt may be stored twice (under another message id).
        per_index = Counter(int(m["props"]["idx"]) for m in pulled if m["props"]["run"] == run_id)
        duplicates = sum(n - 1 for n in per_index.values())
        times = [killed_at, *sorted(s["t"] for s in sent if s["t"] > killed_at)]
        gap = max(b - a for a, b in itertools.pairwise(times))
        print(
            f"\nC++ producer through a SIGKILLed DLedger leader: {len(sent)} acknowledged, 0 lost, {duplicates} "
            f"duplicates, {len(run.of('send_error'))} failed attempts retried; no send acknowledged for {gap:.2f} s "
            f"after the kill (the new master {group.member_at(route[0])} in the route after {routed:.2f} s)"
        )
    finally:
        group.stop()
