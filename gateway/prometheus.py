"""What the broker's and the NameServer's ``/metrics`` share: the ``rocketmq_rpc_latency`` family from a
dispatcher's counts, single-value gauges, and the twisted.web site (``/metrics``, unknown paths 404)."""

from __future__ import annotations

from typing import Any

from prometheus_client.core import CollectorRegistry, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.twisted import MetricsResource
from twisted.logger import Logger
from twisted.web.pages import notFound
from twisted.web.resource import Resource
from twisted.web.server import Site

from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.rpc_latency import UNKNOWN_CODE, Histograms

Labels = dict[str, str]
log = Logger()


def _code_name(enum: Any, code: int) -> str:
    """RemotingHelper.getRequestCodeDesc / getResponseCodeDesc: the lower-case name, else the number."""
    if code == UNKNOWN_CODE:
        return "unknown"
    try:
        return enum(code).name.lower()
    except ValueError:
        return str(code)


def rpc_latency_family(
    base: Labels, latency: Histograms | None, grpc: Histograms | None = None
) -> HistogramMetricFamily:
    """rocketmq_rpc_latency (ms) by request code, response code and result, as RemotingMetricsManager labels it:
    remoting requests from a dispatcher's counts, gRPC calls (protocol_type grpc_v2) from ``grpc``, whose keys
    are the label values (rpc, response code, long polling, result)."""
    extra = ("protocol_type", "request_code", "response_code", "is_long_polling", "result")
    family = HistogramMetricFamily("rocketmq_rpc_latency", "Request latency in ms", labels=[*base, *extra])
    for key in list(grpc.table) if grpc is not None else ():
        rpc, response_code, long_polling, result = key
        buckets, total = grpc.cumulative(key)
        labels = [*base.values(), "grpc_v2", rpc, response_code, "true" if long_polling else "false", result]
        family.add_metric(labels, buckets, total)
    for key in list(latency.table) if latency is not None else ():
        request_code, response_code, oneway, long_polling = key
        buckets, total = latency.cumulative(key)
        labels = [
            *base.values(),
            "remoting",
            _code_name(RequestCode, request_code),
            _code_name(ResponseCode, response_code),
            "true" if long_polling else "false",
            "oneway" if oneway else "success",
        ]
        family.add_metric(labels, buckets, total)
    return family


def gauge(base: Labels, name: str, doc: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=list(base))
    family.add_metric(list(base.values()), value)
    return family


class _Root(Resource):
    def getChild(self, path: bytes, request: Any) -> Resource:
        return notFound()  # /favicon.ico and the like


def listen(reactor: Any, config: Any, site: Site) -> Any:
    """Serve ``site`` on ``metricsPromExporterHost`` (default ``bindAddress``) : ``metricsPromExporterPort`` of
    ``config`` (a broker's or a NameServer's); the port chosen for 0 is written back. The listening port."""
    interface = config.metricsPromExporterHost or config.bindAddress
    port = reactor.listenTCP(config.metricsPromExporterPort, site, interface=interface)
    config.metricsPromExporterPort = port.getHost().port
    log.info("metrics on http://{host}:{port}/metrics", host=interface, port=config.metricsPromExporterPort)
    return port


def metrics_site(collector: Any, children: dict[bytes, Resource] | None = None) -> Site:
    """A site answering ``/metrics`` from a registry holding only ``collector``, plus ``children``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    root = _Root()
    root.putChild(b"metrics", MetricsResource(registry=registry))
    for path, child in (children or {}).items():
        root.putChild(path, child)
    return Site(root)
