"""Between RocketMQ 5's protobuf messages and the remoting model (GrpcConverter, ResponseBuilder).

Property names, message types and status codes are filled as Apache's proxy fills them, because the
SDKs check them (a message id, a body digest, a delivery attempt).
"""

from __future__ import annotations

import hashlib

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from gateway.client.errors import MQBrokerError, MQClientError
from gateway.remoting.codes import ResponseCode
from gateway.remoting.message import MessageConst, MessageExt
from gateway.remoting.protocol import RemotingTimeoutError

from .v2 import definition_pb2 as pb

# Properties the broker owns (MessageConst.STRING_HASH_SET): never user properties, never set by a client.
SYSTEM_PROPERTY_KEYS = frozenset(
    {
        "1ST_POP_TIME", "ARRIVE_TIME", "BORN_TIMESTAMP", "BUYER_ID", "CLUSTER", "CONSUME_START_TIME",
        "CORRECTION_FLAG", "CORRELATION_ID", "DELAY", "DLQ_ORIGIN_MESSAGE_ID", "DLQ_ORIGIN_TOPIC", "DUP_INFO",
        "EXTEND_UNIQ_INFO", "INNER_MULTI_QUEUE_OFFSET", "INSTANCE_ID", "KEYS", "MAX_OFFSET", "MAX_RECONSUME_TIMES",
        "MIN_OFFSET", "MQ2_FLAG", "MSG_REGION", "MSG_TYPE", "ORIGIN_MESSAGE_ID", "PGROUP", "POP_CK", "POP_CK_OFFSET",
        "PUSH_REPLY_TIME", "REAL_QID", "REAL_TOPIC", "RECONSUME_TIME", "REPLY_TO_CLIENT", "RETRY_TOPIC", "TAGS",
        "TIMER_DELAY_LEVEL", "TIMER_DELAY_MS", "TIMER_DELAY_SEC", "TIMER_DELIVER_MS", "TIMER_DEL_UNIQKEY",
        "TIMER_DEQUEUE_MS", "TIMER_ENQUEUE_MS", "TIMER_OUT_MS", "TIMER_ROLL_TIMES", "TRACE_ON", "TRANSFER_FLAG",
        "TRAN_MSG", "TRAN_PREPARED_QUEUE_OFFSET", "TTL", "UNIQ_KEY", "WAIT", "__BORNHOST", "__CRC32#",
    }
)  # fmt: skip

# Properties of RocketMQ 5 that the 4.x constants table does not name.
SHARDING_KEY = "__SHARDINGKEY"
TRACE_CONTEXT = "TRACE_CONTEXT"
BORN_HOST = "__BORNHOST"
BORN_TIMESTAMP = "BORN_TIMESTAMP"
POP_CK = "POP_CK"
DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"

# Remoting response codes with a Code of their own; any other failure is INTERNAL_SERVER_ERROR.
RESPONSE_CODES = {
    ResponseCode.SUCCESS: pb.Code.OK,
    ResponseCode.SYSTEM_BUSY: pb.Code.TOO_MANY_REQUESTS,
    ResponseCode.REQUEST_CODE_NOT_SUPPORTED: pb.Code.NOT_IMPLEMENTED,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: pb.Code.CONSUMER_GROUP_NOT_FOUND,
}


class ProxyError(Exception):
    """A request refused with a RocketMQ ``Code`` (GrpcProxyException): the response carries it as its status."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def status(code: int = pb.Code.OK, message: str | None = None) -> pb.Status:
    """A Status; the message defaults to the code's name, as Apache's ResponseBuilder does."""
    return pb.Status(code=code, message=message if message is not None else pb.Code.Name(code))


def status_of(error: BaseException) -> pb.Status:
    """The Status a failure answers with (ResponseBuilder.buildStatus(Throwable))."""
    if isinstance(error, ProxyError):
        return status(error.code, error.message)
    if isinstance(error, MQBrokerError):
        if error.code == ResponseCode.TOPIC_NOT_EXIST:
            return status(pb.Code.TOPIC_NOT_FOUND, error.remark or "topic not exist")
        return status(RESPONSE_CODES.get(error.code, pb.Code.INTERNAL_SERVER_ERROR), error.remark or str(error.code))
    if isinstance(error, MQClientError):
        code = RESPONSE_CODES.get(error.code, pb.Code.INTERNAL_SERVER_ERROR) if error.code is not None else None
        return status(code or pb.Code.INTERNAL_SERVER_ERROR, str(error))
    if isinstance(error, RemotingTimeoutError):
        return status(pb.Code.PROXY_TIMEOUT, str(error))
    return status(pb.Code.INTERNAL_SERVER_ERROR, f"{type(error).__name__}: {error}")


def timestamp(ms: int) -> Timestamp:
    ts = Timestamp()
    ts.FromMilliseconds(ms)
    return ts


def duration(ms: int) -> Duration:
    d = Duration()
    d.FromMilliseconds(ms)
    return d


def resource(name: str) -> pb.Resource:
    """A topic or group name as a Resource (namespaces are not used: the name is the whole resource)."""
    return pb.Resource(name=name)


def message_type(props: dict[str, str]) -> int:
    """TRANSACTION, DELAY, FIFO or NORMAL, in that order of precedence."""
    if props.get(MessageConst.TRANSACTION_PREPARED) == "true":
        return pb.MessageType.TRANSACTION
    if (
        MessageConst.DELAY_TIME_LEVEL in props
        or MessageConst.TIMER_DELIVER_MS in props
        or MessageConst.TIMER_DELAY_SEC in props
    ):
        return pb.MessageType.DELAY
    if SHARDING_KEY in props:
        return pb.MessageType.FIFO
    return pb.MessageType.NORMAL


def build_message(msg: MessageExt, now_ms: int) -> pb.Message:
    """A stored message as the SDKs receive it (GrpcConverter.buildMessage); ``now_ms`` dates TIMER_DELAY_SEC."""
    props = msg.properties
    sp = pb.SystemProperties(
        message_id=props.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or msg.msg_id,
        body_digest=pb.Digest(type=pb.DigestType.MD5, checksum=hashlib.md5(msg.body).hexdigest().upper()),
        # Records are decoded with their bodies inflated (a 4.x producer's zlib): they go as they are. Apache
        # would still say GZIP for a compressed one, and the SDKs' gunzip of the inflated body would fail.
        body_encoding=pb.Encoding.IDENTITY,
        message_type=message_type(props),
        born_timestamp=timestamp(msg.born_timestamp),
        born_host=props.get(BORN_HOST) or msg.born_host,
        store_timestamp=timestamp(msg.store_timestamp),
        store_host=msg.store_host,
        queue_id=msg.queue_id,
        queue_offset=msg.queue_offset,
        delivery_attempt=msg.reconsume_times + 1,
    )
    if MessageConst.TAGS in props:
        sp.tag = props[MessageConst.TAGS]
    if props.get(MessageConst.KEYS) is not None:
        sp.keys.extend(props[MessageConst.KEYS].split(MessageConst.KEY_SEPARATOR))
    if MessageConst.TIMER_DELAY_SEC in props:
        sp.delivery_timestamp.CopyFrom(timestamp(now_ms + int(props[MessageConst.TIMER_DELAY_SEC]) * 1000))
    elif MessageConst.TIMER_DELIVER_MS in props:
        sp.delivery_timestamp.CopyFrom(timestamp(int(props[MessageConst.TIMER_DELIVER_MS])))
    if SHARDING_KEY in props:
        sp.message_group = props[SHARDING_KEY]
    if POP_CK in props:
        sp.receipt_handle = props[POP_CK]
    if TRACE_CONTEXT in props:
        sp.trace_context = props[TRACE_CONTEXT]
    if DLQ_ORIGIN_TOPIC in props and DLQ_ORIGIN_MESSAGE_ID in props:
        sp.dead_letter_queue.CopyFrom(
            pb.DeadLetterQueue(topic=props[DLQ_ORIGIN_TOPIC], message_id=props[DLQ_ORIGIN_MESSAGE_ID])
        )
    user = {k: v for k, v in props.items() if k not in SYSTEM_PROPERTY_KEYS}
    return pb.Message(topic=resource(msg.topic), user_properties=user, system_properties=sp, body=msg.body)
