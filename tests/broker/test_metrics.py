"""metricsExporterType=PROM: /metrics in Prometheus' text format moves with the traffic (RocketMQ 5's names
and labels), read over HTTP from a real broker."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

import pytest_twisted
from twisted.internet.threads import deferToThread

from gateway.namesrv.service import NamesrvController
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import UpdateConsumerOffsetRequestHeader
from tests.namesrv.conftest import loopback_namesrv_config

from .conftest import BrokerUnderTest, remoting  # noqa: F401
from .test_broker_server import create_topic, pull_request, send


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, response.read().decode()


async def scrape(broker: BrokerUnderTest) -> dict[str, float]:
    """``name{labels}`` -> value of every sample of the broker's /metrics."""
    assert broker.controller is not None
    return await scrape_port(broker.controller.config.metricsPromExporterPort)


async def scrape_port(port: int) -> dict[str, float]:
    url = f"http://127.0.0.1:{port}/metrics"
    status, text = await deferToThread(_get, url)  # in a thread: the broker answers from this reactor
    assert status == 200
    samples = {}
    for line in text.splitlines():
        m = re.match(r"^(\w+(?:\{[^}]*\})?) (\S+)$", line)
        if m:
            samples[m.group(1)] = float(m.group(2))
    return samples


def sample(samples: dict[str, float], name: str, **labels: str) -> float:
    for key, value in samples.items():
        if key.split("{")[0] == name and all(f'{k}="{v}"' in key for k, v in labels.items()):
            return value
    return 0.0


@pytest_twisted.ensureDeferred
async def test_metrics_move_with_sends_pulls_and_commits(tmp_path: Path, remoting) -> None:  # noqa: F811
    broker = BrokerUnderTest(tmp_path, remoting, metricsExporterType="PROM", metricsPromExporterPort="0")
    broker.start()
    try:
        await create_topic(broker, "Metered", 1)
        before = await scrape(broker)
        labels = {"cluster": "DefaultCluster", "node_type": "broker", "node_id": "broker-a", "topic": "Metered"}
        assert sample(before, "rocketmq_messages_in_total", **labels) == 0
        for _ in range(10):
            assert (await send(broker, "Metered", b"x" * 100, {})).code == ResponseCode.SUCCESS
        resp = await broker.call(pull_request("Metered", 0, 0, sub="*", group="metered_cg"))
        assert resp.code == ResponseCode.SUCCESS
        header = UpdateConsumerOffsetRequestHeader("metered_cg", "Metered", 0, 4).encode()
        assert (await broker.call(RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, header))).code == 0
        after = await scrape(broker)
        assert sample(after, "rocketmq_messages_in_total", **labels) == 10
        out = {**labels, "consumer_group": "metered_cg"}
        assert sample(after, "rocketmq_messages_out_total", **out) == 10
        assert sample(after, "rocketmq_throughput_out_total", **out) == len(resp.body)
        assert sample(after, "rocketmq_consumer_lag_messages", **out) == 6
        assert sample(after, "rocketmq_topic_number") >= 1
        assert sample(after, "rocketmq_storage_size") > sample(before, "rocketmq_storage_size")
        assert sample(after, "rocketmq_consumer_lag_latency", **out) > 0
        assert sample(after, "rocketmq_consumer_inflight_messages", **out) == 6  # 10 pulled, 4 committed
        assert sample(after, "rocketmq_storage_dispatch_behind_bytes") == 0
        # Histograms: every record is a little over 100 bytes; every send answered SUCCESS.
        sizes = {**labels, "message_type": "normal"}
        assert sample(after, "rocketmq_message_size_count", **sizes) == 10
        assert sample(after, "rocketmq_message_size_bucket", **sizes, le="1024.0") == 10
        sends = {"request_code": "send_message_v2", "response_code": "success", "result": "success"}
        assert sample(after, "rocketmq_rpc_latency_count", **sends) == 10
        assert sample(after, "rocketmq_rpc_latency_bucket", **sends, le="+Inf") == 10
        assert sample(after, "rocketmq_rpc_latency_sum", **sends) > 0
        await broker.call(RemotingCommand.request(9999, {}))
        await broker.call(RemotingCommand.request(8888, {}))
        unknown = {"request_code": "unknown", "response_code": "request_code_not_supported"}
        assert sample(await scrape(broker), "rocketmq_rpc_latency_count", **unknown) == 2  # one series for all
        # A pull held by long polling and answered when it times out (PULL_NOT_FOUND) after about 0.3 s.
        held = await broker.call(
            pull_request("Metered", 0, 10, suspend=True, sub="*", group="metered_cg", timeout_ms=300)
        )
        assert held.code == ResponseCode.PULL_NOT_FOUND
        polled = {"request_code": "pull_message", "response_code": "pull_not_found", "is_long_polling": "true"}
        samples = await scrape(broker)
        assert sample(samples, "rocketmq_rpc_latency_count", **polled) == 1
        assert sample(samples, "rocketmq_rpc_latency_bucket", **polled, le="100.0") == 0
        assert sample(samples, "rocketmq_rpc_latency_bucket", **polled, le="1000.0") == 1
    finally:
        await broker.stop()


@pytest_twisted.ensureDeferred
async def test_namesrv_metrics(tmp_path: Path, remoting) -> None:  # noqa: F811
    config = loopback_namesrv_config(tmp_path, metricsExporterType="PROM", metricsPromExporterPort="0")
    namesrv = NamesrvController(config)
    namesrv.startService()
    try:
        addr = f"127.0.0.1:{namesrv.port}"
        for _ in range(3):
            await remoting.invoke(addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Nope"}))
        samples = await scrape_port(config.metricsPromExporterPort)
        routes = {"node_type": "namesrv", "request_code": "get_routeinfo_by_topic", "response_code": "topic_not_exist"}
        assert sample(samples, "rocketmq_rpc_latency_count", **routes) == 3
        assert sample(samples, "rocketmq_topic_number", node_type="namesrv") == 0
    finally:
        await namesrv.stopService()
