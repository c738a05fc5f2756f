"""Metrics pushed over OTLP (and to the log), as RocketMQ 5 pushes them: a real OTLP gRPC receiver, built from
opentelemetry-proto's service definitions, gets the points of ``/metrics`` with their names, labels and values;
a receiver that is down costs the broker a log line."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_twisted
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from twisted.internet import reactor
from twisted.logger import formatEvent, globalLogPublisher

from gateway.broker.config import load_broker_config
from gateway.config import ConfigError
from gateway.namesrv.config import load_namesrv_config
from gateway.namesrv.service import NamesrvController
from gateway.remoting.client import RemotingClient
from tests.broker.conftest import BrokerUnderTest
from tests.broker.test_broker_server import create_topic, send
from tests.namesrv.conftest import loopback_namesrv_config

from ..console.conftest import wait_until


class Receiver(metrics_service_pb2_grpc.MetricsServiceServicer):
    """An OTLP metrics receiver: every export request and its metadata."""

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.metadata: list[dict[str, str]] = []

    def Export(self, request: Any, context: Any) -> Any:
        self.requests.append(request)
        self.metadata.append(dict(context.invocation_metadata()))
        return metrics_service_pb2.ExportMetricsServiceResponse()

    def points(self, name: str) -> list[tuple[dict[str, str], Any]]:
        """(attributes, data point) of metric ``name`` in the last request that has it."""
        for request in reversed(self.requests):
            found = [
                ({a.key: a.value.string_value for a in p.attributes}, p)
                for rm in request.resource_metrics
                for sm in rm.scope_metrics
                for m in sm.metrics
                if m.name == name
                if m.WhichOneof("data")
                for p in getattr(m, m.WhichOneof("data")).data_points
            ]
            if found:
                return found
        return []


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, int]]:
    servicer = Receiver()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield servicer, port
    server.stop(None)


@pytest_twisted.async_yield_fixture
async def remoting() -> AsyncIterator[RemotingClient]:
    client = RemotingClient(reactor)
    yield client
    await client.close()


class LogLines:
    """The text of every log event while installed."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, event: dict[str, Any]) -> None:
        self.lines.append(formatEvent(event))


@pytest.fixture
def log_lines() -> Iterator[LogLines]:
    lines = LogLines()
    globalLogPublisher.addObserver(lines)
    yield lines
    globalLogPublisher.removeObserver(lines)


@pytest_twisted.ensureDeferred
async def test_broker_pushes_the_points_of_metrics_over_otlp(
    tmp_path: Path, remoting: RemotingClient, receiver: tuple[Receiver, int]
) -> None:
    servicer, port = receiver
    broker = BrokerUnderTest(
        tmp_path,
        remoting,
        metricsExporterType="OTLP_GRPC",
        metricsGrpcExporterTarget=f"http://127.0.0.1:{port}",
        metricGrpcExporterIntervalInMills="200",
        metricsLabel="env:test,team:mq",
        metricsGrpcExporterHeader="x-otlp-token:s3cret",
    )
    broker.start()
    try:
        await create_topic(broker, "OtlpTopic", 2)
        for i in range(5):
            assert (await send(broker, "OtlpTopic", b"m%d" % i, {}, i % 2)).code == 0

        def five_in() -> bool:
            return any(
                a.get("topic") == "OtlpTopic" and p.as_int == 5
                for a, p in servicer.points("rocketmq_messages_in_total")
            )

        await wait_until(five_in, 15, "rocketmq_messages_in_total{topic=OtlpTopic} = 5 received")
        attrs, point = next(
            (a, p) for a, p in servicer.points("rocketmq_messages_in_total") if a.get("topic") == "OtlpTopic"
        )
        assert attrs == {
            "cluster": "DefaultCluster", "node_type": "broker", "node_id": "broker-a", "topic": "OtlpTopic",
            "env": "test", "team": "mq",
        }  # fmt: skip
        assert point.start_time_unix_nano < point.time_unix_nano
        # A histogram keeps its buckets: the 5 message sizes, and a gauge its value.
        sizes = [p for a, p in servicer.points("rocketmq_message_size") if a.get("topic") == "OtlpTopic"]
        assert sizes and sum(sizes[0].bucket_counts) == sizes[0].count == 5
        assert next(p.as_int for _, p in servicer.points("rocketmq_topic_number")) >= 1
        assert servicer.metadata[-1].get("x-otlp-token") == "s3cret"
        pushes = len(servicer.requests)
    finally:
        await broker.stop()
    assert pushes >= 1


@pytest_twisted.ensureDeferred
async def test_a_receiver_that_is_down_costs_one_log_line(
    tmp_path: Path, remoting: RemotingClient, log_lines: LogLines
) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    broker = BrokerUnderTest(
        tmp_path,
        remoting,
        metricsExporterType="OTLP_GRPC",
        metricsGrpcExporterTarget=f"http://127.0.0.1:{port}",
        metricGrpcExporterIntervalInMills="100",
        metricGrpcExporterTimeOutInMills="200",
    )
    controller = broker.start()
    try:
        await create_topic(broker, "DownTopic", 1)
        for i in range(20):
            assert (await send(broker, "DownTopic", b"m%d" % i, {})).code == 0
        pusher = controller.metrics_pusher
        assert pusher is not None
        # Sends go on while the pushes fail, and only the first failure is logged.
        for _ in range(3):
            assert (await send(broker, "DownTopic", b"more", {})).code == 0
        await wait_until(lambda: pusher.failures >= 3, 15, "three failed pushes")
    finally:
        await broker.stop()
    assert pusher.pushes == 0 and sum("metrics push to" in line for line in log_lines.lines) == 1
    assert not any("Traceback" in line for line in log_lines.lines)


@pytest_twisted.ensureDeferred
async def test_log_exporter_writes_the_points(tmp_path: Path, remoting: RemotingClient, log_lines: LogLines) -> None:
    broker = BrokerUnderTest(tmp_path, remoting, metricsExporterType="LOG", metricLoggingExporterIntervalInMills="100")
    broker.start()
    try:
        await create_topic(broker, "LogTopic", 1)
        assert (await send(broker, "LogTopic", b"x", {})).code == 0

        def messages_in() -> list[Any]:
            """The LogTopic points of rocketmq_messages_in_total in the OTLP JSON lines logged."""
            found = []
            for line in log_lines.lines:
                if line.startswith('{"scopeMetrics"') or line.startswith('{"resource"'):
                    for sm in json.loads(line)["scopeMetrics"]:
                        for m in sm["metrics"]:
                            if m["name"] == "rocketmq_messages_in_total":
                                found += [p for p in m["sum"]["dataPoints"] if _attr(p, "topic") == "LogTopic"]
            return found

        await wait_until(lambda: any(p.get("asInt") == "1" for p in messages_in()), 10, "the point in the log")
    finally:
        await broker.stop()


def _attr(point: dict[str, Any], key: str) -> str | None:
    return next((a["value"]["stringValue"] for a in point["attributes"] if a["key"] == key), None)


@pytest_twisted.ensureDeferred
async def test_namesrv_pushes_its_points(tmp_path: Path, receiver: tuple[Receiver, int]) -> None:
    servicer, port = receiver
    config = loopback_namesrv_config(
        tmp_path,
        metricsExporterType="OTLP_GRPC",
        metricsGrpcExporterTarget=f"http://127.0.0.1:{port}",
        metricGrpcExporterIntervalInMills="200",
        metricsLabel="site:lab",
    )
    namesrv = NamesrvController(config, reactor)
    namesrv.startService()
    try:
        await wait_until(
            lambda: bool(servicer.points("rocketmq_broker_number") or servicer.points("rocketmq_topic_number")),
            10,
            "a push",
        )
        attrs, _ = servicer.points("rocketmq_topic_number")[0]
        assert attrs["node_type"] == "namesrv" and attrs["site"] == "lab"
        assert servicer.requests[-1].resource_metrics[0].scope_metrics[0].scope.name == "namesrv-meter"
    finally:
        await namesrv.stopService()


def test_push_keys_are_checked_where_they_are_read(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="key metricsGrpcExporterTarget: '' is not host:port"):
        load_broker_config(None, {"metricsExporterType": "OTLP_GRPC"})
    with pytest.raises(ConfigError, match="key metricsLabel: 'nolabel' is not name:value"):
        load_broker_config(None, {"metricsExporterType": "LOG", "metricsLabel": "a:b,nolabel"})
    with pytest.raises(ConfigError, match="key metricsExporterType: 'OTLP' is not one of"):
        load_broker_config(None, {"metricsExporterType": "OTLP"})
    conf = tmp_path / "namesrv.properties"
    conf.write_text("metricsExporterType=OTLP_GRPC\nmetricsGrpcExporterTarget=not a target\n")
    with pytest.raises(ConfigError, match=rf"{conf}: key metricsGrpcExporterTarget"):
        load_namesrv_config(conf)
