"""PEEK_MESSAGE (Apache 5.3.3's PeekMessageProcessor): the messages a POP of the group would get, read from
the group's offsets (its pop retry topic included), with no checkpoint and no offset moved."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.extra_info import pop_retry_topic
from gateway.remoting.headers import PeekMessageRequestHeader, PopMessageResponseHeader
from gateway.store.api import GetMessageStatus

from .pop_checks import check_readable

if TYPE_CHECKING:
    from gateway.remoting.bodies import TopicConfig
    from gateway.remoting.protocol import RemotingProtocol

    from ..controller import BrokerController

# A peek reads at most this many messages (as a pop, and the store's own transfer limit).
MAX_PEEK_MSG_NUMS = 32
# Store answers that leave the offset where it was: read again from nextBeginOffset.
_OFFSET_ILLEGAL = frozenset({GetMessageStatus.OFFSET_TOO_SMALL, GetMessageStatus.OFFSET_OVERFLOW_BADLY})


def peek_offset(broker: BrokerController, topic: str, group: str, queue_id: int) -> int:
    """Where the group's next pop of the queue starts: its offset, or the queue's first message (getPopOffset
    of peek and notification, which never commit one)."""
    offset = broker.offsets.query_offset(group, topic, queue_id)
    return offset if offset >= 0 else broker.store.get_min_offset_in_queue(topic, queue_id)


class PeekMessageProcessor:
    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        self.random = random.Random()

    def handlers(self) -> dict[int, Any]:
        return {RequestCode.PEEK_MESSAGE: self.process}

    def process(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        broker = self.broker
        header = PeekMessageRequestHeader.decode(request.ext_fields)
        checked = check_readable(broker, channel, request, header.topic, header.queue_id, header.consumer_group)
        if isinstance(checked, RemotingCommand):
            return checked
        wanted = min(header.max_msg_nums, MAX_PEEK_MSG_NUMS)
        buffers: list[bytes] = []
        rest = 0
        random_q = self.random.randrange(100)
        need_retry = random_q % 5 == 0
        retry_tc = broker.topics.select(pop_retry_topic(header.topic, header.consumer_group))

        def peek_topic(tc: TopicConfig | None) -> None:
            if tc is not None:
                for i in range(tc.read_queue_nums):
                    peek_queue(tc.topic_name, (random_q + i) % tc.read_queue_nums)

        def peek_queue(topic: str, queue_id: int) -> None:
            nonlocal rest
            offset = peek_offset(broker, topic, header.consumer_group, queue_id)
            rest += broker.store.get_max_offset_in_queue(topic, queue_id) - offset
            if len(buffers) >= wanted:
                return
            result = broker.store.get_message(header.consumer_group, topic, queue_id, offset, wanted - len(buffers))
            if result is not None and result.status in _OFFSET_ILLEGAL:
                offset = result.next_begin_offset
                result = broker.store.get_message(header.consumer_group, topic, queue_id, offset, wanted - len(buffers))
            if result is not None:
                buffers.extend(result.buffers)

        if need_retry:
            peek_topic(retry_tc)
        if header.queue_id < 0:
            peek_topic(checked)
        else:
            peek_queue(header.topic, header.queue_id)
        if not need_retry and len(buffers) < wanted:
            peek_topic(retry_tc)
        # Java sets only restNum: the other (primitive) fields go out as 0.
        ext = PopMessageResponseHeader(pop_time=0, invisible_time=0, revive_qid=0, rest_num=rest).encode()
        if not buffers:
            return request.response(ResponseCode.PULL_NOT_FOUND, GetMessageStatus.NO_MESSAGE_IN_QUEUE.name, ext)
        response = request.response(ResponseCode.SUCCESS, GetMessageStatus.FOUND.name, ext)
        response.body_tail = buffers
        return response
