"""Traces written live by Apache RocketMQ 5.3.3's Java remoting client (compat_tests/java5/Trace5Main.java), run
when ``ROCKETMQ5_JAVA_CLASSPATH`` names its jars: ingested by the Spark job with no error row, Recall records
included (tests/trace/golden/java-5.3.3-traces.json is one such run)."""

from __future__ import annotations

import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from compat_tests.servers import GatewayServers, jdk_tool
from compat_tests.test_java5_pop import PROGRAM_TIMEOUT, SUBPROCESS_SLACK, java5  # noqa: F401 - skips without the jars
from gateway.client import blocking, build_message
from gateway.remoting.message import MessageConst
from gateway.remoting.names import TRACE_TOPIC
from spark.trace_ingest import ingest_batch, report

from .conftest import FAST_RETRIES

pytestmark = [pytest.mark.spark, pytest.mark.compat]


@pytest.fixture(scope="module")
def recall_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServers]:
    s = GatewayServers(tmp_path_factory.mktemp("gateway-recall"), {**FAST_RETRIES, "recallMessageEnable": "true"})
    yield s.start()
    s.close()


def test_java5_client_traces_are_ingested(
    spark: Any,
    recall_servers: GatewayServers,
    java5: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    servers = recall_servers
    servers.create_topic("Java5Traced", 2)
    # The 5.x client traces the consumption of messages that carry MSG_REGION only (as an Apache 5.x broker
    # stores every message); ours does not add it, so these two carry it from their producer.
    with blocking.Producer("region_pg", servers.namesrv_addr) as producer:
        for i in range(2):
            region = {MessageConst.MSG_REGION: "DefaultRegion", MessageConst.TRACE_SWITCH: "true"}
            producer.send(build_message("Java5Traced", b"region", keys=f"region-{i}", properties=region))
    cmd = [
        jdk_tool("java"), "-Xmx256m", "-Dcom.rocketmq.recall.default.trace.enable=true", "-cp", java5, "Trace5Main",
        "trace", "--namesrv", servers.namesrv_addr, "--topic", "Java5Traced", "--group", "java5_trace_cg",
        "--count", "5", "--run-id", "j5", "--timeout", str(PROGRAM_TIMEOUT),
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=PROGRAM_TIMEOUT + SUBPROCESS_SLACK)
    assert done.returncode == 0 and "OK" in done.stdout.splitlines(), done.stdout + done.stderr[-4000:]
    out = tmp_path / "out"
    ingest_batch(spark, {"namesrvAddr": servers.namesrv_addr, "topic": TRACE_TOPIC}, out)
    tables = report(spark, out)
    table = pq.read_table(out / "traces").to_pylist()
    assert not pq.read_table(out / "errors").num_rows
    assert Counter(r["traceType"] for r in table) == {
        "Pub": 7, "Recall": 1, "EndTransaction": 1, "SubBefore": 2, "SubAfter": 2,
    }  # fmt: skip
    recall = next(r for r in table if r["traceType"] == "Recall")
    assert recall["success"] and recall["topic"] == "Java5Traced"
    assert [(r["transactionState"], r["count"]) for r in tables["transactions"]] == [("COMMIT_MESSAGE", 1)]
    never = {r["keys"] for r in tables["never_consumed"]}
    assert never == {f"j5-{i}" for i in range(5)} | {"j5-tx"}  # consumed, but not traced: no MSG_REGION
