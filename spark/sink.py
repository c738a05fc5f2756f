"""The ``rocketmq`` sink: ``df.write.format("rocketmq")`` and ``df.writeStream.format("rocketmq")``.

    (df.selectExpr("CAST(id AS STRING) AS keys", "payload AS body")
       .write.format("rocketmq").option("namesrvAddr", "127.0.0.1:9876").option("topic", "TopicTest")
       .mode("append").save())

One message per row. Columns: ``body`` (binary or string, required); ``topic`` (else the ``topic``
option); ``keys`` (string, or an array of strings joined with a space as Apache does); ``tags``;
``properties`` (map<string,string>, user properties: the columns win over the same names);
``delayTimeLevel`` (int, the broker's delay levels); ``deliverTimeMs`` (long, epoch ms: a RocketMQ 5
timer message); ``shardingKey`` (string: rows with the same key go to the same queue, in row order, as
Apache's SelectMessageQueueByHash would send them). Other columns are ignored.

Options: ``namesrvAddr`` (required), ``topic``, ``producerGroup`` (``spark-rocketmq-writer``),
``accessKey``/``secretKey``, ``tls.*``, ``batchSize`` (messages per SEND_BATCH_MESSAGE, 128),
``maxMessageSize`` (bytes per request, 4 MiB as the broker's default), ``maxInFlightBatches`` (requests
awaiting their answer per task, 4), ``sendTimeoutMs`` (per request, 3000), ``retryTimesWhenSendFailed``
(2), ``deliveryGuarantee`` (``at-least-once``, or ``exactly-once``: see ``spark/exactly_once.py``).

Each task sends its rows itself, to each queue's master: rows without a sharding key in batches
round-robin over the topic's writable queues, keyed rows in batches per queue, delayed rows alone (a batch
cannot carry a delay). A send the broker refuses with a code Apache's producer retries (or a lost
connection) is sent again, to a queue of another broker unless its rows are keyed; any other refusal, or
the last retry's, fails the task with the broker's code and remark. A queue with keyed rows has one
request in flight at a time, so a retry cannot reorder them.
"""

from __future__ import annotations

import random
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
)
from twisted.logger import Logger

from gateway.client.api import SEND_OK_CODES
from gateway.client.message_id import set_uniq_id
from gateway.client.producer import RETRY_RESPONSE_CODES, build_message
from gateway.client.route import default_topic_route, publish_queues
from gateway.remoting.blocking import BlockingConnection
from gateway.remoting.bodies import MessageQueue
from gateway.remoting.codes import RequestCode, response_code_text
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import SendMessageRequestHeader, SendMessageResponseHeader
from gateway.remoting.message import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    Message,
    MessageConst,
    MessageSysFlag,
    encode_batch,
    java_string_hash,
    properties_to_string,
)
from gateway.remoting.names import AUTO_CREATE_TOPIC_KEY_TOPIC, NOT_ALLOWED_SEND_TOPICS, group_problem, topic_problem

from . import queues as rq

log = Logger()

DEFAULT_PRODUCER_GROUP = "spark-rocketmq-writer"
DEFAULT_BATCH_SIZE = 128  # 1 KB rows: ~1.5x the rows/s of 32 a batch (benchmarks/README.md)
DELIVERY_GUARANTEES = ("at-least-once", "exactly-once")
DEFAULT_TOPIC_QUEUE_NUMS = 4  # queues a topic auto-created through TBW102 gets (DefaultMQProducer's default)
MAX_IN_FLIGHT = 64
# Keyed rows wait in per-queue batches; past this many bytes buffered the fullest batch goes early.
MAX_BUFFERED_BYTES = 16 << 20
_BATCH_ENTRY_OVERHEAD = 4 + 4 + 4 + 4 + 4 + 2  # total, magic, crc, flag, body length, properties length


class SinkError(ValueError):
    """An unusable option or column, or a send that failed for good (with the broker's code and remark)."""


@dataclass(frozen=True)
class SinkSettings:
    """The sink's options, checked once on the driver; picklable, so it travels to the tasks."""

    namesrv: tuple[str, ...]
    topic: str | None
    producer_group: str
    access_key: str | None
    secret_key: str | None
    tls: dict[str, str]
    batch_size: int
    send_timeout: float  # seconds
    window: int  # requests in flight per task
    delivery_guarantee: str
    retries: int = 2
    max_message_size: int = 4 * 1024 * 1024

    @classmethod
    def from_options(cls, given: dict[str, str] | Any) -> SinkSettings:
        """The data source's options (any case); SinkError naming the first bad one."""
        options = rq.lower_keys(given)
        namesrv, access_key, secret_key, tls = rq.connection_options(options, SinkError)
        topic = options.get("topic") or None
        if topic is not None:
            check_topic(topic, "option topic")
        group = options.get("producergroup") or DEFAULT_PRODUCER_GROUP
        if (problem := group_problem(group)) is not None:
            raise SinkError(f"option producerGroup: {problem}")
        guarantee = (options.get("deliveryguarantee") or "at-least-once").strip().lower()
        if guarantee not in DELIVERY_GUARANTEES:
            raise SinkError(f"option deliveryGuarantee: one of {', '.join(DELIVERY_GUARANTEES)}, not {guarantee!r}")
        return cls(
            namesrv=namesrv,
            topic=topic,
            producer_group=group,
            access_key=access_key,
            secret_key=secret_key,
            tls=tls,
            batch_size=_int_option(options, "batchSize", DEFAULT_BATCH_SIZE, 1, 10_000),
            send_timeout=_int_option(options, "sendTimeoutMs", 3000, 1, 3_600_000) / 1000,
            window=_int_option(options, "maxInFlightBatches", 4, 1, MAX_IN_FLIGHT),
            delivery_guarantee=guarantee,
            retries=_int_option(options, "retryTimesWhenSendFailed", 2, 0, 16),
            max_message_size=_int_option(options, "maxMessageSize", 4 * 1024 * 1024, 1024, 1 << 30),
        )

    def connection(self, topic: str | None = None) -> rq.Settings:
        """The data source's connection settings (NameServers, ACL, TLS, timeout) for ``topic``'s route."""
        return rq.Settings(
            self.namesrv,
            topic or self.topic or AUTO_CREATE_TOPIC_KEY_TOPIC,
            self.producer_group,
            None,
            self.access_key,
            self.secret_key,
            self.tls,
            self.send_timeout,
        )


def _int_option(options: dict[str, str], name: str, default: int, low: int, high: int) -> int:
    given = options.get(name.lower())
    if not given:
        return default
    try:
        value = int(given)
    except ValueError:
        raise SinkError(f"option {name}: not a number: {given!r}") from None
    if not low <= value <= high:
        raise SinkError(f"option {name}: {value} is not between {low} and {high}")
    return value


def check_topic(topic: str, where: str) -> None:
    """A topic a producer may send to (Validators.checkTopic, no system topic), else SinkError."""
    problem = topic_problem(topic)
    if problem is None and topic in NOT_ALLOWED_SEND_TOPICS:
        problem = f"sending to topic {topic} is forbidden"
    if problem is not None:
        raise SinkError(f"{where}: {problem}")


# -- rows into messages

_INTEGRAL = (ByteType, ShortType, IntegerType, LongType)
_COLUMN_TYPES: dict[str, tuple[tuple[type[DataType], ...], str]] = {
    "body": ((BinaryType, StringType), "binary or string"),
    "topic": ((StringType,), "string"),
    "keys": ((StringType, ArrayType), "string or array<string>"),
    "tags": ((StringType,), "string"),
    "properties": ((MapType,), "map<string,string>"),
    "delayTimeLevel": (_INTEGRAL, "int"),
    "deliverTimeMs": (_INTEGRAL, "long (epoch milliseconds)"),
    "shardingKey": ((StringType,), "string"),
}


def _type_fits(kind: DataType, allowed: tuple[type[DataType], ...]) -> bool:
    if isinstance(kind, ArrayType):
        return ArrayType in allowed and isinstance(kind.elementType, StringType)
    if isinstance(kind, MapType):
        return MapType in allowed and isinstance(kind.keyType, StringType) and isinstance(kind.valueType, StringType)
    return isinstance(kind, allowed)


def column_indexes(settings: SinkSettings, schema: StructType) -> dict[str, int]:
    """Where each known column is in ``schema``'s rows; SinkError naming a missing body, a column of the
    wrong type, or rows with no topic. Column names match case-insensitively, as Spark's do."""
    found: dict[str, int] = {}
    by_lower = {name.lower(): name for name in _COLUMN_TYPES}
    for i, field in enumerate(schema.fields):
        name = by_lower.get(field.name.lower())
        if name is None:
            continue
        allowed, described = _COLUMN_TYPES[name]
        if not _type_fits(field.dataType, allowed):
            raise SinkError(f"column {field.name} must be {described}, not {field.dataType.simpleString()}")
        found[name] = i
    if "body" not in found:
        raise SinkError("column body is required (binary or string): the message bodies")
    if "topic" not in found and settings.topic is None:
        raise SinkError("no topic: give the topic option or a topic column")
    return found


@dataclass(slots=True)
class OutgoingMessage:
    """A row as the message to send, and its sharding key (None: any queue)."""

    message: Message
    sharding_key: str | None


def row_messages(settings: SinkSettings, schema: StructType, rows: Iterable[Any]) -> Iterator[OutgoingMessage]:
    """Each row of ``rows`` (Spark Rows of ``schema``) as a message with its UNIQ_KEY; SinkError on a row
    that cannot be one (no body, no topic, a bad topic name or delay)."""
    at = column_indexes(settings, schema)
    body_at = at["body"]
    get = {name: at.get(name) for name in _COLUMN_TYPES}
    checked_topics: set[str] = set()
    for n, row in enumerate(rows):
        body = row[body_at]
        if isinstance(body, str):
            body = body.encode()
        elif isinstance(body, bytearray):
            body = bytes(body)
        if not body:
            raise SinkError(f"row {n} of the task: column body is {'null' if body is None else 'empty'}")
        topic = _value(row, get["topic"]) or settings.topic
        if topic is None:
            raise SinkError(f"row {n} of the task: column topic is null and no topic option is given")
        if topic not in checked_topics:
            check_topic(topic, f"row {n} of the task: column topic")
            checked_topics.add(topic)
        keys = _value(row, get["keys"])
        delay = _value(row, get["delayTimeLevel"]) or 0
        if delay < 0:
            raise SinkError(f"row {n} of the task: column delayTimeLevel is {delay}, not a level (1, 2, ...)")
        if isinstance(keys, list):
            keys = [k for k in keys if k]
        tags = _value(row, get["tags"])
        props = _value(row, get["properties"])
        if props:  # a map: a dict, or (key, value) pairs from Arrow
            props = dict(props)
            for name, value in props.items():
                if value is None or not name:
                    raise SinkError(f"row {n} of the task: column properties: {name!r} has no value")
        _check_text(n, keys, tags, props)
        msg = build_message(
            topic,
            body,
            tags=tags,
            keys=keys,
            properties=props,
            delay_level=delay,
            deliver_time_ms=_value(row, get["deliverTimeMs"]),
        )
        set_uniq_id(msg)
        yield OutgoingMessage(msg, _value(row, get["shardingKey"]))


def _value(row: Any, at: int | None) -> Any:
    return None if at is None else row[at]


def _check_text(n: int, keys: str | list[str] | None, tags: str | None, props: dict[str, str] | None) -> None:
    """No text that goes into the properties string may hold its separators (it would forge properties)."""
    parts = [tags or "", *(keys if isinstance(keys, list) else [keys or ""])]
    if props:
        parts.extend(props)
        parts.extend(props.values())
    if any(NAME_VALUE_SEPARATOR in p or PROPERTY_SEPARATOR in p for p in parts):
        raise SinkError(f"row {n} of the task: keys, tags and properties may not hold characters \\x01 or \\x02")


def is_delayed(msg: Message) -> bool:
    """A delay level or a delivery time: such a message travels alone (a batch cannot carry either)."""
    return MessageConst.DELAY_TIME_LEVEL in msg.properties or MessageConst.TIMER_DELIVER_MS in msg.properties


# -- queues


class QueueChooser:
    """The writable queues of each topic (routed by the NameServers, else TBW102's as a producer
    auto-creates a topic) and which one a message goes to."""

    def __init__(self, settings: SinkSettings) -> None:
        self.settings = settings
        self._queues: dict[str, list[MessageQueue]] = {}
        self._masters: dict[str, str] = {}
        self._next = random.randrange(1 << 16)  # Java starts at random, so tasks do not all begin at queue 0

    def queues(self, topic: str) -> list[MessageQueue]:
        """``topic``'s writable queues, brokers in name order, as Apache's TopicPublishInfo lists them."""
        found = self._queues.get(topic)
        if found is None:
            found = self._queues[topic] = self._lookup(topic)
        return found

    def _lookup(self, topic: str) -> list[MessageQueue]:
        try:
            route = rq.route(self.settings.connection(topic))
        except rq.TopicNotRouted as unknown:
            try:
                template = rq.route(self.settings.connection(AUTO_CREATE_TOPIC_KEY_TOPIC))
            except rq.TopicNotRouted:
                raise SinkError(f"no broker auto-creates topics, and {unknown}") from None
            except rq.SourceError as e:
                raise SinkError(str(e)) from None
            route = default_topic_route(template, DEFAULT_TOPIC_QUEUE_NUMS)
        except rq.SourceError as e:
            raise SinkError(str(e)) from None
        for broker in route.broker_datas:
            master = broker.master_addr()
            if master is not None:
                self._masters[broker.broker_name] = master
        found = publish_queues(topic, route)
        if not found:
            raise SinkError(f"topic {topic} has no writable queue on a broker with a master")
        return found

    def master(self, broker_name: str) -> str:
        """The master address of a broker of a route looked up here."""
        return self._masters[broker_name]

    def choose(self, topic: str, sharding_key: str | None) -> MessageQueue:
        """The queue for a message: by the hash of its sharding key (SelectMessageQueueByHash: Java's
        String.hashCode), else the next one round-robin."""
        qs = self.queues(topic)
        if sharding_key is not None:
            return qs[abs(java_string_hash(sharding_key)) % len(qs)]
        self._next += 1
        return qs[self._next % len(qs)]

    def another(self, mq: MessageQueue) -> MessageQueue:
        """The next queue round-robin, of another broker when the topic has one (a retry)."""
        qs = self.queues(mq.topic)
        for _ in range(len(qs)):
            self._next += 1
            candidate = qs[self._next % len(qs)]
            if candidate.broker_name != mq.broker_name:
                return candidate
        return self.choose(mq.topic, None)


# -- sending


@dataclass(slots=True)
class SendUnit:
    """One request: a SEND_BATCH_MESSAGE of messages of one queue, or a SEND_MESSAGE_V2 of one message.
    Its bytes are made once, so a retry sends the same ids."""

    mq: MessageQueue
    messages: list[Message]
    ordered: bool
    body: bytes
    properties: str  # the request header's
    sys_flag: int
    attempts: int = 0


def unit_for(mq: MessageQueue, messages: list[Message], ordered: bool) -> SendUnit:
    """The request for ``messages`` to ``mq``: a batch, or (one message) a single send, which alone can
    carry a delay or a transaction's half message."""
    if len(messages) == 1:
        msg = messages[0]
        sys_flag = 0
        if msg.properties.get(MessageConst.TRANSACTION_PREPARED) == "true":
            sys_flag = MessageSysFlag.TRANSACTION_PREPARED_TYPE
        return SendUnit(mq, messages, ordered, msg.body, properties_to_string(msg.properties), sys_flag)
    body = encode_batch([(m.flag, m.body, properties_to_string(m.properties)) for m in messages])
    return SendUnit(mq, messages, ordered, body, properties_to_string({MessageConst.WAIT_STORE_MSG_OK: "true"}), 0)


SentCallback = Callable[[SendUnit, SendMessageResponseHeader], None]


class WindowedSender:
    """Sends SendUnits to their queues' masters with at most ``settings.window`` awaiting their answer
    (pipelined on one connection per broker), retrying as Apache's producer does; SinkError when a unit
    fails for good. ``on_sent(unit, answer)`` sees each stored unit. ``flush()`` waits for all."""

    def __init__(self, settings: SinkSettings, chooser: QueueChooser, on_sent: SentCallback | None = None) -> None:
        self.settings = settings
        self.chooser = chooser
        self.on_sent = on_sent
        self.messages = 0  # stored so far
        self.requests = 0
        self._connect = settings.connection().connect
        self._conns: dict[str, BlockingConnection] = {}
        self._in_flight: OrderedDict[tuple[str, int], SendUnit] = OrderedDict()  # (addr, opaque), oldest first
        self._per_queue: Counter[MessageQueue] = Counter()

    def send(self, unit: SendUnit) -> None:
        """Hand ``unit`` over; blocks while the window is full (or, keyed, while its queue has one out)."""
        if len(unit.body) > self.settings.max_message_size:
            raise SinkError(
                f"a message of {len(unit.body)} bytes to {unit.mq.topic} is over maxMessageSize "
                f"{self.settings.max_message_size}"
            )
        while len(self._in_flight) >= self.settings.window or (unit.ordered and self._per_queue[unit.mq]):
            self._complete_oldest()
        self._write(unit)

    def flush(self) -> None:
        while self._in_flight:
            self._complete_oldest()

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()

    def _write(self, unit: SendUnit) -> None:
        mq = unit.mq
        addr = self.chooser.master(mq.broker_name)
        header = SendMessageRequestHeader(
            producer_group=self.settings.producer_group,
            topic=mq.topic,
            default_topic=AUTO_CREATE_TOPIC_KEY_TOPIC,
            default_topic_queue_nums=DEFAULT_TOPIC_QUEUE_NUMS,
            queue_id=mq.queue_id,
            sys_flag=unit.sys_flag,
            born_timestamp=int(time.time() * 1000),
            flag=unit.messages[0].flag if len(unit.messages) == 1 else 0,
            properties=unit.properties,
            reconsume_times=0,
            batch=len(unit.messages) > 1,
            bname=mq.broker_name,
        )
        code = RequestCode.SEND_BATCH_MESSAGE if header.batch else RequestCode.SEND_MESSAGE_V2
        conn = self._conns.get(addr) or self._conns.setdefault(addr, self._connect(addr))
        unit.attempts += 1
        try:
            opaque = conn.send(RemotingCommand.request(code, header.encode_v2(), unit.body))
        except OSError as e:
            self._lost(addr, e, unit)
            return
        self._in_flight[(addr, opaque)] = unit
        self._per_queue[mq] += 1

    def _complete_oldest(self) -> None:
        """Wait for the answer to the oldest request in flight (taking the others its broker sends first)."""
        wanted = next(iter(self._in_flight))
        addr = wanted[0]
        conn = self._conns[addr]
        while wanted in self._in_flight:
            try:
                response = conn.receive()
            except OSError as e:  # the connection is closed: what it had in flight may or may not be stored
                self._lost(addr, e)
                return
            unit = self._in_flight.pop((addr, response.opaque), None)
            if unit is not None:
                self._per_queue[unit.mq] -= 1
                self._answered(unit, response)

    def _answered(self, unit: SendUnit, response: RemotingCommand) -> None:
        if response.code in SEND_OK_CODES:
            self.messages += len(unit.messages)
            self.requests += 1
            if self.on_sent is not None:
                self.on_sent(unit, SendMessageResponseHeader.decode(response.ext_fields))
            return
        failure = (
            f"send to {unit.mq.broker_name} queue {unit.mq.queue_id} of {unit.mq.topic} failed: "
            f"code {response_code_text(response.code)}: {response.remark}"
        )
        if response.code not in RETRY_RESPONSE_CODES or unit.attempts > self.settings.retries:
            raise SinkError(failure + _tried(unit))
        log.warn("{failure}; sending again", failure=failure)
        self._retry(unit)

    def _lost(self, addr: str, error: OSError, unsent: SendUnit | None = None) -> None:
        """The connection to ``addr`` failed: every request it had in flight (and ``unsent``) goes again."""
        self._conns.pop(addr).close()
        units = [self._in_flight.pop(key) for key in [k for k in self._in_flight if k[0] == addr]]
        for unit in units:
            self._per_queue[unit.mq] -= 1
        if unsent is not None:
            units.append(unsent)
        for unit in units:
            if unit.attempts > self.settings.retries:
                raise SinkError(
                    f"send to {unit.mq.broker_name} queue {unit.mq.queue_id} of {unit.mq.topic} failed: "
                    f"{addr}: {str(error) or type(error).__name__}{_tried(unit)}"
                ) from error
        log.warn("{addr}: {error}; sending {n} request(s) again", addr=addr, error=error, n=len(units))
        for unit in units:
            self._retry(unit)

    def _retry(self, unit: SendUnit) -> None:
        if not unit.ordered:
            unit.mq = self.chooser.another(unit.mq)  # keyed rows keep their queue
        self.send(unit)


def _tried(unit: SendUnit) -> str:
    return f" (after {unit.attempts} attempts)" if unit.attempts > 1 else ""


def send_messages(settings: SinkSettings, sender: WindowedSender, outgoing: Iterable[OutgoingMessage]) -> None:
    """Group ``outgoing`` into requests and send them: rows without a key in batches of ``batchSize``
    (round-robin, a batch per queue choice), keyed rows in per-queue batches in row order, delayed rows
    alone; then wait for every answer."""
    limit = settings.max_message_size
    open_batch: dict[str, tuple[list[Message], int]] = {}  # topic -> (messages, bytes): rows without a key
    keyed: dict[MessageQueue, tuple[list[Message], int]] = {}
    keyed_bytes = 0

    def send_keyed(mq: MessageQueue) -> None:
        nonlocal keyed_bytes
        msgs, size = keyed.pop(mq)
        keyed_bytes -= size
        sender.send(unit_for(mq, msgs, True))

    for out in outgoing:
        msg = out.message
        size = _BATCH_ENTRY_OVERHEAD + len(msg.body) + len(properties_to_string(msg.properties))
        if out.sharding_key is not None:
            mq = sender.chooser.choose(msg.topic, out.sharding_key)
            if mq in keyed and (is_delayed(msg) or keyed[mq][1] + size > limit):
                send_keyed(mq)
            if is_delayed(msg):
                sender.send(unit_for(mq, [msg], True))
                continue
            msgs, held = keyed.get(mq, ([], 0))
            msgs.append(msg)
            keyed[mq] = (msgs, held + size)
            keyed_bytes += size
            if len(msgs) >= settings.batch_size:
                send_keyed(mq)
            elif keyed_bytes > MAX_BUFFERED_BYTES:
                send_keyed(max(keyed, key=lambda q: keyed[q][1]))
            continue
        if is_delayed(msg):
            sender.send(unit_for(sender.chooser.choose(msg.topic, None), [msg], False))
            continue
        msgs, held = open_batch.get(msg.topic, ([], 0))
        if msgs and held + size > limit:
            sender.send(unit_for(sender.chooser.choose(msg.topic, None), msgs, False))
            msgs, held = [], 0
        msgs.append(msg)
        open_batch[msg.topic] = (msgs, held + size)
        if len(msgs) >= settings.batch_size:
            sender.send(unit_for(sender.chooser.choose(msg.topic, None), msgs, False))
            del open_batch[msg.topic]
    for topic, (msgs, _) in open_batch.items():
        sender.send(unit_for(sender.chooser.choose(topic, None), msgs, False))
    for mq in list(keyed):
        send_keyed(mq)
    sender.flush()


def open_producer(settings: SinkSettings, on_sent: SentCallback | None = None) -> WindowedSender:
    """A task's sender, with its own QueueChooser; ``close()`` it when done."""
    return WindowedSender(settings, QueueChooser(settings), on_sent)


# -- delivery guarantees and the writers


@dataclass
class SentMessages(WriterCommitMessage):
    """What a task stored: messages and the requests that carried them."""

    messages: int
    requests: int


class Delivery(Protocol):
    def write(self, settings: SinkSettings, schema: StructType, rows: Iterator[Any]) -> WriterCommitMessage:
        """In a task: send ``rows`` (Spark Rows, or tuples as arrow_rows makes them); what the driver's commit
        or abort gets."""
        ...

    def commit(self, settings: SinkSettings, messages: list[WriterCommitMessage], batch_id: int | None) -> None:
        """On the driver, once every task of the write (``batch_id`` when streaming) has succeeded."""
        ...

    def abort(self, settings: SinkSettings, messages: list[WriterCommitMessage], batch_id: int | None) -> None:
        """On the driver, when the write failed; ``messages`` holds None for the tasks that did not finish."""
        ...


class AtLeastOnce:
    """Every row is stored once its task ends; a retried task (or a restarted stream) may store some again."""

    def write(self, settings: SinkSettings, schema: StructType, rows: Iterator[Any]) -> WriterCommitMessage:
        sender = open_producer(settings)
        try:
            send_messages(settings, sender, row_messages(settings, schema, rows))
        finally:
            sender.close()
        return SentMessages(sender.messages, sender.requests)

    def commit(self, settings: SinkSettings, messages: list[WriterCommitMessage], batch_id: int | None) -> None:
        log.info("{n} messages stored by {tasks} tasks{batch}", n=_stored(messages), tasks=len(messages),
                 batch=_batch(batch_id))  # fmt: skip

    def abort(self, settings: SinkSettings, messages: list[WriterCommitMessage], batch_id: int | None) -> None:
        log.warn("write aborted{batch}: {n} messages already stored stay", n=_stored(messages), batch=_batch(batch_id))


def _stored(messages: list[WriterCommitMessage]) -> int:
    return sum(m.messages for m in messages if isinstance(m, SentMessages))


def _batch(batch_id: int | None) -> str:
    return "" if batch_id is None else f" (batch {batch_id})"


def delivery_for(settings: SinkSettings) -> Delivery:
    if settings.delivery_guarantee == "exactly-once":
        from .exactly_once import ExactlyOnce  # here: exactly_once builds on this module

        return ExactlyOnce()
    return AtLeastOnce()


def arrow_rows(batches: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
    """The rows of Arrow record batches as tuples, indexed as Spark Rows are (maps as (key, value) pairs):
    several times cheaper than the Rows Spark would make of them."""
    for batch in batches:
        yield from zip(*(column.to_pylist() for column in batch.columns), strict=True)


class RocketMQBatchWriter(DataSourceArrowWriter):
    """``df.write.format("rocketmq")``: each task sends its rows; the driver commits or aborts per the
    delivery guarantee."""

    def __init__(self, settings: SinkSettings, schema: StructType) -> None:
        column_indexes(settings, schema)  # a bad column fails the query on the driver, before any task
        self.settings = settings
        self.schema = schema
        self.delivery = delivery_for(settings)

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return self.delivery.write(self.settings, self.schema, arrow_rows(iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:  # type: ignore[override]
        self.delivery.commit(self.settings, messages, None)  # type: ignore[arg-type]

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:  # type: ignore[override]
        self.delivery.abort(self.settings, messages, None)  # type: ignore[arg-type]


class RocketMQStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("rocketmq")``: as the batch writer, per micro-batch."""

    def __init__(self, settings: SinkSettings, schema: StructType) -> None:
        column_indexes(settings, schema)
        self.settings = settings
        self.schema = schema
        self.delivery = delivery_for(settings)

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return self.delivery.write(self.settings, self.schema, arrow_rows(iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]
        self.delivery.commit(self.settings, messages, batchId)  # type: ignore[arg-type]

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]
        self.delivery.abort(self.settings, messages, batchId)  # type: ignore[arg-type]
