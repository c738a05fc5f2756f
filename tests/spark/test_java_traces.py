"""Traces written by the official Java client (the compat_tests/java program with ``--trace``), run when
``ROCKETMQ_JAVA_CLASSPATH`` names its jars: ingested by the Spark job into the same records and report as
ours (tests/spark/test_trace_ingest.py)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from compat_tests.servers import GatewayServers
from compat_tests.test_java import assert_ok, java_programs, run_java  # noqa: F401 - skips without the jars
from gateway.remoting.names import TRACE_TOPIC
from spark.trace_ingest import ingest_batch, report

pytestmark = [pytest.mark.spark, pytest.mark.compat]


def test_java_client_traces_are_ingested(
    spark: Any,
    servers: GatewayServers,
    java_programs: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    servers.create_topic("JavaTraced", 2)
    produced = run_java(java_programs, tmp_path, "produce", servers, "JavaTraced", "java_trace_pg", "--count", 20,
                        "--modes", "sync", "--run-id", "jt", "--trace")  # fmt: skip
    assert_ok(produced, "traced producer")
    consumed = run_java(java_programs, tmp_path, "push", servers, "JavaTraced", "java_trace_cg", "--count", 20,
                        "--modes", "sync", "--run-id", "jt", "--trace")  # fmt: skip
    assert_ok(consumed, "traced consumer")
    out = tmp_path / "out"
    ingest_batch(spark, {"namesrvAddr": servers.namesrv_addr, "topic": TRACE_TOPIC}, out)
    tables = report(spark, out)
    traces = spark.read.parquet(str(out / "traces")).filter("topic = 'JavaTraced'")
    counts = Counter(r.traceType for r in traces.select("traceType").collect())
    assert counts["Pub"] == 20 and counts["SubBefore"] == counts["SubAfter"] >= 20
    row = next(r for r in tables["latency"] if r["topic"] == "JavaTraced")
    assert row["consumerGroup"] == "java_trace_cg" and row["messages"] == 20 and row["latencyP50Ms"] is not None
