"""RocketMQ 5 timer messages: delivery at a given time (TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS).

Not 5.x's timer wheel and timer log, but the same contract on the wire and in the store: the message is
parked in ``rmq_sys_wheel_timer`` queue 0 with ``TIMER_OUT_MS`` (its delivery time, also its tagsCode),
``REAL_TOPIC`` and ``REAL_QID``, and re-put to its real topic once due (with ``TIMER_DEQUEUE_MS``; the kept
``TIMER_OUT_MS`` stops it from being parked again).

A recall (RECALL_MESSAGE) parks a marker with ``TIMER_DEL_UNIQKEY`` due one millisecond after the message it
names; the marker is noted when its unit is read, so the message is dropped when due, and the marker itself is
never delivered. Both are above ``commitOffset`` until the message is due, so a restart notes the marker again.

Units of the timer queue are due in any order, so the service reads each unit once into a heap ordered by
delivery time. ``config/timerOffset.json`` holds the first queue offset not yet delivered (``commitOffset``)
and the offsets above it already delivered; a restart reloads the heap from ``commitOffset`` and skips
those. It is written every ``flushDelayOffsetInterval`` and at shutdown (see schedule.py for what a crash
may repeat). On a DLedger ledger a delivery counts (in the file, and in the checkpoint a slave copies) once a
majority holds its entry; one that fails goes back into the heap and is delivered again.
"""

from __future__ import annotations

import heapq
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Any

from twisted.logger import Logger

from gateway.persist import load_with_backup, write_atomically
from gateway.remoting import fastjson
from gateway.remoting.codes import PermName, RequestCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.message import MessageConst, MessageExt, properties_to_string
from gateway.remoting.recall_handle import timer_delete_key
from gateway.store.api import MessageExtBrokerInner, PutMessageResult
from gateway.store.commit_log import now_ms
from gateway.store.consume_queue import BLANK_UNIT_SIZE
from gateway.store.message_store import TIMER_TOPIC

from .inner import inner_from_ext, look_message, put_own
from .schedule import int_property

if TYPE_CHECKING:
    from .controller import BrokerController

log = Logger()

# TimerCheckpoint.encode: lastReadTimeMs, lastTimerLogFlushPos, lastTimerQueueOffset, masterTimerQueueOffset and
# the dataVersion's stateVersion, timestamp and counter, big-endian longs.
_CHECKPOINT = struct.Struct(">7q")


class TimerMessageService:
    """Parks timer messages and delivers them when due."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        self.path = Path(broker.store_config.storePathRootDir) / "config" / "timerOffset.json"
        self.commit_offset = 0
        self.delivered: set[int] = set()  # delivered queue offsets >= commit_offset
        self.read_offset = 0  # units below it are in ``pending`` or delivered
        self.pending: list[tuple[int, int, int]] = []  # heap of (deliver ms, queue offset, commitlog offset)
        self.awaiting: dict[int, tuple[int, int, int]] = {}  # queue offset -> its unit, delivery not yet stored
        self.last_pass_ms = 0  # when the last delivery pass read the timer queue: units due before, delivered
        self.recalled: set[str] = set()  # delete keys (topic+unique id) of recall markers not due yet

    def load(self) -> None:
        """Read timerOffset.json; the timer topic is a system topic, as in 5.x."""
        self.broker.topics.create_topic_in_send_message_back_method(
            TIMER_TOPIC, 1, PermName.PERM_READ | PermName.PERM_WRITE
        )
        self.commit_offset, delivered = load_with_backup(self.path, _parse_timer_offsets) or (0, set())
        self.read_offset = self.commit_offset
        self.delivered = {o for o in delivered if o >= self.commit_offset}
        self.pending, self.awaiting = [], {}
        self.recalled = set()

    def handlers(self) -> dict[int, Any]:
        return {RequestCode.GET_TIMER_CHECK_POINT: self.get_timer_check_point}

    def get_timer_check_point(self, channel: Any, request: RemotingCommand) -> RemotingCommand:
        """GET_TIMER_CHECK_POINT: a TimerCheckpoint whose lastReadTimeMs, as Apache's, is a time every unit due
        before has been delivered by (stored, on a DLedger ledger); its timer queue offsets are our commit offset."""
        first = [self.pending[0][0]] if self.pending else []
        due = min([self.last_pass_ms, *first, *(unit[0] for unit in self.awaiting.values())])
        body = _CHECKPOINT.pack(due, 0, self.commit_offset, self.commit_offset, 0, now_ms(), 0)
        return request.response(body=body)

    def follow_master(self, body: bytes) -> int:
        """A slave takes its master's timer checkpoint (a GET_TIMER_CHECK_POINT body, ours or Apache's): the
        units due before its lastReadTimeMs count as delivered, so that once promoted it does not deliver them
        again (checkpoints revived twice, delays repeated). Returns that time; another body size raises
        ValueError."""
        if len(body) != _CHECKPOINT.size:
            raise ValueError(f"timer checkpoint of {len(body)} bytes, not {_CHECKPOINT.size}")
        last_read_ms = _CHECKPOINT.unpack(body)[0]
        cq = self.broker.store.consume_queue_table.get((TIMER_TOPIC, 0))  # type: ignore[attr-defined]
        if cq is None:
            return last_read_ms
        before = self.commit_offset
        for offset in range(self.commit_offset, cq.max_offset_in_queue):
            unit = cq.get_unit(offset)
            if unit is None:
                break
            if unit[2] < last_read_ms:  # its delivery time (tagsCode)
                self.delivered.add(offset)
        while self.commit_offset in self.delivered:
            self.delivered.remove(self.commit_offset)
            self.commit_offset += 1
        self.read_offset, self.pending, self.awaiting = self.commit_offset, [], {}
        if self.commit_offset != before or self.delivered:
            self.persist()
        return last_read_ms

    def persist(self) -> None:
        write_atomically(
            self.path, fastjson.dumps({"commitOffset": self.commit_offset, "delivered": sorted(self.delivered)})
        )

    def transform(self, msg: MessageExtBrokerInner, props: dict[str, str]) -> str | None:
        """Park ``msg`` until its delivery time (transformTimerMessage); a refusal remark when it is illegal."""
        now = now_ms()
        try:
            if MessageConst.TIMER_DELAY_SEC in props:
                deliver_ms = now + int(props[MessageConst.TIMER_DELAY_SEC]) * 1000
            elif MessageConst.TIMER_DELAY_MS in props:
                deliver_ms = now + int(props[MessageConst.TIMER_DELAY_MS])
            else:
                deliver_ms = int(props[MessageConst.TIMER_DELIVER_MS])
        except ValueError:
            deliver_ms = None
        max_delay_ms = self.broker.config.timerMaxDelaySec * 1000
        if deliver_ms is not None and deliver_ms <= now:
            return None  # already due: an ordinary message
        if deliver_ms is None or deliver_ms - now > max_delay_ms:
            return (
                f"timer message illegal, the delay time should not be bigger than the max delay {max_delay_ms}ms; "
                "or if set del msg, the delay time should be bigger than the current time"
            )
        props[MessageConst.TIMER_OUT_MS] = str(deliver_ms)
        props[MessageConst.REAL_TOPIC] = msg.topic
        props[MessageConst.REAL_QUEUE_ID] = str(msg.queue_id)
        msg.properties = properties_to_string(props)
        msg.topic = TIMER_TOPIC
        msg.queue_id = 0
        msg.tags_code = deliver_ms
        return None

    def deliver(self) -> None:
        """Read new timer units into the heap, then re-put every message whose time has come."""
        try:
            self._deliver_due()
        except Exception:  # the next pass tries again
            log.failure("timer delivery failed")

    def _deliver_due(self) -> None:
        started = now_ms()
        store = self.broker.store
        cq = store.consume_queue_table.get((TIMER_TOPIC, 0))  # type: ignore[attr-defined]
        if cq is None:
            return
        low = cq.min_offset_in_queue
        if self.commit_offset < low:  # expired from the store: nothing left to deliver there
            self.commit_offset = self.read_offset = low
        while self.read_offset < cq.max_offset_in_queue:
            unit = cq.get_unit(self.read_offset)
            if unit is None:
                break
            if unit[1] == BLANK_UNIT_SIZE:  # stands for a record recovery skipped: done with at once
                self.delivered.add(self.read_offset)
            elif self.read_offset not in self.delivered:
                heapq.heappush(self.pending, (unit[2], self.read_offset, unit[0]))
                self._note_recall(unit[0])
            self.read_offset += 1
        if self.read_offset >= cq.max_offset_in_queue:  # what comes later was sent later: due after ``started``
            self.last_pass_ms = started
        now = now_ms()
        while self.pending and self.pending[0][0] <= now:
            unit = heapq.heappop(self.pending)
            ext = look_message(store, unit[2])
            delivered = True if ext is None else self._deliver(ext, now, unit)
            if delivered is False:
                heapq.heappush(self.pending, unit)
                break  # the store refused it: try again on the next pass
            if delivered:
                self.delivered.add(unit[1])
        self._advance()

    def _advance(self) -> None:
        while self.commit_offset in self.delivered:
            self.delivered.remove(self.commit_offset)
            self.commit_offset += 1

    def _note_recall(self, commitlog_offset: int) -> None:
        ext = look_message(self.broker.store, commitlog_offset)
        if ext is not None and MessageConst.TIMER_DEL_UNIQKEY in ext.properties:
            self.recalled.add(ext.properties[MessageConst.TIMER_DEL_UNIQKEY])

    def _deliver(self, ext: MessageExt, now: int, unit: tuple[int, int, int]) -> bool | None:
        """Re-put ``ext`` to its real topic: True when done with, False when the store refuses it now, None when
        its commit is awaited (``unit`` is then in ``awaiting``)."""
        marker = ext.properties.get(MessageConst.TIMER_DEL_UNIQKEY)
        if marker is not None:  # its message was due before it: the marker is done with
            self.recalled.discard(marker)
            return True
        real_topic = ext.properties.get(MessageConst.REAL_TOPIC, "")
        if self.recalled and timer_delete_key(real_topic, ext.uniq_key or "") in self.recalled:
            log.info("timer message {id} of {topic} recalled: not delivered", id=ext.uniq_key, topic=real_topic)
            return True
        props = dict(ext.properties)
        topic = props.pop(MessageConst.REAL_TOPIC, None)
        queue_id = int_property(props.pop(MessageConst.REAL_QUEUE_ID, None))
        if not topic:
            log.error("timer message {id} has no real topic", id=ext.msg_id)
            return True
        props[MessageConst.TIMER_DEQUEUE_MS] = str(now)
        inner = inner_from_ext(ext, topic, queue_id, props)
        result = put_own(self.broker.store, inner, lambda put: self._settle(unit, put, ext.msg_id))
        if result is None:
            self.awaiting[unit[1]] = unit
            return None
        if not result.ok:
            log.warn("timer message {id} not delivered: {status}", id=ext.msg_id, status=result.status)
        return result.ok

    def _settle(self, unit: tuple[int, int, int], result: PutMessageResult, msg_id: str) -> None:
        """An awaited delivery is stored (it counts as delivered) or not (back into the heap)."""
        if self.awaiting.get(unit[1]) is not unit:  # forgotten meanwhile (reloaded, or following a master)
            return
        del self.awaiting[unit[1]]
        if result.ok:
            self.delivered.add(unit[1])
            self._advance()
            return
        log.warn("timer message {id} not delivered: {status}; delivered again", id=msg_id, status=result.status.name)
        heapq.heappush(self.pending, unit)


def _parse_timer_offsets(data: bytes) -> tuple[int, set[int]]:
    """timerOffset.json: the commit offset and the offsets delivered past it (a malformed file raises)."""
    obj = fastjson.loads(data)
    return int(obj.get("commitOffset") or 0), {int(o) for o in obj.get("delivered") or ()}
