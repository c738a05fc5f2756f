"""The ``rocketmq`` Spark data source (Spark 4 Python Data Source API), batch and streaming.

    spark.dataSource.register(RocketMQDataSource)
    df = (spark.read.format("rocketmq")
          .option("namesrvAddr", "127.0.0.1:9876").option("topic", "TopicTest").load())

One input partition per message queue, found from the topic's route when the query is planned; the
workers open their own connections in ``read()`` and pull their queue's offset range from its broker, so
a cluster reads every broker in parallel. Rows come out as Arrow record batches.

Options: ``namesrvAddr`` and ``topic`` (required); ``startingOffsets`` (default ``earliest``) and
``endingOffsets`` (batch only, default ``latest``): ``earliest``, ``latest`` or JSON
``{"broker-a": {"0": 10, "1": 0}}`` (-2 earliest, -1 latest; a queue left out takes the default);
``maxRecordsPerTrigger`` (streaming); ``consumerGroup``: the group the pulls are made as, whose offsets a
streaming query commits as Spark commits each batch (when it plans the next one); ``accessKey`` /
``secretKey`` (ACL); ``tls.enable`` and the ``tls.client.*`` keys; ``timeoutMs`` per request (10000).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from . import queues as rq
from .columns import RecordColumns

SCHEMA = StructType(
    [
        StructField(name, kind)
        for name, kind in (
            ("topic", StringType()), ("broker", StringType()), ("queueId", IntegerType()),
            ("queueOffset", LongType()), ("commitLogOffset", LongType()), ("msgId", StringType()),
            ("keys", StringType()), ("tags", StringType()), ("properties", MapType(StringType(), StringType())),
            ("bornTimestamp", TimestampType()), ("storeTimestamp", TimestampType()), ("bornHost", StringType()),
            ("storeHost", StringType()), ("reconsumeTimes", IntegerType()), ("body", BinaryType()),
        )
    ]
)  # fmt: skip
BATCH_ROWS = 8192  # rows per Arrow batch handed to Spark


@dataclass
class QueueRange(InputPartition):
    """Offsets ``start`` <= offset < ``end`` of one queue."""

    queue: rq.Queue
    start: int
    end: int


class RocketMQDataSource(DataSource):
    """``spark.read.format("rocketmq")`` and ``spark.readStream.format("rocketmq")``; see the module doc."""

    @classmethod
    def name(cls) -> str:
        return "rocketmq"

    def schema(self) -> StructType:
        return SCHEMA

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """``df.write.format("rocketmq")`` (spark/sink.py); a topic is only appended to, whatever the mode."""
        from . import sink  # the writers' imports (the client's), only when writing

        return sink.RocketMQBatchWriter(sink.SinkSettings.from_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """``df.writeStream.format("rocketmq")`` (spark/sink.py)."""
        from . import sink

        return sink.RocketMQStreamWriter(sink.SinkSettings.from_options(self.options), schema)

    def reader(self, schema: StructType) -> DataSourceReader:
        return RocketMQBatchReader(rq.Settings.from_options(self.options), rq.lower_keys(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return RocketMQStreamReader(rq.Settings.from_options(self.options), rq.lower_keys(self.options), schema)


def _ranges(qs: list[rq.Queue], start: rq.Offsets, end: rq.Offsets) -> list[QueueRange]:
    out = []
    for q in qs:
        first = start.get(q.broker, {}).get(str(q.queue_id), 0)
        last = end.get(q.broker, {}).get(str(q.queue_id), first)
        if last > first:
            out.append(QueueRange(q, first, last))
    return out


def read_batches(settings: rq.Settings, part: QueueRange, schema: StructType) -> Iterator[Any]:
    """The rows of ``part`` as Arrow record batches of the source's schema (runs in a worker)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    columns = RecordColumns()
    for body in rq.read_range(settings, part.queue, part.start, part.end):
        columns.add_records(body, part.start, part.end)
        if len(columns) >= BATCH_ROWS:
            yield columns.to_batch(arrow_schema, settings.topic, part.queue.broker, part.queue.queue_id)
    if len(columns):
        yield columns.to_batch(arrow_schema, settings.topic, part.queue.broker, part.queue.queue_id)


class RocketMQBatchReader(DataSourceReader):
    def __init__(self, settings: rq.Settings, options: dict[str, str], schema: StructType) -> None:
        self.settings = settings
        self.options = options
        self.schema = schema

    def partitions(self) -> list[QueueRange]:
        qs = rq.queues(self.settings)
        start = rq.resolve(self.settings, qs, self.options.get("startingoffsets", ""), "startingOffsets", "earliest")
        end = rq.resolve(self.settings, qs, self.options.get("endingoffsets", ""), "endingOffsets", "latest")
        return _ranges(qs, start, end)

    def read(self, partition: QueueRange) -> Iterator[Any]:  # type: ignore[override]
        return read_batches(self.settings, partition, self.schema)


class RocketMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets per queue; ``maxRecordsPerTrigger`` caps a micro-batch, shared out over the queues with data."""

    def __init__(self, settings: rq.Settings, options: dict[str, str], schema: StructType) -> None:
        self.settings = settings
        self.options = options
        self.schema = schema
        limit = options.get("maxrecordspertrigger")
        try:
            self.max_records = int(limit) if limit else None
        except ValueError:
            raise rq.SourceError(f"option maxRecordsPerTrigger: not a number: {limit!r}") from None
        if self.max_records is not None and self.max_records <= 0:
            raise rq.SourceError("option maxRecordsPerTrigger must be positive")
        self._available_now: rq.Offsets | None = None

    def initialOffset(self) -> dict:
        qs = rq.queues(self.settings)
        return rq.resolve(self.settings, qs, self.options.get("startingoffsets", ""), "startingOffsets", "earliest")

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_records) if self.max_records else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = rq.queue_offsets(self.settings, rq.queues(self.settings), "latest")

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        latest = self._available_now or rq.queue_offsets(self.settings, rq.queues(self.settings), "latest")
        end = {b: {q: max(o, start.get(b, {}).get(q, 0)) for q, o in per.items()} for b, per in latest.items()}
        for b, per in start.items():  # a queue gone from the route keeps its place
            for q, o in per.items():
                end.setdefault(b, {}).setdefault(q, o)
        if isinstance(limit, ReadMaxRows):
            end = cap(start, end, limit.max_rows)
        return end

    def partitions(self, start: dict, end: dict) -> list[QueueRange]:
        return _ranges(rq.queues(self.settings), start, end)

    def read(self, partition: QueueRange) -> Iterator[Any]:  # type: ignore[override]
        return read_batches(self.settings, partition, self.schema)

    def commit(self, end: dict) -> None:
        rq.commit(self.settings, rq.queues(self.settings), end)


def cap(start: rq.Offsets, end: rq.Offsets, max_rows: int) -> rq.Offsets:
    """``end`` moved back so that at most ``max_rows`` messages lie between ``start`` and it, taken in turn
    from every queue that has some (a queue with few gives its share to the others)."""
    backlog = {(b, q): o - start.get(b, {}).get(q, 0) for b, per in end.items() for q, o in per.items()}
    take = dict.fromkeys(backlog, 0)
    left = max_rows
    waiting = sorted(k for k, n in backlog.items() if n > 0)
    while left > 0 and waiting:
        share = max(left // len(waiting), 1)
        for k in list(waiting):
            n = min(share, backlog[k] - take[k], left)
            take[k] += n
            left -= n
            if take[k] == backlog[k]:
                waiting.remove(k)
            if left == 0:
                break
    capped: rq.Offsets = {}
    for b, per in end.items():
        for q, o in per.items():
            capped.setdefault(b, {})[q] = start.get(b, {}).get(q, 0) + take[(b, q)] if backlog[(b, q)] > 0 else o
    return capped
