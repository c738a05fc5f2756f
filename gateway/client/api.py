"""MQClientAPI: every request a client makes, built and checked; callers get values or MQBrokerError."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from gateway.remoting import fastjson
from gateway.remoting.bodies import (
    BatchAckMessageRequestBody,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
    SubscriptionData,
    TopicRouteData,
)
from gateway.remoting.client import RemotingClient
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.errors import NameServerUnreachable
from gateway.remoting.extra_info import PROPERTY_POP_CK, ExtraInfo, build_extra_info, real_topic, retry_kind
from gateway.remoting.headers import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    CommandHeader,
    ConsumerGroupRequestHeader,
    ConsumerSendMsgBackRequestHeader,
    CreateTopicRequestHeader,
    EndTransactionRequestHeader,
    GetEarliestMsgStoretimeResponseHeader,
    GetRouteInfoRequestHeader,
    GetSubscriptionGroupConfigRequestHeader,
    OffsetResponseHeader,
    PopMessageRequestHeader,
    PopMessageResponseHeader,
    PullMessageRequestHeader,
    QueryConsumerOffsetRequestHeader,
    QueryMessageRequestHeader,
    RecallMessageRequestHeader,
    RecallMessageResponseHeader,
    SearchOffsetRequestHeader,
    SendMessageRequestHeader,
    TopicQueueRequestHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from gateway.remoting.message import MessageExt, decode_records

from .errors import REMOTING_ERRORS, MQBrokerError

log = Logger()

# Send responses that mean "stored" (SendStatus other than SEND_OK included).
SEND_OK_CODES = frozenset(
    {
        ResponseCode.SUCCESS,
        ResponseCode.FLUSH_DISK_TIMEOUT,
        ResponseCode.FLUSH_SLAVE_TIMEOUT,
        ResponseCode.SLAVE_NOT_AVAILABLE,
    }
)
PULL_OK_CODES = frozenset(
    {
        ResponseCode.SUCCESS,
        ResponseCode.PULL_NOT_FOUND,
        ResponseCode.PULL_RETRY_IMMEDIATELY,
        ResponseCode.PULL_OFFSET_MOVED,
    }
)


# POP answers that are not errors (MQClientAPIImpl.processPopResponse).
POP_OK_CODES = frozenset(
    {ResponseCode.SUCCESS, ResponseCode.POLLING_FULL, ResponseCode.POLLING_TIMEOUT, ResponseCode.PULL_NOT_FOUND}
)


@dataclass(slots=True)
class PopResult:
    """A POP_MESSAGE answer: ``code`` SUCCESS with ``messages`` (each with its POP_CK property), or
    POLLING_FULL / POLLING_TIMEOUT / PULL_NOT_FOUND without."""

    code: int
    rest_num: int
    pop_time: int = 0
    invisible_time: int = 0
    revive_qid: int = 0
    messages: list[MessageExt] = field(default_factory=list)


def _offset_info(text: str | None) -> dict[str, str]:
    """ExtraInfoUtil.parseStartOffsetInfo / parseMsgOffsetInfo / parseOrderCountInfo: ``kind queueId value;...``
    keyed kind@queueId."""
    out = {}
    for item in (text or "").split(";"):
        parts = item.split(" ")
        if len(parts) == 3:
            out[f"{parts[0]}@{parts[1]}"] = parts[2]
    return out


def _check(response: RemotingCommand, addr: str, ok: frozenset[int] = frozenset({ResponseCode.SUCCESS})) -> None:
    if response.code not in ok:
        raise MQBrokerError(response.code, response.remark, addr)


def _request(code: int, header: CommandHeader | None = None, body: bytes = b"") -> RemotingCommand:
    return RemotingCommand.request(code, header.encode() if header is not None else None, body)


class MQClientAPI:
    """Requests to name servers and brokers over one :class:`RemotingClient`; ``timeout`` in seconds."""

    def __init__(self, remoting: RemotingClient, namesrv_addrs: Sequence[str], timeout: float = 3.0) -> None:
        if not namesrv_addrs:
            raise ValueError("no name server address")
        self.remoting = remoting
        self.namesrv_addrs = list(namesrv_addrs)
        self.timeout = timeout
        # Like Java, stick to one name server and move on only when it fails.
        self._namesrv_index = random.randrange(len(self.namesrv_addrs))
        # Why the last name server request failed when none answered; None once one does.
        self.namesrv_unreachable: NameServerUnreachable | None = None

    async def _invoke(self, addr: str, request: RemotingCommand, timeout: float | None = None) -> RemotingCommand:
        return await self.remoting.invoke(addr, request, self.timeout if timeout is None else timeout)

    async def _invoke_namesrv(self, request: RemotingCommand) -> tuple[str, RemotingCommand]:
        last: BaseException | None = None
        for _ in range(len(self.namesrv_addrs)):
            addr = self.namesrv_addrs[self._namesrv_index]
            try:
                response = await self._invoke(addr, request)
            except REMOTING_ERRORS as e:
                log.warn("name server {addr} failed: {error}", addr=addr, error=e)
                last = e
                self._namesrv_index = (self._namesrv_index + 1) % len(self.namesrv_addrs)
            else:
                self.namesrv_unreachable = None
                return addr, response
        self.namesrv_unreachable = NameServerUnreachable(self.namesrv_addrs, last)
        raise self.namesrv_unreachable from last

    # -- name server

    async def get_topic_route(self, topic: str) -> TopicRouteData | None:
        """The topic's route, or None when the name server does not know the topic."""
        header = GetRouteInfoRequestHeader(topic=topic)
        addr, response = await self._invoke_namesrv(_request(RequestCode.GET_ROUTEINFO_BY_TOPIC, header))
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        _check(response, addr)
        return TopicRouteData.from_json(fastjson.loads(response.body))

    # -- send

    async def send_message(
        self, addr: str, header: SendMessageRequestHeader, body: bytes, code: int, timeout: float
    ) -> RemotingCommand:
        """SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE; the response when the message was stored."""
        response = await self._invoke(addr, RemotingCommand.request(code, header.encode_v2(), body), timeout)
        _check(response, addr, SEND_OK_CODES)
        return response

    def send_message_oneway(self, addr: str, header: SendMessageRequestHeader, body: bytes, code: int) -> Deferred:
        """Fire and forget; the Deferred fires once the request is written."""
        return self.remoting.invoke_oneway(addr, RemotingCommand.request(code, header.encode_v2(), body))

    # -- pull and offsets

    async def pull_message(self, addr: str, header: PullMessageRequestHeader, timeout: float) -> RemotingCommand:
        """PULL_MESSAGE; the response when its code is one of the four pull statuses."""
        response = await self._invoke(addr, _request(RequestCode.PULL_MESSAGE, header), timeout)
        _check(response, addr, PULL_OK_CODES)
        return response

    async def query_consumer_offset(self, addr: str, header: QueryConsumerOffsetRequestHeader) -> int:
        """The committed offset; MQBrokerError with code QUERY_NOT_FOUND (22) when there is none."""
        response = await self._invoke(addr, _request(RequestCode.QUERY_CONSUMER_OFFSET, header))
        _check(response, addr)
        return OffsetResponseHeader.decode(response.ext_fields).offset

    async def recall_message(self, addr: str, header: RecallMessageRequestHeader, timeout: float) -> str:
        """RECALL_MESSAGE: the recalled message's unique id (MQBrokerError when the broker refuses)."""
        response = await self._invoke(addr, _request(RequestCode.RECALL_MESSAGE, header), timeout)
        _check(response, addr)
        return RecallMessageResponseHeader.decode(response.ext_fields).msg_id

    async def update_consumer_offset(self, addr: str, header: UpdateConsumerOffsetRequestHeader) -> None:
        """UPDATE_CONSUMER_OFFSET, waiting for the broker's answer."""
        _check(await self._invoke(addr, _request(RequestCode.UPDATE_CONSUMER_OFFSET, header)), addr)

    def update_consumer_offset_oneway(self, addr: str, header: UpdateConsumerOffsetRequestHeader) -> Deferred:
        return self.remoting.invoke_oneway(addr, _request(RequestCode.UPDATE_CONSUMER_OFFSET, header))

    async def _offset(self, addr: str, code: int, header: CommandHeader) -> int:
        response = await self._invoke(addr, _request(code, header))
        _check(response, addr)
        return OffsetResponseHeader.decode(response.ext_fields).offset

    async def get_max_offset(self, addr: str, topic: str, queue_id: int) -> int:
        return await self._offset(addr, RequestCode.GET_MAX_OFFSET, TopicQueueRequestHeader(topic, queue_id))

    async def get_min_offset(self, addr: str, topic: str, queue_id: int) -> int:
        return await self._offset(addr, RequestCode.GET_MIN_OFFSET, TopicQueueRequestHeader(topic, queue_id))

    async def search_offset(self, addr: str, topic: str, queue_id: int, timestamp: int) -> int:
        header = SearchOffsetRequestHeader(topic, queue_id, timestamp)
        return await self._offset(addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, header)

    async def get_earliest_msg_storetime(self, addr: str, topic: str, queue_id: int) -> int:
        header = TopicQueueRequestHeader(topic, queue_id)
        response = await self._invoke(addr, _request(RequestCode.GET_EARLIEST_MSG_STORETIME, header))
        _check(response, addr)
        return GetEarliestMsgStoretimeResponseHeader.decode(response.ext_fields).timestamp

    # -- client registry

    async def send_heartbeat(self, addr: str, data: HeartbeatData) -> int:
        """HEART_BEAT; returns the broker's version."""
        response = await self._invoke(addr, _request(RequestCode.HEART_BEAT, body=fastjson.dumps(data)))
        _check(response, addr)
        return response.version

    async def unregister_client(
        self, addr: str, client_id: str, producer_group: str | None, consumer_group: str | None
    ) -> None:
        header = UnregisterClientRequestHeader(client_id, producer_group, consumer_group)
        _check(await self._invoke(addr, _request(RequestCode.UNREGISTER_CLIENT, header)), addr)

    async def get_consumer_id_list(self, addr: str, group: str) -> list[str]:
        header = ConsumerGroupRequestHeader(group)
        response = await self._invoke(addr, _request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, header))
        _check(response, addr)
        return [str(cid) for cid in fastjson.loads(response.body).get("consumerIdList") or []]

    async def get_subscription_group_config(self, addr: str, group: str) -> dict | None:
        """GET_SUBSCRIPTIONGROUP_CONFIG (5.x) as the broker's JSON; None when the broker has no such group or
        does not know the request (a 4.x broker)."""
        header = GetSubscriptionGroupConfigRequestHeader(group)
        response = await self._invoke(addr, _request(RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, header))
        if response.code in (ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, ResponseCode.REQUEST_CODE_NOT_SUPPORTED):
            return None
        _check(response, addr)
        config = fastjson.loads(response.body)
        return config if isinstance(config, dict) else None

    async def consumer_send_message_back(
        self, addr: str, broker_name: str, msg: MessageExt, group: str, delay_level: int, max_reconsume_times: int
    ) -> None:
        """CONSUMER_SEND_MSG_BACK: the broker re-delivers ``msg`` later through ``%RETRY%<group>``."""
        header = ConsumerSendMsgBackRequestHeader(
            offset=msg.commitlog_offset,
            group=group,
            delay_level=delay_level,
            origin_msg_id=msg.msg_id,
            origin_topic=msg.topic,
            max_reconsume_times=max_reconsume_times,
            bname=broker_name,
        )
        response = await self.send_message_back(addr, header)
        _check(response, addr)

    async def send_message_back(self, addr: str, header: ConsumerSendMsgBackRequestHeader) -> RemotingCommand:
        """CONSUMER_SEND_MSG_BACK as built by the caller; the broker's answer, whatever its code."""
        return await self._invoke(addr, _request(RequestCode.CONSUMER_SEND_MSG_BACK, header), 5.0)

    # -- pop (5.x)

    async def pop_message(
        self, addr: str, broker_name: str, header: PopMessageRequestHeader, timeout: float
    ) -> PopResult:
        """POP_MESSAGE; gives each message found its POP_CK (extraInfo) as the Java client does, from the
        answer's startOffsetInfo when the broker has not set it (messages of the topic itself)."""
        response = await self._invoke(addr, _request(RequestCode.POP_MESSAGE, header), timeout)
        _check(response, addr, POP_OK_CODES)
        if response.code != ResponseCode.SUCCESS and not response.ext_fields:
            return PopResult(response.code, 0)  # "pop message is timeout too much" has no header (Java reads nulls)
        answer = PopMessageResponseHeader.decode(response.ext_fields)
        result = PopResult(response.code, answer.rest_num)
        if response.code != ResponseCode.SUCCESS:
            return result
        result.pop_time, result.invisible_time, result.revive_qid = (
            answer.pop_time,
            answer.invisible_time,
            answer.revive_qid,
        )
        starts = _offset_info(answer.start_offset_info)
        # An orderly pop: times each message was consumed before, per offset or else per queue.
        counts = _offset_info(answer.order_count_info) if header.order else {}
        for msg in decode_records(response.body):
            kind = retry_kind(msg.topic)
            count = counts.get(f"{kind}@qo{msg.queue_id}%{msg.queue_offset}") or counts.get(f"{kind}@{msg.queue_id}")
            if count is not None and count.isdigit() and int(count) > 0:
                msg.reconsume_times = int(count)
            if PROPERTY_POP_CK not in msg.properties:
                start = starts.get(f"{kind}@{msg.queue_id}", str(msg.queue_offset))
                msg.properties[PROPERTY_POP_CK] = build_extra_info(
                    int(start),
                    answer.pop_time,
                    answer.invisible_time,
                    answer.revive_qid,
                    msg.topic,
                    broker_name,
                    msg.queue_id,
                    msg.queue_offset,
                )
            result.messages.append(msg)
        return result

    async def ack_message(self, addr: str, group: str, topic: str, extra_info: str) -> None:
        """ACK_MESSAGE of a popped message by its POP_CK: the queue, offset and real topic (the pop retry topic
        for a message popped from it) come from ``extra_info``, as the Java client takes them."""
        info = ExtraInfo.parse(extra_info)
        header = AckMessageRequestHeader(
            consumer_group=group,
            topic=real_topic(topic, group, info.retry),
            queue_id=info.queue_id,
            extra_info=extra_info,
            offset=info.queue_offset,
        )
        _check(await self._invoke(addr, _request(RequestCode.ACK_MESSAGE, header)), addr)

    async def batch_ack_message(self, addr: str, body: BatchAckMessageRequestBody) -> None:
        """BATCH_ACK_MESSAGE."""
        request = _request(RequestCode.BATCH_ACK_MESSAGE, body=fastjson.dumps(body))
        _check(await self._invoke(addr, request), addr)

    async def change_invisible_time(
        self, addr: str, group: str, topic: str, extra_info: str, invisible_time: int
    ) -> ChangeInvisibleTimeResponseHeader:
        """CHANGE_MESSAGE_INVISIBLETIME of a popped message by its POP_CK; the answer's popTime/invisibleTime/
        reviveQid make its new extraInfo."""
        info = ExtraInfo.parse(extra_info)
        header = ChangeInvisibleTimeRequestHeader(
            consumer_group=group,
            topic=real_topic(topic, group, info.retry),
            queue_id=info.queue_id,
            extra_info=extra_info,
            offset=info.queue_offset,
            invisible_time=invisible_time,
        )
        response = await self._invoke(addr, _request(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, header))
        _check(response, addr)
        return ChangeInvisibleTimeResponseHeader.decode(response.ext_fields)

    def end_transaction_oneway(self, addr: str, header: EndTransactionRequestHeader, remark: str | None) -> Deferred:
        """END_TRANSACTION: commit or roll back a half message; ``remark`` says why a local transaction failed."""
        request = _request(RequestCode.END_TRANSACTION, header)
        request.remark = remark
        return self.remoting.invoke_oneway(addr, request)

    # -- orderly locks and filter checks

    async def lock_batch_mq(self, addr: str, body: LockBatchRequestBody) -> list[MessageQueue]:
        """LOCK_BATCH_MQ: the queues of ``body`` the broker granted to its client id."""
        response = await self._invoke(addr, _request(RequestCode.LOCK_BATCH_MQ, body=fastjson.dumps(body)), 1.0)
        _check(response, addr)
        return LockBatchResponseBody.from_json(fastjson.loads(response.body)).lock_ok_mq_set

    async def unlock_batch_mq(self, addr: str, body: LockBatchRequestBody, *, oneway: bool = False) -> None:
        request = _request(RequestCode.UNLOCK_BATCH_MQ, body=fastjson.dumps(body))
        if oneway:
            await self.remoting.invoke_oneway(addr, request)
            return
        _check(await self._invoke(addr, request, 1.0), addr)

    async def check_client_config(self, addr: str, group: str, client_id: str, sub: SubscriptionData) -> None:
        """CHECK_CLIENT_CONFIG: MQBrokerError when the broker cannot filter by ``sub``'s expression."""
        body = fastjson.dumps({"clientId": client_id, "group": group, "subscriptionData": sub})
        _check(await self._invoke(addr, _request(RequestCode.CHECK_CLIENT_CONFIG, body=body)), addr)

    # -- admin

    async def query_message_by_key(self, addr: str, header: QueryMessageRequestHeader) -> list[MessageExt]:
        """QUERY_MESSAGE by key (not a UNIQ_KEY query): the records the broker's index finds, none if not found."""
        response = await self._invoke(addr, _request(RequestCode.QUERY_MESSAGE, header), 15.0)
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return []
        _check(response, addr)
        return decode_records(response.body)

    async def create_topic(self, addr: str, header: CreateTopicRequestHeader) -> None:
        _check(await self._invoke(addr, _request(RequestCode.UPDATE_AND_CREATE_TOPIC, header)), addr)
