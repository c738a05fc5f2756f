"""RECALL_MESSAGE (RecallMessageProcessor, 5.3): a producer withdraws a delayed message before its time.

The recall handle (answered by the send) names the topic, this broker, the delivery time and the message's
unique id. The broker parks a marker in the timer due with the handle's time, carrying ``TIMER_DEL_UNIQKEY``;
the timer then drops the message instead of delivering it (timer.py). Off unless ``recallMessageEnable``, as
in Apache.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from gateway.remoting.codes import PermName, RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import RecallMessageRequestHeader
from gateway.remoting.message import MessageConst, properties_to_string, tags_code
from gateway.remoting.recall_handle import InvalidRecallHandle, RecallHandle, timer_delete_key
from gateway.store.api import MessageExtBrokerInner, PutMessageResult
from gateway.store.config import SLAVE
from gateway.store.message_store import TIMER_TOPIC

from ..inner import when_put
from ..schedule import handle_schedule_message

if TYPE_CHECKING:
    from gateway.remoting.protocol import RemotingProtocol

    from ..controller import BrokerController

RECALL_MESSAGE_TAG = "_RECALL_TAG_"
UNAVAILABLE = "recall failed, broker service not available"


class RecallMessageProcessor:
    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker

    def handlers(self) -> dict[int, Any]:
        return {RequestCode.RECALL_MESSAGE: self.process}

    def process(self, channel: RemotingProtocol, request: RemotingCommand) -> Any:
        broker = self.broker
        cfg = broker.config
        ext = {MessageConst.MSG_REGION: cfg.regionId}
        header = RecallMessageRequestHeader.decode(request.ext_fields)
        if not cfg.recallMessageEnable:
            return request.response(ResponseCode.NO_PERMISSION, "recall failed, operation is forbidden", ext)
        if broker.store_config.brokerRole == SLAVE:
            return request.response(ResponseCode.SLAVE_NOT_AVAILABLE, UNAVAILABLE, ext)
        now = int(time.time() * 1000)
        if now < cfg.startAcceptSendRequestTimeStamp:
            return request.response(ResponseCode.SERVICE_NOT_AVAILABLE, UNAVAILABLE, ext)
        if not cfg.brokerPermission & PermName.PERM_WRITE and not cfg.allowRecallWhenBrokerNotWriteable:
            return request.response(ResponseCode.SERVICE_NOT_AVAILABLE, UNAVAILABLE, ext)
        if broker.topics.select(header.topic) is None:
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST, f"recall failed, the topic[{header.topic}] not exist", ext
            )
        try:
            handle = RecallHandle.decode(header.recall_handle)
        except InvalidRecallHandle as e:
            return request.response(ResponseCode.ILLEGAL_OPERATION, str(e), ext)
        if handle.topic != header.topic:
            return request.response(ResponseCode.ILLEGAL_OPERATION, "recall failed, topic not match", ext)
        if handle.broker_name != cfg.brokerName:
            return request.response(ResponseCode.ILLEGAL_OPERATION, UNAVAILABLE, ext)
        try:
            time_left = int(handle.timestamp) - now
        except ValueError:
            time_left = -1
        if time_left <= 0 or time_left >= cfg.timerMaxDelaySec * 1000:
            return request.response(ResponseCode.ILLEGAL_OPERATION, "recall failed, timestamp invalid", ext)
        msg, props = self._marker(channel, header, handle, now)
        # Parked in the timer, or not at all: a marker must never reach the topic itself.
        if handle_schedule_message(broker, msg, props) is not None or msg.topic != TIMER_TOPIC:
            return request.response(ResponseCode.ILLEGAL_OPERATION, "recall failed, timestamp invalid", ext)
        return when_put(broker.store.put_message(msg), lambda result: self._answer(request, result, handle, ext))

    @staticmethod
    def _answer(
        request: RemotingCommand, result: PutMessageResult, handle: RecallHandle, ext: dict[str, str]
    ) -> RemotingCommand:
        if not result.ok:
            return request.response(ResponseCode.SYSTEM_ERROR, "recall failed, execute error", ext)
        ext["msgId"] = handle.message_id
        return request.response(ResponseCode.SUCCESS, None, ext)

    def _marker(
        self, channel: RemotingProtocol, header: RecallMessageRequestHeader, handle: RecallHandle, now: int
    ) -> tuple[MessageExtBrokerInner, dict[str, str]]:
        """RecallMessageProcessor.buildMessage: a one-byte message of the topic due at the handle's time."""
        props = {
            MessageConst.TAGS: RECALL_MESSAGE_TAG,
            MessageConst.TIMER_DEL_UNIQKEY: timer_delete_key(handle.topic, handle.message_id),
            MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: handle.message_id,
            MessageConst.TIMER_DELIVER_MS: handle.timestamp,
            MessageConst.CLUSTER: self.broker.config.brokerClusterName,
        }
        if header.producer_group:
            props[MessageConst.PRODUCER_GROUP] = header.producer_group
        msg = MessageExtBrokerInner(
            topic=handle.topic,
            queue_id=0,
            flag=0,
            body=b"0",
            properties=properties_to_string(props),
            tags_code=tags_code(RECALL_MESSAGE_TAG),
            sys_flag=0,
            born_timestamp=now,
            born_host=self.broker.born_host(channel),
            store_host=self.broker.store_host,
        )
        return msg, props
