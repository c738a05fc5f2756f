"""Send throughput of a master/slave pair (ASYNC_MASTER, SYNC_MASTER), ours beside Apache's, and how far the
slave lags.

    python -m benchmarks.ha_pair                                  # ours alone, both modes
    python -m benchmarks.ha_pair --apache-home DIR --rounds 2     # ours and Apache 4.9.8's, alternating

For each mode and target it starts a NameServer, a master (``brokerRole`` = the mode) and a slave of the same
``brokerName`` on temporary stores (ours: ``python -m gateway`` and ``python -m gateway.broker``; Apache's:
NamesrvStartup and two BrokerStartups from ``DIR/lib``), sends ``--warmup`` seconds unmeasured, waits until the
slave holds all of it, then runs the send phase of ``benchmarks.throughput`` against the master (16
connections, 1 KB by default), samples both brokers' commitLogMaxOffset every 100 ms (GET_BROKER_RUNTIME_INFO)
for the slave's lag, and checks that the slave caught up byte-identical (sha256 of the commitlog files).
``--namesrv`` with ``--master``/``--slave`` measures a running pair instead.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compat_tests.servers import GatewayServers, call, free_port
from gateway.remoting import fastjson
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand

from . import rss, throughput, versus
from .wire import SetupError


def max_offset(addr: str) -> int:
    """commitLogMaxOffset; OSError while the broker cannot tell (Apache 4.9.8 answers GET_BROKER_RUNTIME_INFO
    with SYSTEM_ERROR until its first statistics sample, a second after it starts)."""
    resp = call(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 3)
    if resp.code != ResponseCode.SUCCESS or not resp.body:
        raise OSError(f"GET_BROKER_RUNTIME_INFO from {addr}: code {resp.code} {resp.remark}")
    return int(fastjson.loads(resp.body)["table"]["commitLogMaxOffset"])


class LagSampler(threading.Thread):
    """master - slave commitLogMaxOffset every ``period`` seconds until stopped."""

    def __init__(self, master: str, slave: str, period: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.master, self.slave, self.period = master, slave, period
        self.samples: list[int] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.wait(self.period):
            with contextlib.suppress(OSError):
                self.samples.append(max(max_offset(self.master) - max_offset(self.slave), 0))

    def summary(self) -> dict[str, float]:
        values = sorted(self.samples) or [0]

        def pct(q: float) -> float:
            return values[min(int(q * len(values)), len(values) - 1)] / 1e6

        return {"p50_mb": pct(0.5), "p90_mb": pct(0.9), "max_mb": values[-1] / 1e6, "samples": len(self.samples)}


def commitlog_digest(store: Path, end: int, start: int = 0) -> str:
    """sha256 of the bytes ``start`` (a segment's first offset) to ``end`` of the commitlog under the store root
    ``store``, read from its files."""
    h = hashlib.sha256()
    left = end - start
    for segment in sorted((store / "commitlog").iterdir()):
        if left <= 0:
            break
        if int(segment.name) < start:
            continue
        with open(segment, "rb") as f:
            chunk = f.read(left)
        h.update(chunk)
        left -= len(chunk)
    return h.hexdigest()


def first_segment(store: Path) -> int:
    """The offset the oldest commitlog file under ``store`` starts at: where a slave that joined late begins."""
    return min((int(f.name) for f in (store / "commitlog").iterdir()), default=0)


def _wait_answering(addr: str, proc: subprocess.Popen[bytes], what: str, timeout: float = 60) -> None:
    """Until the broker at ``addr`` answers GET_BROKER_RUNTIME_INFO."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            max_offset(addr)
            return
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SetupError(f"{what} did not start") from None
            time.sleep(0.2)


def start_slave(root: Path, namesrv: str, flush: str) -> tuple[subprocess.Popen[bytes], str]:
    """Our slave of ``broker-a``, following the master the NameServer names."""
    port = free_port()
    root.mkdir(parents=True, exist_ok=True)
    conf = root / "slave.conf"
    conf.write_text(
        "".join(
            f"{k}={v}\n"
            for k, v in {
                "brokerClusterName": "DefaultCluster",
                "brokerName": "broker-a",
                "brokerRole": "SLAVE",
                "brokerId": "1",
                "brokerIP1": "127.0.0.1",
                "bindAddress": "127.0.0.1",
                "listenPort": str(port),
                "storePathRootDir": str(root / "store"),
                "flushDiskType": flush,
            }.items()
        )
    )
    log = open(root / "slave.log", "wb")  # noqa: SIM115 (closed with the process)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway.broker", "-c", str(conf), "-n", namesrv], stdout=log, stderr=subprocess.STDOUT
    )
    addr = f"127.0.0.1:{port}"
    try:
        _wait_answering(addr, proc, "the slave", 30)
    except SetupError:
        proc.kill()
        raise
    return proc, addr


def wait_for_link(master: str, timeout: float = 30.0) -> None:
    """Until our master has a slave on its HA port (GET_BROKER_HA_STATUS), so that no send of a SYNC_MASTER
    is answered SLAVE_NOT_AVAILABLE for want of it."""
    deadline = time.monotonic() + timeout
    while True:
        resp = call(master, RemotingCommand.request(RequestCode.GET_BROKER_HA_STATUS), 3)
        if fastjson.loads(resp.body).get("haConnectionInfo"):
            return
        if time.monotonic() > deadline:
            raise SetupError("the slave never connected to the master's HA port")
        time.sleep(0.1)


def wait_caught_up(master: str, slave: str, timeout: float = 60.0) -> int:
    """Until the slave holds the master's whole commitlog; returns that offset (the slave's, if it never did)."""
    end = max_offset(master)
    deadline = time.monotonic() + timeout
    while max_offset(slave) != end and time.monotonic() < deadline:
        time.sleep(0.1)
    return end


@dataclass
class RunningPair:
    """NameServer, master and slave, with where each broker keeps its store."""

    namesrv: str
    master: str
    slave: str
    master_pid: int | None
    slave_pid: int | None
    master_store: Path | None  # None: a pair measured from outside, whose files are not compared
    slave_store: Path | None


def _stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is not None:
        rss.stop_process(proc)


@contextlib.contextmanager
def our_pair(args: argparse.Namespace, root: Path, mode: str) -> Iterator[RunningPair]:
    """Our NameServer + master (one process) and slave, the slave on the master's HA port."""
    master = GatewayServers(root / "master", extra_config={"brokerRole": mode, "flushDiskType": args.flush})
    master.start()
    slave_proc = None
    try:
        slave_proc, slave = start_slave(root / "slave", master.namesrv_addr, args.flush)
        wait_for_link(master.broker_addr)
        assert master.proc is not None
        yield RunningPair(
            master.namesrv_addr,
            master.broker_addr,
            slave,
            master.proc.pid,
            slave_proc.pid,
            root / "master" / "store",
            root / "slave" / "store",
        )
    finally:
        _stop(slave_proc)
        master.stop()


@contextlib.contextmanager
def apache_pair(args: argparse.Namespace, root: Path, mode: str) -> Iterator[RunningPair]:
    """Apache's NameServer, master and slave (three JVMs, the brokers with ``--apache-heap``), as
    ``benchmarks.versus`` starts its single broker."""
    flush = args.flush
    pair = versus.start_apache(args.apache_home, root, {"brokerRole": mode, "flushDiskType": flush}, args.apache_heap)
    slave_proc = None
    try:
        slave_proc, slave = versus.start_apache_broker(
            args.apache_home,
            root,
            "slave",
            pair.namesrv,
            {"brokerId": "1", "brokerRole": "SLAVE", "flushDiskType": flush},
            args.apache_heap,
        )
        try:
            _wait_answering(pair.broker, pair.procs[1], "Apache's master")
            _wait_answering(slave, slave_proc, "Apache's slave")
            # Apache 4.9.8 has no GET_BROKER_HA_STATUS; its slave learns the master's HA address when it registers.
            rss.wait_registered(pair.namesrv, 60, broker_id=1)
        except (SetupError, SystemExit) as e:
            out = "".join(f.read_text(errors="replace")[-3000:] for f in sorted(root.glob("*.out")))
            raise SetupError(f"Apache's pair: {e}\n{out}") from None
        yield RunningPair(
            pair.namesrv, pair.broker, slave, pair.broker_pid, slave_proc.pid, root / "store", root / "slave" / "store"
        )
    finally:
        _stop(slave_proc)
        pair.stop()


def _load_args(args: argparse.Namespace, duration: float) -> argparse.Namespace:
    return throughput.parse_args(
        [
            "--no-drain",
            "--duration",
            str(duration),
            "--size",
            str(args.size),
            "--connections",
            str(args.connections),
            "--topic",
            "BenchmarkPair",
            "--create",
            "admin",
        ]
    )


def _row(
    mode: str,
    target: str,
    results: dict[str, Any],
    sampler: LagSampler,
    slave_cpu: float | None,
    identical: bool | None,
) -> dict[str, Any]:
    send = results["send"]
    rate = send["rate"]

    def per_10k(cores: float | None) -> float | None:
        return cores * 1e4 / rate if cores is not None and rate else None

    return {
        "mode": mode,
        "target": target,
        **throughput.send_summary(send),
        "master_cpu": send["broker_cpu"],
        "master_cpu_per_10k": per_10k(send["broker_cpu"]),
        "slave_cpu_per_10k": per_10k(slave_cpu),
        "lag": sampler.summary(),
        "identical": identical,
    }


def _sampled(args: argparse.Namespace, mode: str, target: str, pair: RunningPair) -> dict[str, Any]:
    """The measured send phase against a running pair, with the lag sampled and the slave's CPU."""
    sampler = LagSampler(pair.master, pair.slave)
    sampler.start()
    slave_cpu = throughput.CpuMeter(pair.slave_pid)
    slave_cpu.start()
    results = throughput.benchmark(_load_args(args, args.duration), pair.namesrv, pair.master_pid, f"{target} {mode}")
    slave_cpu.stop()
    sampler.stop_event.set()
    sampler.join()
    identical = None
    if pair.master_store is not None and pair.slave_store is not None:
        end = wait_caught_up(pair.master, pair.slave)
        start = first_segment(pair.slave_store)
        identical = commitlog_digest(pair.master_store, end, start) == commitlog_digest(pair.slave_store, end, start)
    return _row(mode, target, results, sampler, slave_cpu.broker, identical)


def measure(args: argparse.Namespace, target: str, mode: str) -> dict[str, Any]:
    """One mode on a fresh pair of ``target`` (ours or apache): warm-up, catch-up, then the measured sends."""
    root = Path(tempfile.mkdtemp(prefix=f"rmq-ha-bench-{target}-"))
    try:
        with (our_pair if target == "ours" else apache_pair)(args, root, mode) as pair:
            if args.warmup:  # Java compiles its hot paths in the first seconds: not what a running broker does
                with throughput.affinity_kept():
                    throughput.benchmark(_load_args(args, args.warmup), pair.namesrv, None, f"{target} warm-up")
            wait_caught_up(pair.master, pair.slave)
            with throughput.affinity_kept():
                row = _sampled(args, mode, target, pair)
            if args.java_producer and pair.master_pid is not None:
                row["java"] = versus.java_send(args, pair.namesrv, pair.master_pid)
            return row
    finally:
        shutil.rmtree(root, ignore_errors=True)


def measure_external(args: argparse.Namespace) -> dict[str, Any]:
    """A running pair (``--namesrv``, ``--master``, ``--slave``): send figures and lag, as ``--modes`` says it is."""
    pair = RunningPair(args.namesrv, args.master, args.slave, args.master_pid, None, None, None)
    return _sampled(args, args.modes, "external", pair)


def _slave_state(identical: bool | None) -> str:
    return "n/a " if identical is None else "same" if identical else "DIFFERS"


def _median(rows: list[dict[str, Any]], path: tuple[str, ...]) -> float | None:
    values = []
    for r in rows:
        for key in path:
            r = r.get(key) if r is not None else None
        if r is not None:
            values.append(r)
    return statistics.median(values) if values else None


_RATIOS = (
    (("rate",), "msgs/s"),
    (("p50_ms",), "p50"),
    (("p99_ms",), "p99"),
    (("master_cpu_per_10k",), "CPU"),
    (("java", "rate"), "Java msgs/s"),
    (("java", "producer_avg_rt_ms"), "RT"),
    (("java", "cpu_per_10k"), "CPU"),
)


def render(rows: list[dict[str, Any]]) -> str:
    """Every run's figures, then for each mode the medians of ours and Apache's and their ratios."""
    lines = [
        f"{'mode':13} {'target':7} {'msgs/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'CPU/10k m+s':>12} "
        f"{'lag p50/p90/max MB':>20}  slave  {'Java msgs/s, RT ms, CPU/10k':>27}"
    ]
    for r in rows:
        lag = r["lag"]
        cpu = "/".join(f"{r[k]:.2f}" if r[k] is not None else "-" for k in ("master_cpu_per_10k", "slave_cpu_per_10k"))
        java = r.get("java")
        java_text = (
            f"{java['rate']:8.0f}, {java['producer_avg_rt_ms'] or 0:5.2f}, {java['cpu_per_10k'] or 0:5.2f}"
            if java
            else ""
        )
        lines.append(
            f"{r['mode']:13} {r['target']:7} {r['rate']:8.0f} {r['p50_ms'] or 0:7.2f} {r['p99_ms'] or 0:7.2f} "
            f"{cpu:>12} {lag['p50_mb']:6.2f}/{lag['p90_mb']:5.2f}/{lag['max_mb']:6.2f}  "
            f"{_slave_state(r['identical'])}  {java_text:>27}"
        )
    modes = dict.fromkeys(r["mode"] for r in rows)
    if {r["target"] for r in rows} >= {"ours", "apache"}:
        lines.append("")
        lines.append("ours/Apache, medians (goal: rates >= 1.0; latency, RT and master CPU <= 1.0)")
        for mode in modes:
            ours = [r for r in rows if r["mode"] == mode and r["target"] == "ours"]
            apache = [r for r in rows if r["mode"] == mode and r["target"] == "apache"]
            parts = []
            for path, label in _RATIOS:
                a, b = _median(ours, path), _median(apache, path)
                if a is not None and b:
                    parts.append(f"{label} {a / b:.2f}")
            lines.append(f"  {mode:13} " + ", ".join(parts))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.ha_pair", description=__doc__.split("\n\n")[0])
    p.add_argument("--modes", default="ASYNC_MASTER,SYNC_MASTER")
    p.add_argument("--flush", choices=("ASYNC_FLUSH", "SYNC_FLUSH"), default="ASYNC_FLUSH")
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=5.0, help="seconds of unmeasured sends first (default 5)")
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--connections", type=int, default=16)
    p.add_argument("--apache-home", type=Path, help="an Apache RocketMQ 4.9.8 distribution: its pairs too")
    p.add_argument("--apache-heap", default="1g", help="Apache brokers' -Xms/-Xmx (default 1g)")
    p.add_argument("--rounds", type=int, default=1, help="rounds, the order of the targets alternating (default 1)")
    p.add_argument("--no-java-producer", dest="java_producer", action="store_false", help="skip Apache's Producer")
    p.add_argument("--java-threads", type=int, default=16, help="the Java Producer's threads (default 16)")
    p.add_argument("--java-warmup", type=float, default=8.0, help="seconds before the Java window (default 8)")
    p.add_argument("--namesrv", help="a running pair's NameServer (with --master, --slave; --modes names its mode)")
    p.add_argument("--master", help="HOST:PORT of the running master")
    p.add_argument("--slave", help="HOST:PORT of the running slave")
    p.add_argument("--master-pid", type=int, help="pid of the running master, for its CPU use")
    p.add_argument("--save", metavar="JSON")
    args = p.parse_args(argv)
    if args.namesrv and not (args.master and args.slave and "," not in args.modes):
        p.error("--namesrv needs --master, --slave and the pair's one mode in --modes")
    if args.apache_home is None:
        args.java_producer = False
    elif not list((args.apache_home / "lib").glob("*.jar")):
        p.error(f"--apache-home: no jars in {args.apache_home / 'lib'}")
    targets = ["ours", "apache"] if args.apache_home else ["ours"]
    rows = []
    try:
        if args.namesrv:
            rows.append(measure_external(args))
        for i in range(0 if args.namesrv else args.rounds):
            for mode in args.modes.split(","):
                for target in targets if i % 2 == 0 else targets[::-1]:
                    print(f"--- round {i + 1}: {target} {mode}", flush=True)
                    rows.append(measure(args, target, mode))
    except SetupError as e:
        print(f"benchmark failed: {e}", file=sys.stderr)
        return 2
    print()
    print(f"{platform.node()}, {os.cpu_count()} cores, {datetime.datetime.now():%F %T}, {args.flush}")
    print(render(rows))
    if args.save:
        Path(args.save).write_text(json.dumps(rows, indent=2) + "\n")
    clean = all(
        r["identical"] is not False and not r["errors"] and not r.get("java", {}).get("producer_failed") for r in rows
    )
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
