"""PushConsumer (DefaultMQPushConsumer, concurrent listener): rebalanced queues, long-polling pull loops,
a listener fed batches of messages, and offsets committed as the lowest message not yet consumed.

Delivery is at-least-once: a message leaves a queue's processing window only after the listener
returned CONSUME_SUCCESS (or, on RECONSUME_LATER, after the broker took it back with
CONSUMER_SEND_MSG_BACK, which redelivers it through ``%RETRY%<group>`` after delay level 3 +
reconsumeTimes and moves it to ``%DLQ%<group>`` after ``max_reconsume_times``; if the broker refuses, a
copy is sent to the retry topic as Java does, and if that fails too the message is re-consumed locally
after ``reconsume_later_delay``). A clean shutdown waits for running listeners, then commits, so a consumer
restarted in the same group continues exactly where the previous one stopped.

The listener runs in the reactor thread; it may return a status, a Deferred, or a coroutine. At most
``consume_concurrency`` listener calls run at once.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable, Sequence
from enum import Enum
from typing import Any

from twisted.internet.defer import Deferred, DeferredList, DeferredSemaphore, TimeoutError, maybeDeferred
from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger

from gateway.remoting.bodies import (
    ConsumeFromWhere,
    ConsumerData,
    ConsumeType,
    MessageModel,
    MessageQueue,
    SubscriptionData,
)
from gateway.remoting.codes import ResponseCode
from gateway.remoting.headers import PullSysFlag
from gateway.remoting.message import Message, MessageConst, MessageExt
from gateway.remoting.names import RETRY_GROUP_TOPIC_PREFIX

from .admin import MQAdmin
from .consume_orderly import ConsumeMessageOrderlyService, MessageListenerOrderly
from .consumer import PullAPIWrapper, PullStatus, make_offset_store
from .errors import MQBrokerError, MQClientError
from .instance import CLIENT_INNER_PRODUCER_GROUP, ClientInstance, call_logged, resolve_client
from .message_selector import MessageSelector
from .process_queue import ProcessQueue, PullRequest
from .producer import Producer
from .rebalance import AllocateStrategy, RebalancePushImpl, allocate_averagely
from .security import ClientSecurity
from .trace import ConsumeTraceHook, TraceDispatcher, consume_return_type

log = Logger()

# DefaultMQPushConsumerImpl's timings (seconds).
BROKER_SUSPEND_MAX_TIME = 15.0
CONSUMER_TIMEOUT_WHEN_SUSPEND = 30.0
PULL_DELAY_WHEN_FLOW_CONTROL = 0.05
PULL_DELAY_WHEN_EXCEPTION = 3.0
OFFSET_ILLEGAL_FIX_DELAY = 10.0
# The broker forgot our heartbeat (it restarted): say hello again rather than wait up to 30 s.
_HEARTBEAT_AGAIN_CODES = frozenset({ResponseCode.SUBSCRIPTION_NOT_EXIST, ResponseCode.SUBSCRIPTION_NOT_LATEST})


class ConsumeStatus(Enum):
    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


MessageListener = Callable[[list[MessageExt]], "ConsumeStatus | Deferred[ConsumeStatus] | Awaitable[ConsumeStatus]"]


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


class PushConsumer(MQAdmin):
    """A consumer group member that gets messages pushed to a listener; times in seconds.

    ``consume_timestamp`` (ms) is where CONSUME_FROM_TIMESTAMP starts (default: half an hour before
    the consumer was made). Pulling a queue pauses while it holds more than ``pull_threshold_for_queue``
    messages, ``pull_threshold_size_for_queue`` MiB, or a span of ``consume_concurrently_max_span``
    offsets. BROADCASTING members keep offsets in ``offset_store_dir``.
    """

    def __init__(
        self,
        group: str,
        namesrv_addr: str | Sequence[str] | None = None,
        *,
        client: ClientInstance | None = None,
        reactor: Any = None,
        security: ClientSecurity | None = None,
        message_model: MessageModel = MessageModel.CLUSTERING,
        consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        consume_timestamp: int | None = None,
        allocate: AllocateStrategy = allocate_averagely,
        pull_batch_size: int = 32,
        consume_message_batch_max_size: int = 1,
        consume_concurrency: int = 20,
        pull_threshold_for_queue: int = 1000,
        pull_threshold_size_for_queue: int = 100,
        consume_concurrently_max_span: int = 2000,
        max_reconsume_times: int = 16,
        reconsume_later_delay: float = 5.0,
        await_termination: float = 30.0,
        offset_store_dir: str | os.PathLike[str] | None = None,
        consume_timeout: float = 15 * 60.0,
        enable_msg_trace: bool = False,
        custom_trace_topic: str | None = None,
    ) -> None:
        self.group = group
        self.client = resolve_client(namesrv_addr, client, reactor, security)
        self.consume_timeout = consume_timeout  # a listener call longer than this is traced as TIME_OUT
        # Message trace: SubBefore and SubAfter records to the trace topic (gateway.client.trace).
        self.trace: ConsumeTraceHook | None = None
        if enable_msg_trace:
            self.trace = ConsumeTraceHook(TraceDispatcher(self.client, group, "CONSUMER", custom_trace_topic), group)
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        self.consume_timestamp = consume_timestamp or int((time.time() - 30 * 60) * 1000)
        self.allocate = allocate
        self.pull_batch_size = pull_batch_size
        self.consume_message_batch_max_size = consume_message_batch_max_size
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.pull_threshold_size_for_queue = pull_threshold_size_for_queue
        self.consume_concurrently_max_span = consume_concurrently_max_span
        self.max_reconsume_times = max_reconsume_times
        self.reconsume_later_delay = reconsume_later_delay
        self.await_termination = await_termination
        self.offset_store = make_offset_store(self.client, group, message_model, offset_store_dir)
        self.rebalance = RebalancePushImpl(self)
        self.listener: MessageListener | MessageListenerOrderly | None = None
        self.orderly: ConsumeMessageOrderlyService | None = None
        self.stopping = False
        self._start_timestamp = 0
        self._pull_api = PullAPIWrapper(self.client, group)
        self._consume_slots = DeferredSemaphore(consume_concurrency)
        self._consuming: set[Deferred[None]] = set()
        self._timers: set[IDelayedCall] = set()
        self._retry_topic_learnt = False

    # -- configuration

    def subscribe(self, topic: str, expression: str | MessageSelector = SubscriptionData.SUB_ALL) -> None:
        """Consume ``topic``'s messages whose tag matches ``expression`` (``*`` or ``tagA || tagB``), or that
        a :class:`MessageSelector` selects (``MessageSelector.by_sql("a > 5")``)."""
        selector = expression if isinstance(expression, MessageSelector) else MessageSelector.by_tag(expression)
        self.rebalance.subscription_inner[topic] = selector.subscription_data(topic)
        if self.client.consumers.get(self.group) is self:
            call_logged(self.client.send_heartbeat_to_all_brokers)

    def unsubscribe(self, topic: str) -> None:
        self.rebalance.subscription_inner.pop(topic, None)

    def register_message_listener(self, listener: MessageListener) -> None:
        """``listener(msgs)`` returns CONSUME_SUCCESS or RECONSUME_LATER (an exception counts as the latter)."""
        self.listener = listener

    def register_message_listener_orderly(self, listener: MessageListenerOrderly, **timings: float) -> None:
        """Consume each queue in order, one batch at a time (MessageListenerOrderly): ``listener(msgs)`` returns
        ConsumeOrderlyStatus. In CLUSTERING a queue is consumed only while its broker lock is held. ``timings``
        are ConsumeMessageOrderlyService's (``lock_interval``, ``suspend_current_queue_time``, ...)."""
        self.listener = listener
        self.orderly = ConsumeMessageOrderlyService(self, **timings)

    def assigned_queues(self) -> set[MessageQueue]:
        """The queues this member pulls right now."""
        return set(self.rebalance.process_queue_table)

    # -- admin requests a broker forwards (ClientRemotingProcessor)

    def running_info(self) -> dict[str, Any]:
        """ConsumerRunningInfo, as mqadmin consumerStatus shows it."""
        now_ms = int(time.time() * 1000)
        mq_table = {}
        for mq, pq in sorted(self.rebalance.process_queue_table.items()):
            held = sorted(pq.msgs)
            mq_table[mq] = {
                "cachedMsgCount": pq.msg_count,
                "cachedMsgMaxOffset": held[-1] if held else 0,
                "cachedMsgMinOffset": held[0] if held else 0,
                "cachedMsgSizeInMiB": pq.msg_size // (1024 * 1024),
                "commitOffset": self.offset_store.read_offset(mq),
                "droped": pq.dropped,
                "lastConsumeTimestamp": now_ms,
                "lastLockTimestamp": int(pq.last_lock_timestamp * 1000),
                "lastPullTimestamp": now_ms,
                "locked": pq.locked,
                "transactionMsgCount": 0,
                "transactionMsgMaxOffset": 0,
                "transactionMsgMinOffset": 0,
                "tryUnlockTimes": 0,
            }
        properties = {
            "consumerGroup": self.group,
            "messageModel": self.message_model.name,
            "consumeFromWhere": self.consume_from_where.name,
            "pullBatchSize": str(self.pull_batch_size),
            "consumeMessageBatchMaxSize": str(self.consume_message_batch_max_size),
            "maxReconsumeTimes": str(self.max_reconsume_times),
            "PROP_CONSUMEORDERLY": "true" if self.orderly is not None else "false",
            "PROP_CONSUME_TYPE": "CONSUME_PASSIVELY",
            "PROP_CLIENT_VERSION": "V4_9_8",
            "PROP_NAMESERVER_ADDR": ";".join(self.client.api.namesrv_addrs),
            "PROP_CONSUMER_START_TIMESTAMP": str(self._start_timestamp),
        }
        return {
            "mqTable": mq_table,
            "properties": properties,
            "statusTable": {},
            "subscriptionSet": sorted(self.rebalance.subscription_inner.values(), key=lambda s: s.topic),
        }

    async def consume_message_directly(self, msg: MessageExt) -> dict[str, Any]:
        """Give one message to the listener now, outside any queue (CONSUME_MESSAGE_DIRECTLY, mqadmin's
        consumeMessage to a client); ConsumeMessageDirectlyResult. Nothing is committed or sent back."""
        self._reset_retry_topic([msg])
        started = time.monotonic()
        result, remark = "CR_RETURN_NULL", None
        try:
            status = await maybeDeferred(self.listener, [msg])  # type: ignore[arg-type]
        except Exception as e:
            result, remark = "CR_THROW_EXCEPTION", f"{type(e).__name__}: {e}"
        else:
            if status is not None:
                result = "CR_SUCCESS" if status.name in ("CONSUME_SUCCESS", "SUCCESS") else "CR_LATER"
        return {
            "autoCommit": True,
            "consumeResult": result,
            "order": self.orderly is not None,
            "remark": remark,
            "spentTimeMills": int((time.monotonic() - started) * 1000),
        }

    def consumer_status(self, topic: str) -> dict[MessageQueue, int]:
        """The offsets this member holds for ``topic`` (GET_CONSUMER_STATUS_FROM_CLIENT)."""
        return {mq: self.offset_store.read_offset(mq) for mq in self.rebalance.process_queue_table if mq.topic == topic}

    async def reset_offset(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """Start ``topic``'s queues again from ``offsets`` (RESET_CONSUMER_CLIENT_OFFSET): their process queues
        are dropped (in-flight results no longer commit), the offsets stored, and the queues taken again."""
        table = self.rebalance.process_queue_table
        for mq, offset in offsets.items():
            if mq.topic != topic:
                continue
            pq = table.pop(mq, None)
            if pq is not None:
                pq.dropped = True
            self.offset_store.update_offset(mq, offset, increase_only=False)
            await self.offset_store.persist(mq)
        await self.rebalance.do_rebalance()

    # -- lifecycle

    def start(self) -> Deferred[None]:
        """Join the group: routes, heartbeat, a first rebalance. Fires once the first allocation is in place."""
        if self.listener is None:
            raise MQClientError("messageListener is null")
        if not self.rebalance.subscription_inner:
            raise MQClientError("no subscription")
        if self.message_model is MessageModel.CLUSTERING:
            retry = retry_topic(self.group)
            self.rebalance.subscription_inner[retry] = SubscriptionData.build(retry, SubscriptionData.SUB_ALL)
        self.offset_store.load()
        self._start_timestamp = int(time.time() * 1000)
        self.client.register_consumer(self)

        async def start() -> None:
            for topic in list(self.rebalance.subscription_inner):
                await self.client.update_topic_route_from_namesrv(topic)
            try:
                await self._check_client_in_broker()
            except Exception:
                self.stopping = True
                await self.client.unregister_consumer(self.group)
                raise
            if self.orderly is not None:
                self.orderly.start()
            await self.client.send_heartbeat_to_all_brokers()
            await self.rebalance.do_rebalance()

        return Deferred.fromCoroutine(start())

    def shutdown(self) -> Deferred[None]:
        """Leave the group cleanly: stop pulling, let running listeners finish (up to ``await_termination``),
        commit offsets, unregister."""
        return Deferred.fromCoroutine(self._shutdown())

    async def _shutdown(self) -> None:
        if self.stopping:
            return
        self.stopping = True
        for timer in list(self._timers):
            if timer.active():
                timer.cancel()
        self._timers.clear()
        if self._consuming:
            finished: Deferred[Any] = Deferred()
            DeferredList(list(self._consuming)).addBoth(finished.callback)
            finished.addTimeout(self.await_termination, self.client.reactor)
            try:
                await finished
            except TimeoutError:
                log.warn("{group}: listeners still running after {t}s", group=self.group, t=self.await_termination)
        await self.persist_consumer_offset()
        if self.orderly is not None:
            await self.orderly.shutdown()
        if self.trace is not None:
            await self.trace.dispatcher.shutdown()
        await self.client.unregister_consumer(self.group)
        self.rebalance.destroy()

    async def _check_client_in_broker(self) -> None:
        """CHECK_CLIENT_CONFIG for each SQL92 subscription: a broker that cannot filter by it (or an
        expression that does not compile) fails the start with the broker's code and remark."""
        for sub in self.rebalance.subscription_inner.values():
            if sub.expression_type == MessageSelector.TAG:
                continue
            addr = self.client.find_broker_addr_by_topic(sub.topic)
            if addr is not None:
                await self.client.api.check_client_config(addr, self.group, self.client.client_id, sub)

    # -- MQConsumerInner

    def consumer_data(self) -> ConsumerData:
        return ConsumerData(
            group_name=self.group,
            consume_type=ConsumeType.CONSUME_PASSIVELY,
            message_model=self.message_model,
            consume_from_where=self.consume_from_where,
            subscription_data_set=list(self.rebalance.subscription_inner.values()),
        )

    def update_topic_subscribe_info(self, topic: str, queues: set[MessageQueue]) -> None:
        if topic in self.rebalance.subscription_inner:
            self.rebalance.topic_subscribe_info[topic] = queues

    def do_rebalance(self) -> Deferred[None] | None:
        if self.stopping:
            return None
        return Deferred.fromCoroutine(self.rebalance.do_rebalance())

    def persist_consumer_offset(self) -> Deferred[Any]:
        return self.offset_store.persist_all(set(self.rebalance.process_queue_table))

    # -- pulling

    def _later(self, delay: float, fn: Callable[..., Any], *args: Any) -> None:
        if self.stopping:
            return

        def fire() -> None:
            self._timers.discard(timer)
            call_logged(fn, *args)

        timer = self.client.reactor.callLater(delay, fire)
        self._timers.add(timer)

    def execute_pull_request_immediately(self, pr: PullRequest) -> None:
        self._later(0, self._pull_message, pr)

    async def _pull_message(self, pr: PullRequest) -> None:
        pq = pr.process_queue
        if pq.dropped or self.stopping:
            return
        if (
            pq.msg_count > self.pull_threshold_for_queue
            or pq.msg_size > self.pull_threshold_size_for_queue * 1024 * 1024
            or pq.max_span() > self.consume_concurrently_max_span
        ):
            # Flow control: the listener is behind; pull again shortly.
            self._later(PULL_DELAY_WHEN_FLOW_CONTROL, self._pull_message, pr)
            return
        if self.orderly is not None and not await self.orderly.pull_allowed(pr):
            self._later(PULL_DELAY_WHEN_EXCEPTION, self._pull_message, pr)
            return
        sub = self.rebalance.subscription_inner.get(pr.mq.topic)
        if sub is None:
            self._later(PULL_DELAY_WHEN_EXCEPTION, self._pull_message, pr)
            return
        commit_offset = 0
        if self.message_model is MessageModel.CLUSTERING:
            commit_offset = max(self.offset_store.read_offset(pr.mq), 0)
        sys_flag = PullSysFlag.SUSPEND | (PullSysFlag.COMMIT_OFFSET if commit_offset > 0 else 0)
        try:
            result = await self._pull_api.pull_kernel(
                pr.mq,
                sub,
                pr.next_offset,
                self.pull_batch_size,
                sys_flag,
                commit_offset,
                BROKER_SUSPEND_MAX_TIME,
                CONSUMER_TIMEOUT_WHEN_SUSPEND,
            )
        except Exception as e:
            if pq.dropped or self.stopping:
                return
            if not pr.mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                log.warn("pull of {mq} failed: {error}", mq=pr.mq, error=e)
            if isinstance(e, MQBrokerError) and e.code in _HEARTBEAT_AGAIN_CODES:
                call_logged(self.client.send_heartbeat_to_all_brokers)
            self._later(PULL_DELAY_WHEN_EXCEPTION, self._pull_message, pr)
            return
        if pq.dropped or self.stopping:
            return
        pr.next_offset = result.next_begin_offset
        if result.status is PullStatus.FOUND:
            if result.messages:
                pq.put_messages(result.messages)
                if self.orderly is not None:
                    self.orderly.submit_consume_request(pq, pr.mq)
                else:
                    self._submit_consume_request(result.messages, pq, pr.mq)
        elif result.status is PullStatus.OFFSET_ILLEGAL:
            log.warn("the pull request offset illegal, {mq}, next {offset}", mq=pr.mq, offset=pr.next_offset)
            pq.dropped = True
            self._later(OFFSET_ILLEGAL_FIX_DELAY, self._fix_offset, pr)
            return
        elif pq.msg_count == 0:
            # Nothing new or nothing matching: the offset may advance past skipped messages (correctTagsOffset).
            self.offset_store.update_offset(pr.mq, pr.next_offset, True)
        self.execute_pull_request_immediately(pr)

    def _fix_offset(self, pr: PullRequest) -> None:
        self.offset_store.update_offset(pr.mq, pr.next_offset, False)
        self.offset_store.persist(pr.mq)
        self.rebalance.remove_process_queue(pr.mq)

    # -- consuming

    def _submit_consume_request(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        size = self.consume_message_batch_max_size
        for i in range(0, len(msgs), size):
            self._consume(msgs[i : i + size], pq, mq)

    def _consume(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        d = Deferred.fromCoroutine(self._consume_request(msgs, pq, mq))
        self._consuming.add(d)
        d.addErrback(lambda f: log.failure("consume request failed", f))
        d.addBoth(lambda _: self._consuming.discard(d))

    async def _consume_request(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        async with self._consume_slots:
            if pq.dropped or self.stopping:
                return
            self._reset_retry_topic(msgs)
            status = await self.call_listener(msgs, mq, ConsumeStatus.CONSUME_SUCCESS, ConsumeStatus.RECONSUME_LATER)
        await self._process_consume_result(status, msgs, pq, mq)

    async def call_listener(self, msgs: list[MessageExt], mq: MessageQueue, success: Any, failure: Any) -> Any:
        """The listener's answer (``failure`` when it raised or returned None), traced when tracing is on."""
        ctx = self.trace.before(msgs) if self.trace is not None else None
        started = time.monotonic()
        status, raised = None, False
        try:
            status = await maybeDeferred(self.listener, msgs)  # type: ignore[arg-type]
        except Exception:
            raised = True
            log.failure("listener failed on {n} messages of {mq}", n=len(msgs), mq=mq)
        if self.trace is not None:
            code = consume_return_type(status, success, raised, time.monotonic() - started, self.consume_timeout)
            self.trace.after(ctx, len(msgs), status is success, code)
        return failure if status is None else status

    def _reset_retry_topic(self, msgs: list[MessageExt]) -> None:
        # Messages back from %RETRY%<group> show their original topic.
        retry = retry_topic(self.group)
        for m in msgs:
            original = m.properties.get(MessageConst.RETRY_TOPIC)
            if original and m.topic == retry:
                m.topic = original

    async def _process_consume_result(
        self, status: Any, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue
    ) -> None:
        done = msgs
        if status is not ConsumeStatus.CONSUME_SUCCESS:
            if self.message_model is MessageModel.BROADCASTING:
                log.warn("BROADCASTING, {n} messages of {mq} dropped after RECONSUME_LATER", n=len(msgs), mq=mq)
            else:
                failed = [m for m in msgs if not await self._send_message_back(m, mq)]
                if failed:
                    done = [m for m in msgs if all(m is not f for f in failed)]
                    for m in failed:
                        m.reconsume_times += 1
                    self._later(self.reconsume_later_delay, self._consume, failed, pq, mq)
        offset = pq.remove_messages(done)
        if offset >= 0 and not pq.dropped:
            self.offset_store.update_offset(mq, offset, True)

    async def _send_message_back(self, msg: MessageExt, mq: MessageQueue) -> bool:
        """Give ``msg`` back for a later retry (sendMessageBack); False when neither way worked."""
        addr = self.client.find_broker_addr_in_publish(mq.broker_name)
        try:
            if addr is None:
                raise MQClientError(f"The broker[{mq.broker_name}] not exist")
            await self.client.api.consumer_send_message_back(
                addr, mq.broker_name, msg, self.group, 0, self.max_reconsume_times
            )
        except Exception as e:
            log.warn("send back of {msg_id} failed, sending a retry copy: {error}", msg_id=msg.msg_id, error=e)
            try:
                await self._inner_producer().send(self._retry_copy(msg))
            except Exception as e2:
                log.warn(
                    "retry copy of {msg_id} failed, consuming it again locally: {error}", msg_id=msg.msg_id, error=e2
                )
                return False
        if not self._retry_topic_learnt:
            # The broker made the retry topic after our start: pull it now, not after the next route refresh
            # (30 s) and rebalance (20 s).
            self._retry_topic_learnt = True
            call_logged(self._learn_route, retry_topic(self.group))
        return True

    def _retry_copy(self, msg: MessageExt) -> Message:
        """What Java's client sends to %RETRY%<group> itself when the broker refuses a send-back."""
        props = dict(msg.properties)
        props.setdefault(MessageConst.ORIGIN_MESSAGE_ID, msg.client_msg_id)
        props[MessageConst.RETRY_TOPIC] = msg.topic
        props[MessageConst.RECONSUME_TIME] = str(msg.reconsume_times + 1)
        props[MessageConst.MAX_RECONSUME_TIMES] = str(self.max_reconsume_times)
        props.pop(MessageConst.TRANSACTION_PREPARED, None)
        props[MessageConst.DELAY_TIME_LEVEL] = str(3 + msg.reconsume_times)
        return Message(retry_topic(self.group), msg.body, msg.flag, props)

    def _inner_producer(self) -> Producer:
        """The client instance's own producer (CLIENT_INNER_PRODUCER), made on first use."""
        producer = self.client.producers.get(CLIENT_INNER_PRODUCER_GROUP)
        if not isinstance(producer, Producer):
            producer = Producer(CLIENT_INNER_PRODUCER_GROUP, client=self.client)
            self.client.register_producer(producer)
        return producer

    async def _learn_route(self, topic: str) -> None:
        await self.client.update_topic_route_from_namesrv(topic)
        await self.rebalance.do_rebalance()
