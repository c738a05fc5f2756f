"""Metrics pushed as RocketMQ 5 pushes them: ``metricsExporterType=OTLP_GRPC`` (to an OpenTelemetry Collector or
rocketmq-exporter) or ``LOG`` (the points in the log), on the broker and the NameServer.

The points are those of ``/metrics``: one bridge reads the families the Prometheus collectors build and hands
them to the OpenTelemetry SDK's OTLP exporter as its own data points (counters as cumulative monotonic sums named as
Apache names its instruments, ``..._total``; gauges; histograms with their buckets), so there is no second list of
metrics to keep in step. Every ``metricGrpcExporterIntervalInMills`` (``metricLoggingExporterIntervalInMills`` for
LOG) a pool thread collects and exports, one push at a time, so a slow or absent receiver costs the reactor
nothing; its failures are logged once, then again only when it recovers.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.threads import deferToThread
from twisted.logger import Logger

from gateway.pool_loop import PoolLoop

log = Logger()


@dataclass
class MetricsPushKeys:
    """Apache's keys of the push (BrokerConfig's, and ours on the NameServer too): where and how often the points
    go, and the labels added to each."""

    metricsGrpcExporterTarget: str = ""
    metricsGrpcExporterHeader: str = ""  # k1:v1,k2:v2, sent as gRPC metadata
    metricGrpcExporterTimeOutInMills: int = 3000
    metricGrpcExporterIntervalInMills: int = 60000
    metricLoggingExporterIntervalInMills: int = 10000
    metricsLabel: str = ""  # k1:v1,k2:v2


_TARGET = re.compile(r"(?:https?://)?[A-Za-z0-9.\-\[\]:]+:\d{1,5}/?")


def metrics_pairs(text: str) -> dict[str, str]:
    """``k1:v1,k2:v2`` (metricsLabel, metricsGrpcExporterHeader) as a dict; ValueError saying which item is
    not one (Apache warns and drops it)."""
    pairs = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition(":")
        if not sep or not name or not value or ":" in value:
            raise ValueError(f"{item!r} is not name:value (want k1:v1,k2:v2)")
        pairs[name] = value
    return pairs


def push_config_problem(config: Any) -> tuple[str, str] | None:
    """The push key of ``config`` (a broker's or a NameServer's) that cannot be used, and why; None when all
    can (or nothing is pushed)."""
    kind = config.metricsExporterType.upper()
    if kind not in ("OTLP_GRPC", "LOG"):
        return None
    for key in ("metricsLabel", "metricsGrpcExporterHeader"):
        try:
            metrics_pairs(getattr(config, key))
        except ValueError as e:
            return key, str(e)
    if kind == "OTLP_GRPC" and not _TARGET.fullmatch(config.metricsGrpcExporterTarget):
        target = config.metricsGrpcExporterTarget
        return "metricsGrpcExporterTarget", f"{target!r} is not host:port or http(s)://host:port (OTLP_GRPC needs one)"
    return None


def _points(families: Iterable[Any], extra: dict[str, str], start_ns: int, now_ns: int) -> list[Any]:
    """OpenTelemetry SDK metrics from prometheus-client metric families."""
    from opentelemetry.sdk.metrics.export import (
        AggregationTemporality,
        Gauge,
        Histogram,
        HistogramDataPoint,
        Metric,
        NumberDataPoint,
        Sum,
    )

    cumulative = AggregationTemporality.CUMULATIVE
    out = []
    for family in families:
        if not family.samples:
            continue
        if family.type == "counter":
            points = [
                NumberDataPoint(s.labels | extra, start_ns, now_ns, s.value)
                for s in family.samples
                if s.name.endswith("_total")
            ]
            data: Any = Sum(points, cumulative, is_monotonic=True)
            name = family.name + "_total"
        elif family.type == "histogram":
            data, name = (
                Histogram(_histogram_points(family, extra, start_ns, now_ns, HistogramDataPoint), cumulative),
                family.name,
            )
        else:
            data = Gauge([NumberDataPoint(s.labels | extra, start_ns, now_ns, s.value) for s in family.samples])
            name = family.name
        out.append(Metric(name, family.documentation, family.unit or "", data))
    return out


def _histogram_points(family: Any, extra: dict[str, str], start_ns: int, now_ns: int, point: Any) -> list[Any]:
    """Prometheus' cumulative ``_bucket{le}``, ``_sum`` and ``_count`` samples as OTLP's per-bucket counts."""
    series: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
    for s in family.samples:
        labels = {k: v for k, v in s.labels.items() if k != "le"}
        one = series.setdefault(tuple(sorted(labels.items())), {"labels": labels, "buckets": [], "sum": 0.0})
        if s.name.endswith("_bucket"):
            one["buckets"].append((float(s.labels["le"]), int(s.value)))
        elif s.name.endswith("_sum"):
            one["sum"] = s.value
        elif s.name.endswith("_count"):
            one["count"] = int(s.value)
    points = []
    for one in series.values():
        buckets = sorted(one["buckets"])
        counts, before = [], 0
        for _, cumulative in buckets:
            counts.append(cumulative - before)
            before = cumulative
        bounds = [le for le, _ in buckets if le != float("inf")]
        count = one.get("count", before)
        points.append(point(one["labels"] | extra, start_ns, now_ns, count, one["sum"], counts, bounds, None, None))
    return points


class MetricsPusher:
    """Push ``collector``'s families every interval; ``start()`` / ``stop()`` (a Deferred)."""

    def __init__(self, collector: Any, config: Any, reactor: Any, meter: str) -> None:
        self.collector = collector
        self.meter = meter
        self.kind = config.metricsExporterType.upper()
        self.labels = metrics_pairs(config.metricsLabel)
        self.reactor = reactor
        self.timeout_ms = config.metricGrpcExporterTimeOutInMills
        interval = (
            config.metricGrpcExporterIntervalInMills
            if self.kind == "OTLP_GRPC"
            else config.metricLoggingExporterIntervalInMills
        )
        self.interval = interval / 1000
        self.exporter: Any = None
        self.target = config.metricsGrpcExporterTarget
        if self.kind == "OTLP_GRPC":
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

            target = config.metricsGrpcExporterTarget
            endpoint = target if target.startswith("http") else f"https://{target}"  # as Apache: TLS unless http://
            headers = metrics_pairs(config.metricsGrpcExporterHeader)
            self.exporter = OTLPMetricExporter(
                endpoint=endpoint,
                insecure=endpoint.startswith("http://"),
                headers=headers,
                timeout=self.timeout_ms / 1000,
            )
            # The exporter logs every failed attempt through logging; this pusher says it once, on twisted.logger.
            logging.getLogger("opentelemetry.exporter.otlp.proto.grpc.exporter").setLevel(logging.CRITICAL)
        self.failing = False
        self.pushes = self.failures = 0
        self._start_ns = time.time_ns()
        self._loop = PoolLoop(reactor, self.interval, self.push, "metrics push")

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> Deferred[Any]:
        """No more pushes; fires once the push in progress has ended and the exporter is shut down."""
        stopped = self._loop.stop()
        if self.exporter is not None:
            stopped.addCallback(lambda _: deferToThread(self.exporter.shutdown, timeout_millis=self.timeout_ms))
        return stopped

    def push(self) -> None:
        """Collect and export once (blocking: runs in a pool thread)."""
        from opentelemetry.sdk.metrics.export import MetricExportResult, MetricsData, ResourceMetrics, ScopeMetrics
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        metrics = _points(self.collector.collect(), self.labels, self._start_ns, time.time_ns())
        scope = ScopeMetrics(InstrumentationScope(self.meter), metrics, "")
        data = MetricsData([ResourceMetrics(Resource.get_empty(), [scope], "")])
        if self.kind == "LOG":
            # As Apache's OtlpJsonLoggingMetricExporter: a push as one line of OTLP's JSON.
            from google.protobuf.json_format import MessageToJson
            from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics

            for resource_metrics in encode_metrics(data).resource_metrics:
                log.info("{otlp_json}", otlp_json=MessageToJson(resource_metrics, indent=None))
            return
        ok = self.exporter.export(data, timeout_millis=self.timeout_ms) == MetricExportResult.SUCCESS
        self.pushes += ok
        self.failures += not ok
        if not ok and not self.failing:
            log.warn("metrics push to {target} failed; retrying every {s} s", target=self.target, s=self.interval)
        elif ok and self.failing:
            log.info("metrics push to {target} works again", target=self.target)
        self.failing = not ok
