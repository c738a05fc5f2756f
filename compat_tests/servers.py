"""Our NameServer and Broker in a child process on free loopback ports, for tests that drive real clients.

Blocking clients (the C++ client through ctypes, Node, Java) must not share a thread with the
reactor, so the servers run as ``python -m gateway`` and tests talk to them over sockets only.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from gateway.remoting.blocking import BlockingConnection
from gateway.remoting.codes import RequestCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import CreateTopicRequestHeader

_READY = re.compile(r"rocketmq-gateway ready: namesrv (\S+) broker (\S+)")
_GRPC = re.compile(r" grpc (\S+)")


def call(
    addr: str, request: RemotingCommand, timeout: float = 5.0, tls: ssl.SSLContext | None = None
) -> RemotingCommand:
    """One blocking request/response over a fresh connection (TLS when ``tls`` is given)."""
    with BlockingConnection(addr, timeout, tls) as conn:
        return conn.invoke(request)


def jdk_tool(name: str) -> str:
    """``java``/``javac`` from ``$JAVA_HOME/bin``, else from the PATH; FileNotFoundError if neither has it."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / name).exists():
        return str(Path(java_home) / "bin" / name)
    found = shutil.which(name)
    if not found:
        raise FileNotFoundError(f"'{name}' was not found (install a JDK or set JAVA_HOME)")
    return found


def _ports_of_this_worker() -> range:
    """This test process's share of the ports below the kernel's ephemeral range. A port handed out from there is
    never taken meanwhile by a connection's own end (those come from the ephemeral range), so a server stopped and
    started again on it gets it back; pytest-xdist workers get disjoint shares."""
    try:
        first_ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        first_ephemeral = 32768
    low, high = 10000, min(first_ephemeral, 65536)
    if high - low < 4096:  # the ephemeral range starts too low to leave room below it: share all ports above 10000
        high = 65536
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    index = int(worker) if worker.isdigit() else 0
    share = (high - low) // max(workers, 1)
    return range(low + index * share, low + (index + 1) * share)


_PORTS = _ports_of_this_worker()
# A random start, so that a child process in the same worker's share does not hand out its parent's first ports.
_next_port = _PORTS.start + random.randrange(len(_PORTS))


def free_port() -> int:
    """A loopback port free right now, with its neighbours: a broker (ours as Apache's) also listens on port - 2
    (its VIP channel) and port + 1 (HA), and Apache's exits when either is taken. Ports come from this process's
    share (see ``_ports_of_this_worker``), four at a time, each later call after the last, wrapping round the share:
    so none is handed out twice while the share lasts (for a child process's config file, which cannot say "any
    port", and for a server restarted on the port it had), and no two are neighbours."""
    global _next_port
    for _ in range(len(_PORTS) // 4):
        first = _next_port
        if first + 4 > _PORTS.stop:
            first = _PORTS.start
        _next_port = first + 4
        if all(_bindable(p) for p in (first, first + 2, first + 3)):
            return first + 2
    raise OSError(f"no free port with free neighbours in {_PORTS.start}-{_PORTS.stop - 1}")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))  # Apache binds every interface
        except OSError:
            return False
    return True


def create_topic_request(topic: str, queues: int = 4, order: bool = False) -> RemotingCommand:
    """UPDATE_AND_CREATE_TOPIC of a read-write topic with ``queues`` read and write queues (mqadmin updateTopic)."""
    header = CreateTopicRequestHeader(
        topic=topic,
        default_topic="TBW102",
        read_queue_nums=queues,
        write_queue_nums=queues,
        perm=6,
        topic_filter_type="SINGLE_TAG",
        topic_sys_flag=0,
        order=order,
    )
    return RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header.encode())


def default_sigint() -> None:
    """A child's ``preexec_fn`` for servers stopped with SIGINT (Ctrl-C): a child of a suite run in the background
    (``cmd &``) inherits SIG_IGN, and then the server, as Java does, keeps ignoring it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class GatewayServers:
    """``python -m gateway`` with a store under ``store_dir``; ``start()``, ``stop()``, ``kill()``."""

    def __init__(
        self,
        store_dir: Path,
        extra_config: dict[str, str] | None = None,
        *,
        namesrv_config: dict[str, str] | None = None,
        sign: Callable[[RemotingCommand], None] | None = None,
    ) -> None:
        """``namesrv_config``: lines for a namesrv.properties (e.g. ``tls.*``); ``sign``: applied to the
        requests this harness sends itself (ACL credentials)."""
        self.store_dir = Path(store_dir)
        self.extra_config = extra_config or {}
        self.namesrv_config = namesrv_config
        self.sign = sign
        self.proc: subprocess.Popen[str] | None = None
        self.namesrv_addr = ""
        self.broker_addr = ""
        self.broker_port = 0
        self.namesrv_port = 0
        # The gRPC endpoint (apache.rocketmq.v2) ``python -m gateway`` serves; on a free port, kept on restart.
        self.grpc_addr = ""
        self.grpc_port = 0
        self.output: list[str] = []
        self._pump: threading.Thread | None = None

    def start(self, timeout: float = 30.0) -> GatewayServers:
        conf = self.store_dir / "broker.conf"
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self.namesrv_addr = self.broker_addr = ""
        lines = {
            "brokerClusterName": "DefaultCluster",
            "brokerName": "broker-a",
            "brokerIP1": "127.0.0.1",
            "storePathRootDir": str(self.store_dir / "store"),
            "listenPort": str(self.broker_port),
            "grpcServerPort": str(self.grpc_port),
            **self.extra_config,
        }
        conf.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
        env = dict(os.environ, PYTHONUNBUFFERED="1", HOME=str(self.store_dir))
        namesrv_args = []
        if self.namesrv_config is not None:
            namesrv_conf = self.store_dir / "namesrv.properties"
            namesrv_conf.write_text("".join(f"{k}={v}\n" for k, v in self.namesrv_config.items()))
            namesrv_args = ["--namesrv-config", str(namesrv_conf)]
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gateway",
                "--namesrv-port",
                str(self.namesrv_port),
                "--broker-config",
                str(conf),
                "--bind",
                "127.0.0.1",
                *namesrv_args,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            preexec_fn=default_sigint,
        )
        # One thread reads the child's output from the start (so its pipe never fills); the ready line
        # is handed over through an event. (select() on a buffered pipe can miss lines already read.)
        ready = threading.Event()
        proc = self.proc

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                self.output.append(line)
                m = _READY.search(line)
                if m and not ready.is_set():
                    self.namesrv_addr, self.broker_addr = m.group(1), m.group(2)
                    grpc = _GRPC.search(line)
                    self.grpc_addr = grpc.group(1) if grpc else ""
                    ready.set()
            ready.set()  # EOF: the child died

        self._pump = threading.Thread(target=pump, daemon=True)
        self._pump.start()
        deadline = time.monotonic() + timeout
        while not ready.wait(0.2):
            if time.monotonic() > deadline or proc.poll() is not None:
                break
        if self.namesrv_addr and proc.poll() is None:
            self.namesrv_port = int(self.namesrv_addr.rpartition(":")[2])
            self.broker_port = int(self.broker_addr.rpartition(":")[2])
            if self.grpc_addr:
                self.grpc_port = int(self.grpc_addr.rpartition(":")[2])
            return self
        self.kill()
        raise RuntimeError("gateway did not start:\n" + "".join(self.output))

    def _reap(self) -> None:
        assert self.proc is not None
        if self._pump is not None:
            self._pump.join(5)
            self._pump = None
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.proc = None

    def create_topic(self, topic: str, queues: int = 4, order: bool = False) -> None:
        """UPDATE_AND_CREATE_TOPIC on the broker, then wait until the NameServer routes it."""
        request = create_topic_request(topic, queues, order)
        if self.sign is not None:
            self.sign(request)
        resp = call(self.broker_addr, request)
        assert resp.code == 0, resp.remark
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            route = call(
                self.namesrv_addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
            )
            if route.code == 0:
                return
            time.sleep(0.1)
        raise RuntimeError(f"topic {topic} never reached the name server")

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGINT and wait: a clean shutdown."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        rc = self.proc.returncode
        self._reap()
        return rc

    def close(self) -> None:
        """Stop, then remove the store (the configuration and the output stay): a broker's commitlog reserves
        its 1 GB on disk, and a test run starts dozens of brokers in fixtures that live until a module ends."""
        self.stop()
        shutil.rmtree(self.store_dir / "store", ignore_errors=True)

    def kill(self) -> None:
        """SIGKILL: a crash."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self._reap()

    def restart(self) -> GatewayServers:
        """Stop cleanly and start again on the same ports and store."""
        self.stop()
        return self.start()
