"""NOTIFICATION (200054) and POLLING_INFO (200055), Apache 5.3.3's NotificationProcessor and
PollingInfoProcessor.

A notification asks whether the group has a message to pop in a queue (``queueId`` -1: any queue), its pop
retry topic included; without one it waits up to ``pollTime`` for a message to arrive (in a long-polling
service of its own, woken as pops are), then answers ``hasMsg`` false. An orderly notification counts a queue
held by an unacked orderly batch as empty. POLLING_INFO tells how many pops wait on a queue.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.extra_info import pop_retry_topic
from gateway.remoting.headers import (
    NotificationRequestHeader,
    NotificationResponseHeader,
    PollingInfoRequestHeader,
    PollingInfoResponseHeader,
)

from ..pop.polling import PollingResult, PopLongPollingService, PopRequest
from .peek_message import peek_offset
from .pop_checks import check_readable, with_born_time

if TYPE_CHECKING:
    from gateway.remoting.bodies import TopicConfig
    from gateway.remoting.protocol import RemotingProtocol

    from ..controller import BrokerController


class NotificationProcessor:
    """Answers NOTIFICATION; one that finds nothing waits in ``polling``."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        self.polling = PopLongPollingService(broker.config, broker.reactor, self.execute_held)
        self.random = random.Random()

    def handlers(self) -> dict[int, Any]:
        return {RequestCode.NOTIFICATION: self.process}

    def notify_message_arriving(self, topic: str, queue_id: int) -> None:
        """Wake the notifications held on the queue (and on any queue of the topic), whatever their filter."""
        self.polling.notify_message_arriving(topic, queue_id, None)

    def execute_held(self, held: PopRequest) -> None:
        """Run a woken or expired notification again and write its answer."""
        response = self.process(held.channel, held.request)
        if response is not None:
            self.broker.dispatcher.count_latency(held.request, response, held.since, long_polling=True)
            response.opaque = held.request.opaque
            held.channel.send_command(response)

    def process(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand | None:
        broker = self.broker
        ext = with_born_time(request)
        header = NotificationRequestHeader.decode(ext)
        checked = check_readable(broker, channel, request, header.topic, header.queue_id, header.consumer_group)
        if isinstance(checked, RemotingCommand):
            return checked
        random_q = self.random.randrange(100)
        need_retry = random_q % 5 == 0
        retry_tc = broker.topics.select(pop_retry_topic(header.topic, header.consumer_group))
        has_msg = need_retry and self._has_msg_in_topic(retry_tc, random_q, header)
        if not has_msg:
            if header.queue_id < 0:
                has_msg = self._has_msg_in_topic(checked, random_q, header)
            else:
                has_msg = self._has_msg_in_queue(header.topic, header, header.queue_id)
            if not need_retry and not has_msg:
                has_msg = self._has_msg_in_topic(retry_tc, random_q, header)
        polling_full = False
        if not has_msg:
            polled = self.polling.polling_request(
                channel,
                request,
                header.topic,
                header.consumer_group,
                header.queue_id,
                header.born_time,
                header.poll_time,
                None,
            )
            if polled is PollingResult.POLLING_SUC:
                return None
            polling_full = polled is PollingResult.POLLING_FULL
        return request.response(ResponseCode.SUCCESS, None, NotificationResponseHeader(has_msg, polling_full).encode())

    def _has_msg_in_topic(self, tc: TopicConfig | None, random_q: int, header: NotificationRequestHeader) -> bool:
        if tc is None:
            return False
        n = tc.read_queue_nums
        return any(self._has_msg_in_queue(tc.topic_name, header, (random_q + i) % n) for i in range(n))

    def _has_msg_in_queue(self, topic: str, header: NotificationRequestHeader, queue_id: int) -> bool:
        broker = self.broker
        group = header.consumer_group
        # As Java: the order check is of the topic asked about, whichever topic is read.
        if header.order and broker.order_info.check_block(header.attempt_id, header.topic, group, queue_id, 0):
            return False
        return broker.store.get_max_offset_in_queue(topic, queue_id) > peek_offset(broker, topic, group, queue_id)


class PollingInfoProcessor:
    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker

    def handlers(self) -> dict[int, Any]:
        return {RequestCode.POLLING_INFO: self.process}

    def process(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        broker = self.broker
        header = PollingInfoRequestHeader.decode(request.ext_fields)
        checked = check_readable(broker, channel, request, header.topic, header.queue_id, header.consumer_group)
        if isinstance(checked, RemotingCommand):
            return checked
        held = broker.pop_processor.polling.polling_num(header.topic, header.consumer_group, header.queue_id)
        return request.response(ResponseCode.SUCCESS, None, PollingInfoResponseHeader(held).encode())
