"""Delay levels: messages parked in SCHEDULE_TOPIC_XXXX, re-put to their real topic when due (ScheduleMessageService).

A message with ``DELAY`` = level (1..maxDelayLevel, from ``messageDelayLevel``) is stored in queue level-1 of
SCHEDULE_TOPIC_XXXX with its real topic and queue in ``REAL_TOPIC``/``REAL_QID`` and its delivery time as the
consume-queue tagsCode. Each level's queue is read in order from ``delayOffset.json``'s offset: a unit whose
time has come is re-put to the real topic (DELAY removed), and the offset advances. Units of one level are in
store order and share one delay, so the first unit not yet due ends that level's scan.

The offsets are written every ``flushDelayOffsetInterval`` and at shutdown, as Java does: a clean restart
delivers each message once; after a crash the last interval's deliveries may repeat (never go missing).

On a DLedger ledger a delivery is stored once a majority holds its entry: as Apache's service, which waits for
that commit, a level's offset moves past a delivery only then (the scan goes on meanwhile, the offset following
in order). When one fails (the leader lost its leadership, or no quorum in time), the level is delivered again
from its offset; a later delivery that was stored meanwhile is then delivered twice, never lost.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from twisted.logger import Logger

from gateway.persist import SetAside, load_with_backup, write_atomically
from gateway.remoting import fastjson
from gateway.remoting.codes import RequestCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.message import MessageConst, MessageExt, MessageSysFlag, properties_to_string
from gateway.remoting.names import SCHEDULE_TOPIC, TRANS_HALF_TOPIC
from gateway.store.api import MessageExtBrokerInner, PutMessageResult
from gateway.store.commit_log import now_ms
from gateway.store.consume_queue import BLANK_UNIT_SIZE

from .inner import inner_from_ext, look_message, put_own

if TYPE_CHECKING:
    from gateway.remoting.protocol import RemotingProtocol

    from .controller import BrokerController

log = Logger()

# Delivery polls every 100 ms, as Java's DELAY_FOR_A_WHILE.
DELIVER_INTERVAL = 0.1
_TIMER_KEYS = (MessageConst.TIMER_DELIVER_MS, MessageConst.TIMER_DELAY_SEC, MessageConst.TIMER_DELAY_MS)
_DELAYABLE = (MessageSysFlag.TRANSACTION_NOT_TYPE, MessageSysFlag.TRANSACTION_COMMIT_TYPE)


def int_property(value: str | None) -> int:
    """A numeric property, 0 when absent or malformed (a bad record must not stall a delivery queue)."""
    try:
        return int(value) if value else 0
    except ValueError:
        return 0


def handle_schedule_message(broker: BrokerController, msg: MessageExtBrokerInner, props: dict[str, str]) -> str | None:
    """Park ``msg`` if it asks for a delay level or (5.x) a delivery time (HookUtils.handleScheduleMessage).

    ``props`` are ``msg``'s properties; ``msg`` is changed in place. Returns why a timer message is refused,
    else None. A delay level wins over timer properties, which are then dropped, as in 5.x.
    """
    if MessageSysFlag.transaction_value(msg.sys_flag) not in _DELAYABLE:
        return None
    if MessageConst.DELAY_TIME_LEVEL in props:
        level = int_property(props[MessageConst.DELAY_TIME_LEVEL])
        if level > 0:
            for key in _TIMER_KEYS:
                props.pop(key, None)
            broker.schedule.transform(msg, props, level)
        return None
    if (
        (
            MessageConst.TIMER_DELIVER_MS in props
            or MessageConst.TIMER_DELAY_SEC in props
            or MessageConst.TIMER_DELAY_MS in props
        )
        and MessageConst.TIMER_OUT_MS not in props
        and broker.config.timerWheelEnable  # off: timer properties are ignored, as a 4.9 broker does
    ):
        return broker.timer.transform(msg, props)
    return None


@dataclass(slots=True)
class _Delivery:
    """A level's delivery whose commit is awaited (or, ``stored`` already, units skipped after one): the level's
    offset becomes ``next_offset`` once it and all before it are stored."""

    next_offset: int
    stored: bool = False
    dropped: bool = False


class ScheduleMessageService:
    """Delay-level queues, their delivery offsets (``config/delayOffset.json``) and the delivery scan."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        self.delay_table = broker.store_config.delay_level_table()  # ms; index level-1
        self.offset_table: dict[int, int] = {}
        # Offsets of levels outside messageDelayLevel (another configuration's): kept in the file, never used.
        self.set_aside = SetAside()
        self.path = Path(broker.store_config.storePathRootDir) / "config" / "delayOffset.json"
        self._awaiting: dict[int, deque[_Delivery]] = {}  # level -> its deliveries not yet stored, in order
        self._drops = 0  # how many times awaited deliveries were forgotten

    @property
    def max_delay_level(self) -> int:
        return len(self.delay_table)

    def handlers(self) -> dict[int, Any]:
        return {RequestCode.GET_ALL_DELAY_OFFSET: self.get_all_delay_offset}

    # -- state

    def load(self) -> None:
        """Read delayOffset.json and clamp each offset into its queue's current range (correctDelayOffset)."""
        self._drop_awaiting()
        self.offset_table, self.set_aside = load_with_backup(self.path, self.read) or ({}, SetAside())
        self.set_aside.warn(self.path)
        store = self.broker.store
        for level, offset in list(self.offset_table.items()):
            qid = level - 1
            low = store.get_min_offset_in_queue(SCHEDULE_TOPIC, qid)
            high = store.get_max_offset_in_queue(SCHEDULE_TOPIC, qid)
            self.offset_table[level] = min(max(offset, low), high)

    def replace_offsets(self, table: dict[int, int], set_aside: SetAside) -> None:
        """Take another broker's delay offsets and those it sets aside (a slave following its master: like
        Apache's, its file then holds the master's) and persist them."""
        self._drop_awaiting()
        self.offset_table, self.set_aside = dict(table), set_aside
        self.persist()

    def read(self, data: bytes) -> tuple[dict[int, int], SetAside]:
        """delayOffset.json (or GET_ALL_DELAY_OFFSET's body): the offsets of this configuration's levels, and
        the others set aside."""

        def problem(level: int, _offset: int) -> str | None:
            if 1 <= level <= self.max_delay_level:
                return None
            return f"delay level {level} is not in messageDelayLevel (1..{self.max_delay_level})"

        return SetAside.split(parse_delay_offsets(data), problem)

    def persist(self) -> None:
        write_atomically(self.path, _encode(self.set_aside.merged(self.offset_table)))

    def encode(self) -> bytes:
        """This configuration's levels and their offsets (GET_ALL_DELAY_OFFSET's body)."""
        return _encode(self.offset_table)

    def get_all_delay_offset(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        return request.response(body=self.encode())

    # -- parking

    def transform(self, msg: MessageExtBrokerInner, props: dict[str, str], level: int) -> None:
        """Move ``msg`` to its level's queue (transformDelayLevelMessage); its tagsCode is the delivery time."""
        level = min(level, self.max_delay_level)
        props[MessageConst.DELAY_TIME_LEVEL] = str(level)
        props[MessageConst.REAL_TOPIC] = msg.topic
        props[MessageConst.REAL_QUEUE_ID] = str(msg.queue_id)
        msg.properties = properties_to_string(props)
        msg.topic = SCHEDULE_TOPIC
        msg.queue_id = level - 1
        # Java computes it from the store time at dispatch; the store stamps the record within the same ms.
        msg.tags_code = now_ms() + self.delay_table[level - 1]

    # -- delivery

    def deliver(self) -> None:
        """One pass over every level: re-put what is due."""
        for level in range(1, self.max_delay_level + 1):
            try:
                self._deliver_level(level)
            except Exception:  # keep the other levels (and the next pass) going
                log.failure("delivery of delay level {delay_level} failed", delay_level=level)

    def _deliver_level(self, level: int) -> None:
        store = self.broker.store
        cq = store.consume_queue_table.get((SCHEDULE_TOPIC, level - 1))  # type: ignore[attr-defined]
        if cq is None:
            return
        awaiting = self._awaiting.get(level)
        start = awaiting[-1].next_offset if awaiting else self.offset_table.get(level, 0)
        offset = min(max(start, cq.min_offset_in_queue), cq.max_offset_in_queue)
        delay = self.delay_table[level - 1]
        drops = self._drops
        while offset < cq.max_offset_in_queue:
            unit = cq.get_unit(offset)
            if unit is None:
                break
            phy, size, deliver_at = unit
            if size == BLANK_UNIT_SIZE:  # stands for a record recovery skipped: nothing to deliver
                offset += 1
                continue
            now = now_ms()
            # A time further ahead than the level's delay (clock moved back) is due now (correctDeliverTimestamp).
            if now < deliver_at <= now + delay:
                break
            ext = look_message(store, phy)
            if ext is not None and not self._deliver(ext, level, offset + 1):
                break  # the store refused it: try again on the next pass
            if self._drops != drops:  # an awaited delivery failed meanwhile: the next pass starts over
                self._drop_awaiting(level)
                return
            offset += 1
        awaiting = self._awaiting.get(level)
        if not awaiting:
            self.offset_table[level] = offset
        elif offset > awaiting[-1].next_offset:  # units passed after the last awaited delivery
            awaiting.append(_Delivery(offset, stored=True))

    def _deliver(self, ext: MessageExt, level: int, next_offset: int) -> bool:
        """Re-put ``ext`` to its real topic; False when the store refuses it now."""
        props = dict(ext.properties)
        props.pop(MessageConst.DELAY_TIME_LEVEL, None)
        topic = props.get(MessageConst.REAL_TOPIC)
        if not topic or topic == TRANS_HALF_TOPIC:
            log.error("delayed message {id} has no deliverable real topic ({topic})", id=ext.msg_id, topic=topic)
            return True
        inner = inner_from_ext(ext, topic, int_property(props.get(MessageConst.REAL_QUEUE_ID)), props)
        delivery = _Delivery(next_offset)
        result = put_own(self.broker.store, inner, lambda put: self._settle(level, delivery, put, ext.msg_id))
        if result is None:
            self._awaiting.setdefault(level, deque()).append(delivery)
            return True
        if not result.ok:
            log.warn("delayed message {id} not delivered: {status}", id=ext.msg_id, status=result.status)
        return result.ok

    def _settle(self, level: int, delivery: _Delivery, result: PutMessageResult, msg_id: str) -> None:
        """An awaited delivery is stored, or not: move the level's offset past what is stored in order, or
        deliver the level again from its offset."""
        if delivery.dropped:
            return
        if not result.ok:
            log.warn(
                "delayed message {id} not delivered: {status}; delay level {delay_level} delivered again from "
                "queue offset {offset}",
                id=msg_id,
                status=result.status.name,
                delay_level=level,
                offset=self.offset_table.get(level, 0),
            )
            self._drop_awaiting(level)
            return
        delivery.stored = True
        awaiting = self._awaiting[level]
        while awaiting and awaiting[0].stored:
            self.offset_table[level] = awaiting.popleft().next_offset
        if not awaiting:
            del self._awaiting[level]

    def _drop_awaiting(self, level: int | None = None) -> None:
        """Forget the awaited deliveries (of one level, or all): their outcome no longer moves an offset."""
        self._drops += 1
        for lvl in [level] if level is not None else list(self._awaiting):
            for delivery in self._awaiting.pop(lvl, ()):
                delivery.dropped = True


def _encode(table: dict[int, int]) -> bytes:
    return fastjson.dumps({"offsetTable": dict(sorted(table.items()))})


def parse_delay_offsets(data: bytes) -> dict[int, int]:
    """delayOffset.json: delay level → offset in its schedule queue (a malformed file raises, and is reported)."""
    return {int(k): int(v) for k, v in (fastjson.loads(data).get("offsetTable") or {}).items()}
