"""The consumer RPCs of MessagingService, as Apache 5.3.3's proxy serves them in cluster mode
(ReceiveMessageActivity, AckMessageActivity, ChangeInvisibleDurationActivity, ForwardMessageToDLQActivity,
RouteActivity.queryAssignment, ConsumerProcessor).

ReceiveMessage pops from the broker named by the client's queue (POP_MESSAGE over remoting, long polling via
pollTime), acks what the subscription's tags do not want, forwards what was delivered too often to the
dead-letter queue, then streams a status, the messages and a delivery timestamp. AckMessage,
ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue take a receipt handle back to the broker it names
(ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME, CONSUMER_SEND_MSG_BACK). QueryAssignment gives a push consumer one
queue per broker (the broker chooses the queue it pops).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from twisted.logger import Logger

from gateway.client.errors import MQBrokerError
from gateway.filter import SQL92, TAG
from gateway.remoting.bodies import SubscriptionData
from gateway.remoting.codes import PermName, ResponseCode
from gateway.remoting.extra_info import build_extra_info
from gateway.remoting.headers import ConsumerSendMsgBackRequestHeader, PopMessageRequestHeader
from gateway.remoting.message import MessageExt

from .convert import POP_CK, RESPONSE_CODES, ProxyError, build_message, status, status_of
from .grpc import Kind, ServerCall
from .receipt_handle import InvalidReceiptHandle, ReceiptHandle, create_handle
from .renew import ReceiptHandleManager
from .route import permission, proxy_endpoints
from .service import ProxyContext, Rpc
from .telemetry import DEFAULT_GROUP_CONFIG
from .v2 import definition_pb2 as pb
from .v2 import service_pb2 as spb
from .validate import validate_consumer_group, validate_topic

if TYPE_CHECKING:
    from .config import ProxyConfig
    from .service import MessagingService

log = Logger()

MAX_MSG_NUMS_FOR_POP_REQUEST = 32  # ProxyUtils
CONSUME_INIT_MODE_MAX = 1  # ConsumeInitMode.MAX: a new group starts at the end of the queues
# Clients older than this do not know Code.ILLEGAL_POLLING_TIME (ReceiveMessageActivity).
ILLEGAL_POLLING_TIME_INTRODUCED_CLIENT_VERSION = "5.0.3"


def duration_ms(d: Any) -> int:
    """Durations.toMillis."""
    return d.seconds * 1000 + d.nanos // 1_000_000


def validate_topic_and_group(topic: pb.Resource, group: pb.Resource) -> tuple[str, str]:
    """GrpcValidator.validateTopicAndConsumerGroup."""
    return validate_topic(topic), validate_consumer_group(group)


def polling_time(
    request: spb.ReceiveMessageRequest,
    request_timeout_ms: int,
    remaining_ms: int | None,
    client_version: str | None,
    config: ProxyConfig,
) -> int:
    """ReceiveMessageActivity's long-polling time: the client's, else what its deadline leaves after half a
    request timeout, within the configured bounds and never past the call's deadline."""
    low = config.grpcClientConsumerMinLongPollingTimeoutMillis
    high = config.grpcClientConsumerMaxLongPollingTimeoutMillis
    if request.HasField("long_polling_timeout"):
        ms = duration_ms(request.long_polling_timeout)
    elif remaining_ms is not None:
        ms = remaining_ms - request_timeout_ms // 2
    else:
        ms = high
    ms = min(max(ms, low), high)
    if remaining_ms is not None and ms > remaining_ms:
        if remaining_ms < low:
            # Java's String.compareTo, as Apache compares the versions.
            old = not client_version or client_version < ILLEGAL_POLLING_TIME_INTRODUCED_CLIENT_VERSION
            raise ProxyError(
                pb.Code.BAD_REQUEST if old else pb.Code.ILLEGAL_POLLING_TIME,
                "The deadline time remaining is not enough for polling, please check network condition",
            )
        ms = remaining_ms
    return ms


def validate_invisible_time(ms: int, minimum: int, config: ProxyConfig) -> None:
    """GrpcValidator.validateInvisibleTime."""
    if ms < minimum:
        raise ProxyError(pb.Code.ILLEGAL_INVISIBLE_TIME, f"the invisibleTime is too small. min is {minimum}")
    if 0 < config.maxInvisibleTimeMills < ms:
        raise ProxyError(
            pb.Code.ILLEGAL_INVISIBLE_TIME, f"the invisibleTime is too large. max is {config.maxInvisibleTimeMills}"
        )


def build_subscription(topic: str, expression: pb.FilterExpression) -> SubscriptionData:
    """FilterAPI.build with GrpcConverter.buildExpressionType: SQL92 for FilterType.SQL, TAG otherwise."""
    if expression.type == pb.FilterType.SQL:
        if not expression.expression:
            raise ProxyError(pb.Code.ILLEGAL_FILTER_EXPRESSION, f"Expression can't be null! {SQL92}")
        return SubscriptionData.build(topic, expression.expression, SQL92)
    return SubscriptionData.build(topic, expression.expression, TAG)


class FilterResult(enum.Enum):
    """PopMessageResultFilter.FilterResult."""

    MATCH = "match"
    NO_MATCH = "no match"
    TO_DLQ = "to DLQ"


def filter_message(sub: SubscriptionData, msg: MessageExt, max_attempts: int) -> FilterResult:
    """PopMessageResultFilterImpl: the broker filters by tag hash, so a hash collision is caught here; a message
    delivered ``max_attempts`` times already goes to the dead-letter queue instead of the client."""
    if sub.tags_set and msg.tags not in sub.tags_set:
        return FilterResult.NO_MATCH
    if msg.reconsume_times >= max_attempts:
        return FilterResult.TO_DLQ
    return FilterResult.MATCH


def decode_handle(handle: str) -> ReceiptHandle:
    """A client's receipt handle, or INVALID_RECEIPT_HANDLE saying what is wrong with it (Apache answers a
    malformed one with INTERNAL_SERVER_ERROR, which the SDKs would retry)."""
    try:
        return ReceiptHandle.decode(handle)
    except InvalidReceiptHandle as e:
        raise ProxyError(pb.Code.INVALID_RECEIPT_HANDLE, str(e)) from None


@dataclass(frozen=True, slots=True)
class ConsumerSettings:
    """What a receive needs of the client's settings (GrpcClientSettingsManager.getClientSettings)."""

    fifo: bool = False
    max_attempts: int = DEFAULT_GROUP_CONFIG.retry_max_times + 1
    request_timeout_ms: int = 3000


class ConsumerActivity:
    """ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue, QueryAssignment."""

    def __init__(self, service: MessagingService) -> None:
        self.service = service
        # What push consumers hold, renewed until they ack it (ReceiptHandleProcessor).
        self.receipt_handles = ReceiptHandleManager(
            service.config, service.reactor, self._change_invisible_time, service.clients.consumes_as
        )

    def rpcs(self) -> list[Rpc]:
        return [
            Rpc.of("ReceiveMessage", Kind.SERVER_STREAM, self.receive_message),
            Rpc.of("AckMessage", Kind.UNARY, self.ack_message),
            Rpc.of("ChangeInvisibleDuration", Kind.UNARY, self.change_invisible_duration),
            Rpc.of("ForwardMessageToDeadLetterQueue", Kind.UNARY, self.forward_message_to_dead_letter_queue),
            Rpc.of("QueryAssignment", Kind.UNARY, self.query_assignment),
        ]

    def start(self) -> None:
        self.receipt_handles.start()

    def stop(self) -> Any:
        return self.receipt_handles.stop()

    @property
    def config(self) -> ProxyConfig:
        return self.service.config

    def settings_of(self, ctx: ProxyContext) -> ConsumerSettings:
        """The client's consumer settings as the Telemetry answer gave them (defaults before it sent any)."""
        client = self.service.clients.clients.get(ctx.client_id)
        settings = client.settings if client is not None else None
        if settings is None or not settings.HasField("request_timeout"):
            return ConsumerSettings()
        return ConsumerSettings(request_timeout_ms=duration_ms(settings.request_timeout))

    async def group_settings(self, group: str, addr: str, base: ConsumerSettings) -> ConsumerSettings:
        """The client's settings with its group's (GrpcClientSettingsManager.mergeSubscriptionData): FIFO from
        consumeMessageOrderly, max attempts from retryMaxTimes + 1."""
        config = await self.service.metadata.group_config(group, addr)
        if config is None:
            return base
        return replace(base, fifo=config.consume_message_orderly, max_attempts=config.retry_max_times + 1)

    # -- brokers

    async def _read_broker(self, topic: str, broker_name: str) -> tuple[str, str]:
        """ReceiveMessageQueueSelector: the client's broker if it serves the topic, else a readable one."""
        route = await self.service.metadata.route(topic)
        masters = {bd.broker_name: bd.master_addr() for bd in route.broker_datas if bd.master_addr()}
        readable = [
            qd.broker_name
            for qd in route.queue_datas
            if qd.perm & PermName.PERM_READ and qd.read_queue_nums > 0 and qd.broker_name in masters
        ]
        if not readable:
            raise ProxyError(pb.Code.FORBIDDEN, "no readable queue")
        name = broker_name if broker_name in readable else readable[0]
        return name, masters[name]

    async def _handle_addr(self, handle: ReceiptHandle, topic: str) -> str:
        """ClusterMessageService.resolveBrokerAddrInReceiptHandle: the master of the handle's broker."""
        addr = await self.service.master_of(handle.broker_name, topic)
        if addr is None:
            raise ProxyError(pb.Code.INVALID_RECEIPT_HANDLE, f"cannot find broker {handle.broker_name}")
        return addr

    # -- ReceiveMessage

    async def receive_message(self, ctx: ProxyContext, request: Any, call: ServerCall) -> None:
        """The whole stream at once, as Apache's writer sends it, ending with the delivery timestamp."""
        # The handler runs as soon as the request is in: what the call's deadline leaves is its grpc-timeout.
        remaining_ms = int(call.timeout * 1000) if call.timeout is not None else None
        try:
            responses = await self._receive(ctx, request, remaining_ms)
        except Exception as e:  # every failure is answered as a status, as Apache's writer does
            responses = [spb.ReceiveMessageResponse(status=status_of(e))]
        if call.finished:  # the client went away: what was popped comes back after its invisible time
            return
        if self.config.enableProxyAutoRenew and request.auto_renew:
            self._hold(ctx, request.group.name, responses)
        for response in responses:
            call.send(response)
        delivered = spb.ReceiveMessageResponse()
        delivered.delivery_timestamp.FromMilliseconds(self.service.now_ms())
        call.send(delivered)
        call.finish()

    async def _receive(self, ctx: ProxyContext, request: Any, remaining_ms: int | None) -> list[Any]:
        settings = self.settings_of(ctx)
        poll_ms = polling_time(request, settings.request_timeout_ms, remaining_ms, ctx.client_version, self.config)
        topic, group = validate_topic_and_group(request.message_queue.topic, request.group)
        invisible_ms = duration_ms(request.invisible_duration)
        if self.config.enableProxyAutoRenew and request.auto_renew:
            invisible_ms = self.config.defaultInvisibleTimeMills
        else:
            validate_invisible_time(invisible_ms, self.config.minInvisibleTimeMillsForRecv, self.config)
        sub = build_subscription(topic, request.filter_expression)
        broker_name, addr = await self._read_broker(topic, request.message_queue.broker.name)
        settings = await self.group_settings(group, addr, settings)
        header = PopMessageRequestHeader(
            consumer_group=group,
            topic=topic,
            queue_id=-1,
            max_msg_nums=min(request.batch_size, MAX_MSG_NUMS_FOR_POP_REQUEST),
            invisible_time=invisible_ms,
            poll_time=poll_ms,
            born_time=self.service.now_ms(),
            init_mode=CONSUME_INIT_MODE_MAX,
            exp_type=sub.expression_type,
            exp=sub.sub_string,
            order=settings.fifo,
            attempt_id=request.attempt_id if request.HasField("attempt_id") else None,
        )
        timeout_ms = remaining_ms if remaining_ms is not None else poll_ms + settings.request_timeout_ms
        try:
            result = await self.service.instance.api.pop_message(addr, broker_name, header, timeout_ms / 1000)
        except MQBrokerError as e:
            if e.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED:
                # Apache says INTERNAL_SERVER_ERROR, which the SDKs retry for ever: the filter is the client's.
                raise ProxyError(pb.Code.ILLEGAL_FILTER_EXPRESSION, e.remark or "bad filter expression") from None
            raise
        if result.code == ResponseCode.POLLING_FULL:
            return [spb.ReceiveMessageResponse(status=status(pb.Code.TOO_MANY_REQUESTS, "polling full"))]
        if result.code != ResponseCode.SUCCESS:
            return [spb.ReceiveMessageResponse(status=status(pb.Code.MESSAGE_NOT_FOUND, "no new message"))]
        kept = await self._sift(result.messages, sub, group, topic, settings.max_attempts)
        if not kept:
            return [spb.ReceiveMessageResponse(status=status(pb.Code.MESSAGE_NOT_FOUND, "no match message"))]
        now = self.service.now_ms()
        return [spb.ReceiveMessageResponse(status=status(pb.Code.OK))] + [
            spb.ReceiveMessageResponse(message=build_message(m, now)) for m in kept
        ]

    def _hold(self, ctx: ProxyContext, group: str, responses: list[Any]) -> None:
        """ReceiveMessageActivity: the messages a push consumer got are renewed until it acks them."""
        for response in responses:
            if response.HasField("message"):
                msg, props = response.message, response.message.system_properties
                try:
                    handle = ReceiptHandle.decode(props.receipt_handle)
                except InvalidReceiptHandle:
                    continue  # logged when popped; it comes back after its invisible time
                retries = props.delivery_attempt - 1
                self.receipt_handles.add(ctx.client_id, group, msg.topic.name, props.message_id, handle, retries)

    async def _latest_handle(
        self, ctx: ProxyContext, group: str, message_id: str, receipt_handle: str
    ) -> ReceiptHandle:
        """The client's handle checked, or the latest one of the message when the proxy renews it."""
        return await self.receipt_handles.remove(ctx.client_id, group, message_id, decode_handle(receipt_handle))

    async def _sift(
        self, messages: list[MessageExt], sub: SubscriptionData, group: str, topic: str, max_attempts: int
    ) -> list[MessageExt]:
        """ConsumerProcessor.popMessage's pass over what the broker popped: receipt handles made, messages the
        subscription does not want acked, messages past their attempts sent to the dead-letter queue."""
        kept = []
        for msg in messages:
            extra = msg.properties.get(POP_CK)
            if extra is None:
                log.error("[BUG] popped message {msg_id} without a checkpoint", msg_id=msg.msg_id)
                kept.append(msg)
                continue
            handle_string = create_handle(extra, msg.commitlog_offset)
            msg.properties[POP_CK] = handle_string
            # A redelivery comes from the pop retry topic; the client knows the topic it subscribed to.
            msg.topic = topic
            verdict = filter_message(sub, msg, max_attempts)
            if verdict is FilterResult.MATCH:
                kept.append(msg)
                continue
            try:
                handle = ReceiptHandle.decode(handle_string)
            except InvalidReceiptHandle as e:
                log.error("popped message {msg_id} has a bad checkpoint: {error}", msg_id=msg.msg_id, error=e)
                kept.append(msg)
                continue
            # Apache does not wait for these; a failure leaves the message to come back after its invisible time.
            try:
                if verdict is FilterResult.NO_MATCH:
                    await self._ack(handle, group, topic)
                else:
                    await self._forward_to_dlq(handle, msg.client_msg_id, group, topic)
            except Exception as e:
                log.warn("{verdict} of {msg_id} failed: {error}", verdict=verdict.value, msg_id=msg.msg_id, error=e)
        return kept

    # -- AckMessage

    async def ack_message(self, ctx: ProxyContext, request: Any) -> spb.AckMessageResponse:
        """AckMessageActivity.ackMessageOneByOne: a status per entry; the response's is their common code, or
        MULTIPLE_RESULTS."""
        topic, group = validate_topic_and_group(request.topic, request.group)
        entries = [await self._ack_entry(ctx, entry, group, topic) for entry in request.entries]
        codes = {entry.status.code for entry in entries}
        if len(codes) > 1:
            overall = status(pb.Code.MULTIPLE_RESULTS)
        elif codes:
            overall = status(codes.pop())
        else:
            overall = status(pb.Code.INTERNAL_SERVER_ERROR, "ack message result is empty")
        return spb.AckMessageResponse(status=overall, entries=entries)

    async def _ack_entry(self, ctx: ProxyContext, entry: Any, group: str, topic: str) -> spb.AckMessageResultEntry:
        try:
            handle = await self._latest_handle(ctx, group, entry.message_id, entry.receipt_handle)
            await self._ack(handle, group, topic)
            result = status(pb.Code.OK)
        except Exception as e:  # each entry gets its own status
            result = status_of(e)
        return spb.AckMessageResultEntry(
            message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=result
        )

    def _check_not_expired(self, handle: ReceiptHandle) -> None:
        """AbstractProcessor.validateReceiptHandle."""
        if handle.is_expired(self.service.now_ms()):
            raise ProxyError(pb.Code.INVALID_RECEIPT_HANDLE, "receipt handle is expired")

    async def _ack(self, handle: ReceiptHandle, group: str, topic: str) -> None:
        """ConsumerProcessor.ackMessage: ACK_MESSAGE to the handle's broker (MQBrokerError if it refuses)."""
        self._check_not_expired(handle)
        addr = await self._handle_addr(handle, topic)
        await self.service.instance.api.ack_message(addr, group, topic, handle.handle)

    # -- ChangeInvisibleDuration

    async def change_invisible_duration(self, ctx: ProxyContext, request: Any) -> spb.ChangeInvisibleDurationResponse:
        """ChangeInvisibleDurationActivity: the broker writes a new checkpoint; the client gets its new handle."""
        topic, group = validate_topic_and_group(request.topic, request.group)
        invisible_ms = duration_ms(request.invisible_duration)
        validate_invisible_time(invisible_ms, 0, self.config)
        handle = await self._latest_handle(ctx, group, request.message_id, request.receipt_handle)
        new = await self._change_invisible_time(handle, group, topic, invisible_ms)
        return spb.ChangeInvisibleDurationResponse(status=status(pb.Code.OK), receipt_handle=new.handle)

    async def _change_invisible_time(
        self, handle: ReceiptHandle, group: str, topic: str, invisible_ms: int
    ) -> ReceiptHandle:
        """ConsumerProcessor.changeInvisibleTime: the message's new handle."""
        self._check_not_expired(handle)
        addr = await self._handle_addr(handle, topic)
        answer = await self.service.instance.api.change_invisible_time(addr, group, topic, handle.handle, invisible_ms)
        # MQClientAPIImpl.changeInvisibleTimeAsync's extraInfo, then ConsumerProcessor.createHandle.
        extra = build_extra_info(
            handle.offset,
            answer.pop_time,
            answer.invisible_time,
            answer.revive_qid,
            handle.real_topic(topic, group),
            handle.broker_name,
            handle.queue_id,
            handle.offset,
        )
        return ReceiptHandle.decode(create_handle(extra, handle.commit_log_offset))

    # -- ForwardMessageToDeadLetterQueue

    async def forward_message_to_dead_letter_queue(
        self, ctx: ProxyContext, request: Any
    ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        """ForwardMessageToDLQActivity: the broker's send-back with no attempts left puts it in %DLQ%group."""
        topic, group = validate_topic_and_group(request.topic, request.group)
        handle = await self._latest_handle(ctx, group, request.message_id, request.receipt_handle)
        code, remark = await self._forward_to_dlq(handle, request.message_id, group, topic)
        return spb.ForwardMessageToDeadLetterQueueResponse(
            status=pb.Status(code=RESPONSE_CODES.get(code, pb.Code.INTERNAL_SERVER_ERROR), message=remark or str(code))
        )

    async def _forward_to_dlq(self, handle: ReceiptHandle, message_id: str, group: str, topic: str) -> tuple[int, str]:
        """ProducerProcessor.forwardMessageToDeadLetterQueue: CONSUMER_SEND_MSG_BACK with delayLevel -1 and
        maxReconsumeTimes 0, then the pop acked; the broker's (code, remark)."""
        if handle.commit_log_offset < 0:
            raise ProxyError(pb.Code.INVALID_RECEIPT_HANDLE, "commit log offset is empty")
        addr = await self._handle_addr(handle, topic)
        header = ConsumerSendMsgBackRequestHeader(
            offset=handle.commit_log_offset,
            group=group,
            delay_level=-1,
            origin_msg_id=message_id,
            origin_topic=handle.real_topic(topic, group),
            max_reconsume_times=0,
        )
        response = await self.service.instance.api.send_message_back(addr, header)
        if response.code == ResponseCode.SUCCESS:
            try:
                await self._ack(handle, group, topic)
            except Exception as e:  # the copy is in the DLQ; the pop comes back and is forwarded again
                log.warn("ack after forwarding {msg_id} to the DLQ failed: {error}", msg_id=message_id, error=e)
        return response.code, response.remark

    # -- QueryAssignment

    async def query_assignment(self, ctx: ProxyContext, request: Any) -> spb.QueryAssignmentResponse:
        """RouteActivity.queryAssignment: per readable broker one queue of id -1 (the broker picks the queue it
        pops), every queue for a FIFO group; the broker's endpoints are the client's own (this proxy)."""
        topic, group = validate_topic_and_group(request.topic, request.group)
        route = await self.service.metadata.route(topic)
        config = await self.service.metadata.group_config_of_topic(group, topic)
        fifo = config is not None and config.consume_message_orderly
        masters = {bd.broker_name for bd in route.broker_datas if bd.master_addr() is not None}
        endpoints = proxy_endpoints(request.endpoints, self.config.grpcServerPort)
        assignments = []
        for qd in route.queue_datas:
            if not qd.perm & PermName.PERM_READ or qd.read_queue_nums <= 0 or qd.broker_name not in masters:
                continue
            broker = pb.Broker(name=qd.broker_name, id=0, endpoints=endpoints)
            for queue_id in range(qd.read_queue_nums) if fifo else (-1,):
                queue = pb.MessageQueue(topic=request.topic, id=queue_id, permission=permission(qd.perm), broker=broker)
                assignments.append(pb.Assignment(message_queue=queue))
        if not assignments:
            return spb.QueryAssignmentResponse(status=status(pb.Code.FORBIDDEN, "no readable queue"))
        return spb.QueryAssignmentResponse(status=status(pb.Code.OK), assignments=assignments)


def activity(service: MessagingService) -> ConsumerActivity:
    """The consumer RPCs (the MessagingService imports this module when present)."""
    return ConsumerActivity(service)
