"""Rows per second of ``df.write.format("rocketmq")`` beside the project's own producer benchmark
(benchmarks/throughput.py's send phase) against the same broker, in the same run, alternating.

    python -m benchmarks.spark_sink                          # our servers, 200,000 rows of 1 KB, local[2]
    python -m benchmarks.spark_sink --rows 50000 --repeat 3  # quicker, more rounds
    python -m benchmarks.spark_sink --exactly-once           # also deliveryGuarantee=exactly-once

Each round runs throughput.py's send phase (``--rows`` SEND_MESSAGE_V2 of ``--size`` bytes, 16 connections x
4 in flight, no drain) and then writes as many rows of the same size with the sink (``--partitions`` tasks,
a new topic each time), then, with ``--exactly-once``, the same write exactly-once. The best of
``--repeat`` rounds of each is printed with the sink's ratio to the producer benchmark (and the
exactly-once write's to the at-least-once one).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.spark_source import servers_unless_given, spark_session
from benchmarks.throughput import benchmark, parse_args


def spark_write(spark: Any, namesrv: str, topic: str, args: argparse.Namespace, guarantee: str) -> dict[str, float]:
    """One write of ``args.rows`` rows of ``args.size``-byte bodies (made by Spark in the same job)."""
    columns = [f"unhex(concat(lpad(hex(id), 16, '0'), repeat('5a', {args.size - 8}))) AS body"]
    if args.keys:
        columns.append(f"CAST(id % {args.keys} AS STRING) AS shardingKey")
    df = spark.range(0, args.rows, 1, args.partitions).selectExpr(*columns)
    started = time.perf_counter()
    (
        df.write.format("rocketmq")
        .option("namesrvAddr", namesrv)
        .option("topic", topic)
        .option("batchSize", str(args.batch_size))
        .option("deliveryGuarantee", guarantee)
        .mode("append")
        .save()
    )
    seconds = time.perf_counter() - started
    rate = args.rows / seconds
    print(f"  spark write ({guarantee}): {args.rows} rows in {seconds:.2f} s = {rate:,.0f} rows/s", flush=True)
    return {"rows": args.rows, "seconds": seconds, "rate": rate}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.spark_sink", description=__doc__.split("\n\n")[0])
    p.add_argument("--namesrv", help="a running NameServer; default: start our servers (temporary store)")
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--size", type=int, default=1024, help="body bytes (at least 16)")
    p.add_argument("--queues", type=int, default=8)
    p.add_argument("--partitions", type=int, default=2, help="write tasks")
    p.add_argument("--batch-size", type=int, default=128, help="the sink's batchSize (default 128)")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--keys", type=int, default=0, help="rows carry this many sharding keys (default: none)")
    p.add_argument("--exactly-once", action="store_true", help="also write with deliveryGuarantee=exactly-once")
    p.add_argument("--save", metavar="JSON")
    args = p.parse_args(argv)
    if args.rows < 1 or args.size < 16 or args.repeat < 1 or args.partitions < 1:
        p.error("--rows, --repeat and --partitions must be at least 1, --size at least 16")
    guarantees = ["at-least-once"] + (["exactly-once"] if args.exactly_once else [])
    runs: dict[str, list[dict[str, float]]] = {"producer": [], **{g: [] for g in guarantees}}
    with contextlib.ExitStack() as stack:
        namesrv, pid, target = servers_unless_given(stack, args.namesrv)
        spark = spark_session(args.master, "rocketmq-sink-benchmark")
        stack.callback(spark.stop)
        warm = argparse.Namespace(**{**vars(args), "rows": 1000})
        spark_write(spark, namesrv, "BenchmarkSinkWarmUp", warm, "at-least-once")  # Python workers started
        for round_ in range(args.repeat):
            fill = parse_args([
                "--namesrv", namesrv, "--topic", f"BenchmarkSinkProducer{round_}", "--messages", str(args.rows),
                "--size", str(args.size), "--queues", str(args.queues), "--duration", "3600", "--no-drain",
            ])  # fmt: skip
            send = benchmark(fill, namesrv, pid, target)["send"]
            print(f"  producer benchmark: {send['messages']} messages at {send['rate']:,.0f} msgs/s", flush=True)
            runs["producer"].append({"rows": send["messages"], "seconds": send["seconds"], "rate": send["rate"]})
            for g in guarantees:
                topic = f"BenchmarkSink{g.title().replace('-', '')}{round_}"
                runs[g].append(spark_write(spark, namesrv, topic, args, g))
    best = {name: max(r["rate"] for r in rs) for name, rs in runs.items()}
    print(
        f"\n{target}, {args.rows} x {args.size} B, {args.partitions} write tasks on Spark {args.master}, "
        f"batchSize {args.batch_size} (best of {args.repeat}):\n"
        f"  producer benchmark   {best['producer']:>10,.0f} msgs/s\n"
        f"  sink, at-least-once  {best['at-least-once']:>10,.0f} rows/s   "
        f"{best['at-least-once'] / best['producer']:.2f}x of the producer benchmark"
    )
    if "exactly-once" in best:
        print(
            f"  sink, exactly-once   {best['exactly-once']:>10,.0f} rows/s   "
            f"{best['exactly-once'] / best['at-least-once']:.2f}x of at-least-once"
        )
    if args.save:
        results = {"target": target, "options": vars(args), "runs": runs, "best": best}
        Path(args.save).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
