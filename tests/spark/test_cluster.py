"""The ``rocketmq`` source and sink and ``python -m spark.trace_ingest`` on a real cluster: Spark's own standalone
master and a worker (from the installed pyspark, loopback only), drivers as processes of their own, executors in
their own JVMs, against our NameServer and two brokers. The code reaches the executors as the README says: a zip of
the project passed with ``--py-files`` (to spark-submit, and to trace_ingest); the worker's PYTHONPATH holds this
tree as well, for the modules Spark imports before the zip arrives."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from compat_tests.spark_cluster import Brokers, StandaloneCluster, spark_home
from gateway.client import blocking, build_message
from gateway.remoting.message import decode_records
from gateway.remoting.names import TRACE_TOPIC
from spark import queues as rq

from .conftest import FAST_RETRIES, ROOT
from .test_trace_ingest import trace_types, traffic

pytestmark = pytest.mark.spark
JOB_TIMEOUT = 240  # a driver JVM, executors and their Python workers on a loaded 2-core machine


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Brokers]:
    b = Brokers(tmp_path_factory.mktemp("brokers"), 2, FAST_RETRIES).start()
    yield b
    b.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    pytest.importorskip("pyspark")
    c = StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"), workers=1, cores=2, pythonpath=[str(ROOT)])
    try:
        c.start()
    except FileNotFoundError as e:  # no java
        pytest.skip(str(e))
    yield c
    c.stop()


@pytest.fixture(scope="module")
def code_zip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This tree's packages zipped with the README's command."""
    out = tmp_path_factory.mktemp("dist") / "rocketmq_gateway.zip"
    subprocess.run([sys.executable, "-m", "zipfile", "-c", str(out), "gateway", "spark"], cwd=ROOT, check=True)
    return out


def run(cluster: StandaloneCluster, command: list[str]) -> subprocess.CompletedProcess[str]:
    """A driver process on the cluster; its output in the assertion message when it fails."""
    proc = subprocess.run(command, cwd=ROOT, env=cluster.env(), capture_output=True, text=True, timeout=JOB_TIMEOUT)
    assert proc.returncode == 0, (
        f"{command} exited with {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    )
    return proc


def stored(brokers: Brokers, topic: str) -> list[tuple[str, int, object]]:
    """(broker, queue id, message) of everything in ``topic``, read over the wire without Spark."""
    settings = rq.Settings.from_options({"namesrvAddr": brokers.namesrv_addr, "topic": topic})
    qs = rq.queues(settings)
    ends = rq.queue_offsets(settings, qs, "latest")
    found = []
    for q in qs:
        end = ends[q.broker][str(q.queue_id)]
        for body in rq.read_range(settings, q, 0, end):
            found += [(q.broker, q.queue_id, m) for m in decode_records(body) if m.queue_offset < end]
    return found


def test_trace_ingest_runs_on_the_cluster_over_both_brokers(
    cluster: StandaloneCluster, brokers: Brokers, code_zip: Path, tmp_path: Path
) -> None:
    seen = traffic(brokers, "C")  # type: ignore[arg-type]  # create_topic and namesrv_addr, as GatewayServers
    want = Counter({"Pub": 15, "SubBefore": 12, "SubAfter": 12, "EndTransaction": 2})
    deadline = time.monotonic() + 20
    while (have := trace_types(brokers)) != want:  # type: ignore[arg-type]
        assert time.monotonic() < deadline, f"trace topic holds {have}"
        time.sleep(0.2)
    out = tmp_path / "out"
    ingest = [sys.executable, "-m", "spark.trace_ingest", "--namesrv", brokers.namesrv_addr, "--out", str(out)]
    conf = ["--conf", "spark.executor.memory=512m", "--conf", "spark.sql.shuffle.partitions=4"]
    proc = run(cluster, [*ingest, "--master", cluster.master_url, "--py-files", str(code_zip), *conf])

    assert f"reading {TRACE_TOPIC}: " in proc.stdout and " on 2 broker(s)" in proc.stdout
    traces = pq.read_table(out / "traces").to_pylist()
    assert Counter(r["traceType"] for r in traces) == want
    # The traced messages went to both brokers, and the job read their records from wherever they were stored.
    assert {r["storeHost"] for r in traces if r["traceType"] == "Pub"} == set(brokers.addrs.values())
    assert {r["msgId"] for r in traces if r["traceType"] == "Pub"} >= set(seen["sends"])
    summary = (out / "report" / "summary.txt").read_text()
    assert summary.startswith("trace records: Pub 15, SubBefore 12, SubAfter 12, EndTransaction 2")
    assert seen["a"] in (out / "report" / "latency.csv").read_text()
    apps = cluster.status()["completedapps"]
    assert [(a["name"], a["memoryperexecutor"]) for a in apps] == [("rocketmq-trace-ingest", 512)]  # --conf taken
    shipped = list(cluster.root.glob(f"work-*/{apps[0]['id']}/*/{code_zip.name}"))
    assert shipped, "the executor did not fetch the --py-files zip"


def test_read_and_write_jobs_run_in_executors(cluster: StandaloneCluster, brokers: Brokers, code_zip: Path) -> None:
    source, target, rows = "ClusterRead", "ClusterWrite", 2000
    brokers.create_topic(source, 2)
    brokers.create_topic(target, 2)
    with blocking.Producer("cluster_pg", brokers.namesrv_addr) as producer:
        for i in range(300):
            producer.send(build_message(source, b"m%d" % i))
    before = {r["name"] for r in cluster.status()["completedapps"]}

    submit = str(spark_home() / "bin" / "spark-submit")
    job = ["tests/spark/cluster_job.py", "--namesrv", brokers.namesrv_addr, "--read", source, "--write", target]
    proc = run(
        cluster, [submit, "--master", cluster.master_url, "--py-files", str(code_zip), *job, "--rows", str(rows)]
    )
    out = json.loads(proc.stdout.strip().splitlines()[-1])

    # Read: every message once, one input partition per queue of both brokers, every task in an executor.
    assert Counter(out["bodies"]) == Counter(f"m{i}" for i in range(300))
    assert sorted((b, q) for _, b, q in out["partitions"]) == [(b, q) for b in ("broker-a", "broker-b") for q in (0, 1)]
    for tasks in (out["read_tasks"], out["write_tasks"]):
        assert tasks and all(t["executor"].isdigit() for t in tasks), tasks  # the driver's id is "driver"
    assert {r["name"] for r in cluster.status()["completedapps"]} - before == {"rocketmq-cluster-test"}
    assert out["imported_from"] and all(f"{code_zip.name}/spark/" in f for f in out["imported_from"]), out

    # Write: every row once, on both brokers, a sharding key's rows on one queue, properties kept.
    messages = stored(brokers, target)
    assert Counter(m.body for _, _, m in messages) == Counter(b"%d" % i for i in range(rows))
    assert {b for b, _, _ in messages} == {"broker-a", "broker-b"}
    queues_of_key: dict[str, set[tuple[str, int]]] = {}
    for broker, queue_id, m in messages:
        assert m.properties["rowId"] == m.body.decode() and m.properties["KEYS"] == f"id-{m.body.decode()}"
        queues_of_key.setdefault(f"key-{int(m.body) % 8}", set()).add((broker, queue_id))
    assert len(queues_of_key) == 8 and all(len(qs) == 1 for qs in queues_of_key.values()), queues_of_key
