"""A driver for tests/spark/test_cluster.py, submitted to a standalone cluster with this project as a zip:

    spark-submit --master spark://127.0.0.1:PORT --py-files rocketmq_gateway.zip tests/spark/cluster_job.py \
        --namesrv ADDR --read TOPIC --write TOPIC --rows N

reads every message of ``--read`` with the ``rocketmq`` source, then writes ``--rows`` rows to ``--write`` with the
sink (a ``shardingKey`` of ``key-<id % 8>``, keys ``id-<id>``, a property), and prints one JSON line: the bodies
read, the input partitions, which executor ran each task of the two jobs (from the driver's REST API) and where
the executors' Python imported the ``spark`` package from.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from typing import Any


def tasks(spark: Any, group: str) -> list[dict[str, Any]]:
    """(stage, executorId, host) of every task of the jobs of ``group``, from the driver's UI REST API."""
    sc = spark.sparkContext
    api = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}"
    found = []
    for job_id in sc.statusTracker().getJobIdsForGroup(group):
        job = sc.statusTracker().getJobInfo(job_id)
        for stage in job.stageIds if job else ():
            with urllib.request.urlopen(f"{api}/stages/{stage}/0/taskList?length=1000", timeout=10) as resp:
                found += [{"stage": stage, "executor": t["executorId"], "host": t["host"]} for t in json.load(resp)]
    return found


def main() -> int:
    p = argparse.ArgumentParser()
    for name in ("--namesrv", "--read", "--write"):
        p.add_argument(name, required=True)
    p.add_argument("--rows", type=int, required=True)
    args = p.parse_args()
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from spark import RocketMQDataSource

    spark = (
        SparkSession.builder.appName("rocketmq-cluster-test")
        .config("spark.ui.port", "0")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.executor.memory", "512m")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    spark.dataSource.register(RocketMQDataSource)
    sc = spark.sparkContext
    try:
        sc.setJobGroup("read", "read every message")
        df = spark.read.format("rocketmq").option("namesrvAddr", args.namesrv).option("topic", args.read).load()
        rows = df.select("broker", "queueId", "body", F.spark_partition_id().alias("partition")).collect()
        read_tasks = tasks(spark, "read")
        imported = sc.parallelize(range(2), 2).map(lambda _: __import__("spark").__file__).distinct().collect()

        sc.setJobGroup("write", "write rows")
        out = spark.range(args.rows).selectExpr(
            "CAST(id AS STRING) AS body",
            "concat('id-', id) AS keys",
            "concat('key-', id % 8) AS shardingKey",
            "map('rowId', CAST(id AS STRING)) AS properties",
        )
        out.repartition(4).write.format("rocketmq").option("namesrvAddr", args.namesrv).option(
            "topic", args.write
        ).mode("append").save()
        write_tasks = tasks(spark, "write")
        print(
            json.dumps(
                {
                    "imported_from": imported,
                    "bodies": [r.body.decode() for r in rows],
                    "partitions": sorted({(r.partition, r.broker, r.queueId) for r in rows}),
                    "read_tasks": read_tasks,
                    "write_tasks": write_tasks,
                }
            )
        )
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
