"""The ``rocketmq`` data source on real Spark (local[2]) against our broker in a child process: a whole
topic read exactly, offset options, and a streaming query stopped mid-stream and restarted from its
checkpoint with nothing lost or repeated in its Parquet output."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from compat_tests.servers import GatewayServers, call
from gateway.client import blocking, build_message
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from spark import queues as rq
from spark.datasource import _ranges

pytestmark = pytest.mark.spark

COLUMNS = [
    "topic", "broker", "queueId", "queueOffset", "commitLogOffset", "msgId", "keys", "tags", "properties",
    "bornTimestamp", "storeTimestamp", "bornHost", "storeHost", "reconsumeTimes", "body",
]  # fmt: skip


def send(servers: GatewayServers, topic: str, n: int, start: int = 0) -> dict[str, Any]:
    """``n`` messages (key k<i>, tag T<i%3>, property idx); their SendResults by msgId."""
    with blocking.Producer(f"spark_pg_{topic}", servers.namesrv_addr) as producer:
        results = {}
        for i in range(start, start + n):
            msg = build_message(topic, b"body-%d" % i, tags=f"T{i % 3}", keys=f"k{i}", properties={"idx": str(i)})
            r = producer.send(msg)
            results[r.msg_id] = r
        return results


def read(spark: Any, servers: GatewayServers, topic: str, **options: str) -> Any:
    reader = spark.read.format("rocketmq").option("namesrvAddr", servers.namesrv_addr).option("topic", topic)
    return reader.options(**options).load()


def test_a_batch_read_returns_the_topic_exactly(spark: Any, servers: GatewayServers) -> None:
    servers.create_topic("SparkBatch", 4)
    sent = send(servers, "SparkBatch", 200)
    df = read(spark, servers, "SparkBatch")
    assert df.columns == COLUMNS
    assert df.rdd.getNumPartitions() == 4  # one per queue
    rows = df.collect()
    assert len(rows) == 200 and {r.msgId for r in rows} == set(sent)
    for r in rows:
        s = sent[r.msgId]
        i = int(r.properties["idx"])
        assert (r.topic, r.broker, r.queueId, r.queueOffset) == (
            "SparkBatch",
            "broker-a",
            s.queue.queue_id,
            s.queue_offset,
        )
        assert (r.body, r.keys, r.tags, r.reconsumeTimes) == (b"body-%d" % i, f"k{i}", f"T{i % 3}", 0)
        assert r.storeHost == servers.broker_addr and r.bornHost.startswith("127.0.0.1:")
        assert r.storeTimestamp >= r.bornTimestamp and r.commitLogOffset >= 0
    by_queue: dict[int, list[int]] = {}
    for r in rows:
        by_queue.setdefault(r.queueId, []).append(r.queueOffset)
    assert all(sorted(offsets) == list(range(len(offsets))) for offsets in by_queue.values())

    # Offsets as JSON: queue 0 from 2 to 5; a queue left out of endingOffsets is read to its end (latest),
    # one left out of startingOffsets from its start; -2 is earliest.
    part = read(
        spark, servers, "SparkBatch",
        startingOffsets='{"broker-a": {"0": 2, "1": -2}}', endingOffsets='{"broker-a": {"0": 5, "1": 0}}',
    ).collect()  # fmt: skip
    counts = {q: sum(1 for r in part if r.queueId == q) for q in range(4)}
    assert counts == {0: 3, 1: 0, 2: len(by_queue[2]), 3: len(by_queue[3])}
    assert sorted(r.queueOffset for r in part if r.queueId == 0) == [2, 3, 4]
    with pytest.raises(Exception, match="startingOffsets"):
        read(spark, servers, "SparkBatch", startingOffsets="the beginning").collect()


def test_min_partitions_splits_the_queues_in_proportion_and_reads_each_offset_once(
    spark: Any, servers: GatewayServers
) -> None:
    q = [rq.Queue("broker-a", i, ("x",)) for i in range(3)]
    start, end = {"broker-a": {"0": 10, "1": 0, "2": 5}}, {"broker-a": {"0": 110, "1": 3, "2": 5}}
    ranges = _ranges(q, start, end, 10)  # 100 and 3 offsets to read, queue 2 none
    assert [(r.queue.queue_id, r.start, r.end) for r in ranges] == [
        (0, 10 + 10 * i, 20 + 10 * i) for i in range(10)
    ] + [(1, 0, 3)]
    assert len(_ranges(q, start, end, 2)) == 2 and len(_ranges(q, {}, {"broker-a": {"0": 2}}, 5)) == 2

    servers.create_topic("SparkSplit", 2)
    sent = send(servers, "SparkSplit", 120)
    df = read(spark, servers, "SparkSplit", minPartitions="7")
    assert df.rdd.getNumPartitions() >= 7  # at least, as Kafka's: 60 + 60 offsets make 4 + 4
    ids = [r.msgId for r in df.select("msgId").collect()]
    assert len(ids) == 120 and set(ids) == set(sent)
    with pytest.raises(Exception, match="option minPartitions must be positive"):
        read(spark, servers, "SparkSplit", minPartitions="0").collect()


def test_a_batch_holds_at_most_batch_bytes_of_bodies(servers: GatewayServers, monkeypatch: Any) -> None:
    from pyspark.sql.pandas.types import to_arrow_schema

    from spark import datasource

    servers.create_topic("SparkBytes", 1)
    send(servers, "SparkBytes", 300)
    settings = rq.Settings.from_options({"namesrvAddr": servers.namesrv_addr, "topic": "SparkBytes"})
    (part,) = datasource.RocketMQBatchReader(settings, {}, datasource.SCHEMA).partitions()
    monkeypatch.setattr(datasource, "BATCH_BYTES", 1000)  # 125 to 167 bodies of "body-<i>"
    batches = list(datasource.read_batches(settings, part, datasource.SCHEMA))
    sizes = [sum(len(body) for body in b.column("body").to_pylist()) for b in batches]
    # A batch ends after the pull answer (32 bodies of at most 8 bytes) that takes it to 1000 bytes.
    assert all(1000 <= n < 1000 + 32 * 8 for n in sizes[:-1]) and sizes[-1] < 1000 + 32 * 8
    assert len(batches) == 3 and sum(b.num_rows for b in batches) == 300
    assert all(b.schema == to_arrow_schema(datasource.SCHEMA, timezone="UTC") for b in batches)
    offsets = [o for b in batches for o in b.column("queueOffset").to_pylist()]
    assert offsets == list(range(300))


def _committed(servers: GatewayServers, group: str, topic: str, queue_id: int) -> int:
    request = RemotingCommand.request(
        RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": str(queue_id)}
    )
    resp = call(servers.broker_addr, request)
    return int(resp.ext_fields["offset"]) if resp.code == ResponseCode.SUCCESS else -1


def test_a_stream_stopped_mid_way_resumes_from_its_checkpoint(
    spark: Any, servers: GatewayServers, tmp_path: Path
) -> None:
    servers.create_topic("SparkStream", 2)
    sent = set(send(servers, "SparkStream", 150))
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def start(**trigger: Any) -> Any:
        stream = (
            spark.readStream.format("rocketmq")
            .option("namesrvAddr", servers.namesrv_addr)
            .option("topic", "SparkStream")
            .option("maxRecordsPerTrigger", "40")
            .option("consumerGroup", "spark_stream_cg")
            .load()
        )
        writer = (
            stream.writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
        )
        return writer.trigger(**trigger).start()

    query = start(processingTime="1 second")
    deadline = time.monotonic() + 120
    while sum(p["numInputRows"] for p in query.recentProgress) < 40:
        assert query.exception() is None, query.exception()
        assert time.monotonic() < deadline, "no micro-batch in 120 s"
        time.sleep(0.2)
    query.stop()  # mid-stream: 150 messages at 40 a batch
    done = sum(p["numInputRows"] for p in query.recentProgress)
    assert 40 <= done < 150
    assert all(p["numInputRows"] <= 40 for p in query.recentProgress)

    sent |= set(send(servers, "SparkStream", 50, start=150))
    query = start(availableNow=True)
    query.awaitTermination(180)
    assert query.exception() is None
    got = spark.read.parquet(str(out))
    ids = [r.msgId for r in got.select("msgId").collect()]
    assert len(ids) == len(set(ids)) == 200 and set(ids) == sent
    # The group's offsets are committed as Spark commits batches to the source: when it plans the next one,
    # so they end at most one batch (40 rows, 20 a queue here) behind the end.
    settings = rq.Settings.from_options({"namesrvAddr": servers.namesrv_addr, "topic": "SparkStream"})
    ends = rq.queue_offsets(settings, rq.queues(settings), "latest")["broker-a"]
    for q, end in ends.items():
        assert end - 40 <= _committed(servers, "spark_stream_cg", "SparkStream", int(q)) <= end
