"""mqadmin queryMsgTraceById against our broker, run when ``ROCKETMQ_MQADMIN_CLASSPATH`` names the tools'
jars: the traces our client wrote print as the rows our own view prints (and as mqadmin prints the Java
client's traces against Apache, tests/trace/test_codec.py)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.client import ConsumeStatus, blocking, build_message
from gateway.client.blocking import Admin
from gateway.trace.view import format_trace_views

from .servers import GatewayServers, jdk_tool

MQADMIN_CLASSPATH = os.environ.get("ROCKETMQ_MQADMIN_CLASSPATH", "").strip()
if not MQADMIN_CLASSPATH:
    pytest.skip("mqadmin not given: set ROCKETMQ_MQADMIN_CLASSPATH to its jars", allow_module_level=True)

pytestmark = pytest.mark.compat


@pytest.fixture
def traced(tmp_path: Path) -> Iterator[GatewayServers]:
    s = GatewayServers(tmp_path / "gateway", {"traceTopicEnable": "true"}).start()
    yield s
    s.stop()


def test_query_msg_trace_by_id_prints_our_traces(traced: GatewayServers, tmp_path: Path) -> None:
    traced.create_topic("MqadminTrace", 1)
    consumer = blocking.PushConsumer("mqadmin_trace_cg", traced.namesrv_addr, enable_msg_trace=True)
    got: list[str] = []
    consumer.subscribe("MqadminTrace", "*")
    consumer.register_message_listener(lambda msgs: got.append(msgs[0].client_msg_id) or ConsumeStatus.CONSUME_SUCCESS)
    consumer.start()
    with blocking.Producer("mqadmin_trace_pg", traced.namesrv_addr, enable_msg_trace=True) as producer:
        msg_id = producer.send(build_message("MqadminTrace", b"traced", keys="k")).msg_id
    deadline = time.monotonic() + 30
    while msg_id not in got:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    consumer.shutdown()
    with Admin(traced.namesrv_addr) as admin:
        ours = format_trace_views(admin.query_msg_trace_by_id(msg_id))
    home = tmp_path / "mqadmin"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "logback_tools.xml").write_text('<configuration><root level="OFF"/></configuration>\n')
    proc = subprocess.run(
        [
            jdk_tool("java"), "-Xmx256m", f"-Drocketmq.home.dir={home}", f"-Duser.home={tmp_path}",
            "-cp", MQADMIN_CLASSPATH, "org.apache.rocketmq.tools.command.MQAdminStartup",
            "queryMsgTraceById", "-n", traced.namesrv_addr, "-i", msg_id,
        ],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line.rstrip() for line in proc.stdout.splitlines() if line.startswith(("#Type", "Pub", "Sub"))]
    assert rows == [line.rstrip() for line in ours.splitlines() if line.startswith(("#Type", "Pub", "Sub"))]
