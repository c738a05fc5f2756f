"""Writing checkpoints and acks to the revive topic, and the pop retry topics (PopMessageProcessor.buildCkMsg,
AckMessageProcessor.appendAck, PopReviveService.addRetryTopicIfNotExist)."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import TYPE_CHECKING

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from gateway.remoting.codes import PermName
from gateway.remoting.message import MessageConst, properties_to_string, tags_code
from gateway.store.api import MessageExtBrokerInner, PutMessageResult
from gateway.store.commit_log import now_ms

from ..inner import when_put
from .inflight import PopInflightCounter
from .records import ACK_TIME_INTERVAL, CK_TAG, RETRY_QUEUE_NUM, AckMsg, PopCheckPoint, revive_topic

if TYPE_CHECKING:
    from ..controller import BrokerController

log = Logger()

_RW = PermName.PERM_READ | PermName.PERM_WRITE


class PopService:
    """The revive topic of this broker's cluster and the records pops, acks and invisible-time changes put there."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        self.revive_topic = revive_topic(broker.config.brokerClusterName)
        # PopMessageProcessor.ckMessageNumber: checkpoints are spread over the revive queues in turn.
        self._ck_number = itertools.count()
        self.inflight = PopInflightCounter(now_ms())
        # PopMetricsManager's counters: records put to the revive topic (group, topic, CK/ACK, put status),
        # records the revive service read (group, topic, revive queue, CK/ACK), and messages it put into the
        # pop retry topics (group, topic, put status).
        self.revive_put: Counter[tuple[str, str, str, str]] = Counter()
        self.revive_get: Counter[tuple[str, str, int, str]] = Counter()
        self.revive_retry: Counter[tuple[str, str, str]] = Counter()

    def load(self) -> None:
        """Create the revive topic (a system topic with reviveQueueNum queues), as TopicConfigManager does."""
        self.broker.topics.create_topic_in_send_message_back_method(
            self.revive_topic, self.broker.config.reviveQueueNum, _RW
        )

    def next_revive_qid(self) -> int:
        return next(self._ck_number) % self.broker.config.reviveQueueNum

    def is_revive_qid(self, revive_qid: int) -> bool:
        return 0 <= revive_qid < self.broker.config.reviveQueueNum

    def append_checkpoint(self, ck: PopCheckPoint, revive_qid: int) -> bool | Deferred[bool]:
        """Store ``ck``, delivered to its revive queue one second before its revive time (buildCkMsg); whether it
        is stored (on a DLedger ledger, a Deferred of it: a majority holds it)."""
        deliver_ms = ck.revive_time - ACK_TIME_INTERVAL
        return self._put(revive_qid, CK_TAG, ck.encode(), ck.unique_id, deliver_ms, ck.cid, ck.topic, "CK", str(ck))

    def append_ack(self, ack: AckMsg, revive_qid: int, deliver_ms: int) -> bool | Deferred[bool]:
        """Store ``ack``, delivered to its revive queue at ``deliver_ms`` (the acked pop's revive time)."""
        group, topic = ack.consumer_group, ack.topic
        return self._put(revive_qid, ack.tag, ack.encode(), ack.unique_id, deliver_ms, group, topic, "ACK", str(ack))

    def _put(
        self,
        revive_qid: int,
        tag: str,
        body: bytes,
        unique_id: str,
        deliver_ms: int,
        group: str,
        topic: str,
        kind: str,
        what: str,
    ) -> bool | Deferred[bool]:
        broker = self.broker
        props = {
            MessageConst.TAGS: tag,
            MessageConst.TIMER_DELIVER_MS: str(deliver_ms),
            MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: unique_id,
        }
        msg = MessageExtBrokerInner(
            topic=self.revive_topic,
            queue_id=revive_qid,
            flag=0,
            body=body,
            properties=properties_to_string(props),
            tags_code=tags_code(tag),
            sys_flag=0,
            born_timestamp=now_ms(),
            born_host=broker.store_host,
            store_host=broker.store_host,
        )
        refused = broker.timer.transform(msg, props)
        if refused is not None:
            log.error("pop: {what} not stored: {remark}", what=what, remark=refused)
            return False
        return when_put(broker.store.put_message(msg), lambda result: self._stored(result, group, topic, kind, what))

    def _stored(self, result: PutMessageResult, group: str, topic: str, kind: str, what: str) -> bool:
        self.revive_put[(group, topic, kind, result.status.name)] += 1
        if not result.ok:
            log.error("pop: {what} not stored: {status}", what=what, status=result.status.name)
        return result.ok

    def offset_reset(self, topic: str, group: str, queue_id: int) -> None:
        """The group's offset of the queue was reset: what it had in flight no longer counts and its orderly batch
        no longer holds the queue (PopInflightMessageCounter.clearInFlightMessageNum, clearBlock)."""
        self.inflight.clear(topic, group, queue_id)
        self.broker.order_info.clear_block(topic, group, queue_id)

    def add_retry_topic_if_not_exist(self, topic: str, group: str) -> None:
        """A pop retry topic has one queue; the group starts reading it at 0 (initPopRetryOffset)."""
        if self.broker.topics.select(topic) is not None:
            return
        self.broker.topics.create_topic_in_send_message_back_method(topic, RETRY_QUEUE_NUM, _RW)
        if self.broker.offsets.query_offset(group, topic, 0) < 0:
            self.broker.offsets.commit_offset(group, topic, 0, 0)
