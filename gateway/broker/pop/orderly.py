"""Orderly POP (``order=true``): what PopMessageProcessor, AckMessageProcessor and ChangeInvisibleTimeProcessor do
differently for it in Apache 5.3.3, on top of :class:`~gateway.broker.pop.order_info.ConsumerOrderInfoManager`.

A queue hands out one batch at a time: a pop skips a queue whose last batch is neither acked nor invisible-time
expired. A batch popped commits the group's offset at its start (no checkpoint: an orderly pop's messages come
back by being popped again, not through the revive topic), and acks move that offset, in order, past what is
acked. Each batch's consumed counts travel in the pop response's ``orderCountInfo``, from which clients set the
messages' reconsume times. Orderly messages carry revive queue id 999 (POP_ORDER_REVIVE_QUEUE) in their
``POP_CK``, which is how an ack or a change of invisible time is known to be orderly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from twisted.logger import Logger

from gateway.remoting.codes import ResponseCode
from gateway.remoting.extra_info import retry_kind

from .order_info import ILLEGAL

if TYPE_CHECKING:
    from ..controller import BrokerController

log = Logger()


def order_count_info(topic: str, queue_id: int, counts: dict[int, int], least: int) -> list[str]:
    """ExtraInfoUtil's orderCountInfo entries for one queue's batch: ``kind qo<queueId>%<offset> count`` per
    offset consumed before, then ``kind queueId least`` (what older clients read); ``kind`` is the topic's
    (ExtraInfoUtil.getRetry)."""
    retry = retry_kind(topic)
    entries = [f"{retry} qo{queue_id}%{offset} {count}" for offset, count in counts.items()]
    entries.append(f"{retry} {queue_id} {least}")
    return entries


class OrderlyPop:
    """The orderly steps of pop, ack and change-invisible-time for one broker. ``notify_arriving(topic,
    queue_id, group)`` wakes a pop held for that queue (PopMessageProcessor.notifyMessageArriving), true if one
    was; ``notify_notifications(topic, queue_id)`` the notifications held for it."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        self.order_info = broker.order_info
        self.notify_arriving: Callable[[str, int, str], bool] = lambda topic, queue_id, group: False
        self.notify_notifications: Callable[[str, int], None] = lambda topic, queue_id: None
        self.order_info.on_lock_free = self._lock_freed

    def _lock_freed(self, topic: str, group: str, queue_id: int) -> None:
        """notifyLongPollingRequestIfNeed: a freed queue with messages past the group's offset wakes a pop of
        any queue, else one of this queue, and the notifications waiting on it."""
        offset = self.broker.offsets.query_offset(group, topic, queue_id)
        if self.broker.store.get_max_offset_in_queue(topic, queue_id) <= offset:
            return
        if not self.notify_arriving(topic, -1, group):
            self.notify_arriving(topic, queue_id, group)
        self.notify_notifications(topic, queue_id)

    def blocked(self, attempt_id: str | None, topic: str, group: str, queue_id: int, invisible_time: int) -> bool:
        """Whether the queue's previous batch still holds it: the pop passes the queue over (checkBlock)."""
        return self.order_info.check_block(attempt_id, topic, group, queue_id, invisible_time)

    def popped(
        self,
        attempt_id: str | None,
        topic: str,
        group: str,
        queue_id: int,
        pop_time: int,
        invisible_time: int,
        start_offset: int,
        queue_offsets: list[int],
    ) -> list[str]:
        """A batch was read from ``start_offset``: record it, commit the group's offset at its start, and return
        the queue's ``orderCountInfo`` entries."""
        counts, least = self.order_info.update(
            attempt_id, topic, group, queue_id, pop_time, invisible_time, queue_offsets
        )
        self.broker.offsets.commit_offset(group, topic, queue_id, start_offset)
        return order_count_info(topic, queue_id, counts, least)

    def passed_over(self, topic: str, group: str, queue_id: int, next_begin_offset: int) -> None:
        """Nothing matched from the group's offset up to ``next_begin_offset``: commit past it."""
        self.broker.offsets.commit_offset(group, topic, queue_id, next_begin_offset)

    def ack(
        self, topic: str, group: str, queue_id: int, ack_offset: int, pop_time: int, invisible_time: int, peer: str
    ) -> tuple[int, str] | None:
        """ackOrderly: commit up to the first offset of the batch not acked yet; an error (code, remark) for an
        offset the batch does not hold, else None (an ack of an older batch or below the offset is ignored)."""
        offsets = self.broker.offsets
        old_offset = offsets.query_offset(group, topic, queue_id)
        if ack_offset < old_offset:
            return None
        next_offset = self.order_info.commit_and_next(topic, group, queue_id, ack_offset, pop_time)
        if next_offset == ILLEGAL:
            remark = (
                f"offset is illegal, key:{topic}@{group}@{queue_id}, old:{old_offset}, commit:{ack_offset}, "
                f"next:{next_offset}, {peer}"
            )
            log.warn(remark)
            return ResponseCode.MESSAGE_ILLEGAL, remark
        if next_offset > -1:
            offsets.commit_offset(group, topic, queue_id, next_offset)
            if not self.order_info.check_block(None, topic, group, queue_id, invisible_time):
                self.notify_arriving(topic, queue_id, group)
        self.broker.pop.inflight.decrement(topic, group, pop_time, queue_id, 1)
        return None

    def change_invisible_time(
        self, topic: str, group: str, queue_id: int, offset: int, pop_time: int, invisible_time: int
    ) -> tuple[int, int] | None:
        """processChangeInvisibleTimeForOrder: hide ``offset`` for ``invisible_time`` ms from now; the answer's
        (popTime, invisibleTime), or None when the offset is already committed."""
        if offset < self.broker.offsets.query_offset(group, topic, queue_id):
            return None
        next_visible_time = self.order_info.now() + invisible_time
        self.order_info.update_next_visible_time(topic, group, queue_id, offset, pop_time, next_visible_time)
        return pop_time, next_visible_time - pop_time
