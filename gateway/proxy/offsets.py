"""The queue-and-offset RPCs of MessagingService: PullMessage, UpdateOffset, GetOffset and QueryOffset.

Apache 5.3.3's proxy leaves these four RPCs of the v2 interface unserved in gRPC (its remoting proxy serves the
same requests through ConsumerProcessor). We serve them as ConsumerProcessor does in cluster mode: each goes
to the master of the broker named by the client's message queue, as PULL_MESSAGE, UPDATE_CONSUMER_OFFSET,
QUERY_CONSUMER_OFFSET, GET_MIN_OFFSET, GET_MAX_OFFSET or SEARCH_OFFSET_BY_TIMESTAMP. Pulled messages are
converted as ReceiveMessage converts popped ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gateway.client.consumer import PullAPIWrapper, PullStatus
from gateway.client.errors import MQBrokerError
from gateway.remoting.bodies import MessageQueue
from gateway.remoting.codes import ResponseCode
from gateway.remoting.headers import (
    PullSysFlag,
    QueryConsumerOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)

from .consumer import build_subscription, duration_ms, validate_topic_and_group
from .convert import ProxyError, build_message, status
from .grpc import Kind, ServerCall
from .service import ProxyContext, Rpc
from .v2 import definition_pb2 as pb
from .v2 import service_pb2 as spb
from .validate import validate_topic

if TYPE_CHECKING:
    from .service import MessagingService

# What a pull's status becomes (PullStatus → Code).
PULL_CODES = {
    PullStatus.FOUND: pb.Code.OK,
    PullStatus.NO_NEW_MSG: pb.Code.MESSAGE_NOT_FOUND,
    PullStatus.NO_MATCHED_MSG: pb.Code.MESSAGE_NOT_FOUND,
    PullStatus.OFFSET_ILLEGAL: pb.Code.ILLEGAL_OFFSET,
}
# At most this many messages a pull (what a broker sends of one pull by default, maxTransferCountOnMessageInMemory).
MAX_PULL_BATCH = 32
# The broker's answer to a request for its time to answer (the pull's long polling is on top of it).
BROKER_ANSWER_MS = 3000


def message_queue(queue: pb.MessageQueue) -> MessageQueue:
    """The client's queue (topic, broker, id) checked; ProxyError when a part is missing or wrong."""
    topic = validate_topic(queue.topic)
    if not queue.broker.name:
        raise ProxyError(pb.Code.BAD_REQUEST, "broker name of the message queue is required")
    if queue.id < 0:
        raise ProxyError(pb.Code.BAD_REQUEST, f"illegal queue id {queue.id}")
    return MessageQueue(topic, queue.broker.name, queue.id)


class OffsetActivity:
    """PullMessage, UpdateOffset, GetOffset, QueryOffset."""

    def __init__(self, service: MessagingService) -> None:
        self.service = service

    def rpcs(self) -> list[Rpc]:
        return [
            Rpc.of("PullMessage", Kind.SERVER_STREAM, self.pull_message),
            Rpc.of("UpdateOffset", Kind.UNARY, self.update_offset),
            Rpc.of("GetOffset", Kind.UNARY, self.get_offset),
            Rpc.of("QueryOffset", Kind.UNARY, self.query_offset),
        ]

    async def _master(self, mq: MessageQueue) -> str:
        """The master serving ``mq``; TOPIC_NOT_FOUND when the name server knows no such broker for the topic."""
        addr = await self.service.master_of(mq.broker_name, mq.topic)
        if addr is None:
            raise ProxyError(pb.Code.TOPIC_NOT_FOUND, f"no broker {mq.broker_name} serving topic {mq.topic}")
        return addr

    # -- PullMessage

    async def pull_message(self, ctx: ProxyContext, request: Any, call: ServerCall) -> None:
        """A status, the messages found, then the offset to pull next (also after MESSAGE_NOT_FOUND and
        ILLEGAL_OFFSET, so the client can go on from where the broker says)."""
        group = validate_topic_and_group(request.message_queue.topic, request.group)[1]
        mq = message_queue(request.message_queue)
        if request.offset < 0:
            raise ProxyError(pb.Code.ILLEGAL_OFFSET, f"illegal offset {request.offset}")
        if request.batch_size <= 0:
            raise ProxyError(pb.Code.BAD_REQUEST, f"illegal batch size {request.batch_size}")
        sub = build_subscription(mq.topic, request.filter_expression)
        poll_ms = self._polling_time(request, call)
        await self._master(mq)  # TOPIC_NOT_FOUND for a broker the route lacks; the pull finds the same master
        result = await PullAPIWrapper(self.service.instance, group).pull_kernel(
            mq,
            sub,
            request.offset,
            min(request.batch_size, MAX_PULL_BATCH),
            PullSysFlag.SUBSCRIPTION | (PullSysFlag.SUSPEND if poll_ms > 0 else 0),
            0,
            poll_ms / 1000,
            (poll_ms + BROKER_ANSWER_MS) / 1000,
        )
        if call.finished:
            return
        code = PULL_CODES[result.status]
        if code == pb.Code.OK and not result.messages:
            code = pb.Code.MESSAGE_NOT_FOUND  # all found were other tags with a colliding hash
        call.send(spb.PullMessageResponse(status=status(code)))
        now = self.service.now_ms()
        for msg in result.messages:
            call.send(spb.PullMessageResponse(message=build_message(msg, now)))
        call.send(spb.PullMessageResponse(next_offset=result.next_begin_offset))
        call.finish()

    def _polling_time(self, request: Any, call: ServerCall) -> int:
        """The client's long polling (none unless asked), at most the configured maximum and what the call's
        deadline leaves after the broker's answer."""
        if not request.HasField("long_polling_timeout"):
            return 0
        ms = min(
            max(duration_ms(request.long_polling_timeout), 0),
            self.service.config.grpcClientConsumerMaxLongPollingTimeoutMillis,
        )
        if call.timeout is not None:
            ms = min(ms, int(call.timeout * 1000) - BROKER_ANSWER_MS)
        if ms < 0:
            raise ProxyError(
                pb.Code.ILLEGAL_POLLING_TIME,
                "The deadline time remaining is not enough for polling, please check network condition",
            )
        return ms

    # -- consumer offsets

    async def update_offset(self, ctx: ProxyContext, request: Any) -> spb.UpdateOffsetResponse:
        """UPDATE_CONSUMER_OFFSET of the group's queue, answered once the broker has it."""
        group = validate_topic_and_group(request.message_queue.topic, request.group)[1]
        mq = message_queue(request.message_queue)
        if request.offset < 0:
            raise ProxyError(pb.Code.ILLEGAL_OFFSET, f"illegal offset {request.offset}")
        header = UpdateConsumerOffsetRequestHeader(group, mq.topic, mq.queue_id, request.offset)
        await self.service.instance.api.update_consumer_offset(await self._master(mq), header)
        return spb.UpdateOffsetResponse(status=status(pb.Code.OK))

    async def get_offset(self, ctx: ProxyContext, request: Any) -> spb.GetOffsetResponse:
        """QUERY_CONSUMER_OFFSET: the group's committed offset, OFFSET_NOT_FOUND when it has none."""
        group = validate_topic_and_group(request.message_queue.topic, request.group)[1]
        mq = message_queue(request.message_queue)
        header = QueryConsumerOffsetRequestHeader(group, mq.topic, mq.queue_id, set_zero_if_not_found=False)
        try:
            offset = await self.service.instance.api.query_consumer_offset(await self._master(mq), header)
        except MQBrokerError as e:
            if e.code != ResponseCode.QUERY_NOT_FOUND:
                raise
            raise ProxyError(pb.Code.OFFSET_NOT_FOUND, e.remark or "consumer offset not found") from None
        return spb.GetOffsetResponse(status=status(pb.Code.OK), offset=offset)

    async def query_offset(self, ctx: ProxyContext, request: Any) -> spb.QueryOffsetResponse:
        """The queue's first offset (BEGINNING), its end (END) or the offset of the message stored nearest to
        ``timestamp`` (TIMESTAMP)."""
        mq = message_queue(request.message_queue)
        policy = request.query_offset_policy
        if policy == pb.QueryOffsetPolicy.TIMESTAMP and not request.HasField("timestamp"):
            raise ProxyError(pb.Code.BAD_REQUEST, "timestamp is required for the TIMESTAMP policy")
        api = self.service.instance.api
        addr = await self._master(mq)
        if policy == pb.QueryOffsetPolicy.BEGINNING:
            offset = await api.get_min_offset(addr, mq.topic, mq.queue_id)
        elif policy == pb.QueryOffsetPolicy.END:
            offset = await api.get_max_offset(addr, mq.topic, mq.queue_id)
        elif policy == pb.QueryOffsetPolicy.TIMESTAMP:
            offset = await api.search_offset(addr, mq.topic, mq.queue_id, request.timestamp.ToMilliseconds())
        else:
            raise ProxyError(pb.Code.BAD_REQUEST, f"unknown query offset policy {policy}")
        return spb.QueryOffsetResponse(status=status(pb.Code.OK), offset=offset)


def activity(service: MessagingService) -> OffsetActivity:
    """The offset RPCs (the MessagingService imports this module when present)."""
    return OffsetActivity(service)
