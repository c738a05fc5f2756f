"""SendMessage and EndTransaction (SendMessageActivity, EndTransactionActivity, ProducerProcessor, TransactionService).

An SDK message becomes a remoting message with the properties Apache's proxy gives it: the SDK's message
id as UNIQ_KEY, the message group as the sharding key (its queue chosen by a consistent hash of it), a
delivery timestamp as TIMER_DELIVER_MS (our broker's timer), a transactional message as a half message
whose producer group is its topic. What a later EndTransaction needs of a half message (its broker and
offsets) is kept here for a while; a broker's check-back reaches an SDK producer of the topic over its
Telemetry stream, and the answer comes back as an EndTransaction from the server check.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from twisted.logger import Logger

from gateway.client.producer import Producer, SendResult, SendStatus
from gateway.client.route import TopicPublishInfo
from gateway.remoting.bodies import MessageQueue
from gateway.remoting.headers import (
    CheckTransactionStateRequestHeader,
    EndTransactionRequestHeader,
    RecallMessageRequestHeader,
)
from gateway.remoting.message import (
    Message,
    MessageConst,
    MessageExt,
    MessageSysFlag,
    decode_offset_message_id,
    java_string_hash,
)
from gateway.remoting.recall_handle import InvalidRecallHandle, RecallHandle

from .convert import BORN_HOST, BORN_TIMESTAMP, SHARDING_KEY, SYSTEM_PROPERTY_KEYS, TRACE_CONTEXT, ProxyError, status
from .convert import build_message as build_proto_message
from .grpc import Kind
from .service import ProxyContext, Rpc
from .v2 import definition_pb2 as pb
from .v2 import service_pb2 as spb
from .validate import has_control_character, validate_tag, validate_topic

if TYPE_CHECKING:
    from .service import MessagingService

log = Logger()

RECALL_TIMEOUT = 2.0  # seconds, as RecallMessageActivity gives the broker
# Transaction data outlives a half message's check immunity by this much (transactionDataExpireMillis).
TRANSACTION_DATA_EXPIRE_MS = 30_000
# At most this many half messages remembered at once; the oldest go first.
MAX_TRANSACTION_DATA = 100_000
SEND_STATUS_CODES = {
    SendStatus.FLUSH_DISK_TIMEOUT: pb.Code.MASTER_PERSISTENCE_TIMEOUT,
    SendStatus.FLUSH_SLAVE_TIMEOUT: pb.Code.SLAVE_PERSISTENCE_TIMEOUT,
    SendStatus.SLAVE_NOT_AVAILABLE: pb.Code.HA_NOT_AVAILABLE,
}
COMMIT_OR_ROLLBACK = {
    pb.TransactionResolution.COMMIT: MessageSysFlag.TRANSACTION_COMMIT_TYPE,
    pb.TransactionResolution.ROLLBACK: MessageSysFlag.TRANSACTION_ROLLBACK_TYPE,
}


def consistent_hash(key: int, buckets: int) -> int:
    """Guava's Hashing.consistentHash, which Apache's proxy uses to map a message group to a queue."""
    state = key & 0xFFFFFFFFFFFFFFFF
    candidate = 0
    while True:
        state = (2862933555777941757 * state + 1) & 0xFFFFFFFFFFFFFFFF
        nxt = int((candidate + 1) / (((state >> 33) + 1) / 2.0**31))
        if 0 <= nxt < buckets:
            candidate = nxt
        else:
            return candidate


@dataclass(frozen=True, slots=True)
class TransactionData:
    """Where a half message is: what END_TRANSACTION must name."""

    broker_name: str
    broker_addr: str | None  # the broker that asked (a check-back); None: the master of broker_name
    tran_state_table_offset: int
    commit_log_offset: int
    expires_ms: int


class TransactionTable:
    """Half messages by (producer group, transaction id), bounded in number and in time."""

    def __init__(self, reactor: Any) -> None:
        self.reactor = reactor
        self._data: OrderedDict[tuple[str, str], TransactionData] = OrderedDict()

    def now_ms(self) -> int:
        return int(self.reactor.seconds() * 1000)

    def put(self, group: str, transaction_id: str, data: TransactionData) -> None:
        self._data[(group, transaction_id)] = data
        self._data.move_to_end((group, transaction_id))
        while len(self._data) > MAX_TRANSACTION_DATA:
            self._data.popitem(last=False)
        self._expire()

    def pop(self, group: str, transaction_id: str) -> TransactionData | None:
        self._expire()
        return self._data.pop((group, transaction_id), None)

    def _expire(self) -> None:
        now = self.now_ms()
        while self._data:
            key, data = next(iter(self._data.items()))
            if data.expires_ms > now:
                break
            del self._data[key]


class ProxyProducer(Producer):
    """A producer group of the proxy's remoting client, named after a topic; sends for SDK clients."""

    def __init__(self, group: str, service: MessagingService) -> None:
        config = service.config
        super().__init__(
            group,
            client=service.instance,
            send_timeout=config.sendMessageTimeoutMillis / 1000,
            retry_times_when_send_failed=0,  # the SDK retries, with the backoff policy we gave it
            compress_msg_body_over_howmuch=1 << 62,  # bodies are stored as the SDK sent them
            max_message_size=config.maxMessageSize,
        )
        self.service = service
        # Check-backs for the topic's half messages need its route (to heartbeat its brokers) before any send.
        self._publish[group] = TopicPublishInfo()

    def publish_info_ok(self, topic: str) -> bool:
        info = self._publish.get(topic)
        return info is not None and info.ok()

    def check_transaction_state(
        self, channel: Any, msg: MessageExt, header: CheckTransactionStateRequestHeader
    ) -> None:
        self.service.producer.check_transaction_state(self.group, channel, msg, header)


class ProducerActivity:
    """SendMessage, EndTransaction, and the broker's transaction checks relayed to SDK producers."""

    def __init__(self, service: MessagingService) -> None:
        self.service = service
        self.config = service.config

    def rpcs(self) -> list[Rpc]:
        return [
            Rpc.of("SendMessage", Kind.UNARY, self.send_message),
            Rpc.of("EndTransaction", Kind.UNARY, self.end_transaction),
            Rpc.of("RecallMessage", Kind.UNARY, self.recall_message),
        ]

    async def producer(self, topic: str) -> ProxyProducer:
        """The topic's producer group with the topic's route: the registered one, else a sender for this request
        only. TOPIC_NOT_FOUND when the NameServers do not know the topic (the proxy creates no topic)."""
        instance = self.service.instance
        producer = self.service.clients.producers.get(topic) or ProxyProducer(topic, self.service)
        if not producer.publish_info_ok(topic):
            await instance.update_topic_route_from_namesrv(topic)
            route = instance.topic_routes.get(topic)
            if route is None:
                raise ProxyError(pb.Code.TOPIC_NOT_FOUND, f"No topic route info in name server for the topic: {topic}")
            producer.update_topic_publish_info(topic, route)
        return producer

    # -- SendMessage

    async def send_message(self, ctx: ProxyContext, request: Any) -> spb.SendMessageResponse:
        if not request.messages:
            raise ProxyError(pb.Code.MESSAGE_CORRUPTED, "no message to send")
        first = request.messages[0]
        topic = validate_topic(first.topic)
        messages = []
        for proto in request.messages:
            if proto.topic != first.topic:
                raise ProxyError(pb.Code.MESSAGE_CORRUPTED, "topic in message is not same")
            messages.append(self.build_message(ctx, proto, topic))
        if first.system_properties.body_encoding == pb.Encoding.GZIP:
            raise ProxyError(pb.Code.UNSUPPORTED, "GZIP message bodies are not supported")
        producer = await self.producer(topic)
        group = first.system_properties.message_group if len(messages) == 1 else ""
        if len(messages) == 1:
            selector = (lambda queues, msg, arg: _queue_for(queues, group)) if group else None
            result = await producer.send(messages[0], selector=selector)
        else:
            result = await producer.send_batch(messages)
        if (
            result.status is SendStatus.SEND_OK
            and messages[0].properties.get(MessageConst.TRANSACTION_PREPARED) == "true"
        ):
            self._remember_half_message(topic, result, messages[0])
        return self._response(result, len(messages))

    def build_message(self, ctx: ProxyContext, proto: Any, producer_group: str) -> Message:
        """buildMessage / buildMessageProperty, with Apache's checks in Apache's order."""
        config = self.config
        body = proto.body
        if config.enableMessageBodyEmptyCheck and not body:
            raise ProxyError(pb.Code.MESSAGE_BODY_EMPTY, "message body cannot be empty")
        if config.maxMessageSize > 0 and len(body) > config.maxMessageSize:
            raise ProxyError(
                pb.Code.MESSAGE_BODY_TOO_LARGE, f"message body cannot exceed the max {config.maxMessageSize}"
            )
        sp = proto.system_properties
        user = dict(proto.user_properties)
        if len(user) > config.userPropertyMaxNum:
            raise ProxyError(
                pb.Code.MESSAGE_PROPERTIES_TOO_LARGE, f"too many user properties, max is {config.userPropertyMaxNum}"
            )
        size = 0
        for key, value in user.items():
            if key in SYSTEM_PROPERTY_KEYS:
                raise ProxyError(pb.Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property is used by system: {key}")
            if has_control_character(key):
                raise ProxyError(
                    pb.Code.ILLEGAL_MESSAGE_PROPERTY_KEY, "the key of property cannot contain control character"
                )
            if has_control_character(value):
                raise ProxyError(
                    pb.Code.ILLEGAL_MESSAGE_PROPERTY_KEY, "the value of property cannot contain control character"
                )
            size += len(key.encode()) + len(value.encode())
        props = user
        validate_tag(sp.tag)
        if sp.tag:
            props[MessageConst.TAGS] = sp.tag
        size += len(sp.tag.encode())
        for key in sp.keys:
            if key and key.isspace():
                raise ProxyError(pb.Code.ILLEGAL_MESSAGE_KEY, "key cannot be the char sequence of whitespace")
            if has_control_character(key):
                raise ProxyError(pb.Code.ILLEGAL_MESSAGE_KEY, "key cannot contain control character")
            size += len(key.encode())
        if sp.keys:
            props[MessageConst.KEYS] = MessageConst.KEY_SEPARATOR.join(sp.keys)
        if size > config.maxUserPropertySize:
            raise ProxyError(
                pb.Code.MESSAGE_PROPERTIES_TOO_LARGE,
                f"the total size of user property is too large, max is {config.maxUserPropertySize}",
            )
        if not sp.message_id.strip():
            raise ProxyError(pb.Code.ILLEGAL_MESSAGE_ID, "message id cannot be empty")
        props[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = sp.message_id
        if sp.message_type == pb.MessageType.TRANSACTION:
            props[MessageConst.TRANSACTION_PREPARED] = "true"
            if sp.HasField("orphaned_transaction_recovery_duration"):
                seconds = sp.orphaned_transaction_recovery_duration.seconds
                if 0 < config.maxTransactionRecoverySecond < seconds:
                    raise ProxyError(
                        pb.Code.BAD_REQUEST,
                        "the max transaction recovery time of message is too large, max is "
                        f"{config.maxTransactionRecoverySecond}",
                    )
                props[MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS] = str(seconds)
        if sp.HasField("delivery_timestamp"):
            deliver_ms = sp.delivery_timestamp.ToMilliseconds()
            if 0 < config.maxDelayTimeMills < deliver_ms - self.service.now_ms():
                raise ProxyError(
                    pb.Code.ILLEGAL_DELIVERY_TIME,
                    f"the max delay time of message is too large, max is {config.maxDelayTimeMills}",
                )
            props[MessageConst.TIMER_DELIVER_MS] = str(deliver_ms)
        props[MessageConst.RECONSUME_TIME] = str(sp.delivery_attempt)
        props[MessageConst.PRODUCER_GROUP] = producer_group
        if sp.message_group:
            group = sp.message_group
            if group.isspace():
                raise ProxyError(
                    pb.Code.ILLEGAL_MESSAGE_GROUP, "message group cannot be the char sequence of whitespace"
                )
            if 0 < config.maxMessageGroupSize <= len(group.encode()):
                raise ProxyError(
                    pb.Code.ILLEGAL_MESSAGE_GROUP, f"message group exceed the max size {config.maxMessageGroupSize}"
                )
            if has_control_character(group):
                raise ProxyError(pb.Code.ILLEGAL_MESSAGE_GROUP, "message group cannot contain control character")
            props[SHARDING_KEY] = group
        if sp.trace_context:
            props[TRACE_CONTEXT] = sp.trace_context
        born_host = sp.born_host if sp.born_host.strip() else ctx.remote_address
        if born_host.strip():
            props[BORN_HOST] = born_host
        if sp.HasField("born_timestamp"):
            props[BORN_TIMESTAMP] = str(sp.born_timestamp.ToMilliseconds())
        return Message(topic=proto.topic.name, body=body, properties=props)

    @staticmethod
    def _response(result: SendResult, count: int) -> spb.SendMessageResponse:
        code = SEND_STATUS_CODES.get(result.status)
        if code is not None:
            entry = spb.SendResultEntry(status=status(code, f"send message failed, sendStatus={result.status.name}"))
            entries = [entry] * count
        else:
            ids = result.msg_id.split(",")
            entries = [
                spb.SendResultEntry(
                    status=status(pb.Code.OK),
                    offset=result.queue_offset,
                    message_id=msg_id,
                    transaction_id=result.transaction_id or "",
                    recall_handle=result.recall_handle or "",
                )
                for msg_id in ids
            ]
        return spb.SendMessageResponse(status=entries[0].status, entries=entries)

    def _remember_half_message(self, group: str, result: SendResult, msg: Message) -> None:
        # Our broker leaves transactionId out of its answer; Apache's broker answers the message's UNIQ_KEY.
        transaction_id = result.transaction_id or result.msg_id
        result.transaction_id = transaction_id
        immunity = int(msg.properties.get(MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS) or 0) * 1000
        self.service.transactions.put(
            group,
            transaction_id,
            TransactionData(
                broker_name=result.queue.broker_name,
                broker_addr=None,
                tran_state_table_offset=result.queue_offset,
                commit_log_offset=decode_offset_message_id(result.offset_msg_id)[1],
                expires_ms=self.service.now_ms() + immunity + TRANSACTION_DATA_EXPIRE_MS,
            ),
        )

    # -- EndTransaction

    async def end_transaction(self, ctx: ProxyContext, request: Any) -> spb.EndTransactionResponse:
        topic = validate_topic(request.topic)
        if not request.transaction_id.strip():
            raise ProxyError(pb.Code.INVALID_TRANSACTION_ID, "transaction id cannot be empty")
        data = self.service.transactions.pop(topic, request.transaction_id)
        if data is None:
            raise ProxyError(pb.Code.INVALID_TRANSACTION_ID, "cannot found transaction data")
        addr = data.broker_addr or await self.service.master_of(data.broker_name, topic)
        if addr is None:
            raise ProxyError(pb.Code.INTERNAL_SERVER_ERROR, f"The broker[{data.broker_name}] not exist")
        header = EndTransactionRequestHeader(
            producer_group=topic,
            tran_state_table_offset=data.tran_state_table_offset,
            commit_log_offset=data.commit_log_offset,
            commit_or_rollback=COMMIT_OR_ROLLBACK.get(request.resolution, MessageSysFlag.TRANSACTION_NOT_TYPE),
            from_transaction_check=request.source == pb.TransactionSource.SOURCE_SERVER_CHECK,
            msg_id=request.message_id,
            transaction_id=request.transaction_id,
            bname=data.broker_name,
        )
        await self.service.instance.api.end_transaction_oneway(addr, header, None)
        return spb.EndTransactionResponse(status=status(pb.Code.OK))

    # -- RecallMessage

    async def recall_message(self, ctx: ProxyContext, request: Any) -> spb.RecallMessageResponse:
        """RecallMessageActivity / ProducerProcessor.recallMessage: RECALL_MESSAGE to the broker the handle
        names, answered with the recalled message's id."""
        topic = validate_topic(request.topic)
        try:
            handle = RecallHandle.decode(request.recall_handle)
        except InvalidRecallHandle as e:
            # Apache says INTERNAL_SERVER_ERROR, which the SDKs would retry: the handle is the client's.
            raise ProxyError(pb.Code.BAD_REQUEST, str(e)) from None
        addr = await self.service.master_of(handle.broker_name, topic)
        if addr is None:
            raise ProxyError(pb.Code.INTERNAL_SERVER_ERROR, f"The broker[{handle.broker_name}] not exist")
        header = RecallMessageRequestHeader(topic=topic, recall_handle=request.recall_handle, bname=handle.broker_name)
        message_id = await self.service.instance.api.recall_message(addr, header, RECALL_TIMEOUT)
        return spb.RecallMessageResponse(status=status(pb.Code.OK), message_id=message_id)

    # -- the broker's transaction checks

    def check_transaction_state(
        self, group: str, channel: Any, msg: MessageExt, header: CheckTransactionStateRequestHeader
    ) -> None:
        """RecoverOrphanedTransactionCommand to one SDK producer of the topic that holds a Telemetry stream."""
        transaction_id = header.transaction_id or msg.uniq_key or header.msg_id or ""
        command = spb.TelemetryCommand(
            status=status(pb.Code.OK),
            recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
                message=build_proto_message(msg, self.service.now_ms()), transaction_id=transaction_id
            ),
        )
        for client in self.service.clients.members(group):
            if client.write(command):
                break
        else:
            log.info("transaction check of {id}: no producer of {group} is connected", id=header.msg_id, group=group)
            return
        self.service.transactions.put(
            group,
            transaction_id,
            TransactionData(
                broker_name=header.bname or "",
                broker_addr=channel.peer,
                tran_state_table_offset=header.tran_state_table_offset,
                commit_log_offset=header.commit_log_offset,
                expires_ms=self.service.now_ms() + TRANSACTION_DATA_EXPIRE_MS,
            ),
        )


def _queue_for(queues: list[MessageQueue], group: str) -> MessageQueue:
    return queues[consistent_hash(java_string_hash(group), len(queues))]
