"""The NameServer's ``/metrics`` (``metricsExporterType=PROM`` in namesrv.properties; Apache 5's NameServer
has no exporter, its controller and broker do): request latency as the broker counts it, topics routed, and
live brokers per cluster."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import GaugeMetricFamily
from twisted.web.server import Site

from gateway import prometheus

if TYPE_CHECKING:
    from .service import NamesrvController


class NamesrvCollector:
    def __init__(self, namesrv: NamesrvController) -> None:
        self.namesrv = namesrv

    def collect(self) -> Iterator[Any]:
        namesrv = self.namesrv
        base = {"node_type": "namesrv", "node_id": f"{namesrv.config.bindAddress}:{namesrv.port}"}
        routes = namesrv.route_info_manager  # read in twisted.web's WSGI thread: copied before walked
        if namesrv.dispatcher.rpc_latency is not None:
            yield prometheus.rpc_latency_family(base, namesrv.dispatcher.rpc_latency)
        yield prometheus.gauge(base, "rocketmq_topic_number", "Topics routed", len(routes.topic_queue_table))
        brokers = GaugeMetricFamily("rocketmq_broker_number", "Live brokers, by cluster", labels=[*base, "cluster"])
        live_addrs = set(routes.broker_live_table)
        for cluster, names in sorted(routes.cluster_addr_table.items()):
            live = 0
            for name in list(names):
                data = routes.broker_addr_table.get(name)
                if data is not None:
                    live += sum(addr in live_addrs for addr in list(data.broker_addrs.values()))
            brokers.add_metric([*base.values(), cluster], live)
        yield brokers


def metrics_site(namesrv: NamesrvController) -> Site:
    return prometheus.metrics_site(NamesrvCollector(namesrv))
