"""The RocketMQ 5.x Node.js SDK (rocketmq-client-nodejs 1.0.8) sending through our gRPC endpoint: FIFO message
groups, a delivery timestamp and its recall, read back by our 4.x client."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from gateway.remoting.message import MessageConst

from . import sdk5_node
from .servers import GatewayServers, free_port
from .test_sdk5_python import flat, pull_all

sdk5_node.require_sdk()

pytestmark = pytest.mark.compat


@pytest.fixture(scope="module")
def node_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServers]:
    config = {"grpcServerPort": str(free_port()), "recallMessageEnable": "true"}
    s = GatewayServers(tmp_path_factory.mktemp("sdk5-produce"), config).start()
    yield s
    s.close()


def _topic(servers: GatewayServers, queues: int = 4) -> str:
    topic = f"sdk5n_{uuid.uuid4().hex[:10]}"
    servers.create_topic(topic, queues)
    return topic


def test_fifo_message_groups_keep_queue_order(node_servers: GatewayServers, tmp_path) -> None:
    topic = _topic(node_servers, queues=8)
    groups = ("orders-a", "orders-b", "orders-c")
    specs = [{"i": i * 3 + n, "body": f"{g}-{i}", "group": g} for i in range(5) for n, g in enumerate(groups)]
    sdk5_node.produce(tmp_path, node_servers.grpc_addr, topic, specs)
    by_group: dict[str, list[tuple[int, str]]] = {}
    for mq, msgs in pull_all(node_servers, topic, len(specs)).items():
        for m in msgs:
            by_group.setdefault(m.properties["__SHARDINGKEY"], []).append((mq.queue_id, m.body.decode()))
    assert set(by_group) == set(groups)
    for group, entries in by_group.items():
        assert len({q for q, _ in entries}) == 1, f"{group} spread over queues: {entries}"
        assert [body for _, body in entries] == [f"{group}-{i}" for i in range(5)]


def test_delivery_timestamp_delays_the_message(node_servers: GatewayServers, tmp_path) -> None:
    topic = _topic(node_servers)
    sent_at = time.time()
    sdk5_node.produce(tmp_path, node_servers.grpc_addr, topic, [{"i": 0, "body": "later", "delayMs": 4000}])
    assert flat(pull_all(node_servers, topic, 1, timeout=1.0)) == [], "delivered before its time"
    (got,) = flat(pull_all(node_servers, topic, 1, timeout=15.0))
    assert got.body == b"later"
    deliver_ms = int(got.properties[MessageConst.TIMER_DELIVER_MS])
    assert deliver_ms >= (sent_at + 3.5) * 1000 and got.store_timestamp >= deliver_ms - 50


def test_recalled_delayed_message_never_arrives(node_servers: GatewayServers, tmp_path) -> None:
    topic = _topic(node_servers, queues=1)
    specs = [{"i": 0, "body": "recalled", "delayMs": 3000, "recall": True}, {"i": 1, "body": "kept", "delayMs": 3000}]
    result = sdk5_node.produce(tmp_path, node_servers.grpc_addr, topic, specs)
    sent = {e["i"]: e["messageId"] for e in result.of("sent")}
    assert [e["messageId"] for e in result.of("recalled")] == [sent[0]], result.describe()
    assert [m.body for m in flat(pull_all(node_servers, topic, 1, timeout=15.0))] == [b"kept"]
    time.sleep(1.0)  # nothing more comes in a later timer pass
    assert [m.body for m in flat(pull_all(node_servers, topic, 2, timeout=1.0))] == [b"kept"]
