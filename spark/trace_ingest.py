"""Ingest the message-trace topic into Parquet and write a latency report.

    python -m spark.trace_ingest --namesrv 127.0.0.1:9876 --out traces-out
    python -m spark.trace_ingest --namesrv 127.0.0.1:9876 --out traces-out --stream   # until Ctrl-C

reads RMQ_SYS_TRACE_TOPIC (``--topic`` for a custom one) from the brokers with the ``rocketmq`` data
source and writes:

* ``OUT/traces/``: one row per trace record (Pub, SubBefore, SubAfter, EndTransaction, Recall), Parquet
  partitioned by ``date`` (UTC) and traced ``topic`` (consume records take the topic of their message's
  Pub; one whose Pub was never seen goes under ``topic=__unknown__``); records that do not parse go to
  ``OUT/errors/`` with the id of the trace message that carried them.
* ``OUT/report/``: ``summary.txt`` (also printed), ``latency.csv`` (store-to-consume latency p50/p95/p99
  and consume cost per topic and consumer group, failed consumptions, retries), ``never_consumed.csv``
  (published, consumed by no group, not rolled back or recalled), ``transactions.csv``, and ``latency.png`` (the
  latency distribution per topic).

The store time of a message is taken as the trace's estimate (Pub timestamp + costTime / 2, as the Java
client's TraceBean.storeTime); latency is measured to the first delivery's SubBefore.

Trace records are written once each: a trace message the client's trace dispatcher sent again, or a record
carried by two trace messages, adds no row (records are the same when their trace type, msgId, group, request
id, timestamp, offsetMsgId and transaction state are). Records come from every client that writes the trace
topic: ours, the Java 4.x and 5.x remoting clients (Recall records too; CLOUD-channel SubAfters without
timestamp and group).

A stream remembers the records of the last ``--dedup-window`` (in its checkpoint) to drop their copies.

With ``--stream`` the topic is read as a stream with a checkpoint in ``OUT/_checkpoint`` (a restarted job
goes on where it stopped); ``--available-now`` reads what is there and stops. ``--master`` runs on a
cluster (default ``local[*]``, or spark-submit's master), ``--py-files`` ships this project's code to executors
on nodes that do not have it installed, ``--conf KEY=VALUE`` sets Spark properties; ``OUT`` must then be a folder
every node and the driver share.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from gateway.remoting.names import TRACE_TOPIC

from . import queues as rq
from .trace_parser import RECORD_ID, TRACE_SCHEMA, arrow_mapper

UNKNOWN_TOPIC = "__unknown__"
TYPES = ("Pub", "SubBefore", "SubAfter", "EndTransaction", "Recall")
DEDUP_WINDOW = "10 minutes"


def session(
    master: str | None,
    app: str = "rocketmq-trace-ingest",
    py_files: str | None = None,
    conf: dict[str, str] | None = None,
) -> Any:
    """A SparkSession with the ``rocketmq`` source registered; workers run this Python. ``master`` None: the one
    spark-submit was given, else ``local[*]``; ``py_files``: files (a zip of this project) shipped to executors;
    ``conf``: Spark properties, set last."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from .datasource import RocketMQDataSource

    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:  # not started by spark-submit
        master = "local[*]"
    builder = SparkSession.builder.appName(app).config("spark.ui.showConsoleProgress", "true")
    if master:
        builder = builder.master(master)
    if py_files:
        builder = builder.config("spark.submit.pyFiles", py_files)
    if master and master.startswith("local"):  # a report's joins on one machine: 200 shuffle tasks are overhead
        builder = builder.config("spark.sql.shuffle.partitions", "8")
    spark = builder.config("spark.sql.session.timeZone", "UTC").config(map=conf or {}).getOrCreate()
    spark.dataSource.register(RocketMQDataSource)
    return spark


def source_options(args: argparse.Namespace) -> dict[str, str]:
    """The data source's options for the command line's."""
    options = {"namesrvAddr": args.namesrv, "topic": args.topic, "startingOffsets": "earliest"}
    if args.access_key:
        options.update(accessKey=args.access_key, secretKey=args.secret_key)
    if args.tls:
        options["tls.enable"] = "true"
    return options


def parse(messages: Any, dedup_window: str | None = None) -> Any:
    """Trace messages (``msgId``, ``body``) into TRACE_COLUMNS rows (records and errors), each record once
    (RECORD_ID) and each error once per trace message. A stream keeps what it has seen for ``dedup_window`` of
    processing time (a watermark on when a row was read, not on the record's own time: clients' clocks differ
    and queues are read unevenly, so an event-time watermark would drop records as late)."""
    from pyspark.sql import functions as F

    parsed = messages.select("msgId", "body").mapInArrow(arrow_mapper, TRACE_SCHEMA)
    key = [*RECORD_ID, "error", "errorIn"]
    parsed = parsed.withColumn("errorIn", F.when(F.col("error").isNotNull(), F.col("traceMsgId")))
    if dedup_window is None:
        parsed = parsed.dropDuplicates(key)
    else:
        parsed = (
            parsed.withColumn("readAt", F.current_timestamp())
            .withWatermark("readAt", dedup_window)
            .dropDuplicatesWithinWatermark(key)
            .drop("readAt")
        )
    return parsed.drop("errorIn")


def split(parsed: Any) -> tuple[Any, Any]:
    """Parsed rows into (records, errors) DataFrames."""
    from pyspark.sql import functions as F

    errors = parsed.filter(F.col("error").isNotNull()).select("traceMsgId", "error")
    records = parsed.filter(F.col("error").isNull()).drop("error")
    records = records.withColumn("timestamp", F.timestamp_millis("timestampMs"))
    return records, errors


def with_partitions(records: Any, known_topics: Any | None) -> Any:
    """``date`` and a ``topic`` for every record: consume records take their message's Pub topic, found in
    ``records`` or in ``known_topics`` (msgId, pubTopic) from earlier runs."""
    from pyspark.sql import functions as F

    own = records.filter(F.col("topic").isNotNull()).select("msgId", F.col("topic").alias("pubTopic"))
    topics = own if known_topics is None else own.unionByName(known_topics)
    topics = topics.dropDuplicates(["msgId"])
    out = records.join(topics, "msgId", "left")
    out = out.withColumn("topic", F.coalesce("topic", "pubTopic", F.lit(UNKNOWN_TOPIC))).drop("pubTopic")
    return out.withColumn("date", F.date_format("timestamp", "yyyy-MM-dd"))


def _known_topics(spark: Any, traces: Path) -> Any | None:
    from pyspark.sql import functions as F

    if not (traces / "_SUCCESS").exists() and not any(traces.glob("date=*")):
        return None
    table = spark.read.parquet(str(traces))
    return table.filter(F.col("traceType").isin("Pub", "EndTransaction")).select(
        "msgId", F.col("topic").alias("pubTopic")
    )


def ingest_batch(spark: Any, options: dict[str, str], out: Path) -> None:
    """The trace topic as it is now (the data source's ``options``) into ``out``, replacing what was there."""
    settings = rq.Settings.from_options(options)
    qs = rq.queues(settings)
    first, last = rq.queue_offsets(settings, qs, "earliest"), rq.queue_offsets(settings, qs, "latest")
    backlog = sum(last[q.broker][str(q.queue_id)] - first[q.broker][str(q.queue_id)] for q in qs)
    print(
        f"reading {settings.topic}: {len(qs)} queue(s) on {len({q.broker for q in qs})} broker(s), {backlog} messages"
    )
    messages = spark.read.format("rocketmq").options(**options).load()
    records, errors = split(parse(messages))
    records = with_partitions(records, None).cache()
    spark.sparkContext.setJobDescription("write trace records")
    records.write.mode("overwrite").partitionBy("date", "topic").parquet(str(out / "traces"))
    errors.write.mode("overwrite").parquet(str(out / "errors"))
    print(f"wrote {records.count()} trace records to {out / 'traces'}")


def ingest_stream(
    spark: Any,
    options: dict[str, str],
    out: Path,
    available_now: bool,
    trigger_seconds: int,
    dedup_window: str = DEDUP_WINDOW,
) -> None:
    """The trace topic as a stream into ``out`` (appending; checkpointed in ``out/_checkpoint``, with the records
    seen in the last ``dedup_window``)."""
    traces = out / "traces"
    parsed = parse(spark.readStream.format("rocketmq").options(**options).load(), dedup_window)

    def write(batch: Any, batch_id: int) -> None:
        batch = batch.cache()  # read from the brokers once
        records, errors = split(batch)
        records = with_partitions(records, _known_topics(spark, traces)).cache()
        n = records.count()
        records.write.mode("append").partitionBy("date", "topic").parquet(str(traces))
        errors.write.mode("append").parquet(str(out / "errors"))
        print(f"batch {batch_id}: {n} records, {errors.count()} errors", flush=True)
        records.unpersist()
        batch.unpersist()

    writer = parsed.writeStream.foreachBatch(write).option("checkpointLocation", str(out / "_checkpoint"))
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{trigger_seconds} seconds")
    query = writer.start()
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()


def report(spark: Any, out: Path) -> dict[str, list[dict[str, Any]]]:
    """The report tables from ``OUT/traces`` (written to ``OUT/report``); returns them as rows."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    t = spark.read.parquet(str(out / "traces"))
    pub_all = t.filter(F.col("traceType") == "Pub")
    first_pub = Window.partitionBy("msgId").orderBy(F.col("success").desc(), "timestampMs")
    pub = (
        pub_all.withColumn("n", F.row_number().over(first_pub))
        .filter("n = 1")
        .select(
            "msgId", "topic", F.col("groupName").alias("producerGroup"), "keys",
            F.col("timestampMs").alias("pubMs"), F.col("success").alias("pubOk"),
            (F.col("timestampMs") + F.floor(F.col("costTime") / 2)).alias("storeMs"),
        )
    )  # fmt: skip
    before = t.filter(F.col("traceType") == "SubBefore").select(
        "requestId", "msgId", F.col("groupName").alias("consumerGroup"), F.col("timestampMs").alias("beforeMs"),
        "retryTimes",
    )  # fmt: skip
    after = t.filter(F.col("traceType") == "SubAfter").select(
        "requestId", "msgId", F.col("costTime").alias("consumeCost"), F.col("success").alias("consumeOk"),
        "contextCode",
    )  # fmt: skip
    consumes = before.join(after, ["requestId", "msgId"], "left").join(pub.drop("keys"), "msgId", "left")
    consumes = consumes.withColumn("topic", F.coalesce("topic", F.lit(UNKNOWN_TOPIC)))
    first_delivery = Window.partitionBy("msgId", "consumerGroup").orderBy("beforeMs")
    latency = consumes.withColumn("latencyMs", F.col("beforeMs") - F.col("storeMs")).withColumn(
        "delivery", F.row_number().over(first_delivery)
    )
    latency_table = (
        latency.groupBy("topic", "consumerGroup")
        .agg(
            F.countDistinct("msgId").alias("messages"),
            F.count("*").alias("consumeCalls"),
            F.expr("percentile(IF(delivery = 1, latencyMs, NULL), 0.5)").alias("latencyP50Ms"),
            F.expr("percentile(IF(delivery = 1, latencyMs, NULL), 0.95)").alias("latencyP95Ms"),
            F.expr("percentile(IF(delivery = 1, latencyMs, NULL), 0.99)").alias("latencyP99Ms"),
            F.avg("consumeCost").alias("consumeCostAvgMs"),
            F.max("consumeCost").alias("consumeCostMaxMs"),
            F.sum(F.when(~F.col("consumeOk"), 1).otherwise(0)).alias("failedConsumes"),
            F.sum(F.when(F.col("retryTimes") > 0, 1).otherwise(0)).alias("retries"),
        )
        .orderBy("topic", "consumerGroup")
    )
    rolled_back = t.filter((F.col("traceType") == "EndTransaction") & (F.col("transactionState") == "ROLLBACK_MESSAGE"))
    recalled = t.filter((F.col("traceType") == "Recall") & F.col("success"))
    never = (
        pub.filter("pubOk")
        .join(before.select("msgId").distinct(), "msgId", "left_anti")
        .join(rolled_back.select("msgId").distinct(), "msgId", "left_anti")  # never meant to be delivered
        .join(recalled.select("msgId").distinct(), "msgId", "left_anti")
        .select("topic", "msgId", "keys", "producerGroup", "pubMs")
        .orderBy("topic", "pubMs")
    )
    transactions = (
        t.filter(F.col("traceType") == "EndTransaction")
        .groupBy("topic", "transactionState", "fromTransactionCheck")
        .count()
        .orderBy("topic", "transactionState", "fromTransactionCheck")
    )
    tables = {
        "latency": [r.asDict() for r in latency_table.collect()],
        "never_consumed": [r.asDict() for r in never.collect()],
        "transactions": [r.asDict() for r in transactions.collect()],
    }
    counts = {r["traceType"]: r["count"] for r in t.groupBy("traceType").count().collect()}
    folder = out / "report"
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in tables.items():
        _write_csv(folder / f"{name}.csv", rows)
    samples = latency.filter("delivery = 1 AND latencyMs IS NOT NULL").select("topic", "latencyMs")
    _plot(folder / "latency.png", [(r["topic"], r["latencyMs"]) for r in samples.limit(200_000).collect()])
    summary = _summary(counts, tables)
    (folder / "summary.txt").write_text(summary)
    print(summary)
    return tables


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, "w", newline="") as f:
        if rows:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


def _plot(path: Path, samples: list[tuple[str, int]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_topic: dict[str, list[int]] = {}
    for topic, ms in samples:
        by_topic.setdefault(topic, []).append(ms)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for topic, values in sorted(by_topic.items()):
        ax.hist(values, bins=50, alpha=0.6, label=f"{topic} ({len(values)})")
    ax.set_xlabel("store-to-consume latency (ms)")
    ax.set_ylabel("messages")
    ax.set_title("Message trace: latency to first delivery, per topic")
    if by_topic:
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)


def _summary(counts: dict[str, int], tables: dict[str, list[dict[str, Any]]]) -> str:
    lines = ["trace records: " + ", ".join(f"{k} {counts.get(k, 0)}" for k in TYPES), ""]
    cols = [
        ("topic", "topic"), ("consumerGroup", "group"), ("messages", "msgs"), ("latencyP50Ms", "p50 ms"),
        ("latencyP95Ms", "p95 ms"), ("latencyP99Ms", "p99 ms"), ("consumeCostAvgMs", "cost avg"),
        ("failedConsumes", "failed"), ("retries", "retries"),
    ]  # fmt: skip
    widths = [max([len(title)] + [len(_fmt(r[key])) for r in tables["latency"]]) for key, title in cols]
    lines.append("  ".join(title.ljust(w) for (_, title), w in zip(cols, widths, strict=True)))
    for r in tables["latency"]:
        lines.append("  ".join(_fmt(r[key]).ljust(w) for (key, _), w in zip(cols, widths, strict=True)))
    never = tables["never_consumed"]
    lines += ["", f"published, never consumed: {len(never)}"]
    lines += [f"  {r['topic']} {r['msgId']} keys={r['keys']}" for r in never[:20]]
    if len(never) > 20:
        lines.append(f"  ... and {len(never) - 20} more (never_consumed.csv)")
    lines += ["", "transactions:"]
    lines += [
        f"  {r['topic']} {r['transactionState']}{' (check-back)' if r['fromTransactionCheck'] else ''}: {r['count']}"
        for r in tables["transactions"]
    ] or ["  none"]
    return "\n".join(lines) + "\n"


def _interval(text: str) -> str:
    if not re.fullmatch(r"[1-9]\d*\s+(second|minute|hour|day)s?", text.strip()):
        raise argparse.ArgumentTypeError(f"{text!r} is not an interval such as '10 minutes'")
    return text.strip()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m spark.trace_ingest", description=__doc__.splitlines()[0])
    p.add_argument("--namesrv", required=True, help="NameServer address(es), host:port[;host:port]")
    p.add_argument("--out", required=True, type=Path, help="output folder (traces/, errors/, report/)")
    p.add_argument("--topic", default=TRACE_TOPIC, help="the trace topic (default %(default)s)")
    p.add_argument("--stream", action="store_true", help="read as a stream, with a checkpoint in OUT/_checkpoint")
    p.add_argument(
        "--dedup-window",
        type=_interval,
        default=DEDUP_WINDOW,
        help="with --stream: how long a record is remembered to drop its copies (default %(default)s)",
    )
    p.add_argument("--available-now", action="store_true", help="with --stream: read what is there, then stop")
    p.add_argument("--trigger-seconds", type=int, default=10, help="with --stream: micro-batch interval")
    p.add_argument("--max-records", type=int, help="with --stream: maxRecordsPerTrigger")
    p.add_argument("--master", help="Spark master URL (default: spark-submit's --master, else local[*])")
    p.add_argument(
        "--py-files",
        help="comma-separated .zip/.py files for the executors' Python (a zip of this project's spark and gateway "
        "packages, for nodes that do not have it installed)",
    )
    p.add_argument("--access-key", help="ACL access key")
    p.add_argument("--secret-key", help="ACL secret key")
    p.add_argument(
        "--tls",
        action="store_true",
        help="TLS to the NameServers and brokers (tls.client.* from the tls.config.file, as Java clients)",
    )
    p.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark property, as spark-submit's --conf (e.g. spark.executor.memory=2g); repeatable",
    )
    args = p.parse_args(argv)
    conf = dict(item.partition("=")[::2] for item in args.conf)
    for key, value in conf.items():
        if not key.startswith("spark.") or not value:
            p.error(f"--conf takes spark.KEY=VALUE, not {key}={value}".rstrip("="))
    checkpoint = args.out / "_checkpoint"
    if args.stream and any((checkpoint / "commits").glob("[0-9]*")) and not (checkpoint / "state").exists():
        # Spark cannot add the de-duplication's state to a query that ran without it.
        print(f"error: {checkpoint} was written without record de-duplication: use a new --out", file=sys.stderr)
        return 2
    started = time.monotonic()
    spark = session(args.master, py_files=args.py_files, conf=conf)
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        options = source_options(args)
        if args.stream:
            if args.max_records:
                options["maxRecordsPerTrigger"] = str(args.max_records)
            ingest_stream(spark, options, args.out, args.available_now, args.trigger_seconds, args.dedup_window)
        else:
            ingest_batch(spark, options, args.out)
        report(spark, args.out)
    except rq.SourceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        spark.stop()
    print(f"done in {time.monotonic() - started:.1f} s: {args.out / 'traces'}, {args.out / 'report'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
