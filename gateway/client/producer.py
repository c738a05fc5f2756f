"""Producer (DefaultMQProducer): sync, async, oneway and batch sends, to a chosen queue or by a selector.

Sends go round-robin over the topic's writable queues; a failed sync or async send is retried on the
next queue of another broker (response codes 1, 14, 16, 17, 204, 205 and connection errors), within the
send timeout. Topics unknown to the name servers are routed like TBW102 so the broker auto-creates
them. Bodies of at least 4 KiB (single messages only) travel zlib-compressed.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from gateway.remoting.bodies import MessageQueue, TopicRouteData
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.headers import (
    CheckTransactionStateRequestHeader,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
)
from gateway.remoting.message import (
    Message,
    MessageConst,
    MessageExt,
    MessageSysFlag,
    encode_batch,
    properties_to_string,
)
from gateway.remoting.names import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    NOT_ALLOWED_SEND_TOPICS,
    RETRY_GROUP_TOPIC_PREFIX,
    topic_problem,
)

from .errors import REMOTING_ERRORS, MQBrokerError, MQClientError
from .instance import ClientInstance, resolve_client
from .message_id import set_uniq_id
from .route import TopicPublishInfo, publish_queues
from .security import ClientSecurity
from .trace import SendTraceHook, TraceDispatcher

log = Logger()

DEFAULT_TOPIC = AUTO_CREATE_TOPIC_KEY_TOPIC
# ZLIB in the compression-type bits, as 4.9.4+ clients add to COMPRESSED_FLAG.
COMPRESSION_ZLIB_TYPE = 0x300
# Broker answers after which the next queue (of another broker) is tried.
RETRY_RESPONSE_CODES = frozenset(
    {
        ResponseCode.TOPIC_NOT_EXIST,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.SYSTEM_ERROR,
        ResponseCode.NO_PERMISSION,
        ResponseCode.NO_BUYER_ID,
        ResponseCode.NOT_IN_CURRENT_UNIT,
    }
)


class SendStatus(Enum):
    SEND_OK = ResponseCode.SUCCESS
    FLUSH_DISK_TIMEOUT = ResponseCode.FLUSH_DISK_TIMEOUT
    FLUSH_SLAVE_TIMEOUT = ResponseCode.FLUSH_SLAVE_TIMEOUT
    SLAVE_NOT_AVAILABLE = ResponseCode.SLAVE_NOT_AVAILABLE


@dataclass(slots=True)
class SendResult:
    """A stored message: ``msg_id`` is its UNIQ_KEY (comma-joined for a batch), ``offset_msg_id`` the broker's id."""

    status: SendStatus
    msg_id: str
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int
    transaction_id: str | None = None
    region_id: str = "DefaultRegion"
    trace_on: bool = True
    recall_handle: str | None = None  # 5.3: a delayed message's, for RECALL_MESSAGE


MessageQueueSelector = Callable[[list[MessageQueue], Message, Any], MessageQueue]


def build_message(
    topic: str,
    body: bytes,
    *,
    tags: str | None = None,
    keys: str | Iterable[str] | None = None,
    properties: dict[str, str] | None = None,
    flag: int = 0,
    delay_level: int = 0,
    deliver_time_ms: int | None = None,
    wait_store_msg_ok: bool = True,
) -> Message:
    """A Message as Java's constructors make one: TAGS, KEYS (space-joined), DELAY, WAIT, user properties.

    ``delay_level`` (1..18 by default) delays delivery by the broker's ``messageDelayLevel`` entry;
    ``deliver_time_ms`` asks a RocketMQ 5 broker (or ours) to deliver at that epoch time (TIMER_DELIVER_MS).
    """
    props = dict(properties or {})
    if tags:
        props[MessageConst.TAGS] = tags
    if keys:
        props[MessageConst.KEYS] = keys if isinstance(keys, str) else MessageConst.KEY_SEPARATOR.join(keys)
    if delay_level > 0:
        props[MessageConst.DELAY_TIME_LEVEL] = str(delay_level)
    if deliver_time_ms is not None:
        props[MessageConst.TIMER_DELIVER_MS] = str(deliver_time_ms)
    props[MessageConst.WAIT_STORE_MSG_OK] = "true" if wait_store_msg_ok else "false"
    return Message(topic=topic, body=body, flag=flag, properties=props)


def check_topic(topic: str) -> None:
    """Validators.checkTopic plus the system topics nobody may send to."""
    problem = topic_problem(topic)
    if problem is not None:
        raise MQClientError(problem, ResponseCode.MESSAGE_ILLEGAL)
    if topic in NOT_ALLOWED_SEND_TOPICS:
        raise MQClientError(f"Sending message to topic[{topic}] is forbidden.", ResponseCode.MESSAGE_ILLEGAL)


@dataclass(slots=True)
class _Outgoing:
    """A message or batch ready for the wire; built once, so retries resend the same ids and bytes."""

    topic: str
    body: bytes
    flag: int
    properties: dict[str, str]
    sys_flag: int
    batch: bool
    msg_id: str
    reconsume_times: int = 0
    max_reconsume_times: int | None = None


class Producer:
    """A producer group's sender. ``start()`` before sending, ``shutdown()`` at the end; times in seconds.

    Pass ``namesrv_addr`` (``"host:port;host:port"``) to get a client instance of its own, or ``client``
    to share one with other groups.
    """

    def __init__(
        self,
        group: str,
        namesrv_addr: str | Sequence[str] | None = None,
        *,
        client: ClientInstance | None = None,
        reactor: Any = None,
        security: ClientSecurity | None = None,
        send_timeout: float = 3.0,
        retry_times_when_send_failed: int = 2,
        compress_msg_body_over_howmuch: int = 4096,
        compress_level: int = 5,
        max_message_size: int = 4 * 1024 * 1024,
        create_topic_key: str = DEFAULT_TOPIC,
        default_topic_queue_nums: int = 4,
        enable_msg_trace: bool = False,
        custom_trace_topic: str | None = None,
    ) -> None:
        self.group = group
        self.client = resolve_client(namesrv_addr, client, reactor, security)
        # Message trace: Pub (and EndTransaction) records to the trace topic (gateway.client.trace).
        self.trace: SendTraceHook | None = None
        if enable_msg_trace:
            self.trace = SendTraceHook(TraceDispatcher(self.client, group, "PRODUCER", custom_trace_topic), group)
        self.send_timeout = send_timeout
        self.retry_times_when_send_failed = retry_times_when_send_failed
        self.compress_msg_body_over_howmuch = compress_msg_body_over_howmuch
        self.compress_level = compress_level
        self.max_message_size = max_message_size
        self.create_topic_key = create_topic_key
        self.default_topic_queue_nums = default_topic_queue_nums
        self._publish: dict[str, TopicPublishInfo] = {}

    # -- lifecycle

    def start(self) -> Deferred[None]:
        """Register the group with the client instance and heartbeat."""
        self.client.register_producer(self)
        return Deferred.fromCoroutine(self.client.send_heartbeat_to_all_brokers())

    def shutdown(self) -> Deferred[None]:
        """Send the traces still waiting, then unregister the group from the brokers (and stop the client
        instance if it was the last group)."""

        async def shutdown() -> None:
            if self.trace is not None:
                await self.trace.dispatcher.shutdown()
            await self.client.unregister_producer(self.group)

        return Deferred.fromCoroutine(shutdown())

    # -- MQProducerInner

    def publish_topics(self) -> Iterable[str]:
        return list(self._publish)

    def update_topic_publish_info(self, topic: str, route: TopicRouteData) -> None:
        info = self._publish.get(topic)
        if info is not None:
            info.message_queues = publish_queues(topic, route)

    def check_transaction_state(
        self, channel: Any, msg: MessageExt, header: CheckTransactionStateRequestHeader
    ) -> None:
        """A broker's transaction check: only a TransactionProducer (with a listener) answers it."""
        log.warn(
            "transaction check of {id} ignored: group {group} has no transaction listener",
            id=header.msg_id,
            group=self.group,
        )

    # -- sending

    def send(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None = None,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
        timeout: float | None = None,
    ) -> Deferred[SendResult]:
        """Send and wait for the broker: to ``queue``, to ``selector(queues, msg, arg)``'s choice, or round-robin
        with retries on other brokers."""
        choose = _chooser(msg, selector, arg)
        return Deferred.fromCoroutine(self._send(lambda: self._prepare(msg), queue, choose, timeout, oneway=False))

    def send_async(
        self,
        msg: Message,
        on_success: Callable[[SendResult], Any],
        on_exception: Callable[[BaseException], Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Send in the background and call ``on_success(result)`` or ``on_exception(error)`` (SendCallback)."""
        d = self.send(msg, **kwargs)
        d.addCallback(on_success)
        d.addErrback(lambda f: on_exception(f.value) if on_exception else log.failure("async send failed", f))

    def send_oneway(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None = None,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
    ) -> Deferred[None]:
        """Send without waiting for the broker; one attempt. Fires once the request is written."""
        choose = _chooser(msg, selector, arg)
        return Deferred.fromCoroutine(self._send(lambda: self._prepare(msg), queue, choose, None, oneway=True))

    def send_batch(
        self, msgs: Sequence[Message], *, queue: MessageQueue | None = None, timeout: float | None = None
    ) -> Deferred[SendResult]:
        """SEND_BATCH_MESSAGE: messages of one topic stored together; each gets its own UNIQ_KEY."""
        return Deferred.fromCoroutine(self._send(lambda: self._prepare_batch(msgs), queue, None, timeout, oneway=False))

    def fetch_publish_message_queues(self, topic: str) -> Deferred[list[MessageQueue]]:
        """The topic's writable queues."""

        async def fetch() -> list[MessageQueue]:
            return list((await self._find_publish_info(topic)).message_queues)

        return Deferred.fromCoroutine(fetch())

    # -- internals

    def _prepare(self, msg: Message) -> _Outgoing:
        check_topic(msg.topic)
        self._check_body(msg.body)
        msg_id = set_uniq_id(msg)
        props = dict(msg.properties)
        body = msg.body
        sys_flag = 0
        if len(body) >= self.compress_msg_body_over_howmuch:
            body = zlib.compress(body, self.compress_level)
            sys_flag |= MessageSysFlag.COMPRESSED_FLAG | COMPRESSION_ZLIB_TYPE
        if props.get(MessageConst.TRANSACTION_PREPARED) == "true":
            sys_flag |= MessageSysFlag.TRANSACTION_PREPARED_TYPE
        out = _Outgoing(msg.topic, body, msg.flag, props, sys_flag, False, msg_id)
        if msg.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            # A client re-sending to a retry topic passes the counters in the header, not as properties.
            reconsume = props.pop(MessageConst.RECONSUME_TIME, None)
            max_reconsume = props.pop(MessageConst.MAX_RECONSUME_TIMES, None)
            out.reconsume_times = int(reconsume) if reconsume else 0
            out.max_reconsume_times = int(max_reconsume) if max_reconsume else None
        return out

    def _prepare_batch(self, msgs: Sequence[Message]) -> _Outgoing:
        if not msgs:
            raise MQClientError("the batch is empty", ResponseCode.MESSAGE_ILLEGAL)
        first = msgs[0]
        wait = first.properties.get(MessageConst.WAIT_STORE_MSG_OK, "true")
        for m in msgs:
            if m.topic != first.topic:
                raise MQClientError("The topic of the messages in one batch should be the same")
            if m.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                raise MQClientError("Retry Group is not supported for batching")
            if MessageConst.DELAY_TIME_LEVEL in m.properties:
                raise MQClientError("TimeDelayLevel is not supported for batching")
            if m.properties.get(MessageConst.WAIT_STORE_MSG_OK, "true") != wait:
                raise MQClientError("The waitStoreMsgOK of the messages in one batch should the same")
        check_topic(first.topic)
        ids = [set_uniq_id(m) for m in msgs]
        body = encode_batch([(m.flag, m.body, properties_to_string(m.properties)) for m in msgs])
        self._check_body(body)
        return _Outgoing(first.topic, body, 0, {MessageConst.WAIT_STORE_MSG_OK: wait}, 0, True, ",".join(ids))

    def _check_body(self, body: bytes) -> None:
        if not body:
            raise MQClientError("the message body length is zero", ResponseCode.MESSAGE_ILLEGAL)
        if len(body) > self.max_message_size:
            raise MQClientError(
                f"the message body size over max value, MAX: {self.max_message_size}", ResponseCode.MESSAGE_ILLEGAL
            )

    async def _find_publish_info(self, topic: str) -> TopicPublishInfo:
        """tryToFindTopicPublishInfo: cached route, else the name server's, else TBW102's."""
        info = self._publish.setdefault(topic, TopicPublishInfo())
        if not info.ok():
            await self.client.update_topic_route_from_namesrv(topic)
        if not info.ok():
            await self.client.update_topic_route_from_default(
                topic, self.create_topic_key, self.default_topic_queue_nums
            )
        if not info.ok():
            raise self.client.no_route_error(f"No route info of this topic: {topic}")
        return info

    async def _send(
        self,
        prepare: Callable[[], _Outgoing],
        queue: MessageQueue | None,
        choose: Callable[[list[MessageQueue]], MessageQueue] | None,
        timeout: float | None,
        oneway: bool,
    ) -> Any:
        # Prepared in here so that an invalid message fails the Deferred (and reaches on_exception).
        out = prepare()
        timeout = self.send_timeout if timeout is None else timeout
        begin = self.client.now()
        info = await self._find_publish_info(out.topic)
        if choose is not None:
            queue = choose(list(info.message_queues))
        if queue is not None:
            if queue.topic != out.topic:
                raise MQClientError(f"message's topic not equal mq's topic: {out.topic} {queue.topic}")
            return await self._send_kernel(out, queue, timeout, oneway)
        times_total = 1 if oneway else 1 + self.retry_times_when_send_failed
        last_broker: str | None = None
        last_error: BaseException | None = None
        brokers_sent = []
        for _ in range(times_total):
            mq = info.select_one_message_queue(last_broker)
            last_broker = mq.broker_name
            brokers_sent.append(mq.broker_name)
            cost = self.client.now() - begin
            if cost > timeout:
                raise MQClientError(f"sendDefaultImpl call timeout after {cost:.3f}s")
            try:
                return await self._send_kernel(out, mq, timeout - cost, oneway)
            except MQBrokerError as e:
                if e.code not in RETRY_RESPONSE_CODES:
                    raise
                last_error = e
            except (MQClientError, *REMOTING_ERRORS) as e:
                last_error = e
            log.warn("send to {mq} failed, trying again: {error}", mq=mq, error=last_error)
        raise MQClientError(
            f"Send [{times_total}] times, still failed, cost [{int((self.client.now() - begin) * 1000)}]ms, "
            f"Topic: {out.topic}, BrokersSent: {brokers_sent}: {last_error}",
            getattr(last_error, "code", None),
        ) from last_error

    async def _send_kernel(self, out: _Outgoing, mq: MessageQueue, timeout: float, oneway: bool) -> SendResult | None:
        addr = self.client.find_broker_addr_in_publish(mq.broker_name)
        if addr is None:
            await self._find_publish_info(mq.topic)
            addr = self.client.find_broker_addr_in_publish(mq.broker_name)
        if addr is None:
            raise MQClientError(f"The broker[{mq.broker_name}] not exist")
        header = SendMessageRequestHeader(
            producer_group=self.group,
            topic=out.topic,
            default_topic=self.create_topic_key,
            default_topic_queue_nums=self.default_topic_queue_nums,
            queue_id=mq.queue_id,
            sys_flag=out.sys_flag,
            born_timestamp=int(time.time() * 1000),
            flag=out.flag,
            properties=properties_to_string(out.properties),
            reconsume_times=out.reconsume_times,
            max_reconsume_times=out.max_reconsume_times,
            batch=out.batch,
            bname=mq.broker_name,
        )
        code = RequestCode.SEND_BATCH_MESSAGE if out.batch else RequestCode.SEND_MESSAGE_V2
        if oneway:
            await self.client.api.send_message_oneway(addr, header, out.body, code)
            return None
        trace = None if self.trace is None else self.trace.before(out.topic, out.properties, len(out.body), addr)
        response = await self.client.api.send_message(addr, header, out.body, code, timeout)
        rh = SendMessageResponseHeader.decode(response.ext_fields)
        ext = response.ext_fields or {}
        result = SendResult(
            status=SendStatus(response.code),
            msg_id=out.msg_id,
            offset_msg_id=rh.msg_id,
            queue=MessageQueue(out.topic, mq.broker_name, rh.queue_id),
            queue_offset=rh.queue_offset,
            transaction_id=rh.transaction_id,
            region_id=ext.get(MessageConst.MSG_REGION, "DefaultRegion"),
            trace_on=ext.get(MessageConst.TRACE_SWITCH) != "false",
            recall_handle=rh.recall_handle,
        )
        if self.trace is not None:
            self.trace.after(trace, result)
        return result


def _chooser(
    msg: Message, selector: MessageQueueSelector | None, arg: Any
) -> Callable[[list[MessageQueue]], MessageQueue] | None:
    return None if selector is None else lambda queues: selector(queues, msg, arg)
