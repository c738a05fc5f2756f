"""The store as transactions use it: half and op messages, and the check-back's offsets (TransactionalMessageBridge).

A half message lives in RMQ_SYS_TRANS_HALF_TOPIC queue 0 until an op message in RMQ_SYS_TRANS_OP_HALF_TOPIC
(same queue id, tag ``d``, body = the half's queue offset as text) says it was committed or rolled back.
The check-back reads both queues as consumer group CID_RMQ_SYS_TRANS, whose offsets live in
consumerOffset.json like any group's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from twisted.internet.defer import Deferred

from gateway.remoting.codes import PermName
from gateway.remoting.message import (
    MessageConst,
    MessageExt,
    MessageSysFlag,
    decode_record,
    properties_to_string,
    tags_code,
)
from gateway.remoting.names import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from gateway.store.api import GetMessageStatus, MessageExtBrokerInner, PutMessageResult

from ..inner import inner_from_ext, put_now

if TYPE_CHECKING:
    from ..controller import BrokerController

TRANS_GROUP = "CID_RMQ_SYS_TRANS"
REMOVE_TAG = "d"
_NO_NEW = frozenset({GetMessageStatus.NO_MESSAGE_IN_QUEUE, GetMessageStatus.OFFSET_OVERFLOW_ONE})


@dataclass(slots=True)
class QueueRead:
    """One read of a half or op queue (the PullResult Java's bridge builds); ``messages`` is None unless found."""

    next_begin_offset: int
    messages: list[MessageExt] | None
    no_new: bool  # nothing at or past the offset (NO_NEW_MSG)


class TransactionalMessageBridge:
    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker

    def _topic(self, topic: str) -> None:
        # System topics of one queue, created on first use.
        self.broker.topics.create_topic_in_send_message_back_method(topic, 1, PermName.PERM_READ | PermName.PERM_WRITE)

    def half_queue_ids(self) -> range:
        tc = self.broker.topics.select(TRANS_HALF_TOPIC)
        return range(tc.read_queue_nums if tc else 0)

    # -- writes

    def put_half_message(self, msg: MessageExtBrokerInner, props: dict[str, str]) -> PutMessageResult:
        """Park a prepared message in the half queue (parseHalfMessageInner); ``props`` are its properties."""
        self._topic(TRANS_HALF_TOPIC)
        props[MessageConst.REAL_TOPIC] = msg.topic
        props[MessageConst.REAL_QUEUE_ID] = str(msg.queue_id)
        msg.properties = properties_to_string(props)
        msg.sys_flag = MessageSysFlag.reset_transaction_value(msg.sys_flag, MessageSysFlag.TRANSACTION_NOT_TYPE)
        msg.topic = TRANS_HALF_TOPIC
        msg.queue_id = 0
        return self.broker.store.put_message(msg)

    def put_op_message(self, half: MessageExt) -> bool:
        """Mark ``half`` resolved: tag ``d``, body its queue offset (addRemoveTagInTransactionOp)."""
        self._topic(TRANS_OP_HALF_TOPIC)
        broker = self.broker
        props = {MessageConst.TAGS: REMOVE_TAG}
        op = MessageExtBrokerInner(
            topic=TRANS_OP_HALF_TOPIC,
            queue_id=half.queue_id,
            flag=0,
            body=str(half.queue_offset).encode(),
            properties=properties_to_string(props),
            tags_code=tags_code(REMOVE_TAG),
            sys_flag=0,
            born_timestamp=int(time.time() * 1000),
            born_host=broker.store_host,
            store_host=broker.store_host,
        )
        return put_now(broker.store, op).ok

    def renew_half_message(
        self, half: MessageExt, immunity: bool = False
    ) -> PutMessageResult | Deferred[PutMessageResult]:
        """Append ``half`` (with its current properties) again to its half queue (renew[Immunity]HalfMessageInner);
        on a DLedger ledger the result comes once the copy is committed (or not).

        For an immunity renewal ``TRAN_PREPARED_QUEUE_OFFSET`` keeps pointing at the first copy's offset.
        """
        props = dict(half.properties)
        if immunity:
            props.setdefault(MessageConst.TRANSACTION_PREPARED_QUEUE_OFFSET, str(half.queue_offset))
        return self.broker.store.put_message(inner_from_ext(half, half.topic, half.queue_id, props))

    # -- reads and offsets

    def read(self, topic: str, queue_id: int, offset: int, nums: int) -> QueueRead:
        result = self.broker.store.get_message(TRANS_GROUP, topic, queue_id, offset, nums)
        if result is None:  # store not running
            return QueueRead(offset, None, True)
        messages = [decode_record(b) for b in result.buffers] if result.status is GetMessageStatus.FOUND else None
        return QueueRead(result.next_begin_offset, messages, result.status in _NO_NEW)

    def fetch_consume_offset(self, topic: str, queue_id: int) -> int:
        offset = self.broker.offsets.query_offset(TRANS_GROUP, topic, queue_id)
        return offset if offset >= 0 else self.broker.store.get_min_offset_in_queue(topic, queue_id)

    def update_consume_offset(self, topic: str, queue_id: int, offset: int) -> None:
        self.broker.offsets.commit_offset(TRANS_GROUP, topic, queue_id, offset)
