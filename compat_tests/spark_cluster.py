"""Spark's own standalone cluster manager, from the installed pyspark, as child processes on loopback: a master
and workers (``spark-class org.apache.spark.deploy.master.Master`` / ``...worker.Worker``), for the tests and
benchmarks that run jobs on a real cluster, where executors are JVMs of their own and their Python workers
import this project from ``pythonpath``. Also a NameServer with several brokers (``benchmarks.rss.start_ours``)
and a topic on all of them, for those jobs to read and write.

    cluster = StandaloneCluster(tmp, pythonpath=[repo]).start()
    subprocess.run([sys.executable, "job.py", "--master", cluster.master_url], env=cluster.env())
    cluster.stop()
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from benchmarks.rss import start_ours, stop_process
from compat_tests.servers import call, create_topic_request, jdk_tool
from gateway.remoting import fastjson
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand

_MASTER_URL = re.compile(r"Starting Spark master at (spark://\S+)")
_MASTER_UI = re.compile(r"Bound MasterWebUI to .*started at http://\S+:(\d+)")
_WORKER_UP = re.compile(r"Successfully registered with master")


def spark_home() -> Path:
    """The installed pyspark's package folder: it holds ``bin/spark-class`` and the jars."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class StandaloneCluster:
    """A standalone master and ``workers`` workers of ``cores`` cores and ``memory`` each, logs and work folders
    under ``root``; ``start()`` waits until every worker is registered, ``stop()`` ends each one's process group
    (executors and their Python workers with it). FileNotFoundError from ``start()`` when Java is missing."""

    def __init__(
        self, root: Path, workers: int = 1, cores: int = 2, memory: str = "1g", pythonpath: Sequence[str] = ()
    ) -> None:
        self.root = Path(root)
        self.workers, self.cores, self.memory = workers, cores, memory
        self.pythonpath = list(pythonpath)
        self.master_url = ""
        self.ui_url = ""
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []

    def env(self) -> dict[str, str]:
        """The environment for the cluster's processes and for drivers that run on it: loopback only, this
        Python for the Python workers, ``pythonpath`` first on PYTHONPATH."""
        path = os.pathsep.join([*self.pythonpath, *filter(None, [os.environ.get("PYTHONPATH")])])
        return dict(
            os.environ,
            SPARK_HOME=str(spark_home()),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_DAEMON_MEMORY="256m",  # the master's and workers' own heaps; executors get spark.executor.memory
            # No REST submission server: its fixed port (6066) would collide between clusters on one machine.
            SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
            PYSPARK_PYTHON=sys.executable,
            PYSPARK_DRIVER_PYTHON=sys.executable,
            PYTHONPATH=path,
        )

    def start(self, timeout: float = 90.0) -> StandaloneCluster:
        jdk_tool("java")
        self.root.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + timeout
        try:
            master = self._spawn("master", "org.apache.spark.deploy.master.Master", "--port", "0", "--webui-port", "0")
            self.master_url = self._wait_for(master, _MASTER_URL, deadline).group(1)
            self.ui_url = f"http://127.0.0.1:{self._wait_for(master, _MASTER_UI, deadline).group(1)}"
            for _ in range(self.workers):
                self.add_worker(deadline - time.monotonic())
        except BaseException:
            self.stop()
            raise
        return self

    def add_worker(self, timeout: float = 60.0) -> None:
        """One more worker, returning once the master counts it alive."""
        n = len(self.procs) - 1  # workers so far (the master is the first process)
        work = self.root / f"work-{n}"
        work.mkdir(exist_ok=True)
        worker = self._spawn(
            f"worker-{n}", "org.apache.spark.deploy.worker.Worker", self.master_url, "--port", "0",
            "--webui-port", "0", "--cores", str(self.cores), "--memory", self.memory, "--work-dir", str(work),
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        self._wait_for(worker, _WORKER_UP, deadline)
        while self.status().get("aliveworkers", 0) <= n:
            self._check_deadline(deadline, "the master to count the worker")
            time.sleep(0.2)

    def status(self) -> dict:
        """The master's JSON status page (workers, cores, applications)."""
        with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=5) as resp:
            return json.loads(resp.read())

    def stop(self) -> None:
        """SIGTERM each process group (workers first), SIGKILL what is left after 10 s."""
        for proc in reversed(self.procs):
            _end_group(proc)
        self.procs.clear()

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of every process's log, for a failure message."""
        return "\n".join(
            f"--- {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) for log in self.logs
        )

    def _spawn(self, name: str, main_class: str, *args: str) -> subprocess.Popen[bytes]:
        log = self.root / f"{name}.log"
        self.logs.append(log)
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), main_class, "--host", "127.0.0.1", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env(),
                start_new_session=True,  # its own process group: the executors it starts are stopped with it
            )
        self.procs.append(proc)
        return proc

    def _wait_for(self, proc: subprocess.Popen[bytes], pattern: re.Pattern[str], deadline: float) -> re.Match[str]:
        log = self.logs[self.procs.index(proc)]
        while True:
            found = pattern.search(log.read_text(errors="replace"))
            if found:
                return found
            if proc.poll() is not None:
                raise RuntimeError(f"{log.stem} exited with {proc.returncode}:\n{self.log_tail()}")
            self._check_deadline(deadline, f"{log.stem} to log {pattern.pattern!r}")
            time.sleep(0.1)

    def _check_deadline(self, deadline: float, what: str) -> None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}:\n{self.log_tail()}")


def _end_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)  # a worker stops its executors on SIGTERM
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(10)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # what is left of the group
    proc.wait()


class Brokers:
    """Our NameServer and ``count`` brokers (broker-a, broker-b...) in one cluster, each a process, stores under
    ``root``; ``broker_lines`` adds broker.conf lines to each. ``addrs`` maps broker names to addresses."""

    def __init__(self, root: Path, count: int = 2, broker_lines: dict[str, str] | None = None) -> None:
        self.root, self.count, self.broker_lines = Path(root), count, broker_lines
        self.procs: list[subprocess.Popen[bytes]] = []
        self.namesrv_addr = ""
        self.addrs: dict[str, str] = {}

    def start(self, timeout: float = 60.0) -> Brokers:
        self.root.mkdir(parents=True, exist_ok=True)
        self.procs, self.namesrv_addr, _ = start_ours(self.root, self.broker_lines, self.count)
        deadline = time.monotonic() + timeout
        while len(self.addrs) < self.count:
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                self.stop()
                raise RuntimeError(f"{self.count} brokers did not register (logs under {self.root})")
            time.sleep(0.2)
            try:
                resp = call(self.namesrv_addr, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), 3)
            except OSError:
                continue
            table = fastjson.loads(resp.body).get("brokerAddrTable", {}) if resp.code == ResponseCode.SUCCESS else {}
            masters = {name: {str(k): v for k, v in data["brokerAddrs"].items()} for name, data in table.items()}
            self.addrs = {name: addrs["0"] for name, addrs in masters.items() if "0" in addrs}
        return self

    def create_topic(self, topic: str, queues: int = 4) -> None:
        """The topic on every broker, then wait until the NameServer routes all of them."""
        for addr in self.addrs.values():
            resp = call(addr, create_topic_request(topic, queues))
            assert resp.code == ResponseCode.SUCCESS, resp.remark
        deadline = time.monotonic() + 15
        while self.routed(topic) != set(self.addrs):
            if time.monotonic() > deadline:
                raise RuntimeError(f"topic {topic} routed to {self.routed(topic)}, not to {set(self.addrs)}")
            time.sleep(0.1)

    def routed(self, topic: str) -> set[str]:
        """The brokers the NameServer routes ``topic`` to."""
        resp = call(self.namesrv_addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))
        if resp.code != ResponseCode.SUCCESS:
            return set()
        return {q["brokerName"] for q in fastjson.loads(resp.body).get("queueDatas", [])}

    def stop(self) -> None:
        for proc in reversed(self.procs):
            stop_process(proc)
        self.procs.clear()
