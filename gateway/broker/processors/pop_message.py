"""POP_MESSAGE (PopMessageProcessor, non-orderly): messages from the topic's queues and the group's pop retry
topic, each queue read from the group's offset, which moves past them once their checkpoint is stored.

Messages of the topic go out as stored; those of the retry topic under the topic's name with their POP_CK
property. The answer's startOffsetInfo/msgOffsetInfo say, per queue read, where the checkpoint starts and
which offsets it holds (ExtraInfoUtil), from which clients build each message's POP_CK. A pop that finds
nothing waits up to its pollTime (gateway.broker.pop.polling).

On a DLedger ledger a checkpoint is stored once a majority holds it: as Apache's pop, which holds the queue's
lock until then, the group's offset moves once it is, and the queue is not popped meanwhile. When it is not
stored the offset stays: the messages are popped again (never left without a checkpoint).
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred

from gateway.filter import Expression, FilterError, compile_expression, is_tag_type
from gateway.remoting.bodies import SubscriptionData
from gateway.remoting.codes import PermName, RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.extra_info import PROPERTY_POP_CK, append_offset_info, build_extra_info, pop_retry_topic
from gateway.remoting.headers import PopMessageRequestHeader, PopMessageResponseHeader
from gateway.remoting.message import RecordError, decode_record, encode_record, properties_to_string
from gateway.remoting.names import RETRY_GROUP_TOPIC_PREFIX
from gateway.store.api import GetMessageResult, GetMessageStatus
from gateway.store.commit_log import MAX_TOPIC_LENGTH, now_ms

from ..consumer_filter import filter_by_properties
from ..inner import packed_host
from ..pop.polling import PollingResult, PopLongPollingService, PopRequest
from ..pop.records import POP_ORDER_REVIVE_QUEUE, PopCheckPoint
from .pop_checks import check_topic_and_group, with_born_time
from .pull import tag_filter

if TYPE_CHECKING:
    from gateway.remoting.bodies import TopicConfig
    from gateway.remoting.protocol import RemotingProtocol

    from ..controller import BrokerController

MAX_POP_MSG_NUMS = 32
# A record's queue offset: after totalSize, magic, bodyCRC, queueId, flag.
_QUEUE_OFFSET = struct.Struct(">q")
_QUEUE_OFFSET_AT = 20
# Store answers that leave the offset where it was: the group's offset is moved to nextBeginOffset.
_OFFSET_ILLEGAL = frozenset(
    {GetMessageStatus.OFFSET_TOO_SMALL, GetMessageStatus.OFFSET_OVERFLOW_BADLY, GetMessageStatus.OFFSET_FOUND_NULL}
)
_NOTHING_MATCHED = frozenset(
    {
        GetMessageStatus.NO_MATCHED_MESSAGE,
        GetMessageStatus.OFFSET_FOUND_NULL,
        GetMessageStatus.MESSAGE_WAS_REMOVING,
    }
)


@dataclass(slots=True)
class PopContext:
    """One pop in progress: what it asked for and what it has gathered so far."""

    header: PopMessageRequestHeader
    pop_time: int
    revive_qid: int
    tag_filter: Callable[[int], bool] | None
    expression: Expression | None
    buffers: list[bytes] = field(default_factory=list)
    start_offset_info: list[str] = field(default_factory=list)
    msg_offset_info: list[str] = field(default_factory=list)
    order_count_info: list[str] = field(default_factory=list)
    rest_num: int = 0

    @property
    def wanted(self) -> int:
        return self.header.max_msg_nums - len(self.buffers)


class PopMessageProcessor:
    """Answers POP_MESSAGE; a pop that found nothing waits in ``polling``."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        self.polling = PopLongPollingService(broker.config, broker.reactor, self.execute_held)
        self.random = random.Random()
        # (topic, group, queue id) whose checkpoint awaits its commit: not popped meanwhile.
        self._checkpointing: set[tuple[str, str, int]] = set()

    def handlers(self) -> dict[int, Any]:
        return {RequestCode.POP_MESSAGE: self.process}

    def execute_held(self, held: PopRequest) -> None:
        """Run a woken or expired pop again and write its answer."""
        response = self.process(held.channel, held.request)
        if response is not None:
            self.broker.dispatcher.count_latency(held.request, response, held.since, long_polling=True)
            response.opaque = held.request.opaque
            held.channel.send_command(response)

    def process(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand | None:
        broker = self.broker
        cfg = broker.config
        ext = with_born_time(request)
        header = PopMessageRequestHeader.decode(ext)
        header.queue_id = max(header.queue_id, -1)  # any negative queue id means every queue (getQueueId)
        if now_ms() - header.born_time - header.poll_time > 500:
            return request.response(
                ResponseCode.POLLING_TIMEOUT, f"the broker[{cfg.brokerIP1}] pop message is timeout too much"
            )
        if not cfg.brokerPermission & PermName.PERM_READ:
            return request.response(ResponseCode.NO_PERMISSION, f"the broker[{cfg.brokerIP1}] pop message is forbidden")
        if header.max_msg_nums > MAX_POP_MSG_NUMS:
            return request.response(
                ResponseCode.INVALID_PARAMETER, f"the broker[{cfg.brokerIP1}] pop message's num is greater than 32"
            )
        if not cfg.timerWheelEnable:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"the broker[{cfg.brokerIP1}] pop message is forbidden because timerWheelEnable is false",
            )
        checked = check_topic_and_group(broker, channel, request, header.topic, header.queue_id, header.consumer_group)
        if isinstance(checked, RemotingCommand):
            return checked
        tc = checked
        retry = pop_retry_topic(header.topic, header.consumer_group)
        if not header.order and len(retry) > MAX_TOPIC_LENGTH:
            # Apache stores such a name in a v2 record; ours holds v1 records only, and a message popped now
            # could not be revived into it. Orderly pops come back from their own queue.
            return request.response(
                ResponseCode.INVALID_PARAMETER,
                f"the pop retry topic of group {header.consumer_group} and topic {header.topic} would be "
                f"{len(retry)} characters, longer than the {MAX_TOPIC_LENGTH} this broker stores: use a shorter "
                "group or topic name, or orderly pops",
            )
        expression: Expression | None = None
        sub = None
        if header.exp:
            try:
                sub = SubscriptionData.build(header.topic, header.exp, header.exp_type)
                if not is_tag_type(sub.expression_type):
                    expression = compile_expression(sub.expression_type, header.exp)
            except (FilterError, ValueError):
                return request.response(
                    ResponseCode.SUBSCRIPTION_PARSE_FAILED, "parse the consumer's subscription failed"
                )
        ctx = PopContext(
            header,
            pop_time=now_ms(),
            revive_qid=POP_ORDER_REVIVE_QUEUE if header.order else broker.pop.next_revive_qid(),
            tag_filter=tag_filter(sub),
            expression=expression,
        )
        self.pop(ctx, tc)
        return self._answer(channel, request, ctx)

    def pop(self, ctx: PopContext, tc: TopicConfig) -> None:
        """Gather messages as Apache orders it: the retry topic first one time in popFromRetryProbability/100,
        else last if room is left; the topic's queues from a random one on (or the one asked for)."""
        header = ctx.header
        random_q = self.random.randrange(100)
        need_retry = random_q < self.broker.config.popFromRetryProbability
        retry = pop_retry_topic(header.topic, header.consumer_group)
        if need_retry and not header.order:
            self._pop_from_topic(ctx, retry, True, random_q)
        if header.queue_id < 0:
            self._pop_from_topic(ctx, tc.topic_name, False, random_q)
        else:
            self.pop_from_queue(ctx, tc.topic_name, header.queue_id, False)
        if not need_retry and ctx.wanted > 0 and not header.order:
            self._pop_from_topic(ctx, retry, True, random_q)

    def _pop_from_topic(self, ctx: PopContext, topic: str, is_retry: bool, random_q: int) -> None:
        tc = self.broker.topics.select(topic)
        if tc is None:
            return
        n = tc.read_queue_nums
        for i in range(n):
            self.pop_from_queue(ctx, topic, (random_q + i) % n, is_retry)

    def pop_offset(self, topic: str, group: str, queue_id: int, init_mode: int, commit: bool = True) -> int:
        """The group's offset in the queue; a group without one starts (and commits) at the queue's start for
        ConsumeInitMode.MIN and retry topics, else at its last message, or at 0 while the queue starts there
        in memory (getPopOffset / getInitOffset; ``commit`` False only looks)."""
        offsets = self.broker.offsets
        offset = offsets.query_offset(group, topic, queue_id)
        if offset >= 0:
            return offset
        store = self.broker.store
        if init_mode == 0 or topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            offset = store.get_min_offset_in_queue(topic, queue_id)
        elif (
            self.broker.config.initPopOffsetByCheckMsgInMem
            and store.get_min_offset_in_queue(topic, queue_id) <= 0
            and not store.check_in_disk_by_consume_offset(topic, queue_id, 0)
        ):
            offset = 0
        else:
            offset = max(store.get_max_offset_in_queue(topic, queue_id) - 1, 0)
        if commit:
            offsets.commit_offset(group, topic, queue_id, offset)
        return offset

    def pop_from_queue(self, ctx: PopContext, topic: str, queue_id: int, is_retry: bool) -> None:
        """popMsgFromQueue for one queue: read from the group's offset, store the checkpoint, move the offset."""
        broker = self.broker
        store = broker.store
        header = ctx.header
        group = header.consumer_group
        if header.order:
            if broker.orderly.blocked(header.attempt_id, topic, group, queue_id, header.invisible_time):
                return  # its previous batch holds it; that backlog is not counted (gateway.broker.pop.orderly)
            broker.pop.inflight.clear(topic, group, queue_id)  # what it held before is returned again
        if ctx.wanted <= 0 or (topic, group, queue_id) in self._checkpointing:  # only counted in restNum
            offset = self.pop_offset(topic, group, queue_id, header.init_mode, commit=False)
            ctx.rest_num += store.get_max_offset_in_queue(topic, queue_id) - offset
            return
        offset = self.pop_offset(topic, group, queue_id, header.init_mode)
        result = store.get_message(group, topic, queue_id, offset, ctx.wanted, ctx.tag_filter)
        if result is not None and result.status in _OFFSET_ILLEGAL:
            broker.offsets.commit_offset(group, topic, queue_id, result.next_begin_offset)
            offset = result.next_begin_offset
            result = store.get_message(group, topic, queue_id, offset, ctx.wanted, ctx.tag_filter)
        if result is None:
            ctx.rest_num += store.get_max_offset_in_queue(topic, queue_id) - offset
            return
        if ctx.expression is not None:
            filter_by_properties(result, ctx.expression)
        if result.buffers:
            queue_offsets = [_QUEUE_OFFSET.unpack_from(b, _QUEUE_OFFSET_AT)[0] for b in result.buffers]
            if header.order:
                ctx.order_count_info += broker.orderly.popped(
                    header.attempt_id,
                    topic,
                    group,
                    queue_id,
                    ctx.pop_time,
                    header.invisible_time,
                    offset,
                    queue_offsets,
                )
            else:
                stored = self.append_checkpoint(ctx, topic, queue_id, offset, queue_offsets)
                if not stored:
                    ctx.rest_num += result.max_offset - offset
                    return
                if isinstance(stored, Deferred):
                    self._when_checkpoint_stored(stored, ctx, topic, queue_id, result)
                else:
                    broker.offsets.commit_offset(group, topic, queue_id, result.next_begin_offset)
            append_offset_info(ctx.start_offset_info, topic, queue_id, offset)
            append_offset_info(ctx.msg_offset_info, topic, queue_id, queue_offsets)
            broker.message_counts.pulled(topic, group, queue_id, result.message_count, result.buffer_total_size, None)
            broker.pop.inflight.increment(topic, group, queue_id, result.message_count)
            self._add_messages(ctx, result, topic, offset, is_retry)
        elif result.status in _NOTHING_MATCHED and result.next_begin_offset > -1:
            broker.offsets.commit_offset(group, topic, queue_id, result.next_begin_offset)
        ctx.rest_num += result.max_offset - result.next_begin_offset

    def _when_checkpoint_stored(
        self, stored: Deferred[bool], ctx: PopContext, topic: str, queue_id: int, result: GetMessageResult
    ) -> None:
        """Move the group's offset past the popped messages once their checkpoint is stored; else leave it, so
        they are popped again, and count them out of flight."""
        group = ctx.header.consumer_group
        key = (topic, group, queue_id)
        self._checkpointing.add(key)
        pop_time, count, next_offset = ctx.pop_time, result.message_count, result.next_begin_offset

        def settled(ok: bool) -> None:
            self._checkpointing.discard(key)
            if ok:
                self.broker.offsets.commit_offset(group, topic, queue_id, next_offset)
            else:
                self.broker.pop.inflight.decrement(topic, group, pop_time, queue_id, count)

        stored.addCallback(settled)

    def append_checkpoint(
        self, ctx: PopContext, topic: str, queue_id: int, offset: int, queue_offsets: list[int]
    ) -> bool | Deferred[bool]:
        """Store the checkpoint of the messages just read from one queue (appendCheckPoint); whether it is
        stored (on a DLedger ledger, a Deferred of it)."""
        header = ctx.header
        ck = PopCheckPoint(
            start_offset=offset,
            pop_time=ctx.pop_time,
            invisible_time=header.invisible_time,
            bit_map=0,
            num=len(queue_offsets),
            queue_id=queue_id,
            topic=topic,
            cid=header.consumer_group,
            queue_offset_diff=[o - offset for o in queue_offsets],
            broker_name=self.broker.config.brokerName,
        )
        return self.broker.pop.append_checkpoint(ck, ctx.revive_qid)

    def _add_messages(self, ctx: PopContext, result: GetMessageResult, topic: str, offset: int, retry: bool) -> None:
        if not retry:
            ctx.buffers.extend(result.buffers)
            return
        # A retry topic's message goes out under the topic's own name, its POP_CK saying where it is.
        broker_name = self.broker.config.brokerName
        for record in result.buffers:
            try:
                msg = decode_record(record)
            except RecordError:
                continue
            props = dict(msg.properties)
            props.setdefault(
                PROPERTY_POP_CK,
                build_extra_info(
                    offset,
                    ctx.pop_time,
                    ctx.header.invisible_time,
                    ctx.revive_qid,
                    topic,
                    broker_name,
                    msg.queue_id,
                    msg.queue_offset,
                ),
            )
            ctx.buffers.append(
                encode_record(
                    topic=ctx.header.topic.encode(),
                    queue_id=msg.queue_id,
                    flag=msg.flag,
                    queue_offset=msg.queue_offset,
                    physical_offset=msg.commitlog_offset,
                    sys_flag=msg.sys_flag,
                    born_timestamp=msg.born_timestamp,
                    born_host=packed_host(msg.born_host),
                    store_timestamp=msg.store_timestamp,
                    store_host=packed_host(msg.store_host),
                    reconsume_times=msg.reconsume_times,
                    prepared_transaction_offset=msg.prepared_transaction_offset,
                    body=msg.body,
                    properties=properties_to_string(props).encode(),
                    crc=msg.body_crc,
                )
            )

    def _answer(self, channel: RemotingProtocol, request: RemotingCommand, ctx: PopContext) -> RemotingCommand | None:
        header = ctx.header
        if ctx.buffers:
            code = ResponseCode.SUCCESS
            remark = GetMessageStatus.FOUND.name
            if ctx.rest_num > 0:
                self.polling.notify(header.topic, header.queue_id, header.consumer_group)
        else:
            polled = self.polling.polling_request(
                channel,
                request,
                header.topic,
                header.consumer_group,
                header.queue_id,
                header.born_time,
                header.poll_time,
                ctx.tag_filter,
            )
            if polled is PollingResult.POLLING_SUC:
                # Apache also wakes it at once when messages are left (another pop held their queue's lock);
                # here no lock is ever held, and a store refusing checkpoints would make that a busy loop.
                return None
            code = ResponseCode.POLLING_FULL if polled is PollingResult.POLLING_FULL else ResponseCode.POLLING_TIMEOUT
            remark = GetMessageStatus.NO_MESSAGE_IN_QUEUE.name
        response = request.response(
            code,
            remark,
            PopMessageResponseHeader(
                pop_time=ctx.pop_time,
                invisible_time=header.invisible_time,
                revive_qid=ctx.revive_qid,
                rest_num=ctx.rest_num,
                start_offset_info=";".join(ctx.start_offset_info),
                msg_offset_info=";".join(ctx.msg_offset_info),
                order_count_info=";".join(ctx.order_count_info) if header.order else None,
            ).encode(),
        )
        if ctx.buffers:
            response.body_tail = ctx.buffers
        return response
