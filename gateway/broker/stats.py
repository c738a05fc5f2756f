"""4.x broker statistics over remoting (BrokerStatsManager): per-minute, per-hour and per-day sums, TPS and
average size of messages put and got, as VIEW_BROKER_STATS_DATA, GET_BROKER_CONSUME_STATS and mqadmin
``statsAll`` read them.

The send and pull paths only add to counters (``MessageCounts``); this service samples them every 10 s
into three short windows, as Java's StatsItem does. A window's figures run from its oldest sample to the
counters' values now, so a request sees traffic of the last seconds too (Java's lag up to one sample).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any

from gateway.remoting.names import SCHEDULE_TOPIC, TRANS_HALF_TOPIC
from gateway.remoting.rpc_latency import MESSAGE_SIZE_BUCKETS, Histograms

TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
TOPIC_PUT_SIZE = "TOPIC_PUT_SIZE"
GROUP_GET_NUMS = "GROUP_GET_NUMS"
GROUP_GET_SIZE = "GROUP_GET_SIZE"
BROKER_PUT_NUMS = "BROKER_PUT_NUMS"
BROKER_GET_NUMS = "BROKER_GET_NUMS"

SAMPLE_SECONDS = 10.0
# RocketMQ 5's message_type label, by the topic a message is stored in (the real topic of a delayed or
# transactional message is in its properties, which the counting does not read).
_MESSAGE_TYPES = {SCHEDULE_TOPIC: "delay", TRANS_HALF_TOPIC: "transaction"}
_HISTORY_SAMPLES = 181  # half an hour of 10 s samples
# (name, samples kept, sample every N ticks): a minute of 10 s samples, an hour of 10 min, a day of hours.
_WINDOWS = (("statsMinute", 7, 1), ("statsHour", 7, 60), ("statsDay", 25, 360))


def message_type(topic: str) -> str:
    """RocketMQ 5's ``message_type`` label of what is stored in ``topic``."""
    return _MESSAGE_TYPES.get(topic, "normal")


class MessageCounts:
    """Messages and bytes put per topic and pulled per (topic, group), with how many requests carried them.

    The send path pays for one dict lookup and four updates of the topic's entry: messages, bytes and its size
    histogram's bucket and sum (the histogram's count per topic is also how many puts carried the topic's
    messages)."""

    def __init__(self) -> None:
        # topic → [messages, bytes, its size histogram's bucket counts, the histogram's sum (a 1-list)]
        self._in: dict[str, list[Any]] = {}
        self.messages_out: Counter[tuple[str, str]] = Counter()
        self.bytes_out: Counter[tuple[str, str]] = Counter()
        self.pulls: Counter[tuple[str, str]] = Counter()
        # (topic, group, queue id) → the offset after the last message pulled (for inflight messages).
        self.pulled_to: dict[tuple[str, str, int], int] = {}
        # rocketmq_message_size: topic → stored record sizes, one sample a put.
        self.sizes = Histograms(MESSAGE_SIZE_BUCKETS)

    def put(self, topic: str, messages: int, size: int) -> None:
        entry = self._in.get(topic)
        if entry is None:
            entry = self._in[topic] = [0, 0, *self.sizes.entry(topic)]
        entry[0] += messages
        entry[1] += size
        average = size / messages
        entry[2][bisect_left(MESSAGE_SIZE_BUCKETS, average)] += 1
        entry[3][0] += average

    def put_totals(self) -> dict[str, tuple[int, int]]:
        """(messages, bytes) put, by topic."""
        return {topic: (entry[0], entry[1]) for topic, entry in list(self._in.items())}

    @property
    def messages_in(self) -> dict[str, int]:
        """Messages put, by topic."""
        return {topic: entry[0] for topic, entry in list(self._in.items())}

    @property
    def bytes_in(self) -> dict[str, int]:
        """Bytes put, by topic."""
        return {topic: entry[1] for topic, entry in list(self._in.items())}

    def puts(self, topic: str) -> int:
        """How many puts stored messages in ``topic``."""
        return self.sizes.count(topic)

    @property
    def total_in(self) -> int:
        return sum(entry[0] for entry in list(self._in.values()))

    @property
    def total_out(self) -> int:
        return sum(self.messages_out.values())

    def pulled(self, topic: str, group: str, queue_id: int, messages: int, size: int, next_offset: int | None) -> None:
        """Messages and bytes out; ``next_offset`` is the pull offset (None for pops, which keep no pull
        offset: their messages in flight are counted by the pop room)."""
        self.messages_out[(topic, group)] += messages
        self.bytes_out[(topic, group)] += size
        self.pulls[(topic, group)] += 1
        if next_offset is not None:
            self.pulled_to[(topic, group, queue_id)] = next_offset


@dataclass(frozen=True, slots=True)
class _Sample:
    ms: int
    value: int
    times: int


class BrokerStatsManager:
    """The stats table behind VIEW_BROKER_STATS_DATA, keyed (statsName, statsKey) as Java keys it."""

    def __init__(self, counts: MessageCounts, cluster_name: str, clock: Any) -> None:
        self.counts = counts
        self.cluster_name = cluster_name
        self.clock = clock
        self._ticks = 0
        self._windows: dict[str, dict[tuple[str, str], deque[_Sample]]] = {name: {} for name, _, _ in _WINDOWS}
        # Each window's last sample time: an item first counted after it was zero then.
        start = int(clock.seconds() * 1000)
        self._last_ms = {name: start for name, _, _ in _WINDOWS}
        # (ms, messages put, messages got) at each sample, for the console's throughput chart.
        self.history: deque[tuple[int, int, int]] = deque(maxlen=_HISTORY_SAMPLES)

    def current(self) -> dict[tuple[str, str], tuple[int, int]]:
        """(statsName, statsKey) → (value, times) now."""
        c = self.counts
        table: dict[tuple[str, str], tuple[int, int]] = {}
        put_n = put_t = get_n = get_t = 0
        for topic, (n, size) in c.put_totals().items():
            times = c.puts(topic)
            table[(TOPIC_PUT_NUMS, topic)] = (n, times)
            table[(TOPIC_PUT_SIZE, topic)] = (size, times)
            put_n += n
            put_t += times
        for (topic, group), n in c.messages_out.items():
            key = f"{topic}@{group}"
            times = c.pulls[(topic, group)]
            table[(GROUP_GET_NUMS, key)] = (n, times)
            table[(GROUP_GET_SIZE, key)] = (c.bytes_out[(topic, group)], times)
            get_n += n
            get_t += times
        table[(BROKER_PUT_NUMS, self.cluster_name)] = (put_n, put_t)
        table[(BROKER_GET_NUMS, self.cluster_name)] = (get_n, get_t)
        return table

    def sample(self) -> None:
        """Take one sample (the broker calls this every ``SAMPLE_SECONDS``)."""
        now = int(self.clock.seconds() * 1000)
        table = self.current()
        for name, keep, every in _WINDOWS:
            if self._ticks % every:
                continue
            window = self._windows[name]
            for key, (value, times) in table.items():
                samples = window.get(key)
                if samples is None:
                    samples = window[key] = deque([_Sample(self._last_ms[name], 0, 0)], maxlen=keep)
                samples.append(_Sample(now, value, times))
            self._last_ms[name] = now
        put = table[(BROKER_PUT_NUMS, self.cluster_name)][0]
        got = table[(BROKER_GET_NUMS, self.cluster_name)][0]
        self.history.append((now, put, got))
        self._ticks += 1

    def stats_data(self, name: str, key: str) -> dict[str, Any] | None:
        """BrokerStatsData (statsMinute, statsHour, statsDay of sum, tps, avgpt), or None if not kept."""
        now_value = self.current().get((name, key))
        if now_value is None:
            return None
        now = _Sample(int(self.clock.seconds() * 1000), *now_value)
        out = {}
        for window_name, _, _ in _WINDOWS:
            samples = self._windows[window_name].get((name, key))
            first = samples[0] if samples else _Sample(self._last_ms[window_name], 0, 0)
            out[window_name] = _item(first, now)
        return out

    def tps(self, name: str, key: str) -> float:
        """The last minute's TPS of one item (tpsGroupGetNums and the like), 0.0 if not kept."""
        data = self.stats_data(name, key)
        return data["statsMinute"]["tps"] if data else 0.0


def _item(first: _Sample, last: _Sample) -> dict[str, Any]:
    """Java's StatsItem.computeStatsData: sum, tps and average per call between two samples."""
    total = last.value - first.value
    times = last.times - first.times
    ms = last.ms - first.ms
    return {
        "avgpt": total / times if times else 0.0,
        "sum": total,
        "tps": total * 1000.0 / ms if ms else 0.0,
    }
