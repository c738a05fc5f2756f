"""Send throughput of our cluster with one broker process and with several on the same CPUs: how the design
uses more cores (one broker process per core, each its own broker group, as RocketMQ clusters scale out).

    python -m benchmarks.scale_out                              # 1 and 2 broker processes, 2 rounds, all CPUs
    python -m benchmarks.scale_out --brokers 4 --broker-cpus 0-3 --generator-cpus 4-7 --procs 2

Each round starts our NameServer and N broker processes (broker-a, broker-b...: one cluster, a store each) on
loopback, pins every broker thread to ``--broker-cpus``, creates the topic on every broker (8 queues each, as
``mqadmin updateTopic -c`` does), sends ``--warmup`` seconds unmeasured, then measures the send phase of
``benchmarks.throughput`` (16 connections x 4 in flight, 1 KB), whose generator spreads its sends over every queue
of the route, the way a client's default queue selector does. The order of the counts alternates by round; it
prints the medians and each count's rate over the one-broker rate.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import rss, throughput
from .wire import SetupError, masters

TOPIC = "BenchmarkScaleOut"


def measure(args: argparse.Namespace, brokers: int) -> dict[str, Any]:
    """One cluster of ``brokers`` broker processes: the figures of its measured send phase."""
    root = Path(tempfile.mkdtemp(prefix=f"rmq-scale-{brokers}-"))
    procs, namesrv, _ = rss.start_ours(root, brokers=brokers)
    pair = rss.Pair("ours", namesrv, "", procs)
    try:
        deadline = time.monotonic() + 60
        while len(_registered(namesrv)) < brokers:
            if time.monotonic() > deadline:
                raise SetupError(f"{brokers} brokers did not register in time")
            time.sleep(0.2)
        cpus = throughput.parse_cpus(args.broker_cpus) if args.broker_cpus else None
        if cpus:
            for proc in procs[1:]:
                throughput.pin(proc.pid, cpus)
        argv = ["--namesrv", namesrv, "--topic", TOPIC, "--create", "admin", "--no-drain", "--procs", str(args.procs),
                "--messages", str(args.messages)]  # fmt: skip
        if args.generator_cpus:
            argv += ["--generator-cpus", args.generator_cpus]
        label = f"{brokers} broker process(es)"
        with throughput.affinity_kept():
            for seconds in [args.warmup, args.duration] if args.warmup else [args.duration]:  # the last one counts
                phase = throughput.parse_args([*argv, "--duration", str(seconds)])
                run = throughput.benchmark(phase, namesrv, None, label)
        send = throughput.send_summary(run["send"])
        if send["errors"]:
            raise SetupError(f"{label}: send errors {send['errors']}")
        # How much of the machine the brokers and the generator left idle: what a broker could still grow into.
        return {"brokers": brokers, **send, **throughput.cores_used(run["send"])}
    finally:
        pair.stop()
        shutil.rmtree(root, ignore_errors=True)


def _registered(namesrv: str) -> list[str]:
    try:
        return masters(namesrv)
    except (OSError, SetupError):
        return []


def render(results: dict[int, list[dict[str, Any]]]) -> str:
    """Medians per broker count, and their rates over the one-broker rate."""
    base = statistics.median(r["rate"] for r in results[1])
    lines = ["brokers    msgs/s  p50 ms  p99 ms  over 1 broker"]
    for count, rows in sorted(results.items()):
        rate = statistics.median(r["rate"] for r in rows)
        p50 = statistics.median(r["p50_ms"] for r in rows)
        p99 = statistics.median(r["p99_ms"] for r in rows)
        lines.append(f"{count:7d}  {rate:8.0f}  {p50:6.2f}  {p99:6.2f}  {rate / base:12.2f}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.scale_out", description=__doc__.split("\n\n")[0])
    p.add_argument("--brokers", type=int, default=2, help="broker processes of the larger cluster (default 2)")
    p.add_argument("--rounds", type=int, default=2, help="rounds, the order alternating (default 2)")
    p.add_argument("--duration", type=float, default=10.0, help="seconds of each send phase (default 10)")
    p.add_argument("--warmup", type=float, default=3.0, help="seconds of unmeasured sends first (default 3)")
    p.add_argument("--messages", type=int, default=1_000_000, help="send phase limit in messages")
    p.add_argument("--procs", type=int, default=1, help="generator processes (default 1)")
    p.add_argument("--broker-cpus", help="pin every broker to these CPUs, e.g. 0-1 (default: not pinned)")
    p.add_argument("--generator-cpus", help="pin the generator to these CPUs")
    p.add_argument("--save", metavar="JSON", help="write every round's figures here")
    args = p.parse_args(argv)
    if args.brokers < 2:
        p.error("--brokers: at least 2 (one broker is the baseline)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    results: dict[int, list[dict[str, Any]]] = {1: [], args.brokers: []}
    try:
        for i in range(args.rounds):
            for count in (1, args.brokers) if i % 2 == 0 else (args.brokers, 1):
                print(f"--- round {i + 1}: {count} broker process(es)", flush=True)
                results[count].append(measure(args, count))
    except SetupError as e:
        print(f"benchmark failed: {e}", file=sys.stderr)
        return 2
    print()
    print(render(results))
    if args.save:
        Path(args.save).write_text(json.dumps({"options": vars(args), "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
