"""A local[2] Spark session (one per test run: a JVM takes seconds to start) and our servers, with message
trace on, as child processes on loopback."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from compat_tests.servers import GatewayServers

ROOT = Path(__file__).resolve().parents[2]
FAST_RETRIES = {"messageDelayLevel": " ".join(["1s"] * 18), "traceTopicEnable": "true"}


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    pytest.importorskip("pyspark")
    # Spark's Python workers run PYSPARK_PYTHON and import the data source by module name (../shared/spark.md).
    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from spark import RocketMQDataSource

    session = (
        SparkSession.builder.master("local[2]")
        .appName("rocketmq-gateway-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local")))
        .config("spark.driver.extraJavaOptions", "-Dderby.system.home=" + str(tmp_path_factory.mktemp("derby")))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(RocketMQDataSource)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServers]:
    s = GatewayServers(tmp_path_factory.mktemp("gateway"), FAST_RETRIES).start()
    yield s
    s.close()
