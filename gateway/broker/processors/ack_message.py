"""ACK_MESSAGE and BATCH_ACK_MESSAGE (AckMessageProcessor): an ack record in the revive queue of the pop that
returned the message, delivered when that pop's invisible time ends, so the revive service finds it next to
the checkpoint and leaves the message alone."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gateway.remoting import fastjson
from gateway.remoting.bodies import BatchAck, BatchAckMessageRequestBody
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.extra_info import ExtraInfo, PopRecordError, real_topic
from gateway.remoting.headers import AckMessageRequestHeader

from ..pop.records import POP_ORDER_REVIVE_QUEUE, AckMsg
from .pop_checks import check_topic_queue

if TYPE_CHECKING:
    from gateway.remoting.protocol import RemotingProtocol

    from ..controller import BrokerController


def extra_info_error(request: RemotingCommand, e: PopRecordError) -> RemotingCommand:
    """An extraInfo that ExtraInfoUtil cannot read: Java throws, and the remoting layer answers SYSTEM_ERROR."""
    return request.response(ResponseCode.SYSTEM_ERROR, f"IllegalArgumentException: {e}")


class AckMessageProcessor:
    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker

    def handlers(self) -> dict[int, Any]:
        return {RequestCode.ACK_MESSAGE: self.ack, RequestCode.BATCH_ACK_MESSAGE: self.batch_ack}

    def ack(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        broker = self.broker
        header = AckMessageRequestHeader.decode(request.ext_fields)
        checked = check_topic_queue(broker, channel, request, header.topic, header.queue_id)
        if isinstance(checked, RemotingCommand):
            return checked
        store = broker.store
        low = store.get_min_offset_in_queue(header.topic, header.queue_id)
        high = store.get_max_offset_in_queue(header.topic, header.queue_id)
        if not low <= header.offset <= high:
            return request.response(
                ResponseCode.NO_MESSAGE,
                f"offset is illegal, key:{header.topic}@{header.queue_id}, commit:{header.offset}, store:{low}~{high}",
            )
        try:
            info = ExtraInfo.parse(header.extra_info)
            ack = AckMsg(
                ack_offset=header.offset,
                start_offset=info.ck_queue_offset,
                consumer_group=header.consumer_group,
                topic=header.topic,
                queue_id=header.queue_id,
                pop_time=info.pop_time,
                broker_name=info.broker_name,
            )
            revive_qid, invisible_time = info.revive_qid, info.invisible_time
        except PopRecordError as e:
            return extra_info_error(request, e)
        if revive_qid == POP_ORDER_REVIVE_QUEUE:
            refused = broker.orderly.ack(
                header.topic,
                header.consumer_group,
                header.queue_id,
                header.offset,
                ack.pop_time,
                invisible_time,
                channel.peer,
            )
            return request.response(*refused) if refused else request.response(ResponseCode.SUCCESS)
        response = request.response(ResponseCode.SUCCESS)
        self._append(request, response, ack, revive_qid, invisible_time)
        return response

    def batch_ack(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        body = BatchAckMessageRequestBody.from_json(fastjson.loads(request.body)) if request.body else None
        if body is None or not body.acks:
            return request.response(ResponseCode.NO_MESSAGE)
        response = request.response(ResponseCode.SUCCESS)
        for batch in body.acks:
            self._append_batch(request, response, batch, body.broker_name, channel.peer)
        return response

    def _append_batch(
        self,
        request: RemotingCommand,
        response: RemotingCommand,
        batch: BatchAck,
        broker_name: str | None,
        peer: str,
    ) -> None:
        store = self.broker.store
        try:
            topic = real_topic(batch.topic, batch.consumer_group, batch.retry)
        except PopRecordError:
            return
        low = store.get_min_offset_in_queue(topic, batch.queue_id)
        high = store.get_max_offset_in_queue(topic, batch.queue_id)
        if self.broker.topics.select(topic) is None:  # Apache: "Illegal topic or queue found when batch ack"
            return
        offsets = sorted(o for o in (batch.start_offset + i for i in batch.bit_set) if low <= o <= high)
        if not offsets:
            return
        if batch.revive_queue_id == POP_ORDER_REVIVE_QUEUE:
            for offset in offsets:
                refused = self.broker.orderly.ack(
                    topic, batch.consumer_group, batch.queue_id, offset, batch.pop_time, batch.invisible_time, peer
                )
                if refused:
                    response.code, response.remark = refused
            return
        ack = AckMsg(
            ack_offset=-1,
            start_offset=batch.start_offset,
            consumer_group=batch.consumer_group,
            topic=topic,
            queue_id=batch.queue_id,
            pop_time=batch.pop_time,
            broker_name=broker_name,
            ack_offset_list=offsets,
        )
        self._append(request, response, ack, batch.revive_queue_id, batch.invisible_time)

    def _append(
        self, request: RemotingCommand, response: RemotingCommand, ack: AckMsg, revive_qid: int, invisible_time: int
    ) -> None:
        pop = self.broker.pop
        if not pop.is_revive_qid(revive_qid):
            # Not a revive queue of ours (999 is an orderly pop's, which writes no checkpoint).
            response.code = ResponseCode.MESSAGE_ILLEGAL
            response.remark = f"reviveQid[{revive_qid}] is illegal"
            return
        pop.append_ack(ack, revive_qid, ack.pop_time + invisible_time)
        acked = len(ack.ack_offset_list) if ack.ack_offset_list is not None else 1
        pop.inflight.decrement(ack.topic, ack.consumer_group, ack.pop_time, ack.queue_id, acked)
