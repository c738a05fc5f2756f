"""Orderly consumption (ConsumeMessageOrderlyService, MessageListenerOrderly): each queue's messages go to the
listener one batch at a time in queue order, and in CLUSTERING only while this member holds the queue's
lock on the broker.

A queue joins this member only once LOCK_BATCH_MQ granted it; every ``lock_interval`` all held queues are
locked again, and a queue whose lock was not renewed for ``lock_max_live_time`` (30 s, half the broker's
60 s) is not consumed until it is. A queue leaving this member is unlocked only after the batch being
consumed finished and the offset was committed, so the next owner, which re-reads the committed offset
after its own lock, starts right after it: no queue is ever consumed by two members at once.

A listener answering SUSPEND_CURRENT_QUEUE_A_MOMENT (or raising) gets the same batch again after
``suspend_current_queue_time``; after ``max_reconsume_times`` attempts the messages go to the group's
dead-letter queue and the queue moves on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from enum import Enum
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from gateway.remoting.bodies import LockBatchRequestBody, MessageModel, MessageQueue
from gateway.remoting.message import MessageExt

from .instance import call_logged
from .process_queue import ProcessQueue, PullRequest

if TYPE_CHECKING:
    from .push_consumer import PushConsumer

log = Logger()


class ConsumeOrderlyStatus(Enum):
    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


MessageListenerOrderly = Callable[
    [list[MessageExt]], "ConsumeOrderlyStatus | Deferred[ConsumeOrderlyStatus] | Awaitable[ConsumeOrderlyStatus]"
]

# Delays of ConsumeMessageOrderlyService (seconds).
_RESUBMIT_MIN, _RESUBMIT_MAX = 0.01, 30.0
_TRY_LOCK_LATER = 0.01
_RETRY_LOCK_FAILED = 3.0


class ConsumeMessageOrderlyService:
    """One consuming loop per queue at a time; broker locks taken, renewed and released for the consumer."""

    def __init__(
        self,
        consumer: PushConsumer,
        *,
        lock_interval: float = 20.0,
        lock_max_live_time: float = 30.0,
        suspend_current_queue_time: float = 1.0,
        max_time_consume_continuously: float = 60.0,
    ) -> None:
        self.consumer = consumer
        self.lock_interval = lock_interval
        self.lock_max_live_time = lock_max_live_time
        self.suspend_current_queue_time = suspend_current_queue_time
        self.max_time_consume_continuously = max_time_consume_continuously
        # The running consume loop of each queue (Java's MessageQueueLock): a queue never has two.
        self._loops: dict[ProcessQueue, Deferred[None]] = {}
        self._lock_loop: LoopingCall | None = None

    @property
    def clustering(self) -> bool:
        return self.consumer.message_model is MessageModel.CLUSTERING

    def _now(self) -> float:
        return self.consumer.client.now()

    # -- lifecycle

    def start(self) -> None:
        if self.clustering:
            self._lock_loop = LoopingCall(call_logged, self.lock_all)
            self._lock_loop.clock = self.consumer.client.reactor
            self._lock_loop.start(self.lock_interval, now=False)

    async def shutdown(self) -> None:
        """Stop renewing and release every lock (after the offsets were persisted)."""
        if self._lock_loop is not None and self._lock_loop.running:
            self._lock_loop.stop()
        if self.clustering:
            # A rebalance round still running may lock a queue yet; it gives it back since we are stopping.
            await self.consumer.rebalance.do_rebalance()
            await self.unlock_all()

    # -- broker locks

    def _broker_addr(self, broker_name: str) -> str | None:
        return self.consumer.client.find_broker_addr_in_publish(broker_name)

    def _body(self, mqs: list[MessageQueue]) -> LockBatchRequestBody:
        return LockBatchRequestBody(self.consumer.group, self.consumer.client.client_id, mqs)

    def _by_broker(self) -> dict[str, list[MessageQueue]]:
        brokers: dict[str, list[MessageQueue]] = {}
        for mq in self.consumer.rebalance.process_queue_table:
            brokers.setdefault(mq.broker_name, []).append(mq)
        return brokers

    async def _lock_batch(self, addr: str, mqs: list[MessageQueue]) -> list[MessageQueue]:
        """LOCK_BATCH_MQ; what the broker granted. A grant that arrives once the consumer is shutting down,
        maybe after its locks were released, is given back at once."""
        granted = await self.consumer.client.api.lock_batch_mq(addr, self._body(mqs))
        if self.consumer.stopping:
            if granted:
                await self.consumer.client.api.unlock_batch_mq(addr, self._body(granted), oneway=True)
            return []
        self._mark_locked(granted)
        return granted

    async def lock(self, mq: MessageQueue) -> bool:
        """Lock one queue (before it joins this member)."""
        addr = self._broker_addr(mq.broker_name)
        if addr is None:
            return False
        try:
            return mq in await self._lock_batch(addr, [mq])
        except Exception as e:
            log.warn("lockBatchMQ of {mq} failed: {error}", mq=mq, error=e)
            return False

    async def lock_all(self) -> None:
        """Renew every held queue's lock; queues refused are consumed no more until a lock succeeds."""
        for broker_name, mqs in self._by_broker().items():
            addr = self._broker_addr(broker_name)
            if addr is None:
                continue
            try:
                granted = await self._lock_batch(addr, mqs)
            except Exception as e:
                log.warn("lockBatchMQ on {broker} failed: {error}", broker=broker_name, error=e)
                continue
            for mq in set(mqs) - set(granted):
                pq = self.consumer.rebalance.process_queue_table.get(mq)
                if pq is not None:
                    log.warn("the message queue locked Failed, Group: {group} {mq}", group=self.consumer.group, mq=mq)
                    pq.locked = False

    def _mark_locked(self, granted: list[MessageQueue]) -> None:
        for mq in granted:
            pq = self.consumer.rebalance.process_queue_table.get(mq)
            if pq is not None:
                pq.locked = True
                pq.last_lock_timestamp = self._now()

    async def unlock_all(self) -> None:
        for broker_name, mqs in self._by_broker().items():
            addr = self._broker_addr(broker_name)
            if addr is None:
                continue
            try:
                await self.consumer.client.api.unlock_batch_mq(addr, self._body(mqs))
            except Exception as e:
                log.warn("unlockBatchMQ on {broker} failed: {error}", broker=broker_name, error=e)

    async def release(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        """A dropped queue leaves this member: let its running batch finish, commit, then unlock it."""
        running = self._loops.get(pq)
        if running is not None:
            finished: Deferred[Any] = Deferred()
            running.addBoth(lambda r: (finished.callback(None), r)[1])
            await finished
        store = self.consumer.offset_store
        store.persist(mq)
        store.remove_offset(mq)
        # Oneway after the oneway offset update on the same connection: the broker sees them in order.
        await self.unlock(mq)

    async def unlock(self, mq: MessageQueue) -> None:
        addr = self._broker_addr(mq.broker_name)
        if addr is not None:
            await self.consumer.client.api.unlock_batch_mq(addr, self._body([mq]), oneway=True)

    # -- consuming

    async def pull_allowed(self, pr: PullRequest) -> bool:
        """Pull a queue only while it is locked; the first pull after the lock starts again from the committed
        offset, which the previous owner wrote before it unlocked."""
        if not pr.process_queue.locked:
            log.info("pull message later because not locked in broker, {mq}", mq=pr.mq)
            return False
        if not pr.previously_locked:
            offset = await self.consumer.rebalance.compute_pull_from_where(pr.mq)
            if offset < 0:
                return False
            pr.previously_locked = True
            pr.next_offset = offset
        return True

    def lock_expired(self, pq: ProcessQueue) -> bool:
        return self._now() - pq.last_lock_timestamp > self.lock_max_live_time

    def submit_consume_request(self, pq: ProcessQueue, mq: MessageQueue) -> None:
        """Start the queue's consuming loop unless it runs already."""
        if pq in self._loops or pq.dropped or self.consumer.stopping:
            return
        d = Deferred.fromCoroutine(self._consume(pq, mq))
        self._loops[pq] = d
        # The consumer's shutdown waits for these as for concurrent listeners.
        self.consumer._consuming.add(d)

        def done(result: Any) -> Any:
            self._loops.pop(pq, None)
            self.consumer._consuming.discard(d)
            return result

        d.addBoth(done)
        d.addErrback(lambda f: log.failure("orderly consume of {mq} failed", f, mq=mq))

    def _submit_later(self, pq: ProcessQueue, mq: MessageQueue, delay: float) -> None:
        delay = min(max(delay, _RESUBMIT_MIN), _RESUBMIT_MAX)
        self.consumer._later(delay, self.submit_consume_request, pq, mq)

    def _try_lock_later_and_reconsume(self, pq: ProcessQueue, mq: MessageQueue) -> None:
        async def retry() -> None:
            locked = await self.lock(mq)
            self._submit_later(pq, mq, _TRY_LOCK_LATER if locked else _RETRY_LOCK_FAILED)

        self.consumer._later(_TRY_LOCK_LATER, retry)

    async def _consume(self, pq: ProcessQueue, mq: MessageQueue) -> None:
        started = self._now()
        consumer = self.consumer
        while not (pq.dropped or consumer.stopping):
            if self.clustering and (not pq.locked or self.lock_expired(pq)):
                log.warn("the message queue not locked, so consume later, {mq}", mq=mq)
                self._try_lock_later_and_reconsume(pq, mq)
                return
            if self._now() - started > self.max_time_consume_continuously:
                self._submit_later(pq, mq, _RESUBMIT_MIN)  # let the other queues have their turn
                return
            msgs = pq.take_messages(consumer.consume_message_batch_max_size)
            if not msgs:
                return
            consumer._reset_retry_topic(msgs)
            async with consumer._consume_slots:
                status = await consumer.call_listener(
                    msgs, mq, ConsumeOrderlyStatus.SUCCESS, ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
                )
            if status is not ConsumeOrderlyStatus.SUCCESS and await self._suspend(msgs):
                pq.make_messages_to_consume_again(msgs)
                self._submit_later(pq, mq, self.suspend_current_queue_time)
                return
            offset = pq.commit()
            if offset >= 0:
                consumer.offset_store.update_offset(mq, offset, False)

    async def _suspend(self, msgs: list[MessageExt]) -> bool:
        """checkReconsumeTimes: True to consume the batch again; messages past the limit go to the DLQ."""
        suspend = False
        for m in msgs:
            if m.reconsume_times >= self.consumer.max_reconsume_times and await self._send_to_dlq(m):
                continue
            suspend = True
            m.reconsume_times += 1
        return suspend

    async def _send_to_dlq(self, msg: MessageExt) -> bool:
        # As Java: a copy to %RETRY%<group> whose reconsume count is past the limit, which the broker
        # stores in %DLQ%<group>.
        try:
            await self.consumer._inner_producer().send(self.consumer._retry_copy(msg))
        except Exception as e:
            log.warn("sendMessageBack of {msg_id} failed: {error}", msg_id=msg.msg_id, error=e)
            return False
        return True
