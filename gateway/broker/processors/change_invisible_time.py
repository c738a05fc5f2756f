"""CHANGE_MESSAGE_INVISIBLETIME (ChangeInvisibleTimeProcessor): a new checkpoint of the one message, due
``invisibleTime`` from now, then an ack of it under its old checkpoint."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.extra_info import ExtraInfo, PopRecordError
from gateway.remoting.headers import ChangeInvisibleTimeRequestHeader, ChangeInvisibleTimeResponseHeader
from gateway.store.commit_log import now_ms

from ..pop.records import POP_ORDER_REVIVE_QUEUE, AckMsg, PopCheckPoint
from .ack_message import extra_info_error
from .pop_checks import check_topic_queue

if TYPE_CHECKING:
    from gateway.remoting.protocol import RemotingProtocol

    from ..controller import BrokerController


class ChangeInvisibleTimeProcessor:
    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker

    def handlers(self) -> dict[int, Any]:
        return {RequestCode.CHANGE_MESSAGE_INVISIBLETIME: self.process}

    def process(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        broker = self.broker
        header = ChangeInvisibleTimeRequestHeader.decode(request.ext_fields)
        checked = check_topic_queue(broker, channel, request, header.topic, header.queue_id)
        if isinstance(checked, RemotingCommand):
            return checked
        store = broker.store
        low = store.get_min_offset_in_queue(header.topic, header.queue_id)
        high = store.get_max_offset_in_queue(header.topic, header.queue_id)
        if not low <= header.offset < high:
            return request.response(ResponseCode.NO_MESSAGE)
        try:
            info = ExtraInfo.parse(header.extra_info)
            revive_qid = info.revive_qid
            old_ack = AckMsg(
                ack_offset=header.offset,
                start_offset=info.ck_queue_offset,
                consumer_group=header.consumer_group,
                topic=header.topic,
                queue_id=header.queue_id,
                pop_time=info.pop_time,
                broker_name=info.broker_name,
            )
            old_revive_time = info.pop_time + info.invisible_time
        except PopRecordError as e:
            return extra_info_error(request, e)
        if revive_qid == POP_ORDER_REVIVE_QUEUE:
            changed = broker.orderly.change_invisible_time(
                header.topic,
                header.consumer_group,
                header.queue_id,
                header.offset,
                info.pop_time,
                header.invisible_time,
            )
            # Already committed: Java answers its header unset, every field 0.
            pop_time, invisible_time = changed if changed is not None else (0, 0)
            return request.response(
                ResponseCode.SUCCESS,
                None,
                ChangeInvisibleTimeResponseHeader(pop_time, invisible_time, revive_qid if changed else 0).encode(),
            )
        pop = broker.pop
        if not pop.is_revive_qid(revive_qid):
            return request.response(ResponseCode.MESSAGE_ILLEGAL, f"reviveQid[{revive_qid}] is illegal")
        now = now_ms()
        ck = PopCheckPoint(
            start_offset=header.offset,
            pop_time=now,
            invisible_time=header.invisible_time,
            bit_map=0,
            num=1,
            queue_id=header.queue_id,
            topic=header.topic,
            cid=header.consumer_group,
            queue_offset_diff=[0],
            broker_name=old_ack.broker_name,
        )
        if not pop.append_checkpoint(ck, revive_qid):
            return request.response(ResponseCode.SYSTEM_ERROR)
        pop.append_ack(old_ack, revive_qid, old_revive_time)
        return request.response(
            ResponseCode.SUCCESS,
            None,
            ChangeInvisibleTimeResponseHeader(
                pop_time=now, invisible_time=header.invisible_time, revive_qid=revive_qid
            ).encode(),
        )
