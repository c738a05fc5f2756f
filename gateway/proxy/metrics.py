"""The proxy's ``/metrics`` (``metricsExporterType=PROM``): ``rocketmq_proxy_up`` and the latency of the gRPC
calls it serves, ``rocketmq_rpc_latency{protocol_type="grpc_v2"}``, labelled as Apache's ProxyMetricsManager
labels a proxy (cluster, node_type proxy, node_id, proxy_mode)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from twisted.web.server import Site

from gateway import prometheus

if TYPE_CHECKING:
    from .config import ProxyConfig
    from .service import MessagingService


class ProxyCollector:
    def __init__(self, config: ProxyConfig, service: MessagingService) -> None:
        self.config = config
        self.service = service

    def collect(self) -> Iterator[Any]:
        cfg = self.config
        base = {
            "cluster": cfg.proxyClusterName,
            "node_type": "proxy",
            "node_id": cfg.proxyName,
            "proxy_mode": "cluster",
        }
        yield prometheus.gauge(base, "rocketmq_proxy_up", "1 while the proxy serves", 1)
        yield prometheus.rpc_latency_family(base, None, self.service.rpc_latency)


def metrics_site(config: ProxyConfig, service: MessagingService) -> Site:
    return prometheus.metrics_site(ProxyCollector(config, service))
