"""Charts: the sampler's series after known traffic, drawn as SVG (page and the fragment the script reloads),
bounded in length and number."""

from __future__ import annotations

from argparse import Namespace
from collections import deque
from typing import Any

import pytest_twisted
from twisted.internet import reactor
from twisted.internet.threads import deferToThread

from gateway.admin.cli import Session, delete_topic
from gateway.client import Producer, build_message
from gateway.console import charts
from gateway.console.charts import Sampler, Series, svg_chart
from gateway.console.settings import ConsoleSettings

from .browser import in_chromium, needs_chromium, shot
from .conftest import Cluster, consumer_of, http, wait_until


@needs_chromium
@pytest_twisted.ensureDeferred
async def test_topic_and_group_charts_after_traffic(cluster: Cluster) -> None:
    topic, group = "ConsoleChartTopic", "ConsoleChartCG"
    await cluster.admin.create_topic(topic, 2)
    base = cluster.console(sample_seconds=0.3)
    sampler = cluster.consoles[-1].sampler
    producer = Producer("ConsoleChartPG", cluster.namesrv_addr)
    await producer.start()
    consumer, got = consumer_of(cluster, group, topic)
    try:
        await consumer.start()
        for i in range(30):
            await producer.send(build_message(topic, b"chart %d" % i))
        await wait_until(lambda: len(got) >= 30, 20, "the 30 messages consumed")
        await wait_until(lambda: len(sampler.topic_tps.get(topic, Series(deque())).points) >= 3, 10, "3 samples")
        await wait_until(lambda: group in sampler.group_lag, 10, "the group sampled")
        # Put TPS is the max offsets' growth: some sample saw the 30 messages arrive.
        assert max(v for _, v in sampler.topic_tps[topic].points) > 0

        status, fragment = await deferToThread(http, f"{base}/charts?topic={topic}&svg=1")
        assert status == 200 and "<polyline" in fragment and "put TPS" in fragment and "<html" not in fragment

        def steps(page: Any) -> str:
            page.goto(f"{base}/charts?group={group}")
            shot(page, "charts-group")
            page.goto(f"{base}/charts?topic={topic}")
            shot(page, "charts-topic")
            return page.content()

        dom = await deferToThread(in_chromium, steps)
        assert f"{topic} put TPS" in dom and "<polyline" in dom and 'src="/static/charts.js"' in dom
        # A deleted topic frees its place among the series.
        session = Session(cluster.namesrv_addr)
        try:
            await deferToThread(delete_topic, session, Namespace(topic=topic, clusterName="DefaultCluster"))
        finally:
            session.close()
        await wait_until(lambda: topic not in sampler.topic_tps, 10, "the deleted topic's series dropped")
    finally:
        await consumer.shutdown()
        await producer.shutdown()


def test_series_are_bounded_in_length_and_number(monkeypatch: Any) -> None:
    monkeypatch.setattr(charts, "MAX_TOPICS", 2)
    sampler = Sampler(ConsoleSettings("127.0.0.1:9876", history_hours=1), reactor, interval=600.0)
    assert sampler.maxlen == 6
    for i in range(10):
        for name in ("a", "b", "c"):
            sampler._add(sampler.topic_tps, name, float(i), float(i), charts.MAX_TOPICS)
    assert sorted(sampler.topic_tps) == ["a", "b"] and sampler.left_out == 10
    assert [t for t, _ in sampler.topic_tps["a"].points] == [4.0, 5.0, 6.0, 7.0, 8.0, 9.0]
    chart = svg_chart(sampler.topic_tps["a"].points, "a")
    assert chart["max"] == 9.0 and chart["points"].count(",") == 6
