"""Charts of topic and group TPS and lag: a sampler that asks the cluster every 10 s and keeps the last hours in
memory, and the page that draws them as SVG (server-side; a small script only reloads them)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from twisted.internet.defer import Deferred, succeed

from gateway.admin.cli import Session
from gateway.pool_loop import PoolLoop
from gateway.remoting.names import is_system_group

from .routes import Rendered, View, page
from .settings import ConsoleSettings
from .topic_pages import reserved_topics, topic_kind

SAMPLE_SECONDS = 10.0
# Series kept: past these, new topics or groups are not tracked (the page says how many were left out).
MAX_TOPICS = 200
MAX_GROUPS = 200


@dataclass
class Series:
    """(time in s, value) points of one figure, the oldest dropped past ``maxlen``."""

    points: deque[tuple[float, float]]

    def add(self, when: float, value: float) -> None:
        self.points.append((when, value))

    @property
    def last(self) -> float | None:
        return self.points[-1][1] if self.points else None


@dataclass
class Sampler:
    """Every ``interval`` seconds, in a pool thread with its own mqadmin session (never on the reactor, one
    sample at a time): each topic's put TPS (from its queues' max offsets), each group's consume TPS and lag
    (GET_BROKER_CONSUME_STATS of every master)."""

    settings: ConsoleSettings
    reactor: Any
    interval: float = SAMPLE_SECONDS
    topic_tps: dict[str, Series] = field(default_factory=dict)
    group_tps: dict[str, Series] = field(default_factory=dict)
    group_lag: dict[str, Series] = field(default_factory=dict)
    left_out: int = 0
    _max_offsets: dict[str, tuple[float, int]] = field(default_factory=dict)
    _loop: PoolLoop | None = None
    _admin: Session | None = None

    @property
    def maxlen(self) -> int:
        return max(int(self.settings.history_hours * 3600 / self.interval), 2)

    def start(self) -> None:
        self._loop = PoolLoop(self.reactor, self.interval, self.sample, "console chart sample")
        self._loop.start(now=True)

    def stop(self) -> Deferred[None]:
        """No more samples; fires once the one in progress has ended and the session is closed."""
        stopped = self._loop.stop() if self._loop is not None else succeed(None)
        return stopped.addCallback(lambda _: self._admin.close() if self._admin is not None else None)

    def sample(self) -> None:
        """Read the cluster once (blocking) and add a point to each series."""
        if self._admin is None:
            self._admin = self.settings.session()
        admin = self._admin
        admin.errors.clear()
        now = time.time()
        masters = admin.master_addrs()
        reserved = reserved_topics(admin.cluster_info())
        topics = [t for t in admin.topic_list() if topic_kind(t, reserved) == "normal"]
        _forget(self.topic_tps, self._max_offsets, keep=set(topics))  # deleted topics free their places
        for topic in topics:
            total = 0
            with admin.part():
                for addr in admin.route_masters(topic).values():
                    total += sum(row["maxOffset"] for row in admin.topic_stats(addr, topic).values())
                before = self._max_offsets.get(topic)
                self._max_offsets[topic] = (now, total)
                if before is not None and now > before[0]:
                    self._add(self.topic_tps, topic, now, max(total - before[1], 0) / (now - before[0]), MAX_TOPICS)
        tps: dict[str, float] = {}
        lag: dict[str, float] = {}
        for addr in masters.values():
            with admin.part():
                for entry in admin.broker_consume_stats(addr).get("consumeStatsList", []):
                    for group, stats_list in entry.items():
                        if is_system_group(group):
                            continue
                        for stats in stats_list:
                            tps[group] = tps.get(group, 0.0) + stats.get("consumeTps", 0.0)
                            rows = stats.get("offsetTable", {}).values()
                            lag[group] = lag.get(group, 0) + sum(r["brokerOffset"] - r["consumerOffset"] for r in rows)
        if not admin.errors:  # a broker that did not answer does not make its groups vanish
            _forget(self.group_tps, self.group_lag, keep=set(tps))
        for group in tps:
            self._add(self.group_tps, group, now, tps[group], MAX_GROUPS)
            self._add(self.group_lag, group, now, lag[group], MAX_GROUPS)

    def _add(self, table: dict[str, Series], name: str, when: float, value: float, cap: int) -> None:
        series = table.get(name)
        if series is None:
            if len(table) >= cap:
                self.left_out += 1
                return
            series = table[name] = Series(deque(maxlen=self.maxlen))
        series.add(when, value)


def _forget(*tables: dict[str, Any], keep: set[str]) -> None:
    for table in tables:
        for name in [n for n in table if n not in keep]:
            del table[name]


def svg_chart(points: Iterable[tuple[float, float]], label: str, width: int = 720, height: int = 200) -> dict[str, Any]:
    """What the template draws: a polyline in a box with its time and value axes."""
    pts = list(points)
    left, top, right, bottom = 60, 16, width - 12, height - 28
    if not pts:
        return {"label": label, "points": "", "width": width, "height": height, "empty": True}
    t0, t1 = pts[0][0], max(pts[-1][0], pts[0][0] + 1)
    top_value = max(max(v for _, v in pts), 1.0)

    def x(t: float) -> float:
        return round(left + (t - t0) * (right - left) / (t1 - t0), 1)

    def y(v: float) -> float:
        return round(bottom - v * (bottom - top) / top_value, 1)

    return {
        "label": label,
        "points": " ".join(f"{x(t)},{y(v)}" for t, v in pts),
        "width": width,
        "height": height,
        "box": (left, top, right, bottom),
        "max": round(top_value, 2),
        "last": round(pts[-1][1], 2),
        "from": time.strftime("%H:%M:%S", time.localtime(t0)),
        "to": time.strftime("%H:%M:%S", time.localtime(pts[-1][0])),
        "empty": False,
    }


@page("/charts", nav="Charts")
def charts(view: View) -> Rendered:
    sampler = view.sampler
    if sampler is None:
        return Rendered("charts.html", {"title": "Charts", "off": True})
    context: dict[str, Any] = {"title": "Charts", "query": ""}
    if view.args.get("topic"):
        topic = view.topic()
        series = sampler.topic_tps.get(topic)
        context |= {
            "query": f"topic={topic}",
            "charts": [svg_chart(series.points if series else (), f"{topic} put TPS")],
        }
    elif view.args.get("group"):
        group = view.group()
        tps, lag = sampler.group_tps.get(group), sampler.group_lag.get(group)
        context |= {
            "query": f"group={group}",
            "charts": [
                svg_chart(tps.points if tps else (), f"{group} consume TPS"),
                svg_chart(lag.points if lag else (), f"{group} lag"),
            ],
        }
    context |= {
        "topics": sorted((name, s.last) for name, s in sampler.topic_tps.items()),
        "groups": sorted((name, s.last, sampler.group_lag[name].last) for name, s in sampler.group_tps.items()),
        "left_out": sampler.left_out,
        "interval": sampler.interval,
        "hours": view.settings.history_hours,
    }
    template = "chart_svgs.html" if view.args.get("svg") == "1" else "charts.html"
    return Rendered(template, context)
