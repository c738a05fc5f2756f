"""PopReviveService: reads the revive queues, pairs acks with their checkpoints and re-puts, once a
checkpoint's invisible time has passed, every message of it still unacknowledged into the pop retry topic
with its reconsume times + 1.

Each revive queue is read in order from the revive group's committed offset (``CID_RMQ_SYS_REVIVE_GROUP`` in
consumerOffset.json, copied by slaves like any offset). A checkpoint is revived once the newest delivery
time seen (or, at the queue's end, the clock) is more than two seconds past its revive time, so its acks,
delivered at the revive time itself, are in. Checkpoints are revived in queue order and the offset of the
last one revived is committed: after a restart the queue is read again from there, which finds the
checkpoints still pending and their acks.

On a DLedger ledger a re-put is stored once a majority holds its entry: a checkpoint's offset is committed only
once every re-put of it (or the checkpoint put again for one that failed) is stored, in queue order. When one
is not, nothing of that queue is committed past it any more: a new master (or a restart) revives from there.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from gateway.remoting.extra_info import PopRecordError, parse_normal_topic, pop_retry_topic
from gateway.remoting.message import MessageConst, MessageExt, RecordError, decode_records
from gateway.remoting.names import RETRY_GROUP_TOPIC_PREFIX
from gateway.store.api import GetMessageStatus, PutMessageResult
from gateway.store.commit_log import now_ms

from ..inner import inner_from_ext, when_put
from .records import (
    ACK_TAG,
    ACK_TIME_INTERVAL,
    BATCH_ACK_TAG,
    CK_TAG,
    PROPERTY_FIRST_POP_TIME,
    REVIVE_GROUP,
    SECOND,
    AckMsg,
    PopCheckPoint,
)

if TYPE_CHECKING:
    from ..controller import BrokerController
    from .service import PopService

log = Logger()

# Read per revive queue and pass, so one pass never holds the reactor long (Apache reads 32 at a time too).
_BATCH = 32
_MAX_BATCHES_PER_PASS = 8
# Checkpoints held per revive queue while they wait for their time, so memory stays bounded whatever the
# clients' invisible times: past it, later checkpoints are passed over (reading goes on, for the delivery times
# that make the held ones due) and read again from the first of them once some are revived.
MAX_PENDING = 100_000
# PopReviveService.ckRewriteIntervalsInSeconds: the extra wait of a checkpoint whose revival failed.
_CK_REWRITE_INTERVALS = (10, 20, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)


@dataclass(slots=True)
class _Revived:
    """A revived checkpoint whose re-puts await their commit: its offset is committed once none is left."""

    offset: int
    left: int


@dataclass(slots=True)
class _ReviveQueue:
    """What one revive queue has read and not yet revived."""

    queue_id: int
    next_offset: int  # the next revive-queue offset to read
    checkpoints: dict[str, PopCheckPoint] = field(default_factory=dict)
    end_time: int = 0  # the latest delivery time read
    # While the queue has no checkpoints, passes skipped before the next read (reviveMaxSlow).
    slow: int = 1
    skip: int = 0
    # The offset of the first checkpoint passed over at MAX_PENDING, to read again from.
    rewind: int | None = None
    # Revived checkpoints, in queue order, not yet committed; stuck once a re-put of one was not stored.
    revived: deque[_Revived] = field(default_factory=deque)
    stuck: bool = False


class PopReviveService:
    """One pass over every revive queue per ``reviveInterval`` (run by a master only)."""

    def __init__(self, broker: BrokerController, pop: PopService) -> None:
        self.broker = broker
        self.pop = pop
        self.queues: list[_ReviveQueue] = []

    def start(self) -> None:
        """Begin (again) at each revive queue's committed offset: a new master takes over from the old one."""
        offsets = self.broker.offsets
        topic = self.pop.revive_topic
        self.queues = [
            _ReviveQueue(qid, offsets.query_offset(REVIVE_GROUP, topic, qid) + 1)
            for qid in range(self.broker.config.reviveQueueNum)
        ]

    def revive(self) -> None:
        """One pass: read what each revive queue has new, then revive the checkpoints that are due."""
        for queue in self.queues:
            if queue.skip > 0:
                queue.skip -= 1
                continue
            try:
                self._read(queue)
                self._revive_due(queue)
                if queue.checkpoints:
                    queue.slow = 1
                else:  # idle: read less often, up to reviveMaxSlow passes apart
                    queue.skip = queue.slow
                    queue.slow = min(queue.slow + 1, self.broker.config.reviveMaxSlow)
            except Exception:  # the next pass tries again
                log.failure("reviveQueueId={qid}, revive error", qid=queue.queue_id)

    # -- reading

    def _read(self, queue: _ReviveQueue) -> None:
        store = self.broker.store
        topic = self.pop.revive_topic
        at_end = False
        for _ in range(_MAX_BATCHES_PER_PASS):
            result = store.get_message(REVIVE_GROUP, topic, queue.queue_id, queue.next_offset, _BATCH)
            if result is None:
                return
            if result.status is not GetMessageStatus.FOUND:
                if result.status in (GetMessageStatus.OFFSET_TOO_SMALL, GetMessageStatus.OFFSET_OVERFLOW_BADLY):
                    log.warn(
                        "reviveQueueId={qid}, offset {offset} illegal, moving to {next}",
                        qid=queue.queue_id,
                        offset=queue.next_offset,
                        next=result.next_begin_offset,
                    )
                    queue.next_offset = result.next_begin_offset
                    continue
                at_end = True
                break
            for record in result.buffers:
                try:
                    (ext,) = decode_records(record)
                except (RecordError, ValueError):
                    continue
                self._take(queue, ext)
            queue.next_offset = result.next_begin_offset
            if result.next_begin_offset >= result.max_offset:
                at_end = True
                break
        if at_end:
            # Everything due is in (the timer service delivers as it falls due): the clock is the end time.
            queue.end_time = max(queue.end_time, now_ms())

    def _take(self, queue: _ReviveQueue, ext: MessageExt) -> None:
        tag = ext.tags
        try:
            if tag == CK_TAG:
                ck = PopCheckPoint.decode(ext.body)
                self.pop.revive_get[(ck.cid, ck.topic, queue.queue_id, "CK")] += 1
                if len(queue.checkpoints) >= MAX_PENDING:
                    if queue.rewind is None:
                        queue.rewind = ext.queue_offset
                elif ck.topic and ck.cid:
                    ck.revive_offset = ext.queue_offset
                    queue.checkpoints[ck.merge_key] = ck
            elif tag in (ACK_TAG, BATCH_ACK_TAG):
                ack = AckMsg.decode(ext.body, batch=tag == BATCH_ACK_TAG)
                self.pop.revive_get[(ack.consumer_group, ack.topic, queue.queue_id, "ACK")] += 1
                point = queue.checkpoints.get(ack.merge_key(self.broker.config.brokerName))
                if point is not None:  # an ack of a checkpoint already revived (or unknown) is skipped
                    for offset in ack.ack_offset_list if ack.ack_offset_list is not None else (ack.ack_offset,):
                        index = point.index_of_ack(offset)
                        if index > -1:
                            point.bit_map |= 1 << index
                        else:
                            log.error("invalid ack index, {ack}, {ck}", ack=ack, ck=point)
        except PopRecordError as e:
            log.error("reviveQueueId={qid}, bad {tag} record: {error}", qid=queue.queue_id, tag=tag, error=e)
        deliver = ext.properties.get(MessageConst.TIMER_DELIVER_MS)
        deliver_time = int(deliver) if deliver and deliver.isdigit() else ext.store_timestamp
        queue.end_time = max(queue.end_time, deliver_time)

    # -- reviving

    def _revive_due(self, queue: _ReviveQueue) -> None:
        broker = self.broker
        for ck in sorted(queue.checkpoints.values(), key=lambda c: c.revive_offset):
            if queue.end_time - ck.revive_time <= ACK_TIME_INTERVAL + SECOND:
                break
            del queue.checkpoints[ck.merge_key]
            revived = _Revived(ck.revive_offset, 0)
            queue.revived.append(revived)
            if broker.topics.select(parse_normal_topic(ck.topic, ck.cid)) is None:
                log.warn("reviveQueueId={qid}, can not get normal topic {topic}", qid=queue.queue_id, topic=ck.topic)
                continue
            if broker.groups.find(ck.cid) is None:
                log.warn("reviveQueueId={qid}, can not get cid {cid}", qid=queue.queue_id, cid=ck.cid)
                continue
            awaited = self._revive_checkpoint(queue, ck)
            revived.left = len(awaited)
            for stored in awaited:
                stored.addCallback(self._re_put_stored, queue, revived)
        self._commit(queue)
        if queue.rewind is not None and len(queue.checkpoints) < MAX_PENDING:
            queue.next_offset, queue.rewind = queue.rewind, None

    def _re_put_stored(self, stored: bool, queue: _ReviveQueue, revived: _Revived) -> None:
        if not stored and not queue.stuck:
            queue.stuck = True
            log.warn(
                "reviveQueueId={qid}, a re-put of the checkpoint at offset {offset} was not stored: its offset is "
                "no longer committed, a new master revives from the last committed one",
                qid=queue.queue_id,
                offset=revived.offset,
            )
        revived.left -= 1
        self._commit(queue)

    def _commit(self, queue: _ReviveQueue) -> None:
        """Commit the revive offset of the checkpoints revived in order whose re-puts are all stored."""
        if queue.stuck or not any(q is queue for q in self.queues):  # or started again since (a new master)
            return
        committed = None
        while queue.revived and queue.revived[0].left == 0:
            committed = queue.revived.popleft().offset
        if committed is not None:
            self.broker.offsets.commit_offset(REVIVE_GROUP, self.pop.revive_topic, queue.queue_id, committed)

    def _revive_checkpoint(self, queue: _ReviveQueue, ck: PopCheckPoint) -> list[Deferred[bool]]:
        """Re-put every unacknowledged message of ``ck`` (or a checkpoint of it when that fails); returns the
        outcomes whose commit is awaited."""
        awaited: list[Deferred[bool]] = []
        for index in range(ck.num):
            if ck.bit_map >> index & 1:
                continue
            offset = ck.ack_offset_by_index(index)
            ext = self._business_message(ck, offset)
            if ext is None:  # gone from the store (expired, or never there): nothing to revive
                log.info(
                    "reviveQueueId={qid}, no message for {ck} at {offset}", qid=queue.queue_id, ck=ck, offset=offset
                )
                continue
            retried = self._revive_retry(ck, ext)
            if isinstance(retried, Deferred):
                # Not stored: a checkpoint of it instead, as when the store refuses it at once.
                awaited.append(retried.addCallback(lambda ok, at=offset: ok or self._re_put_checkpoint(queue, ck, at)))
            elif not retried and isinstance(put := self._re_put_checkpoint(queue, ck, offset), Deferred):
                awaited.append(put)
        return awaited

    def _business_message(self, ck: PopCheckPoint, offset: int) -> MessageExt | None:
        result = self.broker.store.get_message(ck.cid, ck.topic, ck.queue_id, offset, 1)
        if result is None or result.status is not GetMessageStatus.FOUND or not result.buffers:
            return None
        try:
            (ext,) = decode_records(result.buffers[0])
        except (RecordError, ValueError):
            return None
        return ext if ext.queue_offset == offset else None

    def _revive_retry(self, ck: PopCheckPoint, ext: MessageExt) -> bool | Deferred[bool]:
        """reviveRetry: the message again, in the pop retry topic's queue 0, one more reconsume time; whether it
        is stored (on a DLedger ledger, a Deferred of it)."""
        broker = self.broker
        topic = ck.topic if ck.topic.startswith(RETRY_GROUP_TOPIC_PREFIX) else pop_retry_topic(ck.topic, ck.cid)
        props = dict(ext.properties)
        if ext.reconsume_times == 0 or PROPERTY_FIRST_POP_TIME not in props:
            props[PROPERTY_FIRST_POP_TIME] = str(ck.pop_time)
        msg = inner_from_ext(ext, topic, 0, props, reconsume_times=ext.reconsume_times + 1)
        msg.born_host = msg.store_host = broker.store_host
        self.pop.add_retry_topic_if_not_exist(topic, ck.cid)
        return when_put(broker.store.put_message(msg), lambda result: self._retried(result, ck, ext, topic))

    def _retried(self, result: PutMessageResult, ck: PopCheckPoint, ext: MessageExt, topic: str) -> bool:
        self.pop.revive_retry[(ck.cid, ck.topic, result.status.name)] += 1
        if not result.ok:
            log.error(
                "reviveQueueId={qid}, revive error, msg is: {topic} {offset}",
                qid=ck,
                topic=topic,
                offset=ext.queue_offset,
            )
            return False
        self.pop.inflight.decrement(ck.topic, ck.cid, ck.pop_time, ck.queue_id, 1)
        return True

    def _re_put_checkpoint(self, queue: _ReviveQueue, old: PopCheckPoint, offset: int) -> bool | Deferred[bool]:
        """rePutCK: a checkpoint of the one message that could not be revived, due again a while later."""
        times = old.parse_re_put_times()
        invisible = old.invisible_time
        if old.revive_time <= now_ms():
            invisible += _CK_REWRITE_INTERVALS[min(times, len(_CK_REWRITE_INTERVALS) - 1)] * 1000
        ck = PopCheckPoint(
            start_offset=offset,
            pop_time=old.pop_time,
            invisible_time=invisible,
            bit_map=0,
            num=1,
            queue_id=old.queue_id,
            topic=old.topic,
            cid=old.cid,
            queue_offset_diff=[0],
            broker_name=old.broker_name,
            re_put_times=str(times + 1),
        )
        return self.pop.append_checkpoint(ck, queue.queue_id)
