# ruff: noqa: F811  (fixtures imported from their modules)
"""Mixed generations with Apache's Java 4.x client (run when ``ROCKETMQ_JAVA_CLASSPATH`` names its jars): its push
consumer reads what the 5.x Node.js SDK sent through the gRPC endpoint, checked field by field by CompatMain; and a
5.x SimpleConsumer receives what its producer sent. (The Node SDK, not the Python one, sends here: the Python SDK
keeps a message's keys in a set, and CompatMain checks their order.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from . import sdk5_node
from .servers import GatewayServers
from .test_java import COUNT as JAVA_COUNT
from .test_java import MODES, _unique, assert_consumed_once, java_programs, produce_all_modes, run_java  # noqa: F401
from .test_sdk5_mixed import receive_from_start
from .test_sdk5_python import grpc_servers, topic_on  # noqa: F401

pytestmark = pytest.mark.compat
COUNT = 5
UNICODE_VALUE = "gr\u00fc\u00dfe-\u4f60\u597d"  # CompatMain.UNICODE_VALUE


def compat_message(run_id: str, mode: str, i: int) -> dict[str, str | list[str] | dict[str, str]]:
    """CompatMain.buildMessage's message ``i``, as a line of sdk5_producer.js."""
    return {
        "i": i,
        "body": f"compat|{run_id}|{mode}|{i}|payload-{i}",
        "tag": "Tag" + mode.title(),
        "keys": [f"key-{run_id}-{mode}-{i}", f"k2-{mode}-{i}"],
        "props": {"compatRun": run_id, "compatMode": mode, "compatIndex": str(i), "compatUnicode": UNICODE_VALUE},
    }


def test_java_push_consumer_reads_what_the_5x_sdk_sent(java_programs, grpc_servers: GatewayServers, tmp_path: Path):
    sdk5_node.require_sdk()
    topic = topic_on(grpc_servers, "Sdk5ToJava")
    run_id = _unique("r")
    sdk5_node.produce(
        tmp_path, grpc_servers.grpc_addr, topic, [compat_message(run_id, "sync", i) for i in range(COUNT)]
    )
    run = run_java(java_programs, tmp_path, "push", grpc_servers, topic, _unique("sdk5_java"), "--count", COUNT,
                   "--modes", "sync", "--run-id", run_id, "--grace", 3)  # fmt: skip
    assert_consumed_once(run, "Java push consumer of 5.x messages", COUNT)


def test_5x_simple_consumer_reads_what_the_java_producer_sent(
    java_programs, grpc_servers: GatewayServers, tmp_path: Path
):
    topic = topic_on(grpc_servers, "JavaToSdk5")
    run_id = _unique("r")
    produce_all_modes(java_programs, tmp_path, grpc_servers, topic, run_id)
    sent = [compat_message(run_id, mode, i) for mode in MODES for i in range(JAVA_COUNT)]
    received = receive_from_start(grpc_servers, topic, 4, len(sent))
    got = sorted((m["body"], m["tag"], m["keys"], m["attempt"]) for m in received)
    assert got == sorted((s["body"], s["tag"], sorted(s["keys"]), 1) for s in sent)
    for m in received:
        assert m["props"]["compatRun"] == run_id and m["props"]["compatUnicode"] == UNICODE_VALUE, m
