"""RocketMQ 5-style metrics pulled by Prometheus: ``metricsExporterType=PROM`` serves ``/metrics`` on
``metricsPromExporterHost:metricsPromExporterPort`` (prometheus-client's text format, through twisted.web).

Messages in are the consume queues' ends (every message a topic ever stored, so the counter survives
restarts); bytes in, message sizes and messages and bytes out are the counters the send and pull paths keep
for the 4.x stats (``stats.MessageCounts``), request latency the dispatcher's counts; everything else
(topics, groups, connections, storage, consumer lag) is read from the broker's own tables when Prometheus
scrapes. Pops add to messages out and in flight, and to PopMetricsManager's counters and revive backlog
(``rocketmq_pop_revive_*``). Names and labels are RocketMQ 5's (``rocketmq_messages_in_total{cluster,
node_type, node_id, topic}``...).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from twisted.web.server import Site
from twisted.web.util import Redirect

from gateway import prometheus

from .console import ConsoleResource
from .pop.records import REVIVE_GROUP
from .stats import message_type

if TYPE_CHECKING:
    from .controller import BrokerController


class BrokerCollector:
    """A prometheus-client collector reading the broker at scrape time (in twisted.web's WSGI thread: every
    table is copied before it is walked, since the reactor may change it meanwhile)."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker

    def collect(self) -> Iterator[Any]:
        broker, cfg = self.broker, self.broker.config
        store = broker.store
        base = {"cluster": cfg.brokerClusterName, "node_type": "broker", "node_id": cfg.brokerName}
        values = list(base.values())
        counts = broker.message_counts

        def family(kind: Any, name: str, doc: str, extra: tuple[str, ...] = ()) -> Any:
            return kind(name, doc, labels=[*base, *extra])

        stored: Counter[str] = Counter()
        for (topic, _), cq in list(store.consume_queue_table.items()):
            stored[topic] += cq.max_offset_in_queue
        m_in = family(CounterMetricFamily, "rocketmq_messages_in", "Messages stored, by topic", ("topic",))
        for topic, n in stored.items():
            m_in.add_metric([*values, topic], n)
        yield m_in
        b_in = family(CounterMetricFamily, "rocketmq_throughput_in", "Bytes stored since start, by topic", ("topic",))
        for topic, size in list(counts.bytes_in.items()):
            b_in.add_metric([*values, topic], size)
        yield b_in
        sizes = family(
            HistogramMetricFamily, "rocketmq_message_size", "Stored message sizes in bytes", ("topic", "message_type")
        )
        for topic in list(counts.sizes.table):
            buckets, total = counts.sizes.cumulative(topic)
            sizes.add_metric([*values, topic, message_type(topic)], buckets, total)
        yield sizes
        labels = ("topic", "consumer_group")
        m_out = family(CounterMetricFamily, "rocketmq_messages_out", "Messages pulled, by topic and group", labels)
        b_out = family(CounterMetricFamily, "rocketmq_throughput_out", "Bytes pulled, by topic and group", labels)
        for (topic, group), n in list(counts.messages_out.items()):
            m_out.add_metric([*values, topic, group], n)
            b_out.add_metric([*values, topic, group], counts.bytes_out[(topic, group)])
        yield m_out
        yield b_out
        if broker.dispatcher.rpc_latency is not None:
            yield prometheus.rpc_latency_family(base, broker.dispatcher.rpc_latency, broker.grpc_latency)
        yield prometheus.gauge(base, "rocketmq_topic_number", "Topics", len(broker.topics.table))
        yield prometheus.gauge(base, "rocketmq_consumer_group_number", "Subscription groups", len(broker.groups.table))
        producers = sum(len(channels) for channels in broker.producers.table.values())
        consumers = sum(len(info.channels) for info in broker.consumers.table.values())
        yield prometheus.gauge(base, "rocketmq_producer_connections", "Producer connections", producers)
        yield prometheus.gauge(base, "rocketmq_consumer_connections", "Consumer connections", consumers)
        cl = store.commit_log
        yield prometheus.gauge(base, "rocketmq_storage_size", "Commitlog bytes held", cl.max_offset - cl.min_offset)
        behind = cl.max_offset - store.flushed_where
        yield prometheus.gauge(base, "rocketmq_storage_flush_behind_bytes", "Bytes not yet flushed", behind)
        yield prometheus.gauge(
            base, "rocketmq_storage_dispatch_behind_bytes", "Bytes not yet in consume queues", broker.dispatch_behind()
        )
        if broker.ha_service is not None and not cfg.is_slave:
            lag_bytes = broker.ha_service.slave_fall_behind() if broker.ha_service.connections else 0
            yield prometheus.gauge(
                base, "rocketmq_ha_slave_fall_behind_bytes", "Bytes the furthest slave lags behind", lag_bytes
            )
        if broker.dledger is not None:
            ms = broker.dledger.server.member_state
            yield prometheus.gauge(base, "rocketmq_dledger_term", "This DLedger member's term", ms.term)
            yield prometheus.gauge(
                base,
                "rocketmq_dledger_commit_lag",
                "Ledger entries this DLedger member holds that are not committed yet (ledger end - committed index)",
                max(ms.ledger_end_index - ms.committed_index, 0),
            )
        yield from self._consumer_lag(base, values, labels)
        yield from self._pop(base, values)

    def _consumer_lag(self, base: dict[str, str], values: list[str], labels: tuple[str, ...]) -> Iterator[Any]:
        """Lag in messages and, from the store time of the oldest message not consumed, in milliseconds."""
        broker = self.broker
        store = broker.store
        now = int(time.time() * 1000)
        lag = GaugeMetricFamily("rocketmq_consumer_lag_messages", "Messages not yet consumed", labels=[*base, *labels])
        latency = GaugeMetricFamily(
            "rocketmq_consumer_lag_latency", "Age in ms of the oldest message not yet consumed", labels=[*base, *labels]
        )
        for key, queues in list(broker.offsets.offset_table.items()):
            topic, _, group = key.partition("@")
            behind_msgs = 0
            oldest = now
            for queue_id, offset in list(queues.items()):
                high = store.get_max_offset_in_queue(topic, queue_id)
                if high > offset:
                    behind_msgs += high - offset
                    stored_at = store.get_message_store_timestamp(topic, queue_id, offset)
                    if stored_at > 0:
                        oldest = min(oldest, stored_at)
            lag.add_metric([*values, topic, group], behind_msgs)
            latency.add_metric([*values, topic, group], now - oldest)
        yield lag
        yield latency
        inflight = GaugeMetricFamily(
            "rocketmq_consumer_inflight_messages", "Messages pulled and not yet committed", labels=[*base, *labels]
        )
        held: Counter[tuple[str, str]] = Counter()
        for topic, group, queue_id in list(broker.message_counts.pulled_to):
            held[(topic, group)] += broker.inflight(group, topic, queue_id)[0]
        # Pops: the messages popped and neither acked nor revived (PopInflightMessageCounter).
        for (topic, group, _), n in broker.pop.inflight.items():
            held[(topic, group)] += n
        for (topic, group), n in held.items():
            inflight.add_metric([*values, topic, group], n)
        yield inflight
        ready = GaugeMetricFamily(
            "rocketmq_consumer_ready_messages", "Messages stored and not yet pulled or popped", labels=[*base, *labels]
        )
        for key, queues in list(broker.offsets.offset_table.items()):
            topic, _, group = key.partition("@")
            waiting = 0
            for queue_id in list(queues):
                high = store.get_max_offset_in_queue(topic, queue_id)
                pulled = broker.inflight(group, topic, queue_id)[0]
                waiting += max(high - max(queues.get(queue_id, 0), 0) - pulled, 0)
            ready.add_metric([*values, topic, group], waiting)
        yield ready

    def _pop(self, base: dict[str, str], values: list[str]) -> Iterator[Any]:
        """PopMetricsManager's counters and the revive queues' backlog (records not revived through, and the
        age in ms of the first of them)."""
        pop = self.broker.pop
        put = CounterMetricFamily(
            "rocketmq_pop_revive_in_message",
            "Checkpoints and acks put to the revive topic",
            labels=[*base, "consumer_group", "topic", "revive_message_type", "put_status"],
        )
        for key, n in list(pop.revive_put.items()):
            put.add_metric([*values, *key], n)
        yield put
        get = CounterMetricFamily(
            "rocketmq_pop_revive_out_message",
            "Checkpoints and acks read from the revive topic",
            labels=[*base, "consumer_group", "topic", "queue_id", "revive_message_type"],
        )
        for (group, topic, queue_id, kind), n in list(pop.revive_get.items()):
            get.add_metric([*values, group, topic, str(queue_id), kind], n)
        yield get
        retry = CounterMetricFamily(
            "rocketmq_pop_revive_retry_messages",
            "Messages put into the pop retry topics",
            labels=[*base, "consumer_group", "topic", "put_status"],
        )
        for key, n in list(pop.revive_retry.items()):
            retry.add_metric([*values, *key], n)
        yield retry
        lag = GaugeMetricFamily(
            "rocketmq_pop_revive_lag", "Revive records not revived through", labels=[*base, "queue_id"]
        )
        latency = GaugeMetricFamily(
            "rocketmq_pop_revive_latency",
            "Age in ms of the first revive record not revived through",
            labels=[*base, "queue_id"],
        )
        store, now = self.broker.store, int(time.time() * 1000)
        for queue_id in range(self.broker.config.reviveQueueNum):
            # The revive service commits the offset of the last checkpoint it revived.
            first = self.broker.offsets.query_offset(REVIVE_GROUP, pop.revive_topic, queue_id) + 1
            behind = max(store.get_max_offset_in_queue(pop.revive_topic, queue_id) - first, 0)
            stored_at = store.get_message_store_timestamp(pop.revive_topic, queue_id, first) if behind else 0
            lag.add_metric([*values, str(queue_id)], behind)
            latency.add_metric([*values, str(queue_id)], max(now - stored_at, 0) if stored_at > 0 else 0)
        yield lag
        yield latency


def metrics_site(broker: BrokerController) -> Site:
    """``/metrics``, and the console under ``/console/`` (``/`` leads there)."""
    children = {b"console": ConsoleResource(broker), b"": Redirect(b"/console/")}
    return prometheus.metrics_site(BrokerCollector(broker), children)
