"""The proxy's /metrics (metricsExporterType=PROM): rocketmq_proxy_up and rocketmq_rpc_latency of the gRPC calls
it served (protocol_type grpc_v2), after calls made with grpcio against a real NameServer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
import pytest_twisted
from twisted.internet import reactor

from gateway.__main__ import GatewayService
from gateway.broker.config import load_broker_config
from gateway.broker.controller import BrokerController
from gateway.config import ConfigError
from gateway.namesrv.service import NamesrvController
from gateway.proxy.config import ProxyConfig, load_proxy_config
from gateway.proxy.server import ProxyServer, broker_proxy
from gateway.proxy.v2 import service_pb2 as spb
from tests.broker.test_metrics import sample, scrape_port
from tests.namesrv.conftest import loopback_namesrv_config
from tests.proxy.test_service import Proxy, route_request

PROXY = {"cluster": "DefaultCluster", "node_type": "proxy", "node_id": "proxy-m", "proxy_mode": "cluster"}


@pytest_twisted.async_yield_fixture
async def metered_proxy(tmp_path: Path) -> AsyncIterator[tuple[Proxy, ProxyServer]]:
    namesrv = NamesrvController(loopback_namesrv_config(tmp_path), reactor)
    namesrv.startService()
    config = ProxyConfig(
        namesrvAddr=f"127.0.0.1:{namesrv.port}",
        grpcServerPort=0,
        bindAddress="127.0.0.1",
        proxyName="proxy-m",
        metricsExporterType="PROM",
        metricsPromExporterPort=0,
    )
    server = ProxyServer(config, reactor)
    server.startService()
    channel = grpc.insecure_channel(f"127.0.0.1:{server.listen_port}")
    yield Proxy(f"127.0.0.1:{server.listen_port}", server.listen_port, None, channel, ""), server  # type: ignore[arg-type]
    channel.close()
    await server.stopService()
    await namesrv.stopService()


@pytest_twisted.ensureDeferred
async def test_rpc_latency_of_grpc_calls(metered_proxy: tuple[Proxy, ProxyServer]) -> None:
    proxy, server = metered_proxy
    port = server.config.metricsPromExporterPort
    before = await scrape_port(port)
    assert sample(before, "rocketmq_proxy_up", **PROXY) == 1
    route = {**PROXY, "protocol_type": "grpc_v2", "request_code": "query_route"}
    assert sample(before, "rocketmq_rpc_latency_count", **route) == 0

    for _ in range(2):
        response = await proxy.call("QueryRoute", route_request("NoSuchTopicM"), spb.QueryRouteResponse)
    await proxy.call("QueryRoute", route_request("NoSuchTopicM"), spb.QueryRouteResponse, client_id=None)
    after = await scrape_port(port)
    missing = {**route, "response_code": "topic_not_found", "is_long_polling": "false", "result": "success"}
    assert response.status.code != 0
    assert sample(after, "rocketmq_rpc_latency_count", **missing) == 2
    assert sample(after, "rocketmq_rpc_latency_bucket", **missing, le="+Inf") == 2
    assert sample(after, "rocketmq_rpc_latency_count", **route, response_code="client_id_required") == 1


def test_metrics_exporter_type_checked() -> None:
    with pytest.raises(ConfigError, match="metricsExporterType"):
        load_proxy_config(None, {"metricsExporterType": "OTLP"})
    assert load_proxy_config(None, {"metricsExporterType": "PROM"}).metricsExporterType == "PROM"


@pytest_twisted.ensureDeferred
async def test_broker_metrics_show_the_grpc_calls_served_beside_it(tmp_path: Path) -> None:
    broker_cfg, store_cfg = load_broker_config(
        None,
        {
            "bindAddress": "127.0.0.1",
            "brokerIP1": "127.0.0.1",
            "brokerName": "broker-a",
            "listenPort": "0",
            "grpcServerPort": "0",
            "storePathRootDir": str(tmp_path / "store"),
            "metricsExporterType": "PROM",
            "metricsPromExporterPort": "0",
        },
    )
    broker = BrokerController(broker_cfg, store_cfg, reactor)
    grpc_server = broker_proxy(broker_cfg, reactor, None, broker.grpc_latency)
    service = GatewayService(NamesrvController(loopback_namesrv_config(tmp_path), reactor), broker, grpc_server)
    service.startService()
    channel = grpc.insecure_channel(f"127.0.0.1:{grpc_server.listen_port}")
    try:
        proxy = Proxy("", grpc_server.listen_port, None, channel, "")  # type: ignore[arg-type]
        await proxy.call("QueryRoute", route_request("NoSuchTopicB"), spb.QueryRouteResponse)
        samples = await scrape_port(broker_cfg.metricsPromExporterPort)
        labels = {"node_type": "broker", "node_id": "broker-a", "protocol_type": "grpc_v2"}
        assert sample(samples, "rocketmq_rpc_latency_count", **labels, request_code="query_route") == 1
    finally:
        channel.close()
        await service.stopService()
