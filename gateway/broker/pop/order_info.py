"""Orderly POP's per-queue state (Apache's offset.ConsumerOrderInfoManager and ConsumerOrderInfoLockManager).

An orderly pop of a queue records the queue offsets it handed out (an :class:`OrderInfo` per topic, group and
queue). Until each of them is acked (committed) or its invisible time has passed, the queue is blocked: the
next orderly pop of that group skips it. A batch that comes back after its invisible time carries the same
offsets, each with its consumed count one higher. Acks commit in order: the group's offset moves to the first
offset not yet acked. Kept in config/consumerOrderInfo.json in Apache's JSON; a slave does not copy it (as
Apache's SlaveSynchronize).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from gateway.persist import load_with_backup, write_atomically
from gateway.remoting import fastjson
from gateway.remoting.names import check_group, check_topic

log = Logger()

# An order info not popped or acked for a day is dropped when the file is written (CLEAN_SPAN_FROM_LAST).
CLEAN_SPAN_FROM_LAST = 24 * 3600 * 1000
# commitOffsetBit is a Java long: one bit per offset of a batch.
MAX_BATCH = 64
# commitAndNext's answers that are not offsets.
ILLEGAL = -1
NO_NEED_COMMIT = -2


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"expected an integer, got {value!r}")
    return int(value)


def _long_map(value: Any) -> dict[int, int] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"expected an object, got {value!r}")
    return {_int(k): _int(v) for k, v in value.items()}


@dataclass(slots=True)
class OrderInfo:
    """The last orderly batch of one queue: ``offset_list[0]`` is its first queue offset, ``offset_list[i]``
    (i > 0) the distance of the i-th from it; bit i of ``commit_offset_bit`` says the i-th was acked."""

    pop_time: int
    invisible_time: int | None
    offset_list: list[int]
    last_consume_timestamp: int
    commit_offset_bit: int = 0
    attempt_id: str | None = None
    offset_next_visible_time: dict[int, int] | None = None
    offset_consumed_count: dict[int, int] | None = None

    @staticmethod
    def build_offset_list(queue_offsets: list[int]) -> list[int]:
        first = queue_offsets[0]
        return [first, *(o - first for o in queue_offsets[1:])]

    def queue_offset(self, index: int) -> int:
        return self.offset_list[0] + (self.offset_list[index] if index else 0)

    def queue_offsets(self) -> list[int]:
        return [self.queue_offset(i) for i in range(len(self.offset_list))]

    def is_not_ack(self, index: int) -> bool:
        return not self.commit_offset_bit & (1 << index)

    def _next_visible_time(self, index: int) -> int:
        assert self.invisible_time is not None
        times = self.offset_next_visible_time
        at = times.get(self.queue_offset(index)) if times else None
        return self.pop_time + self.invisible_time if at is None else at

    def need_block(self, attempt_id: str | None, current_invisible_time: int, now: int) -> bool:
        """Whether an offset of the batch is neither acked nor visible again; a retry of the same pop attempt
        (same ``attempt_id``) is never blocked."""
        if not self.offset_list or (self.attempt_id is not None and self.attempt_id == attempt_id):
            return False
        if self.invisible_time is None or self.invisible_time <= 0:
            self.invisible_time = current_invisible_time
        return any(self.is_not_ack(i) and now < self._next_visible_time(i) for i in range(len(self.offset_list)))

    def lock_free_timestamp(self, now: int) -> int | None:
        """When the queue stops being blocked: the next visible time of the first offset still unacked and
        invisible, ``now`` when none is, None when unknown."""
        if not self.offset_list:
            return None
        for i in range(len(self.offset_list)):
            if self.is_not_ack(i):
                if self.invisible_time is None or self.invisible_time <= 0:
                    return None
                at = self._next_visible_time(i)
                if now < at:
                    return at
        return now

    def next_offset(self) -> int:
        """The first offset not acked, or the one after the batch once all are."""
        if not self.offset_list:
            return NO_NEED_COMMIT
        for i in range(len(self.offset_list)):
            if self.is_not_ack(i):
                return self.queue_offset(i)
        return self.queue_offset(len(self.offset_list) - 1) + 1

    def merge_offset_consumed_count(self, prev: OrderInfo) -> None:
        """Offsets popped again count one more consumption than in ``prev``; a retried attempt keeps them."""
        prev_counts = prev.offset_consumed_count or {}
        if prev.attempt_id is not None and prev.attempt_id == self.attempt_id:
            self.offset_consumed_count = prev_counts
            return
        before = set(prev.queue_offsets())
        self.offset_consumed_count = {o: prev_counts.get(o, 0) + 1 for o in self.queue_offsets() if o in before}

    def to_json(self) -> dict[str, Any]:
        # fastjson's property names (@JSONField), in its alphabetical order; nulls left out.
        return {
            "a": self.attempt_id,
            "cm": self.commit_offset_bit,
            "i": self.invisible_time,
            "l": self.last_consume_timestamp,
            "o": self.offset_list,
            "oc": self.offset_consumed_count,
            "ot": self.offset_next_visible_time,
            "popTime": self.pop_time,
        }

    @classmethod
    def from_json(cls, obj: Any) -> OrderInfo:
        if not isinstance(obj, dict):
            raise ValueError(f"expected an object, got {obj!r}")
        offsets = obj.get("o") or []
        if not isinstance(offsets, list) or len(offsets) > MAX_BATCH:
            raise ValueError(f"bad offset list {offsets!r}")
        attempt = obj.get("a")
        invisible = obj.get("i")
        return cls(
            pop_time=_int(obj.get("popTime", 0)),
            invisible_time=None if invisible is None else _int(invisible),
            offset_list=[_int(o) for o in offsets],
            last_consume_timestamp=_int(obj.get("l", 0)),
            commit_offset_bit=_int(obj.get("cm", 0)),
            attempt_id=None if attempt is None else str(attempt),
            offset_next_visible_time=_long_map(obj.get("ot")),
            offset_consumed_count=_long_map(obj.get("oc")),
        )


def _split_key(key: str) -> tuple[str, str]:
    topic, _, group = key.partition("@")
    return topic, group


class ConsumerOrderInfoManager:
    """consumerOrderInfo.json: ``topic@group`` → queue id → :class:`OrderInfo`, and a wake-up per queue when
    its lock frees (``on_lock_free(topic, group, queue_id)``, with ``enableNotifyAfterPopOrderLockRelease``)."""

    def __init__(
        self,
        config_dir: Path,
        clock: IReactorTime,
        topic_read_queue_nums: Callable[[str], int | None] = lambda topic: None,
        group_exists: Callable[[str], bool] = lambda group: True,
        notify_lock_free: Callable[[], bool] = lambda: True,
    ) -> None:
        """``topic_read_queue_nums`` (None for an unknown topic) and ``group_exists`` decide what the
        periodic clean keeps, as Apache's autoClean."""
        self.path = config_dir / "consumerOrderInfo.json"
        self.clock = clock
        self.table: dict[str, dict[int, OrderInfo]] = {}
        self.on_lock_free: Callable[[str, str, int], None] | None = None
        self._read_queue_nums = topic_read_queue_nums
        self._group_exists = group_exists
        self._notify_lock_free = notify_lock_free
        self._lock_free_calls: dict[tuple[str, str, int], IDelayedCall] = {}
        self._dirty = False

    def now(self) -> int:
        return int(self.clock.seconds() * 1000)

    def get(self, topic: str, group: str, queue_id: int) -> OrderInfo | None:
        return self.table.get(f"{topic}@{group}", {}).get(queue_id)

    def update(
        self,
        attempt_id: str | None,
        topic: str,
        group: str,
        queue_id: int,
        pop_time: int,
        invisible_time: int,
        queue_offsets: list[int],
    ) -> tuple[dict[int, int], int]:
        """Record an orderly batch of ``queue_offsets`` (at most :data:`MAX_BATCH`) popped at ``pop_time``;
        returns each offset's consumed count (those above 0) and the least over the batch (what the queue's
        ``orderCountInfo`` entries carry)."""
        if not queue_offsets or len(queue_offsets) > MAX_BATCH:
            raise ValueError(f"an orderly batch has 1 to {MAX_BATCH} offsets, not {len(queue_offsets)}")
        queues = self.table.setdefault(f"{topic}@{group}", {})
        info = OrderInfo(pop_time, invisible_time, OrderInfo.build_offset_list(queue_offsets), self.now())
        info.attempt_id = attempt_id
        prev = queues.get(queue_id)
        if prev is not None:
            info.merge_offset_consumed_count(prev)
        queues[queue_id] = info
        self._dirty = True
        counts = info.offset_consumed_count or {}
        least = min(counts.values()) if counts and len(counts) == len(info.offset_list) else 0
        self._schedule_lock_free(topic, group, queue_id, info)
        return dict(counts), least

    def check_block(self, attempt_id: str | None, topic: str, group: str, queue_id: int, invisible_time: int) -> bool:
        """Whether the queue's last batch still holds it (checkBlock)."""
        info = self.get(topic, group, queue_id)
        return info is not None and info.need_block(attempt_id, invisible_time, self.now())

    def commit_and_next(self, topic: str, group: str, queue_id: int, queue_offset: int, pop_time: int) -> int:
        """Mark ``queue_offset`` of the batch popped at ``pop_time`` acked; the offset the group may commit now,
        :data:`ILLEGAL` for an offset not in the batch, :data:`NO_NEED_COMMIT` for an older batch's ack."""
        key = f"{topic}@{group}"
        queues = self.table.get(key)
        info = queues.get(queue_id) if queues is not None else None
        if info is None:
            if queues is not None:
                log.warn("OrderInfo is null, {key}, {offset}", key=key, offset=queue_offset)
            return queue_offset + 1
        if not info.offset_list:
            log.warn("OrderInfo is empty, {key}, {offset}, {info}", key=key, offset=queue_offset, info=info)
            return ILLEGAL
        if pop_time != info.pop_time:
            log.warn(
                "popTime is not equal to orderInfo saved. key: {key}, offset: {offset}, orderInfo: {info}, "
                "popTime: {pop_time}",
                key=key,
                offset=queue_offset,
                info=info,
                pop_time=pop_time,
            )
            return NO_NEED_COMMIT
        offsets = info.queue_offsets()
        if queue_offset not in offsets:
            log.warn(
                "OrderInfo not found commit offset, {key}, {offset}, {info}", key=key, offset=queue_offset, info=info
            )
            return ILLEGAL
        info.commit_offset_bit |= 1 << offsets.index(queue_offset)
        self._dirty = True
        self._schedule_lock_free(topic, group, queue_id, info)
        return info.next_offset()

    def clear_block(self, topic: str, group: str, queue_id: int) -> None:
        """Forget the queue's last batch (its offset was reset): the next orderly pop is not held by it."""
        queues = self.table.get(f"{topic}@{group}")
        if queues is not None and queues.pop(queue_id, None) is not None:
            self._dirty = True
        call = self._lock_free_calls.pop((topic, group, queue_id), None)
        if call is not None and call.active():
            call.cancel()

    def update_next_visible_time(
        self, topic: str, group: str, queue_id: int, queue_offset: int, pop_time: int, next_visible_time: int
    ) -> None:
        """CHANGE_INVISIBLETIME of an orderly message: ``queue_offset`` is hidden until ``next_visible_time``."""
        key = f"{topic}@{group}"
        info = self.get(topic, group, queue_id)
        if info is None:
            log.warn("orderInfo is null, key: {key}, queueOffset: {offset}", key=key, offset=queue_offset)
            return
        if pop_time != info.pop_time:
            log.warn(
                "popTime is not equal to orderInfo saved. key: {key}, queueOffset: {offset}, popTime: {pop_time}",
                key=key,
                offset=queue_offset,
                pop_time=pop_time,
            )
            return
        if info.offset_next_visible_time is None:
            info.offset_next_visible_time = {}
        info.offset_next_visible_time[queue_offset] = next_visible_time
        self._dirty = True
        self._schedule_lock_free(topic, group, queue_id, info)

    # -- lock release notification (ConsumerOrderInfoLockManager)

    def _schedule_lock_free(self, topic: str, group: str, queue_id: int, info: OrderInfo) -> None:
        if not self._notify_lock_free():
            return
        at = info.lock_free_timestamp(self.now())
        if at is None:
            return
        key = (topic, group, queue_id)
        old = self._lock_free_calls.pop(key, None)
        if old is not None and old.active():
            old.cancel()
        delay = max(at - self.now(), 0) / 1000.0
        self._lock_free_calls[key] = self.clock.callLater(delay, self._lock_freed, key)

    def _lock_freed(self, key: tuple[str, str, int]) -> None:
        del self._lock_free_calls[key]
        if self.on_lock_free is not None and self._notify_lock_free():
            self.on_lock_free(*key)

    def shutdown(self) -> None:
        """Cancel the pending lock release notifications."""
        for call in self._lock_free_calls.values():
            if call.active():
                call.cancel()
        self._lock_free_calls.clear()

    # -- persistence

    def auto_clean(self) -> None:
        """Drop the entries of topics or groups that no longer exist, of queues the topic no longer reads, and
        those untouched for :data:`CLEAN_SPAN_FROM_LAST` (autoClean)."""
        now = self.now()
        for key in list(self.table):
            topic, group = _split_key(key)
            read_queues = self._read_queue_nums(topic)
            queues = self.table[key]
            if read_queues is None:
                log.info("Topic not exist, Clean order info, {key}:{queues}", key=key, queues=queues)
            elif not self._group_exists(group):
                log.info("Group not exist, Clean order info, {key}:{queues}", key=key, queues=queues)
            elif not queues:
                log.info("Order table is empty, Clean order info, {key}:{queues}", key=key, queues=queues)
            else:
                for queue_id in list(queues):
                    if queue_id >= read_queues:
                        log.info("Queue not exist, Clean order info, {key}:{queue_id}", key=key, queue_id=queue_id)
                        del queues[queue_id]
                    elif now - queues[queue_id].last_consume_timestamp > CLEAN_SPAN_FROM_LAST:
                        log.info(
                            "Not consume long time, Clean order info, {key}:{queue_id}", key=key, queue_id=queue_id
                        )
                        del queues[queue_id]
                continue
            del self.table[key]

    def encode(self) -> bytes:
        self.auto_clean()
        return fastjson.dumps({"table": self.table})

    @staticmethod
    def read(data: bytes) -> dict[str, dict[int, OrderInfo]]:
        """consumerOrderInfo.json's table; names are checked, a malformed entry raises."""
        table = fastjson.loads(data).get("table") or {}
        out: dict[str, dict[int, OrderInfo]] = {}
        for key, queues in table.items():
            topic, group = _split_key(str(key))
            check_topic(topic)
            check_group(group)
            out[f"{topic}@{group}"] = {_int(q): OrderInfo.from_json(info) for q, info in dict(queues).items()}
        return out

    def load(self) -> None:
        """Read the file, and schedule the lock release of every queue still blocked (recover)."""
        loaded = load_with_backup(self.path, self.read)
        if loaded is None:
            return
        self.table = loaded
        now = self.now()
        for key, queues in loaded.items():
            topic, group = _split_key(key)
            for queue_id, info in queues.items():
                at = info.lock_free_timestamp(now)
                if at is not None and at > now:
                    self._schedule_lock_free(topic, group, queue_id, info)

    def persist(self) -> None:
        write_atomically(self.path, self.encode())
        self._dirty = False

    def persist_if_dirty(self) -> None:
        if self._dirty:
            self.persist()
