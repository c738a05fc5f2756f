"""Send throughput of a master/slave pair (ASYNC_MASTER, SYNC_MASTER) and how far the slave lags.

For each mode it starts our NameServer + master (``python -m gateway``) and a slave (``python -m
gateway.broker``) on a temporary store, runs the send phase of ``benchmarks.throughput`` against the
master (16 connections, 1 KB by default), samples both brokers' commitLogMaxOffset every 100 ms
(GET_BROKER_RUNTIME_INFO) for the slave's lag, then checks that the slave caught up byte-identical
(sha256 of the commitlog files). ``--namesrv`` with ``--master``/``--slave`` measures a running pair
instead (an Apache one, built outside the repository), so both can be measured in one run.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from compat_tests.servers import GatewayServers, call, free_port
from gateway.remoting import fastjson
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand

from . import throughput
from .wire import SetupError

# Apache 4.9.8 pairs on this machine class, measured with --namesrv on 2026-11-26 (benchmarks/README.md).
APACHE_REFERENCE = {
    "ASYNC_MASTER": "17.2k msgs/s (2026-11-26)",
    "SYNC_MASTER": "15.3k msgs/s (2026-11-26)",
}


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


def commitlog_digest(store: Path, end: int) -> str:
    """sha256 of the first ``end`` bytes of the commitlog under the store root ``store``, read from its files."""
    h = hashlib.sha256()
    left = end
    for segment in sorted((store / "commitlog").iterdir()):
        if left <= 0:
            break
        with open(segment, "rb") as f:
            chunk = f.read(left)
        h.update(chunk)
        left -= len(chunk)
    return h.hexdigest()


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
    deadline = time.monotonic() + 30
    while True:
        try:
            max_offset(addr)
            return proc, addr
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise SetupError("the slave did not start") from None
            time.sleep(0.2)


def _load_args(args: argparse.Namespace) -> argparse.Namespace:
    return throughput.parse_args(
        [
            "--no-drain",
            "--duration",
            str(args.duration),
            "--size",
            str(args.size),
            "--connections",
            str(args.connections),
        ]
    )


def _row(mode: str, results: dict[str, Any], sampler: LagSampler, identical: bool | None) -> dict[str, Any]:
    send = results["send"]
    return {
        "mode": mode,
        **throughput.send_summary(send),
        "master_cpu": send["broker_cpu"],
        "lag": sampler.summary(),
        "identical": identical,
    }


def wait_for_link(master: str, timeout: float = 30.0) -> None:
    """Until the master has a slave on its HA port (GET_BROKER_HA_STATUS), so that no send of a SYNC_MASTER
    is answered SLAVE_NOT_AVAILABLE for want of it."""
    deadline = time.monotonic() + timeout
    while True:
        resp = call(master, RemotingCommand.request(RequestCode.GET_BROKER_HA_STATUS), 3)
        if fastjson.loads(resp.body).get("haConnectionInfo"):
            return
        if time.monotonic() > deadline:
            raise SetupError("the slave never connected to the master's HA port")
        time.sleep(0.1)


def measure_external(args: argparse.Namespace) -> dict[str, Any]:
    """A running pair (``--namesrv``, ``--master``, ``--slave``): send figures and lag, as ``--mode`` says it is."""
    sampler = LagSampler(args.master, args.slave)
    sampler.start()
    results = throughput.benchmark(_load_args(args), args.namesrv, args.master_pid, f"pair at {args.namesrv}")
    sampler.stop_event.set()
    sampler.join()
    return _row(args.modes, results, sampler, None)


def measure(args: argparse.Namespace, mode: str) -> dict[str, Any]:
    """One mode on our own pair: send figures, lag, and whether the slave ended byte-identical."""
    targs = _load_args(args)
    with tempfile.TemporaryDirectory(prefix="rmq-ha-bench-") as tmp:
        root = Path(tmp)
        master = GatewayServers(root / "master", extra_config={"brokerRole": mode, "flushDiskType": args.flush})
        master.start()
        slave_proc = None
        try:
            slave_proc, slave = start_slave(root / "slave", master.namesrv_addr, args.flush)
            wait_for_link(master.broker_addr)
            sampler = LagSampler(master.broker_addr, slave)
            sampler.start()
            results = throughput.benchmark(targs, master.namesrv_addr, master.proc.pid, f"rocketmq-gateway {mode}")
            sampler.stop_event.set()
            sampler.join()
            end = max_offset(master.broker_addr)
            deadline = time.monotonic() + 60
            while max_offset(slave) != end and time.monotonic() < deadline:
                time.sleep(0.1)
            identical = commitlog_digest(root / "master" / "store", end) == commitlog_digest(
                root / "slave" / "store", end
            )
        finally:
            if slave_proc is not None:
                slave_proc.terminate()
                slave_proc.wait(30)
            master.stop()
    return _row(mode, results, sampler, identical)


def _slave_state(identical: bool | None) -> str:
    return "n/a " if identical is None else "same" if identical else "DIFFERS"


def render(rows: list[dict[str, Any]], baseline: dict[str, Any]) -> str:
    lines = [f"{'mode':14} {'msgs/s':>9} {'p50 ms':>7} {'p99 ms':>7} {'lag p50/p90/max MB':>20}  slave  vs"]
    for r in rows:
        lag = r["lag"]
        base = baseline.get(r["mode"], {}).get("rate")
        ratio = f"{r['rate'] / base:.2f}x" if base else APACHE_REFERENCE.get(r["mode"], "")
        lines.append(
            f"{r['mode']:14} {r['rate']:9.0f} {r['p50_ms'] or 0:7.2f} {r['p99_ms'] or 0:7.2f} "
            f"{lag['p50_mb']:6.2f}/{lag['p90_mb']:5.2f}/{lag['max_mb']:6.2f}  "
            f"{_slave_state(r['identical'])}  {ratio}"
        )
    if not baseline:
        lines.append("(vs: Apache 4.9.8 reference figures, not measured in this run; --compare a saved run for ratios)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.ha_pair", description=__doc__.split("\n\n")[0])
    p.add_argument("--modes", default="ASYNC_MASTER,SYNC_MASTER")
    p.add_argument("--flush", choices=("ASYNC_FLUSH", "SYNC_FLUSH"), default="ASYNC_FLUSH")
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--connections", type=int, default=16)
    p.add_argument("--namesrv", help="a running pair's NameServer (with --master, --slave; --modes names its mode)")
    p.add_argument("--master", help="HOST:PORT of the running master")
    p.add_argument("--slave", help="HOST:PORT of the running slave")
    p.add_argument("--master-pid", type=int, help="pid of the running master, for its CPU use")
    p.add_argument("--save", metavar="JSON")
    p.add_argument("--compare", metavar="JSON", help="ratios against a run saved with --save (e.g. an Apache pair)")
    args = p.parse_args(argv)
    baseline = {r["mode"]: r for r in json.loads(Path(args.compare).read_text())} if args.compare else {}
    if args.namesrv and not (args.master and args.slave and "," not in args.modes):
        p.error("--namesrv needs --master, --slave and the pair's one mode in --modes")
    try:
        rows = [measure_external(args)] if args.namesrv else [measure(args, m) for m in args.modes.split(",")]
    except SetupError as e:
        print(f"benchmark failed: {e}", file=sys.stderr)
        return 2
    print(render(rows, baseline))
    if args.save:
        Path(args.save).write_text(json.dumps(rows, indent=2) + "\n")
    return 0 if all(r["identical"] is not False and not r["errors"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
