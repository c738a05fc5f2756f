"""SEND_REPLY_MESSAGE(_V2) (ReplyMessageProcessor): 4.x request/reply.

A requester (``DefaultMQProducer.request``) sends an ordinary message carrying ``CORRELATION_ID`` and
``REPLY_TO_CLIENT`` (its client id); the consumer answers with a reply message (``MSG_TYPE=reply``) to
``<cluster>_REPLY_TOPIC`` through these codes. The broker pushes the reply straight to the requester's
connection as PUSH_REPLY_MESSAGE_TO_CLIENT, and also stores it when ``storeReplyMessageEnable`` is on.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred, succeed
from twisted.logger import Logger

from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import ReplyMessageRequestHeader, SendMessageRequestHeader
from gateway.remoting.message import MessageConst, properties_to_string, string_to_properties, tags_code
from gateway.store.api import MessageExtBrokerInner, PutMessageResult

from ..inner import when_put

if TYPE_CHECKING:
    from gateway.remoting.protocol import RemotingProtocol

    from ..controller import BrokerController
    from .send import SendMessageProcessor

log = Logger()

PUSH_REPLY_TIMEOUT = 10.0  # seconds, as Broker2Client.callClient


class ReplyMessageProcessor:
    def __init__(self, broker: BrokerController, send: SendMessageProcessor) -> None:
        self.broker = broker
        self.send = send  # shares the send checks (AbstractSendMessageProcessor.msgCheck)

    def handlers(self) -> dict[int, Any]:
        return {RequestCode.SEND_REPLY_MESSAGE: self.process, RequestCode.SEND_REPLY_MESSAGE_V2: self.process}

    def process(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand | Deferred[Any]:
        if request.code == RequestCode.SEND_REPLY_MESSAGE_V2:
            header = SendMessageRequestHeader.decode_v2(request.ext_fields)
        else:
            header = SendMessageRequestHeader.decode(request.ext_fields)
        ext = self.send.region_ext()
        error = self.send.msg_check(request, header)
        if error is not None:
            return request.response(error[0], error[1], ext)
        broker = self.broker
        queue_id = self.send.queue_id(header)
        props = string_to_properties(header.properties)
        pushed = self._push_reply_message(channel, header, props, request.body)

        def answer(failure: str | None) -> RemotingCommand | Deferred[RemotingCommand]:
            if failure is None:
                ext.update(msgId="0", queueId=str(queue_id), queueOffset="0")  # zeros keep the client's decoder happy
            if broker.config.storeReplyMessageEnable:
                msg = MessageExtBrokerInner(
                    topic=header.topic,
                    queue_id=queue_id,
                    flag=header.flag,
                    body=request.body,
                    properties=header.properties or "",
                    tags_code=tags_code(props.get(MessageConst.TAGS)),
                    sys_flag=header.sys_flag,
                    born_timestamp=header.born_timestamp,
                    born_host=broker.born_host(channel),
                    store_host=broker.store_host,
                    reconsume_times=header.reconsume_times or 0,
                )
                return when_put(broker.store.put_message(msg), lambda result: respond(failure, result))
            return respond(failure)

        def respond(failure: str | None, result: PutMessageResult | None = None) -> RemotingCommand:
            if result is not None and result.ok and result.append is not None:
                ext.update(
                    msgId=result.append.msg_id, queueId=str(queue_id), queueOffset=str(result.append.logics_offset)
                )
            if failure is not None:
                return request.response(ResponseCode.SYSTEM_ERROR, failure, ext)
            return request.response(ResponseCode.SUCCESS, None, ext)

        return pushed.addCallback(answer)

    def _push_reply_message(
        self, channel: RemotingProtocol, header: SendMessageRequestHeader, props: dict[str, str], body: bytes
    ) -> Deferred[str | None]:
        """PUSH_REPLY_MESSAGE_TO_CLIENT to the requester; fires with None when it took the reply, else why not."""
        sender = props.get(MessageConst.MESSAGE_REPLY_TO_CLIENT)
        if sender is None:
            return succeed(f"reply message properties[{MessageConst.MESSAGE_REPLY_TO_CLIENT}] is null")
        target = self.broker.producers.find_channel(sender)
        if target is None:
            return succeed(f"push reply message fail, channel of <{sender}> not found.")
        props[MessageConst.PUSH_REPLY_TIME] = str(int(time.time() * 1000))
        push = ReplyMessageRequestHeader(
            producer_group=header.producer_group,
            topic=header.topic,
            default_topic=header.default_topic,
            default_topic_queue_nums=header.default_topic_queue_nums,
            queue_id=header.queue_id,
            sys_flag=header.sys_flag,
            born_timestamp=header.born_timestamp,
            flag=header.flag,
            born_host=channel.peer,
            store_host=self.broker.config.broker_addr,
            store_timestamp=int(time.time() * 1000),
            properties=properties_to_string(props),
            reconsume_times=header.reconsume_times,
            unit_mode=header.unit_mode,
        )
        request = RemotingCommand.request(
            RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, push.encode(), body, language="JAVA"
        )
        failed = f"push reply message to {sender}fail."  # sic: Java's wording

        def done(response: RemotingCommand) -> str | None:
            return None if response.code == ResponseCode.SUCCESS else failed

        def error(reason: Any) -> str:
            log.warn("push reply to {sender} failed: {error}", sender=sender, error=reason.value)
            return failed

        return target.invoke(request, PUSH_REPLY_TIMEOUT).addCallbacks(done, error)
