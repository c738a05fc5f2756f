"""SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE, CONSUMER_SEND_MSG_BACK (SendMessageProcessor).

Only messages that ask for more leave the plain path: ``TRAN_MSG`` ones become half messages, ``DELAY`` and
timer ones are parked until due (schedule.py, timer.py), and ``%RETRY%`` ones past their group's maximum
reconsume times go to the dead-letter queue.
"""

from __future__ import annotations

import os
import random
import shutil
import time
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred

from gateway.remoting.codes import PermName, RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.dispatch import LaterResponse
from gateway.remoting.headers import ConsumerSendMsgBackRequestHeader, SendMessageRequestHeader
from gateway.remoting.message import (
    PROPERTY_SEPARATOR,
    MessageConst,
    MessageSysFlag,
    RecordError,
    decode_batch,
    properties_to_string,
    send_properties,
    string_to_properties,
    tags_code,
    wait_store_msg_ok,
)
from gateway.remoting.names import (
    DLQ_GROUP_TOPIC_PREFIX,
    NOT_ALLOWED_SEND_TOPICS,
    RETRY_GROUP_TOPIC_PREFIX,
    InvalidNameError,
)
from gateway.remoting.recall_handle import RecallHandle
from gateway.store.api import MessageExtBrokerInner, PutMessageResult, PutMessageStatus
from gateway.store.message_store import TIMER_TOPIC

from ..inner import inner_from_ext, look_message, when_put
from ..managers import retry_topic
from ..schedule import handle_schedule_message

if TYPE_CHECKING:
    from gateway.remoting.protocol import RemotingProtocol

    from ..controller import BrokerController

# MQVersion V3_4_9: from it on, clients send their own maxReconsumeTimes.
VERSION_3_4_9 = 121
DLQ_NUMS_PER_GROUP = 1
# TopicSysFlag: the retry topic of a unit-mode group "has unit subscription".
_UNIT_SUB_FLAG = 0x2
_RW = PermName.PERM_READ | PermName.PERM_WRITE
_V2_CODES = frozenset({RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE, RequestCode.SEND_REPLY_MESSAGE_V2})

# Enum members as module globals: reading one through its class costs ~0.13 us (Python 3.11).
_PUT_OK = PutMessageStatus.PUT_OK
_SUCCESS = ResponseCode.SUCCESS
# PutMessageStatus → (response code, remark)
_STATUS_CODES: dict[PutMessageStatus, tuple[int, str | None]] = {
    PutMessageStatus.PUT_OK: (ResponseCode.SUCCESS, None),
    PutMessageStatus.FLUSH_DISK_TIMEOUT: (ResponseCode.FLUSH_DISK_TIMEOUT, None),
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: (ResponseCode.FLUSH_SLAVE_TIMEOUT, None),
    PutMessageStatus.SLAVE_NOT_AVAILABLE: (ResponseCode.SLAVE_NOT_AVAILABLE, None),
    PutMessageStatus.CREATE_MAPEDFILE_FAILED: (
        ResponseCode.SYSTEM_ERROR,
        "create mapped file failed, server is busy or broken.",
    ),
    PutMessageStatus.MESSAGE_ILLEGAL: (
        ResponseCode.MESSAGE_ILLEGAL,
        "the message is illegal, maybe msg body or properties length not matched. msg body length limit 128k, "
        "msg properties length limit 32k.",
    ),
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: (
        ResponseCode.MESSAGE_ILLEGAL,
        "the message is illegal, maybe msg properties length limit 32k.",
    ),
    PutMessageStatus.SERVICE_NOT_AVAILABLE: (
        ResponseCode.SERVICE_NOT_AVAILABLE,
        "service not available now. It may be caused by one of the following reasons: the broker's disk is full, "
        "messages are put to the slave, message store has been shut down, etc.",
    ),  # a send's answer names the disks' use too (_service_not_available)
    PutMessageStatus.OS_PAGECACHE_BUSY: (
        ResponseCode.SYSTEM_ERROR,
        "[PC_SYNCHRONIZED]broker busy, start flow control for a while",
    ),
    PutMessageStatus.UNKNOWN_ERROR: (ResponseCode.SYSTEM_ERROR, "UNKNOWN_ERROR"),
}


def batch_properties(batch_props: dict[str, str], cluster: str) -> str:
    """What each message of a SEND_BATCH_MESSAGE stores after its own properties: the batch's (its header's, through
    Java's map), with CLUSTER."""
    return properties_to_string({**batch_props, MessageConst.CLUSTER: cluster})


def batch_messages(batch_str: str, body: bytes) -> list[tuple[int, bytes, str, int]]:
    """A SEND_BATCH_MESSAGE's messages as they are stored: (flag, body, properties, tags code) each. Each keeps its
    own properties followed by ``batch_str`` (:func:`batch_properties`); its tags code is its own TAGS'. Raises
    RecordError for a body that is not a batch."""
    out = []
    for flag, mbody, inner in decode_batch(body):
        props = inner + PROPERTY_SEPARATOR + batch_str if inner and batch_str else inner or batch_str
        out.append((flag, mbody, props, tags_code(string_to_properties(inner).get(MessageConst.TAGS))))
    return out


class SendMessageProcessor:
    """Stores sent messages and answers with their ids and queue offsets."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        cfg = broker.config
        self._region_ext = {MessageConst.MSG_REGION: cfg.regionId, MessageConst.TRACE_SWITCH: str(cfg.traceOn).lower()}

    def handlers(self) -> dict[int, Any]:
        return {
            RequestCode.SEND_MESSAGE: self.process,
            RequestCode.SEND_MESSAGE_V2: self.process,
            RequestCode.SEND_BATCH_MESSAGE: self.process,
            RequestCode.CONSUMER_SEND_MSG_BACK: self.consumer_send_msg_back,
        }

    def process(
        self, channel: RemotingProtocol, request: RemotingCommand
    ) -> RemotingCommand | LaterResponse | Deferred[Any]:
        try:
            if request.code in _V2_CODES:
                header = SendMessageRequestHeader.decode_v2(request.ext_fields)
            else:
                header = SendMessageRequestHeader.decode(request.ext_fields)
        except InvalidNameError as e:
            return request.response(ResponseCode.INVALID_PARAMETER, str(e), self.region_ext())
        ext = self.region_ext()
        topics_version = self.broker.topics.data_version.counter
        error = self.msg_check(request, header)
        if error is not None:
            code, remark = error
            return request.response(code, remark, ext)
        if header.batch:
            response = self._send_batch(channel, request, header, ext)
        else:
            response = self._send(channel, request, header, ext)
        if self.broker.topics.data_version.counter != topics_version:  # this send created its topic
            if type(response) is LaterResponse:
                response = response.deferred()
            return self.broker.answer_once_registered(topics_version, response)
        return response

    def region_ext(self) -> dict[str, str]:
        """MSG_REGION and TRACE_ON: in every send response, success or not."""
        return dict(self._region_ext)

    def msg_check(self, request: RemotingCommand, header: SendMessageRequestHeader) -> tuple[int, str] | None:
        """msgCheck: broker permission, topic name, topic existence (auto-create), queue id range."""
        broker = self.broker
        cfg = broker.config
        start_accept = cfg.startAcceptSendRequestTimeStamp
        if start_accept and int(time.time() * 1000) < start_accept:
            return ResponseCode.SYSTEM_ERROR, f"broker unable to service, until {cfg.startAcceptSendRequestTimeStamp}"
        if broker.put_refused is not None and wait_store_msg_ok(header.properties):
            refused = broker.put_refused()
            if refused is not None:
                return refused
        if not cfg.brokerPermission & PermName.PERM_WRITE:
            return ResponseCode.NO_PERMISSION, f"the broker[{cfg.brokerIP1}] sending message is forbidden"
        # The topic's name was checked as the header was decoded.
        topic = header.topic
        if topic in NOT_ALLOWED_SEND_TOPICS:
            return ResponseCode.SYSTEM_ERROR, f"Sending message to topic[{topic}] is forbidden."
        topics = broker.topics
        tc = topics.select(topic)
        if tc is None:
            sys_flag = 1 if header.unit_mode else 0
            if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                tc = topics.create_topic_in_send_message_back_method(
                    topic, 1, PermName.PERM_READ | PermName.PERM_WRITE, sys_flag
                )
            else:
                tc = topics.create_topic_in_send_message_method(
                    topic, header.default_topic, header.default_topic_queue_nums, sys_flag
                )
            if tc is None:
                return (
                    ResponseCode.TOPIC_NOT_EXIST,
                    f"topic[{topic}] not exist, apply first please! http://rocketmq.apache.org/docs/faq/",
                )
        if not tc.perm & PermName.PERM_WRITE:
            return ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden"
        queue_id_max = max(tc.write_queue_nums, tc.read_queue_nums)
        if header.queue_id >= queue_id_max:
            return (
                ResponseCode.SYSTEM_ERROR,
                f"request queueId[{header.queue_id}] is illegal, topic:{topic} "
                f"topicConfig.writeQueueNums:{tc.write_queue_nums} consumer:{request.language}",
            )
        return None

    def queue_id(self, header: SendMessageRequestHeader) -> int:
        """The requested queue, or a random write queue of the topic."""
        if header.queue_id >= 0:
            return header.queue_id
        tc = self.broker.topics.select(header.topic)
        return random.randrange(max(tc.write_queue_nums, 1)) if tc else 0

    def _retry_to_dlq(
        self, header: SendMessageRequestHeader, request: RemotingCommand, props: dict[str, str]
    ) -> str | tuple[int, str]:
        """A client re-sending to %RETRY% after too many attempts goes to the group's DLQ (handleRetryAndDLQ).

        Returns the topic to store in, or a refusal (code, remark).
        """
        group = header.topic[len(RETRY_GROUP_TOPIC_PREFIX) :]
        cfg = self.broker.groups.find(group)
        if cfg is None:
            return ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}"
        max_times = cfg.retry_max_times
        if request.version >= VERSION_3_4_9 and header.max_reconsume_times is not None:
            max_times = header.max_reconsume_times
        if (header.reconsume_times or 0) < max_times:
            return header.topic
        props.pop(MessageConst.DELAY_TIME_LEVEL, None)
        header.queue_id = random.randrange(DLQ_NUMS_PER_GROUP)
        return self._dlq_topic(group)

    def _dlq_topic(self, group: str) -> str:
        dlq = DLQ_GROUP_TOPIC_PREFIX + group
        self.broker.topics.create_topic_in_send_message_back_method(dlq, DLQ_NUMS_PER_GROUP, _RW)
        return dlq

    def _base_sys_flag(self, header: SendMessageRequestHeader) -> int:
        sys_flag = header.sys_flag
        tc = self.broker.topics.select(header.topic)
        if tc is not None and tc.topic_filter_type == "MULTI_TAG":
            sys_flag |= MessageSysFlag.MULTI_TAGS_FLAG
        return sys_flag

    def _send(
        self, channel: RemotingProtocol, request: RemotingCommand, header: SendMessageRequestHeader, ext: dict[str, str]
    ) -> RemotingCommand | LaterResponse:
        broker = self.broker
        raw = header.properties or ""
        topic = header.topic
        if not (
            "DELAY\x01" in raw or "TIMER_" in raw or "TRAN_MSG\x01" in raw or topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
        ):
            # The common case: no delay, timer or transaction, not a retry; the properties stay a string.
            properties, tags, wait = send_properties(raw, broker.config.brokerClusterName)
            # Positional (keywords cost a send ~0.5 us): topic, queue_id, flag, body, properties, tags_code,
            # sys_flag, born_timestamp, born_host, store_host, reconsume_times.
            msg = MessageExtBrokerInner(
                topic,
                self.queue_id(header),
                header.flag,
                request.body,
                properties,
                tags,
                self._base_sys_flag(header),
                header.born_timestamp,
                broker.born_host(channel),
                broker.store_host,
                header.reconsume_times or 0,
            )
            return self._respond(request, broker.store.put_message(msg), topic, msg.queue_id, ext, wait)
        props = string_to_properties(raw)
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            routed = self._retry_to_dlq(header, request, props)
            if isinstance(routed, tuple):
                return request.response(*routed, ext)
            topic = routed
        props.pop(MessageConst.WAIT_STORE_MSG_OK, None)
        props[MessageConst.CLUSTER] = broker.config.brokerClusterName
        msg = MessageExtBrokerInner(
            topic=topic,
            queue_id=self.queue_id(header),
            flag=header.flag,
            body=request.body,
            properties=properties_to_string(props),
            tags_code=tags_code(props.get(MessageConst.TAGS)),
            sys_flag=self._base_sys_flag(header),
            born_timestamp=header.born_timestamp,
            born_host=broker.born_host(channel),
            store_host=broker.store_host,
            reconsume_times=header.reconsume_times or 0,
        )
        queue_id = msg.queue_id
        if props.get(MessageConst.TRANSACTION_PREPARED) == "true":
            if broker.config.rejectTransactionMessage:
                return request.response(
                    ResponseCode.NO_PERMISSION,
                    f"the broker[{broker.config.brokerIP1}] sending transaction message is forbidden",
                    ext,
                )
            result = broker.transactions.bridge.put_half_message(msg, props)
        else:
            remark = handle_schedule_message(broker, msg, props)
            if remark is not None:
                return request.response(ResponseCode.MESSAGE_ILLEGAL, remark, ext)
            result = broker.store.put_message(msg)
            if msg.topic == TIMER_TOPIC:
                result = when_put(result, lambda stored: self._attach_recall_handle(stored, props, ext))
        # The answer names the requested queue even when the message is parked in a system queue.
        return self._respond(request, result, msg.topic, queue_id, ext, wait_store_msg_ok(header.properties))

    def _attach_recall_handle(
        self, result: PutMessageResult, props: dict[str, str], ext: dict[str, str]
    ) -> PutMessageResult:
        """attachRecallHandle: a parked timer message's answer carries the handle that can withdraw it (not a
        retry's: those are the broker's own); ``result`` is the put's, passed on."""
        real_topic = props.get(MessageConst.REAL_TOPIC)
        unique_id = props.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        if not result.ok or real_topic is None or unique_id is None or real_topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return result
        # One past the delivery time, as Apache's (its timer wheel slots are floored).
        timestamp = str(int(props[MessageConst.TIMER_OUT_MS]) + 1)
        ext["recallHandle"] = RecallHandle(real_topic, self.broker.config.brokerName, timestamp, unique_id).encode()
        return result

    def consumer_send_msg_back(self, channel: RemotingProtocol, request: RemotingCommand) -> Any:
        """A consumer gives a message back: it comes again later through %RETRY%<group> (delay level
        3 + reconsumeTimes unless the consumer names one), or goes to %DLQ%<group> after too many attempts.
        Answered once a retry or DLQ topic it created is registered."""
        topics_version = self.broker.topics.data_version.counter
        return self.broker.answer_once_registered(topics_version, self._send_back(channel, request))

    def _send_back(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        header = ConsumerSendMsgBackRequestHeader.decode(request.ext_fields)
        broker = self.broker
        cfg = broker.groups.find(header.group)
        if cfg is None:
            return request.response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {header.group}"
            )
        if not broker.config.brokerPermission & PermName.PERM_WRITE:
            return request.response(
                ResponseCode.NO_PERMISSION, f"the broker[{broker.config.brokerIP1}] sending message is forbidden"
            )
        if cfg.retry_queue_nums <= 0:
            return request.response(ResponseCode.SUCCESS)  # the group wants no retries: drop it
        msg = look_message(broker.store, header.offset)
        if msg is None:
            return request.response(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {header.offset}")
        if broker.acl is not None:
            # 4.9.8 checks only the group: any message could be copied into the group's retry topic, then
            # read; checked before the retry topic is made.
            refused = broker.acl.validator.refuse_message(channel, request, msg)
            if refused is not None:
                return refused
        topic = retry_topic(header.group)
        tc = broker.topics.create_topic_in_send_message_back_method(
            topic, cfg.retry_queue_nums, _RW, _UNIT_SUB_FLAG if header.unit_mode else 0
        )
        if not tc.perm & PermName.PERM_WRITE:
            return request.response(ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
        props = dict(msg.properties)
        props.setdefault(MessageConst.RETRY_TOPIC, msg.topic)
        props.setdefault(MessageConst.ORIGIN_MESSAGE_ID, msg.msg_id)
        max_times = cfg.retry_max_times
        if request.version >= VERSION_3_4_9 and header.max_reconsume_times is not None:
            max_times = header.max_reconsume_times
        delay_level = header.delay_level
        if msg.reconsume_times >= max_times or delay_level < 0:
            topic = self._dlq_topic(header.group)
            queue_id = random.randrange(DLQ_NUMS_PER_GROUP)
            props.pop(MessageConst.DELAY_TIME_LEVEL, None)
        else:
            queue_id = random.randrange(cfg.retry_queue_nums)
            props[MessageConst.DELAY_TIME_LEVEL] = str(delay_level or 3 + msg.reconsume_times)
        inner = inner_from_ext(msg, topic, queue_id, props, reconsume_times=msg.reconsume_times + 1)
        handle_schedule_message(broker, inner, props)
        return put_result_response(request, broker.store.put_message(inner))

    def _send_batch(
        self, channel: RemotingProtocol, request: RemotingCommand, header: SendMessageRequestHeader, ext: dict[str, str]
    ) -> RemotingCommand | LaterResponse:
        broker = self.broker
        if header.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return request.response(
                ResponseCode.MESSAGE_ILLEGAL, f"batch request does not support retry group {header.topic}", ext
            )
        batch_props = string_to_properties(header.properties)
        if MessageConst.DELAY_TIME_LEVEL in batch_props or batch_props.get(MessageConst.TRANSACTION_PREPARED) == "true":
            return request.response(
                ResponseCode.MESSAGE_ILLEGAL, "batch message does not support delay or transaction", ext
            )
        try:
            entries = batch_messages(batch_properties(batch_props, broker.config.brokerClusterName), request.body)
        except RecordError as e:
            return request.response(ResponseCode.MESSAGE_ILLEGAL, f"bad batch body: {e}", ext)
        if not entries:
            return request.response(ResponseCode.MESSAGE_ILLEGAL, "empty batch", ext)
        queue_id = self.queue_id(header)
        sys_flag = self._base_sys_flag(header)
        born_host = broker.born_host(channel)
        msgs = []
        for flag, body, props_str, tags in entries:
            msgs.append(
                MessageExtBrokerInner(
                    topic=header.topic,
                    queue_id=queue_id,
                    flag=flag,
                    body=body,
                    properties=props_str,
                    tags_code=tags,
                    sys_flag=sys_flag,
                    born_timestamp=header.born_timestamp,
                    born_host=born_host,
                    store_host=broker.store_host,
                    reconsume_times=header.reconsume_times or 0,
                )
            )
        result = broker.store.put_messages(msgs)
        return self._respond(request, result, header.topic, queue_id, ext, wait_store_msg_ok(header.properties))

    def _respond(
        self,
        request: RemotingCommand,
        result: PutMessageResult | Deferred[PutMessageResult],
        topic: str,
        queue_id: int,
        ext: dict[str, str],
        wait_stored: bool,
    ) -> RemotingCommand | LaterResponse | Deferred[Any]:
        if type(result) is not PutMessageResult:
            # DLedger mode: answered once a majority holds the entry, with what DLedgerCommitLog made of it.
            return result.addCallback(lambda put: self._respond(request, put, topic, queue_id, ext, wait_stored))
        append = result.append
        if result.status is not _PUT_OK or append is None:
            if result.status is PutMessageStatus.SERVICE_NOT_AVAILABLE:
                return request.response(ResponseCode.SERVICE_NOT_AVAILABLE, _service_not_available(self.broker), ext)
            return request.response(*status_code(result.status), ext)
        self.broker.message_counts.put(topic, append.msg_num, append.wrote_bytes)
        ext["msgId"] = append.msg_id
        ext["queueId"] = str(queue_id)
        ext["queueOffset"] = str(append.logics_offset)
        wait = self.broker.put_waiter
        if wait is None or not wait_stored:
            return request.response(_SUCCESS, None, ext)
        # SYNC_FLUSH / SYNC_MASTER: answer once the bytes are on disk / on a slave. A timeout still reports
        # the message stored (FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE), remark null.
        later = LaterResponse()
        status = wait(
            append.wrote_offset + append.wrote_bytes,
            lambda status: later.answer(request.response(_STATUS_CODES[status][0], None, ext)),
        )
        if status is not None:
            return request.response(_STATUS_CODES[status][0], None, ext)
        return later


def _service_not_available(broker: BrokerController) -> str:
    """What a send the store refuses (a slave, a full disk, a store shut down) is answered, as 4.9.8's
    handlePutMessageResult words it, with diskUtil: the used share of the commitlog's (the DLedger ledger's data
    files'), the consume queues' and the index's partitions."""
    root = broker.store_config.storePathRootDir
    physic = broker.dledger.data_path if broker.dledger is not None else broker.store_config.commit_log_path
    cl, cq, index = (
        _disk_used(path) for path in (physic, os.path.join(root, "consumequeue"), os.path.join(root, "index"))
    )
    return (
        "service not available now. It may be caused by one of the following reasons: the broker's disk is full "
        f"[CL: {cl:5.2f} CQ: {cq:5.2f} INDEX: {index:5.2f}], messages are put to the slave, message store has been "
        "shut down, etc."
    )


def _disk_used(path: str) -> float:
    """``UtilAll.getDiskPartitionSpaceUsedPercent``: the partition's used share, rounded up to a whole percent
    (-1 for a path that does not exist)."""
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return -1.0
    entire = usage.used + usage.free  # Java: (total - free) + usable
    if usage.total <= 0 or entire <= 0:
        return -1.0
    percent = -(-usage.used * 100 // entire)
    return percent / 100.0


def put_result_response(
    request: RemotingCommand, result: PutMessageResult | Deferred[PutMessageResult]
) -> RemotingCommand | Deferred[RemotingCommand]:
    """SUCCESS when the message is stored (flush and slave timeouts included), else the status's code; once
    the put is decided on a DLedger ledger."""
    return when_put(result, lambda stored: _put_result_response(request, stored))


def _put_result_response(request: RemotingCommand, result: PutMessageResult) -> RemotingCommand:
    if result.ok:
        return request.response(ResponseCode.SUCCESS)
    code, remark = status_code(result.status)
    return request.response(code, remark)


def status_code(status: PutMessageStatus) -> tuple[int, str | None]:
    """The response code and remark of a put status (SYSTEM_ERROR for one with none)."""
    found = _STATUS_CODES.get(status)
    # The fallback is built only when needed: str() of an enum is not free, and this runs on every send.
    return found if found is not None else (ResponseCode.SYSTEM_ERROR, str(status))
