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

``--pure`` also reads with the Python decoder (the fallback where spark/_columns.c is not built), taking turns
with the C one in the same Spark session, so the two rates are comparable. Each read reports the CPU a row
cost Spark's JVM and its Python workers (their processes' CPU, on this machine: local masters only).
``--min-partitions`` passes the source's ``minPartitions``.
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

from benchmarks.throughput import _proc_cpu, benchmark, parse_args
from compat_tests.servers import GatewayServers
from compat_tests.spark_cluster import StandaloneCluster

ROOT = Path(__file__).resolve().parents[1]  # on the executors' PYTHONPATH

PURE_ENV = "ROCKETMQ_GATEWAY_PURE_PYTHON"


def _tree_cpu(pid: int) -> float:
    """CPU seconds used so far by process ``pid`` and its live descendants (Spark's JVM, its Python workers)."""
    parents = {}
    for entry in os.listdir("/proc"):
        with contextlib.suppress(OSError, ValueError):
            parents[int(entry)] = int(Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()[1])
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(child for child, parent in parents.items() if parent == p)
    return sum(_proc_cpu(p) or 0.0 for p in tree)


def _register_pure(spark: Any, source: type) -> str:
    """The source again as ``rocketmq_pure``, whose Python workers keep to the Python decoder: a Python data
    source carries the environment its context had when it was registered, and other workers serve it."""
    pure = type("PureRocketMQDataSource", (source,), {"name": classmethod(lambda cls: "rocketmq_pure")})
    env = spark.sparkContext.environment
    env[PURE_ENV] = "1"
    try:
        spark.dataSource.register(pure)
    finally:
        del env[PURE_ENV]
    return "rocketmq_pure"


def servers_unless_given(stack: contextlib.ExitStack, namesrv: str | None) -> tuple[str, int | None, str]:
    """(NameServer address, broker pid, label): ``namesrv`` as given, else our servers on a temporary store,
    stopped when ``stack`` closes."""
    if namesrv is not None:
        return namesrv, None, f"namesrv {namesrv}"
    tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="rmq-spark-bench-"))
    servers = GatewayServers(Path(tmp)).start()
    stack.callback(servers.stop)
    return servers.namesrv_addr, servers.proc.pid, "rocketmq-gateway"  # type: ignore[union-attr]


def spark_session(master: str, app: str, conf: dict[str, str] | None = None) -> Any:
    """A quiet SparkSession on ``master`` with the ``rocketmq`` source registered; workers run this Python."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from spark import RocketMQDataSource

    spark = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config(map=conf or {})
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(RocketMQDataSource)
    return spark


def spark_read(
    namesrv: str,
    topic: str,
    master: str,
    repeat: int,
    pure: bool = False,
    min_partitions: int | None = None,
    conf: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    from spark import RocketMQDataSource

    spark = spark_session(master, "rocketmq-source-benchmark", conf)
    sources = ["rocketmq"] + ([_register_pure(spark, RocketMQDataSource)] if pure else [])
    jvm = spark.sparkContext._gateway.proc.pid  # type: ignore[union-attr]
    local = master.startswith("local")
    runs = []
    try:
        for _ in range(repeat):
            for source in sources:  # in turns, so that both see the same machine
                df = spark.read.format(source).option("namesrvAddr", namesrv).option("topic", topic)
                df = (df.option("minPartitions", str(min_partitions)) if min_partitions else df).load()
                cpu, started = _tree_cpu(jvm), time.perf_counter()
                df.write.format("noop").mode("overwrite").save()
                seconds, cpu = time.perf_counter() - started, _tree_cpu(jvm) - cpu
                rows = df.count()
                us = cpu / rows * 1e6 if rows and local else 0.0  # executors elsewhere are not the JVM's children
                runs.append({"source": source, "rows": rows, "seconds": seconds, "rate": rows / seconds, "cpu_us": us})
                print(
                    f"  spark read ({source}): {rows} rows in {seconds:.2f} s = {rows / seconds:,.0f} rows/s"
                    + (f", {us:.1f} us CPU a row (JVM and Python workers)" if local else ""),
                    flush=True,
                )
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
    p.add_argument("--pure", action="store_true", help="also read with the Python decoder, in turns with C")
    p.add_argument("--min-partitions", type=int, help="the source's minPartitions (default: one per queue)")
    args = p.parse_args(argv)
    if args.min_partitions is not None and args.min_partitions < 1:
        p.error("--min-partitions must be at least 1")
    with contextlib.ExitStack() as stack:
        namesrv, pid, target = servers_unless_given(stack, args.namesrv)
        fill = parse_args([
            "--namesrv", namesrv, "--topic", args.topic, "--messages", str(args.messages), "--size", str(args.size),
            "--queues", str(args.queues), "--duration", "3600", "--timeout", "600", "--drain-repeat", str(args.repeat),
        ])  # fmt: skip
        raw = benchmark(fill, namesrv, pid, target)
        drain = raw["drain"]
        print(f"  raw drain: {drain['messages']} messages in {drain['seconds']:.2f} s = {drain['rate']:,.0f} msgs/s")
        runs = spark_read(namesrv, args.topic, args.master, args.repeat, args.pure, args.min_partitions)
        cluster = standalone(stack, args, namesrv) if args.standalone else {}
    best = max((r for r in runs if r["source"] == "rocketmq"), key=lambda r: r["rate"])
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
        "cpu_us": best["cpu_us"],
    }
    print(
        f"\n{target}, {args.messages} x {args.size} B over {args.queues} queues, Spark {args.master}:\n"
        f"  raw drain   {drain['rate']:>12,.0f} msgs/s\n"
        f"  data source {best['rate']:>12,.0f} rows/s   {ratio:.2f}x of the drain (goal >= 0.50x),"
        f" {best['cpu_us']:.1f} us CPU a row"
    )
    if args.pure:
        slow = max((r for r in runs if r["source"] != "rocketmq"), key=lambda r: r["rate"])
        results.update(pure_rate=slow["rate"], pure_ratio=slow["rate"] / drain["rate"], pure_cpu_us=slow["cpu_us"])
        print(
            f"  pure Python {slow['rate']:>12,.0f} rows/s   {results['pure_ratio']:.2f}x of the drain,"
            f" {slow['cpu_us']:.1f} us CPU a row; C reads {best['rate'] / slow['rate']:.2f}x as fast"
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
            found[n] += spark_read(
                namesrv, args.topic, cluster.master_url, 2, min_partitions=args.min_partitions, conf=conf
            )
    return found


if __name__ == "__main__":
    sys.exit(main())
