"""RocketMQ 5-style metrics pulled by Prometheus: ``metricsExporterType=PROM`` serves ``/metrics`` on
``metricsPromExporterHost:metricsPromExporterPort`` (prometheus-client's text format, through twisted.web).

Messages in are the consume queues' ends (every message a topic ever stored, so the counter survives
restarts); bytes in and messages and bytes out are the counters the send and pull paths keep for the 4.x
stats (``stats.MessageCounts``); everything else (topics, groups, connections, storage, consumer lag) is
read from the broker's own tables when Prometheus scrapes. Names and labels are RocketMQ 5's
(``rocketmq_messages_in_total{cluster, node_type, node_id, topic}``...).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily
from prometheus_client.twisted import MetricsResource
from twisted.web.pages import notFound
from twisted.web.resource import Resource
from twisted.web.server import Site
from twisted.web.util import Redirect

from .console import ConsoleResource

if TYPE_CHECKING:
    from .controller import BrokerController


class BrokerCollector:
    """A prometheus-client collector reading the broker at scrape time."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker

    def collect(self) -> Iterator[Any]:
        broker, cfg = self.broker, self.broker.config
        base = {"cluster": cfg.brokerClusterName, "node_type": "broker", "node_id": cfg.brokerName}
        names, values = list(base), list(base.values())
        counts = broker.message_counts

        def family(kind: Any, name: str, doc: str, extra: tuple[str, ...] = ()) -> Any:
            return kind(name, doc, labels=[*names, *extra])

        stored: Counter[str] = Counter()
        for (topic, _), cq in list(broker.store.consume_queue_table.items()):
            stored[topic] += cq.max_offset_in_queue
        m_in = family(CounterMetricFamily, "rocketmq_messages_in", "Messages stored, by topic", ("topic",))
        for topic, n in stored.items():
            m_in.add_metric([*values, topic], n)
        yield m_in
        b_in = family(CounterMetricFamily, "rocketmq_throughput_in", "Bytes stored since start, by topic", ("topic",))
        for topic, size in counts.bytes_in.items():
            b_in.add_metric([*values, topic], size)
        yield b_in
        labels = ("topic", "consumer_group")
        m_out = family(CounterMetricFamily, "rocketmq_messages_out", "Messages pulled, by topic and group", labels)
        b_out = family(CounterMetricFamily, "rocketmq_throughput_out", "Bytes pulled, by topic and group", labels)
        for (topic, group), n in counts.messages_out.items():
            m_out.add_metric([*values, topic, group], n)
            b_out.add_metric([*values, topic, group], counts.bytes_out[(topic, group)])
        yield m_out
        yield b_out
        yield self._gauge(names, values, "rocketmq_topic_number", "Topics", len(broker.topics.table))
        yield self._gauge(
            names, values, "rocketmq_consumer_group_number", "Subscription groups", len(broker.groups.table)
        )
        producers = sum(len(channels) for channels in broker.producers.table.values())
        consumers = sum(len(info.channels) for info in broker.consumers.table.values())
        yield self._gauge(names, values, "rocketmq_producer_connections", "Producer connections", producers)
        yield self._gauge(names, values, "rocketmq_consumer_connections", "Consumer connections", consumers)
        cl = broker.store.commit_log
        yield self._gauge(names, values, "rocketmq_storage_size", "Commitlog bytes held", cl.max_offset - cl.min_offset)
        behind = cl.max_offset - broker.store.flushed_where
        yield self._gauge(names, values, "rocketmq_storage_flush_behind_bytes", "Bytes not yet flushed", behind)
        lag = family(GaugeMetricFamily, "rocketmq_consumer_lag_messages", "Messages not yet consumed", labels)
        for key, queues in broker.offsets.offset_table.items():
            topic, _, group = key.partition("@")
            behind_msgs = sum(
                max(0, broker.store.get_max_offset_in_queue(topic, queue_id) - offset)
                for queue_id, offset in queues.items()
            )
            lag.add_metric([*values, topic, group], behind_msgs)
        yield lag

    @staticmethod
    def _gauge(names: list[str], values: list[str], name: str, doc: str, value: float) -> Any:
        gauge = GaugeMetricFamily(name, doc, labels=names)
        gauge.add_metric(values, value)
        return gauge


class _Root(Resource):
    def getChild(self, path: bytes, request: Any) -> Resource:
        return notFound()  # /favicon.ico and the like


def metrics_site(broker: BrokerController) -> Site:
    """A twisted.web site answering ``/metrics`` from a registry of its own, and the console under
    ``/console/`` (``/`` leads there)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(broker))
    root = _Root()
    root.putChild(b"metrics", MetricsResource(registry=registry))
    root.putChild(b"console", ConsoleResource(broker))
    root.putChild(b"", Redirect(b"/console/"))
    return Site(root)
