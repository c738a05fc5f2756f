"""A streaming query run as its own driver process by test_sink_exactly_once: the topic ``source`` copied
to ``sink`` with ``deliveryGuarantee=exactly-once`` from ``checkpoint``, 400 rows a micro-batch.

    python eos_stream_driver.py NAMESRV SOURCE SINK CHECKPOINT STOP_FILE

Prints "caught up" once the backlog is written, then keeps its Python workers (the check-back answerers)
alive until STOP_FILE exists.
"""

from __future__ import annotations

import os
import sys
import time

from pyspark.sql import SparkSession

from spark import RocketMQDataSource


def main(namesrv: str, source: str, sink: str, checkpoint: str, stop_file: str) -> None:
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("eos-stream-driver")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(RocketMQDataSource)
    query = (
        spark.readStream.format("rocketmq")
        .option("namesrvAddr", namesrv)
        .option("topic", source)
        .option("maxRecordsPerTrigger", "400")
        .load()
        .selectExpr("body", "keys AS shardingKey")
        .writeStream.format("rocketmq")
        .option("namesrvAddr", namesrv)
        .option("topic", sink)
        .option("producerGroup", "eos_stream_pg")
        .option("deliveryGuarantee", "exactly-once")
        .option("sendTimeoutMs", "300")  # a grace of 6 s before check-backs commit what a driver left
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    print("caught up", flush=True)
    while not os.path.exists(stop_file):
        time.sleep(0.2)
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:6])
