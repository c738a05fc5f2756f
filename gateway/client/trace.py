"""Message trace for the Python client: the hooks Java's client runs (SendMessageTraceHookImpl,
ConsumeMessageTraceHookImpl, EndTransactionTraceHookImpl) and its AsyncTraceDispatcher.

A hook builds a TraceContext and hands it to the dispatcher, which encodes it at once and ships the
records in the background as messages to the trace topic (``RMQ_SYS_TRACE_TOPIC`` unless a custom one is
given): one message per trace topic when ~118 KB of records are waiting or 500 ms after the first, with
every traced msgId and business key in its KEYS, so that ``mqadmin queryMsgTraceById`` finds them. A
trace never slows or fails the traced send or consume: hooks swallow their errors, a full queue drops
contexts (logged), and trace messages are sent without being awaited.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred, DeferredList
from twisted.logger import Logger

from gateway.remoting.message import Message, MessageConst, MessageExt
from gateway.remoting.names import TRACE_TOPIC
from gateway.trace.codec import (
    DEFAULT_REGION,
    ConsumeReturnType,
    MessageType,
    TraceBean,
    TraceContext,
    TraceType,
    encode_context,
)

from .message_id import create_uniq_id

if TYPE_CHECKING:
    from .instance import ClientInstance
    from .producer import Producer, SendResult

log = Logger()

GROUP_NAME_PREFIX = "_INNER_TRACE_PRODUCER"
MAX_MESSAGE_SIZE = 128_000  # the trace producer's maxMessageSize; a message is sent 10 KB before it
WAIT_TIME_THRESHOLD = 0.5  # seconds a record waits at most
QUEUE_SIZE = 2048  # contexts waiting to be sent, beyond which new ones are dropped
_counter = itertools.count(1)


def now_ms() -> int:
    return int(time.time() * 1000)


class TraceDispatcher:
    """AsyncTraceDispatcher: batches encoded contexts per trace topic and sends them with an inner producer
    of the same client instance (group ``_INNER_TRACE_PRODUCER-<group>-<type>-<n>``)."""

    def __init__(self, client: ClientInstance, group: str, kind: str, trace_topic: str | None = None) -> None:
        self.client = client
        self.trace_topic = trace_topic or TRACE_TOPIC
        self.producer_group = f"{GROUP_NAME_PREFIX}-{group}-{kind}-{next(_counter)}"
        self._producer: Producer | None = None
        self._data: list[str] = []
        self._keys: set[str] = set()
        self._size = 0
        self._contexts = 0
        self._timer: Any = None
        self._sending: set[Deferred[Any]] = set()
        self.dropped = 0

    def append(self, ctx: TraceContext) -> None:
        """Queue ``ctx``'s records; never raises."""
        try:
            if self._contexts >= QUEUE_SIZE:
                self.dropped += 1
                if self.dropped % 1000 == 1:
                    log.warn("trace queue full, {n} contexts dropped so far", n=self.dropped)
                return
            data, keys = encode_context(ctx)
            self._data.append(data)
            self._keys.update(keys)
            self._size += len(data)
            self._contexts += 1
            if self._size >= MAX_MESSAGE_SIZE - 10_000:
                self.flush()
            elif self._timer is None:
                self._timer = self.client.reactor.callLater(WAIT_TIME_THRESHOLD, self.flush)
        except Exception:
            log.failure("trace context dropped")

    def flush(self) -> None:
        """Send what is waiting now."""
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
        if not self._data:
            return
        body = "".join(self._data).encode("utf-8")
        keys = " ".join(sorted(self._keys))
        self._data, self._keys, self._size, self._contexts = [], set(), 0, 0
        msg = Message(self.trace_topic, body, 0, {MessageConst.KEYS: keys, MessageConst.WAIT_STORE_MSG_OK: "true"})
        d = self._trace_producer().send(msg, timeout=5.0)
        self._sending.add(d)
        d.addErrback(lambda f: log.warn("trace data not sent: {error}", error=f.value))
        d.addBoth(lambda _: self._sending.discard(d))

    def _trace_producer(self) -> Producer:
        if self._producer is None:
            from .producer import Producer

            self._producer = Producer(self.producer_group, client=self.client)
            self.client.register_producer(self._producer)
        return self._producer

    async def shutdown(self) -> None:
        """Send what is waiting, wait for the sends in flight, and leave the client instance."""
        self.flush()
        if self._sending:
            await DeferredList(list(self._sending), consumeErrors=True)
        if self._producer is not None:
            self.client.producers.pop(self._producer.group, None)


def message_type(props: dict[str, str]) -> MessageType:
    if props.get(MessageConst.TRANSACTION_PREPARED) == "true":
        return MessageType.Trans_Msg_Half
    if any(k in props for k in (MessageConst.DELAY_TIME_LEVEL, MessageConst.TIMER_DELIVER_MS, "__STARTDELIVERTIME")):
        return MessageType.Delay_Msg
    return MessageType.Normal_Msg


class SendTraceHook:
    """Pub records: one per send attempt that got an answer (a failed attempt leaves none, as in Java)."""

    def __init__(self, dispatcher: TraceDispatcher, group: str) -> None:
        self.dispatcher = dispatcher
        self.group = group

    def before(self, topic: str, properties: dict[str, str], body_length: int, broker_addr: str) -> TraceContext | None:
        if topic == self.dispatcher.trace_topic:
            return None
        bean = TraceBean(
            topic=topic,
            tags=properties.get(MessageConst.TAGS),
            keys=properties.get(MessageConst.KEYS),
            store_host=broker_addr,
            body_length=body_length,
            msg_type=message_type(properties),
        )
        return TraceContext(TraceType.Pub, now_ms(), self.group, beans=[bean])

    def after(self, ctx: TraceContext | None, result: SendResult) -> None:
        if ctx is None or not result.trace_on:
            return
        bean = ctx.beans[0]
        ctx.cost_time = now_ms() - ctx.timestamp
        ctx.success = result.status.name == "SEND_OK"
        ctx.region_id = result.region_id
        bean.msg_id = result.msg_id
        bean.offset_msg_id = result.offset_msg_id
        self.dispatcher.append(ctx)

    def end_transaction(
        self,
        msg: Message | MessageExt,
        msg_id: str,
        broker_addr: str,
        state: str,
        from_check: bool,
    ) -> None:
        """EndTransaction: once END_TRANSACTION is written (a check-back's answer included)."""
        if msg.topic == self.dispatcher.trace_topic:
            return
        bean = TraceBean(
            topic=msg.topic,
            msg_id=msg_id,
            tags=msg.properties.get(MessageConst.TAGS),
            keys=msg.properties.get(MessageConst.KEYS),
            store_host=broker_addr,
            msg_type=MessageType.Trans_msg_Commit,
            transaction_id=msg_id,
            transaction_state=state,
            from_transaction_check=from_check,
        )
        region = msg.properties.get(MessageConst.MSG_REGION) or DEFAULT_REGION
        self.dispatcher.append(TraceContext(TraceType.EndTransaction, now_ms(), self.group, region, beans=[bean]))


class ConsumeTraceHook:
    """SubBefore (one record per message, before the listener) and SubAfter (after it) of a consume call."""

    def __init__(self, dispatcher: TraceDispatcher, group: str) -> None:
        self.dispatcher = dispatcher
        self.group = group

    def before(self, msgs: Sequence[MessageExt]) -> TraceContext | None:
        beans = []
        region: str | None = None
        for m in msgs:
            if m.properties.get(MessageConst.TRACE_SWITCH) == "false":
                continue
            region = m.properties.get(MessageConst.MSG_REGION)
            beans.append(
                TraceBean(
                    topic=m.topic,
                    msg_id=m.client_msg_id,
                    tags=m.tags,
                    keys=m.keys,
                    body_length=m.store_size,
                    retry_times=m.reconsume_times,
                )
            )
        if not beans:
            return None
        ctx = TraceContext(TraceType.SubBefore, now_ms(), self.group, region, request_id=create_uniq_id(), beans=beans)
        self.dispatcher.append(ctx)
        return ctx

    def after(self, before: TraceContext | None, n: int, success: bool, code: ConsumeReturnType) -> None:
        if before is None:
            return
        ctx = TraceContext(
            TraceType.SubAfter,
            now_ms(),
            self.group,
            before.region_id,
            request_id=before.request_id,
            success=success,
            context_code=int(code),
            beans=before.beans,
        )
        ctx.cost_time = (ctx.timestamp - before.timestamp) // max(n, 1)
        self.dispatcher.append(ctx)


def consume_return_type(status: Any, success: Any, raised: bool, elapsed: float, timeout: float) -> ConsumeReturnType:
    """What a consume call came to (ConsumeReturnType), as ConsumeMessageConcurrentlyService decides it."""
    if status is None:
        return ConsumeReturnType.EXCEPTION if raised else ConsumeReturnType.RETURNNULL
    if elapsed >= timeout:
        return ConsumeReturnType.TIME_OUT
    return ConsumeReturnType.SUCCESS if status is success else ConsumeReturnType.FAILED
