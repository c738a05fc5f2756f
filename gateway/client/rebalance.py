"""Rebalancing a push consumer (RebalanceImpl / RebalancePushImpl) and AllocateMessageQueueAveragely.

Every member sorts the same inputs — the topic's readable queues and the group's client ids from a
broker — and takes its own share, so the group agrees without talking. Queues leaving a member get
their offset committed; queues joining start where the group's committed offset (or consumeFromWhere)
says.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from gateway.remoting.bodies import ConsumeFromWhere, MessageModel, MessageQueue, SubscriptionData
from gateway.remoting.names import RETRY_GROUP_TOPIC_PREFIX

from .instance import call_logged
from .offset_store import OFFSET_NOT_FOUND
from .process_queue import ProcessQueue, PullRequest

if TYPE_CHECKING:
    from .push_consumer import PushConsumer

log = Logger()

AllocateStrategy = Callable[[str, list[MessageQueue], list[str]], list[MessageQueue]]


def allocate_averagely(current_cid: str, mq_all: list[MessageQueue], cid_all: list[str]) -> list[MessageQueue]:
    """AllocateMessageQueueAveragely: consecutive blocks, the first ``len(mq_all) % len(cid_all)`` ids one longer.

    Both lists must be sorted; a client id not in ``cid_all`` gets nothing.
    """
    if current_cid not in cid_all:
        return []
    index = cid_all.index(current_cid)
    n, k = len(mq_all), len(cid_all)
    mod = n % k
    if n <= k:
        average = 1
    elif mod > 0 and index < mod:
        average = n // k + 1
    else:
        average = n // k
    start = index * average if mod > 0 and index < mod else index * average + mod
    return [mq_all[(start + i) % n] for i in range(min(average, n - start))]


def allocate_averagely_by_circle(
    current_cid: str, mq_all: list[MessageQueue], cid_all: list[str]
) -> list[MessageQueue]:
    """AllocateMessageQueueAveragelyByCircle: every ``len(cid_all)``-th queue from the member's own index.

    Both lists must be sorted; a client id not in ``cid_all`` gets nothing.
    """
    if current_cid not in cid_all:
        return []
    return mq_all[cid_all.index(current_cid) :: len(cid_all)]


# The strategies a broker allocates with for QUERY_ASSIGNMENT, by their Java names (getName()).
ALLOCATE_STRATEGIES: dict[str, AllocateStrategy] = {
    "AVG": allocate_averagely,
    "AVG_BY_CIRCLE": allocate_averagely_by_circle,
}


class RebalancePushImpl:
    """Which queues this member pulls: subscriptions, known queues per topic, and the process queue table."""

    def __init__(self, consumer: PushConsumer) -> None:
        self.consumer = consumer
        self.subscription_inner: dict[str, SubscriptionData] = {}
        self.topic_subscribe_info: dict[str, set[MessageQueue]] = {}
        self.process_queue_table: dict[MessageQueue, ProcessQueue] = {}
        self._again = False
        # Callers waiting for the running round; None when no round runs.
        self._waiters: list[Deferred[None]] | None = None

    async def do_rebalance(self) -> None:
        """Rebalance every subscribed topic. A request arriving meanwhile makes one more round, and returns
        when that round is done."""
        self._again = True
        if self._waiters is not None:
            waiter: Deferred[None] = Deferred()
            self._waiters.append(waiter)
            await waiter
            return
        self._waiters = []
        try:
            while self._again and not self.consumer.stopping:
                self._again = False
                for topic in list(self.subscription_inner):
                    await self._rebalance_by_topic(topic)
                self._truncate_message_queue_not_my_topic()
        finally:
            waiters, self._waiters = self._waiters, None
            for w in waiters:
                w.callback(None)

    async def _rebalance_by_topic(self, topic: str) -> None:
        mq_set = self.topic_subscribe_info.get(topic)
        if not mq_set:
            if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                log.warn(
                    "doRebalance, {group}, but the topic[{topic}] not exist.", group=self.consumer.group, topic=topic
                )
            return
        if self.consumer.message_model is MessageModel.BROADCASTING:
            await self._update_process_queue_table(topic, mq_set)
            return
        client = self.consumer.client
        cid_all = await client.find_consumer_id_list(topic, self.consumer.group)
        if not cid_all:
            log.warn(
                "doRebalance, {group} {topic}, get consumer id list failed", group=self.consumer.group, topic=topic
            )
            return
        mine = self.consumer.allocate(client.client_id, sorted(mq_set), sorted(cid_all))
        await self._update_process_queue_table(topic, set(mine))

    async def _update_process_queue_table(self, topic: str, mq_set: set[MessageQueue]) -> None:
        for mq in [mq for mq in self.process_queue_table if mq.topic == topic and mq not in mq_set]:
            self.remove_process_queue(mq)
        orderly = self.consumer.orderly if self.consumer.message_model is MessageModel.CLUSTERING else None
        for mq in sorted(mq_set - self.process_queue_table.keys()):
            if orderly is not None and not await orderly.lock(mq):
                log.warn(
                    "doRebalance, {group}, add a new mq failed, {mq}, because lock failed",
                    group=self.consumer.group,
                    mq=mq,
                )
                continue
            self.consumer.offset_store.remove_offset(mq)  # removeDirtyOffset
            try:
                next_offset = await self.compute_pull_from_where(mq)
            except Exception as e:
                log.warn(
                    "doRebalance, {group}, compute offset of {mq} failed: {error}",
                    group=self.consumer.group,
                    mq=mq,
                    error=e,
                )
                continue
            # The table may have changed, or the consumer stopped, while we waited for the broker.
            if next_offset < 0 or mq in self.process_queue_table or self.consumer.stopping:
                if orderly is not None and self.consumer.stopping:
                    await orderly.unlock(mq)  # locked, but the shutdown already released the others
                continue
            # Locked from the start (for orderly CLUSTERING members the lock was just granted).
            pq = ProcessQueue(locked=True, last_lock_timestamp=self.consumer.client.now())
            self.process_queue_table[mq] = pq
            log.info(
                "doRebalance, {group}, add a new mq, {mq} from offset {offset}",
                group=self.consumer.group,
                mq=mq,
                offset=next_offset,
            )
            self.consumer.execute_pull_request_immediately(PullRequest(mq, pq, next_offset))

    def _truncate_message_queue_not_my_topic(self) -> None:
        for mq in [mq for mq in self.process_queue_table if mq.topic not in self.subscription_inner]:
            self.process_queue_table.pop(mq).dropped = True

    def remove_process_queue(self, mq: MessageQueue) -> None:
        """Stop pulling ``mq``; commit its offset (removeUnnecessaryMessageQueue)."""
        pq = self.process_queue_table.pop(mq, None)
        if pq is None:
            return
        pq.dropped = True
        log.info("doRebalance, {group}, remove unnecessary mq, {mq}", group=self.consumer.group, mq=mq)
        orderly = self.consumer.orderly
        if orderly is not None and self.consumer.message_model is MessageModel.CLUSTERING:
            call_logged(orderly.release, mq, pq)
            return
        store = self.consumer.offset_store
        store.persist(mq)
        store.remove_offset(mq)

    async def compute_pull_from_where(self, mq: MessageQueue) -> int:
        """The committed offset; without one, where consumeFromWhere says; -1 when the broker cannot tell now."""
        consumer = self.consumer
        last = await consumer.offset_store.read_offset_from_store(mq)
        if last >= 0:
            return last
        if last != OFFSET_NOT_FOUND:
            return -1
        where = consumer.consume_from_where
        is_retry = mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
        if where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
            return 0
        if where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
            if is_retry:
                return await consumer.max_offset(mq)
            return await consumer.search_offset(mq, consumer.consume_timestamp)
        # CONSUME_FROM_LAST_OFFSET and the deprecated values that behave like it.
        return 0 if is_retry else await consumer.max_offset(mq)

    def destroy(self) -> None:
        """Drop every queue (at shutdown, after the offsets were persisted)."""
        for pq in self.process_queue_table.values():
            pq.dropped = True
        self.process_queue_table.clear()
