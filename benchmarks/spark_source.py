"""Rows per second of the ``rocketmq`` Spark data source reading a backlog, beside the raw drain rate of
the same broker (benchmarks/throughput.py's pipelined pulls) in the same run.

    python -m benchmarks.spark_source                          # our servers, 1M messages of 1 KB, local[2]
    python -m benchmarks.spark_source --messages 200000        # a quicker run
    python -m benchmarks.spark_source --namesrv 127.0.0.1:9876 # a running cluster (Apache's too)
    python -m benchmarks.spark_source --standalone             # also on Spark's standalone cluster: 1 and 2 executors

Phase 1 fills a topic with ``--messages`` messages (throughput.py's send phase) and drains it with raw
pipelined pulls ``--repeat`` times, keeping the best: the rate a client without Spark gets. Phase 2 reads
the same backlog with ``spark.read.format("rocketmq")`` into Spark's ``noop`` sink (every row made, nothing written), on
``--master`` (default ``local[2]``), ``--repeat`` times; the best run is reported with its ratio to the
drain. The goal: at least 0.5x of the drain. With ``--standalone`` the same reads then run on Spark's own standalone
master and one worker of ``--worker-cores`` cores started on loopback (compat_tests/spark_cluster.py), with
executors of one core each, ``--executors`` of them at a time (default 1 and 2, the order alternating by round;
each round reads twice per session and the best read counts).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.throughput import benchmark, parse_args
from compat_tests.servers import GatewayServers
from compat_tests.spark_cluster import StandaloneCluster

ROOT = Path(__file__).resolve().parents[1]  # on the executors' PYTHONPATH


def spark_read(
    namesrv: str, topic: str, master: str, repeat: int, conf: dict[str, str] | None = None
) -> list[dict[str, float]]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from spark import RocketMQDataSource

    spark = (
        SparkSession.builder.master(master)
        .appName("rocketmq-source-benchmark")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config(map=conf or {})
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(RocketMQDataSource)
    runs = []
    try:
        for _ in range(repeat):
            df = spark.read.format("rocketmq").option("namesrvAddr", namesrv).option("topic", topic).load()
            started = time.perf_counter()
            df.write.format("noop").mode("overwrite").save()
            seconds = time.perf_counter() - started
            rows = df.count()
            runs.append({"rows": rows, "seconds": seconds, "rate": rows / seconds})
            print(f"  spark read: {rows} rows in {seconds:.2f} s = {rows / seconds:,.0f} rows/s", flush=True)
    finally:
        spark.stop()
    return runs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.spark_source", description=__doc__.split("\n\n")[0])
    p.add_argument("--namesrv", help="a running NameServer; default: start our servers (temporary store)")
    p.add_argument("--topic", default="BenchmarkSparkSource")
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--queues", type=int, default=8)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--standalone", action="store_true", help="also read on a standalone master + worker on loopback")
    p.add_argument("--worker-cores", type=int, default=2, help="with --standalone: the worker's cores")
    p.add_argument("--executors", default="1,2", help="with --standalone: executor counts (1 core each) to compare")
    p.add_argument("--save", metavar="JSON")
    args = p.parse_args(argv)
    with contextlib.ExitStack() as stack:
        namesrv, pid, target = args.namesrv, None, f"namesrv {args.namesrv}"
        if namesrv is None:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="rmq-spark-bench-"))
            servers = GatewayServers(Path(tmp)).start()
            stack.callback(servers.stop)
            namesrv, pid, target = servers.namesrv_addr, servers.proc.pid, "rocketmq-gateway"  # type: ignore[union-attr]
        fill = parse_args([
            "--namesrv", namesrv, "--topic", args.topic, "--messages", str(args.messages), "--size", str(args.size),
            "--queues", str(args.queues), "--duration", "3600", "--timeout", "600", "--drain-repeat", str(args.repeat),
        ])  # fmt: skip
        raw = benchmark(fill, namesrv, pid, target)
        drain = raw["drain"]
        print(f"  raw drain: {drain['messages']} messages in {drain['seconds']:.2f} s = {drain['rate']:,.0f} msgs/s")
        runs = spark_read(namesrv, args.topic, args.master, args.repeat)
        cluster = standalone(stack, args, namesrv) if args.standalone else {}
    best = max(runs, key=lambda r: r["rate"])
    ratio = best["rate"] / drain["rate"] if drain["rate"] else 0.0
    results: dict[str, Any] = {
        "target": target,
        "messages": args.messages,
        "size": args.size,
        "queues": args.queues,
        "master": args.master,
        "drain_rate": drain["rate"],
        "spark_runs": runs,
        "spark_rate": best["rate"],
        "ratio": ratio,
    }
    print(
        f"\n{target}, {args.messages} x {args.size} B over {args.queues} queues, Spark {args.master}:\n"
        f"  raw drain   {drain['rate']:>12,.0f} msgs/s\n"
        f"  data source {best['rate']:>12,.0f} rows/s   {ratio:.2f}x of the drain (goal >= 0.50x)"
    )
    if cluster:
        results["standalone"] = {str(n): {"runs": r, "rate": max(x["rate"] for x in r)} for n, r in cluster.items()}
        print(f"  standalone, 1 worker of {args.worker_cores} cores:")
        for n, row in results["standalone"].items():
            print(f"    {n} executor(s) {row['rate']:>10,.0f} rows/s   {row['rate'] / drain['rate']:.2f}x of the drain")
    if args.save:
        Path(args.save).write_text(json.dumps(results, indent=2) + "\n")
    every = runs + [r for rs in cluster.values() for r in rs]
    return 0 if all(r["rows"] >= args.messages for r in every) else 1


def standalone(stack: contextlib.ExitStack, args: argparse.Namespace, namesrv: str) -> dict[int, list[Any]]:
    """The reads on a standalone master + worker started for them, per executor count, rounds alternating."""
    root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rmq-spark-cluster-")))
    cluster = StandaloneCluster(root, cores=args.worker_cores, pythonpath=[str(ROOT)]).start()
    stack.callback(cluster.stop)
    counts = [int(n) for n in args.executors.split(",")]
    found: dict[int, list[dict[str, float]]] = {n: [] for n in counts}
    for round_ in range(args.repeat):
        for n in counts if round_ % 2 == 0 else counts[::-1]:
            print(f"  standalone, {n} executor(s) of 1 core:", flush=True)
            conf = {"spark.executor.cores": "1", "spark.cores.max": str(n), "spark.executor.memory": "512m"}
            # Two reads a session: the first also starts the executors and their Python workers.
            found[n] += spark_read(namesrv, args.topic, cluster.master_url, 2, conf)
    return found


if __name__ == "__main__":
    sys.exit(main())
