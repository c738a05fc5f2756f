"""Mixed generations with Apache's C++ 4.x client (PyPI ``rocketmq`` 0.4.4): what the official 5.x Python SDK sends
through the gRPC endpoint, the C++ client reads over remoting with its body, tags, keys and properties; and what the
C++ client sends, a 5.x SimpleConsumer receives intact. (Our Python 4.x client: test_sdk5_python.py; Apache's Java
4.x client: test_sdk5_mixed_java.py.)"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from gateway.remoting.codes import RequestCode
from gateway.remoting.command import RemotingCommand

from .checks import check_exactly_once
from .cpp_client import expected
from .sdk5 import run_scenario
from .servers import GatewayServers, call
from .test_cpp_client import produce, pull_all
from .test_sdk5_python import grpc_servers, topic_on  # noqa: F401

pytestmark = pytest.mark.compat
COUNT = 6


def sdk5_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """A C++-format message (``cpp_client.expected``) as the 5.x producer scenario's spec."""
    return {"body": spec["body"], "tag": spec["tags"], "keys": spec["keys"].split(" "), "properties": spec["props"]}


def receive_from_start(servers: GatewayServers, topic: str, queues: int, want: int) -> list[dict[str, Any]]:
    """Every message of ``topic`` as a 5.x SimpleConsumer of a new group receives them: its offsets are committed
    at 0 first (a new 5.x group would start at the queues' ends)."""
    group = f"Sdk5Mixed{uuid.uuid4().hex[:8]}"
    for queue in range(queues):
        header = {"consumerGroup": group, "topic": topic, "queueId": str(queue), "commitOffset": "0"}
        assert call(servers.broker_addr, RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, header)).code == 0
    out = run_scenario(
        "consumer",
        {"endpoint": servers.grpc_addr, "topic": topic, "group": group, "kind": "simple", "send": [], "want": want,
         "wait": 30, "from_committed": True},
        timeout=60,
    )  # fmt: skip
    return out["received"]


def test_cpp_client_reads_what_the_5x_sdk_sent(grpc_servers: GatewayServers, tmp_path: Path) -> None:  # noqa: F811
    topic = topic_on(grpc_servers, "Sdk5ToCpp")
    run_id = f"s5{uuid.uuid4().hex[:6]}"
    specs = [sdk5_spec(expected(run_id, i)) for i in range(COUNT)]
    out = run_scenario("producer", {"endpoint": grpc_servers.grpc_addr, "topic": topic, "messages": specs})
    assert "error" not in out, out
    pulled = pull_all(tmp_path, grpc_servers, topic)
    # The SDK holds a message's keys as a set: their order is its own.
    messages = [{**m, "keys": _sorted_keys(m["keys"])} for m in pulled.messages]
    check_exactly_once(
        messages,
        run_id,
        range(COUNT),
        topic,
        "C++ pull of 5.x messages",
        lambda i: {**expected(run_id, i), "keys": _sorted_keys(expected(run_id, i)["keys"])},
    )


def _sorted_keys(keys: str) -> str:
    return " ".join(sorted(keys.split(" ")))


def test_5x_simple_consumer_reads_what_the_cpp_client_sent(grpc_servers: GatewayServers, tmp_path: Path) -> None:  # noqa: F811
    topic = topic_on(grpc_servers, "CppToSdk5")
    run_id = f"cp{uuid.uuid4().hex[:6]}"
    produce(tmp_path, grpc_servers, topic, run_id, COUNT)
    received = receive_from_start(grpc_servers, topic, 4, COUNT)
    got = sorted(received, key=lambda m: int(m["props"]["idx"]))
    assert [int(m["props"]["idx"]) for m in got] == list(range(COUNT)), received
    for i, m in enumerate(got):
        want = expected(run_id, i)
        assert (m["body"], m["tag"], m["keys"], m["attempt"]) == (
            want["body"], want["tags"], sorted(want["keys"].split(" ")), 1
        )  # fmt: skip
        assert {k: m["props"][k] for k in want["props"]} == want["props"]
