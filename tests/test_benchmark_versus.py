"""The benchmarks run end to end on our servers (their figures are not checked here: benchmarks, not tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# The process's and its threads' CPU are counted in clock ticks, each read once at either end of the 1 s send: one
# thread's figure can come out up to a tick above the process's (a broker on one thread, the pure-Python one).
TWO_TICKS = 2 / os.sysconf("SC_CLK_TCK")


def test_versus_runs_our_pair_and_verifies_its_drains(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    argv = [sys.executable, "-m", "benchmarks.versus", "--rounds", "1", "--duration", "1", "--warmup", "0.5",
            "--settle", "0.5", "--topics", "5", "--connections", "5", "--no-scaling", "--save", str(out)]  # fmt: skip
    run = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "every drain matched its sends, no send errors" in run.stdout
    assert "reactor thread us CPU/msg (Apache: busiest thread)" in run.stdout
    [ours] = json.loads(out.read_text())["results"]["ours"]
    for flush in ("ASYNC_FLUSH", "SYNC_FLUSH"):
        assert ours[flush]["send"]["rate"] > 0
        assert ours[flush]["drain"]["verify"].startswith("OK")
        assert (
            0
            < ours[flush]["send"]["busiest_thread"]
            <= ours[flush]["send"]["cpu_per_10k"] * ours[flush]["send"]["rate"] / 1e4 + TWO_TICKS
        )
        # the reactor is the broker's main thread, found by its thread id (= the pid)
        assert 0 < ours[flush]["send"]["reactor_thread"] <= ours[flush]["send"]["busiest_thread"]
        # who set the rate: the broker process, the generator, the machine (all cores busy at most)
        send = ours[flush]["send"]
        assert send["broker_cores"] > 0 and send["generator_cores"] > 0
        assert send["broker_cores"] + send["generator_cores"] <= send["machine_cores"] + 0.3 <= os.cpu_count() + 0.3
    assert len(ours["loaded_rss_mb"]) == 2 and ours["idle_rss_one_process_mb"] > 0


def test_growth_is_judged_only_where_apache_grew() -> None:
    from benchmarks.versus import render

    def scaling(one: float, two: float) -> dict[str, Any]:
        return {"cores_0": {"rate": one}, "cores_0,1": {"rate": two}}

    def growth_goal(apache_two: float) -> str:
        table = render({"ours": [scaling(100.0, 110.0)], "apache": [scaling(50.0, apache_two)]})
        return next(line for line in table.splitlines() if line.lstrip().startswith("growth"))

    assert growth_goal(60.0).endswith("NOT met")  # ours 1.10 against Apache's 1.20
    assert growth_goal(52.0).endswith(">= 1.0: met")  # 1.10 against 1.04
    assert growth_goal(45.0).endswith("not measured: Apache did not grow")  # 1.10 against 0.90: no verdict


def test_ha_pair_runs_our_pair_and_compares_the_slave(tmp_path: Path) -> None:
    out = tmp_path / "pair.json"
    argv = [sys.executable, "-m", "benchmarks.ha_pair", "--modes", "SYNC_MASTER", "--duration", "1", "--warmup",
            "0.5", "--save", str(out)]  # fmt: skip
    run = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    [row] = json.loads(out.read_text())
    assert row["target"] == "ours" and row["rate"] > 0 and not row["errors"]
    assert row["identical"] is True and row["slave_cpu_per_10k"] is not None


def test_pipeline_measures_a_send_and_a_replicated_message() -> None:
    for extra in ([], ["--replica"]):
        argv = [sys.executable, "-m", "benchmarks.pipeline", "--runs", "1", "--sends", "4096", *extra]
        run = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=240)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        assert "us CPU per" in run.stdout


def test_scale_out_runs_one_and_two_broker_processes(tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    argv = [sys.executable, "-m", "benchmarks.scale_out", "--rounds", "1", "--duration", "1", "--warmup", "0",
            "--save", str(out)]  # fmt: skip
    run = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    results = json.loads(out.read_text())["results"]
    assert [row["brokers"] for row in results["1"] + results["2"]] == [1, 2]
    assert all(row["rate"] > 0 and not row["errors"] for row in results["1"] + results["2"])
    assert all(row["machine_cores"] > 0 and row["generator_cores"] > 0 for row in results["1"] + results["2"])
    assert "16 queues" in run.stdout  # the topic is on both brokers: the generator sent to all 16 queues


def test_sdk5_runs_both_paths_and_receives_every_message() -> None:
    argv = [sys.executable, "-m", "benchmarks.sdk5", "--messages", "40", "--threads", "2", "--batch", "8"]
    run = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "every message received on both paths: yes" in run.stdout
    rows = [json.loads(line) for line in run.stderr.splitlines() if line.startswith("{")]
    assert sorted(r["path"] for r in rows) == ["grpc", "remoting"]
    assert all(r["send_rate"] > 0 and r["receive_rate"] > 0 and r["server_send_cpu_us"] > 0 for r in rows), rows
