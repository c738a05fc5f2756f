"""Admin requests the broker answers by asking its consumers (Broker2Client and AdminBrokerProcessor's
callConsumer): INVOKE_BROKER_TO_RESET_OFFSET, INVOKE_BROKER_TO_GET_CONSUMER_STATUS, GET_CONSUMER_RUNNING_INFO
and CONSUME_MESSAGE_DIRECTLY."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twisted.internet import defer
from twisted.logger import Logger

from gateway.remoting import fastjson
from gateway.remoting.bodies import BodyError, MessageQueue
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import (
    ConsumeMessageDirectlyResultRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    GetConsumerStatusRequestHeader,
    ResetOffsetRequestHeader,
)
from gateway.remoting.message import decode_offset_message_id
from gateway.remoting.protocol import RemotingTimeoutError

if TYPE_CHECKING:
    from gateway.remoting.protocol import RemotingProtocol

    from ..controller import BrokerController

log = Logger()

# MQVersion ordinals: clients older than these cannot answer (Java refuses them the same way).
_V3_0_7_SNAPSHOT = 28
_V3_1_8_SNAPSHOT = 62
# Broker2Client's timeouts: 5 s for a status, callClient's 10 s for running info and direct consumption.
_STATUS_TIMEOUT = 5.0
_CALL_TIMEOUT = 10.0


class BrokerToClientProcessor:
    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker

    def handlers(self) -> dict[int, Any]:
        return {
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: self.reset_offset,
            RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS: self.get_consumer_status,
            RequestCode.GET_CONSUMER_RUNNING_INFO: self.get_consumer_running_info,
            RequestCode.CONSUME_MESSAGE_DIRECTLY: self.consume_message_directly,
        }

    def reset_offset(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        """Move a group's offsets on one topic to a time (-1: the queue ends), here and in each online member
        (RESET_CONSUMER_CLIENT_OFFSET); without ``isForce`` an offset only moves back."""
        broker = self.broker
        h = ResetOffsetRequestHeader.decode(request.ext_fields)
        log.info(
            "[reset-offset] reset offset started by {peer}. topic={topic}, group={group}, timestamp={ts}, "
            "isForce={force}",
            peer=channel.peer,
            topic=h.topic,
            group=h.group,
            ts=h.timestamp,
            force=h.is_force,
        )
        tc = broker.topics.select(h.topic)
        if tc is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"[reset-offset] reset offset failed, no topic in this broker. topic={h.topic}",
            )
        store = broker.store
        table: dict[MessageQueue, int] = {}
        for qid in range(tc.write_queue_nums):
            consumer_offset = broker.offsets.query_offset(h.group, h.topic, qid)
            if consumer_offset == -1:
                return request.response(ResponseCode.SYSTEM_ERROR, f"THe consumer group <{h.group}> not exist")
            if h.timestamp == -1:
                target = store.get_max_offset_in_queue(h.topic, qid)
            else:
                target = store.get_offset_in_queue_by_time(h.topic, qid, h.timestamp)
            target = max(target, 0)
            mq = MessageQueue(h.topic, broker.config.brokerName, qid)
            table[mq] = target if h.is_force or target < consumer_offset else consumer_offset
        cg = broker.consumers.get(h.group)
        if cg is None or not cg.channels:
            return request.response(
                ResponseCode.CONSUMER_NOT_ONLINE,
                f"Consumer not online, so can not reset offset, Group: {h.group} Topic: {h.topic} "
                f"Timestamp: {h.timestamp}",
            )
        push = ResetOffsetRequestHeader(topic=h.topic, group=h.group, timestamp=h.timestamp, is_force=False).encode()
        # Java's header carries isForce too (false, a primitive): the C++ client reads every field.
        # C++ clients read a list of queues with offsets (ResetOffsetBodyForC); the others a map.
        body_c = fastjson.dumps({"offsetTable": [{**mq.to_json(), "offset": offset} for mq, offset in table.items()]})
        body = fastjson.dumps({"offsetTable": table})
        for ch, info in list(cg.channels.items()):
            if info.version < _V3_0_7_SNAPSHOT:
                return request.response(
                    ResponseCode.SYSTEM_ERROR, f"the client does not support this feature. version={info.version}"
                )
            is_c = request.language == "CPP" or info.language == "CPP"
            ch.invoke_oneway(
                RemotingCommand.request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, dict(push), body_c if is_c else body)
            )
            log.info(
                "[reset-offset] reset offset success. topic={topic}, group={group}, clientId={client}",
                topic=h.topic,
                group=h.group,
                client=info.client_id,
            )
        # Server side too (5.x's useServerSideResetOffset): POP consumers keep no offsets of their own, and their
        # pops in flight and orderly batches go with the old offsets.
        for mq, offset in table.items():
            broker.offsets.commit_offset(h.group, h.topic, mq.queue_id, offset)
            broker.pop.offset_reset(h.topic, h.group, mq.queue_id)
        return request.response(body=body)

    def get_consumer_status(self, channel: RemotingProtocol, request: RemotingCommand) -> Any:
        """Ask the group's members (or the one at ``clientAddr``) for their offsets (GetConsumerStatusBody)."""
        return self._consumer_status(request, GetConsumerStatusRequestHeader.decode(request.ext_fields))

    @defer.inlineCallbacks
    def _consumer_status(self, request: RemotingCommand, h: GetConsumerStatusRequestHeader) -> Any:
        cg = self.broker.consumers.get(h.group)
        if cg is None or not cg.channels:
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"No Any Consumer online in the consumer group: [{h.group}]"
            )
        ask = {"topic": h.topic, "group": h.group}
        status: dict[str, Any] = {}
        for ch, info in list(cg.channels.items()):
            if info.version < _V3_0_7_SNAPSHOT:
                return request.response(
                    ResponseCode.SYSTEM_ERROR, f"the client does not support this feature. version={info.version}"
                )
            if h.client_addr and h.client_addr != info.client_id:
                continue
            try:
                answer = yield ch.invoke(
                    RemotingCommand.request(RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT, dict(ask)), _STATUS_TIMEOUT
                )
                if answer.code == ResponseCode.SUCCESS and answer.body:
                    table = fastjson.loads(answer.body).get("messageQueueTable") or {}
                    status[info.client_id] = table
            except (RemotingTimeoutError, BodyError, ValueError, AttributeError) as e:
                log.error(
                    "[get-consumer-status] get consumer status exception. topic={topic}, group={group}, error={e}",
                    topic=h.topic,
                    group=h.group,
                    e=e,
                )
            if h.client_addr:
                break
        return request.response(body=fastjson.dumps({"consumerTable": status}))

    def get_consumer_running_info(self, channel: RemotingProtocol, request: RemotingCommand) -> Any:
        h = GetConsumerRunningInfoRequestHeader.decode(request.ext_fields)
        return self._call_consumer(
            RequestCode.GET_CONSUMER_RUNNING_INFO, request, h.consumer_group, h.client_id, request.body
        )

    def consume_message_directly(self, channel: RemotingProtocol, request: RemotingCommand) -> Any:
        """Hand one stored message (by offsetMsgId) to a consumer to consume now (mqadmin consumeMessage)."""
        h = ConsumeMessageDirectlyResultRequestHeader.decode(request.ext_fields)
        request.ext_fields = {**(request.ext_fields or {}), "brokerName": self.broker.config.brokerName}
        body = request.body
        try:
            _, offset = decode_offset_message_id(h.msg_id or "")
        except ValueError:
            pass  # as Java: the request goes on with the body it came with
        else:
            record = self.broker.store.look_message_by_offset(offset)
            if record is not None:
                body = bytes(record)
        return self._call_consumer(RequestCode.CONSUME_MESSAGE_DIRECTLY, request, h.consumer_group, h.client_id, body)

    @defer.inlineCallbacks
    def _call_consumer(
        self, code: int, request: RemotingCommand, group: str, client_id: str | None, body: bytes
    ) -> Any:
        cg = self.broker.consumers.get(group)
        info = None
        if cg is not None:
            info = next((i for i in cg.channels.values() if i.client_id == client_id), None)
        if info is None:
            return request.response(ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online")
        if info.version < _V3_1_8_SNAPSHOT:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"The Consumer <{client_id}> Version <{info.version}> too low to finish, please upgrade it to "
                "V3_1_8_SNAPSHOT",
            )
        forward = RemotingCommand.request(code, dict(request.ext_fields or {}), body or b"")
        try:
            answer = yield info.channel.invoke(forward, _CALL_TIMEOUT)
        except RemotingTimeoutError as e:
            return request.response(ResponseCode.CONSUME_MSG_TIMEOUT, f"consumer <{group}> <{client_id}> Timeout: {e}")
        except Exception as e:  # any failure of the call is the answer's remark, as in Java
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"invoke consumer <{group}> <{client_id}> Exception: {e}"
            )
        # The consumer's answer goes back as it is, under the admin's opaque.
        return request.response(answer.code, answer.remark, answer.ext_fields, answer.body)
