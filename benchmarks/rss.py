"""Resident memory of a NameServer and a broker: idle, then holding 1,000 topics x 8 queues and 500 client
connections (each has sent a heartbeat, as a producer would).

    python -m benchmarks.rss                                   # ours: two processes, temporary store
    python -m benchmarks.rss --namesrv HOST:PORT --broker HOST:PORT --namesrv-pid P --broker-pid Q   # any pair

Reads VmRSS (and RssAnon, the heap) from /proc of each process. Ours are started as ``python -m
gateway.namesrv`` and ``python -m gateway.broker`` on loopback. Apache's reference (91 + 115 MB idle) is
the figure the performance issue gives for 4.9.8 on this machine; ``benchmarks/versus.py`` measures Apache's
pair in the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.wire import SetupError, rpc
from compat_tests.servers import create_topic_request, free_port
from gateway.remoting import fastjson
from gateway.remoting.bodies import HeartbeatData, ProducerData
from gateway.remoting.codec import encode
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand

APACHE_IDLE_MB = (91, 115)  # NameServer, broker: Apache RocketMQ 4.9.8 on this machine class (issue figures)


def memory(pid: int) -> tuple[float, float]:
    """(VmRSS, RssAnon) of ``pid`` in MB."""
    status = Path(f"/proc/{pid}/status").read_text()
    rss, anon = (int(re.search(rf"{k}:\s+(\d+)", status).group(1)) for k in ("VmRSS", "RssAnon"))  # type: ignore[union-attr]
    return rss / 1024, anon / 1024


@dataclass
class Pair:
    """A running NameServer + broker: two child processes (more brokers after the first: ``start_ours(brokers=N)``)."""

    target: str  # "ours" or "apache"
    namesrv: str
    broker: str
    procs: list[subprocess.Popen[bytes]]

    @property
    def namesrv_pid(self) -> int:
        return self.procs[0].pid

    @property
    def broker_pid(self) -> int:
        return self.procs[1].pid

    def stop(self) -> None:
        """Stop every process, brokers first (as an operator would)."""
        for proc in reversed(self.procs):
            stop_process(proc)


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM ``proc`` if it runs, SIGKILL it if it is still there after 30 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def start_ours(
    root: Path, broker_lines: dict[str, str] | None = None, brokers: int = 1
) -> tuple[list[subprocess.Popen[bytes]], str, str]:
    """Our NameServer and broker as two processes on loopback (as Apache runs them), stores under ``root``;
    ``broker_lines`` adds or replaces broker.conf lines. ``brokers`` > 1 starts more broker processes in the same
    cluster (broker-b, broker-c... with stores ``root/store-b``...). Returns the processes (the NameServer's first),
    the NameServer's address and broker-a's."""
    ns_port = free_port()
    (root / "namesrv.properties").write_text(
        f"listenPort={ns_port}\nbindAddress=127.0.0.1\nkvConfigPath={root / 'kv.json'}\n"
    )
    servers = [("gateway.namesrv", "namesrv.properties", root)]
    broker_addr = ""
    for i in range(brokers):
        letter = chr(ord("a") + i)
        suffix = "" if i == 0 else f"-{letter}"
        broker_port = free_port()
        broker_addr = broker_addr or f"127.0.0.1:{broker_port}"
        lines = {
            "brokerName": f"broker-{letter}",
            "brokerIP1": "127.0.0.1",
            "bindAddress": "127.0.0.1",
            "listenPort": str(broker_port),
            "namesrvAddr": f"127.0.0.1:{ns_port}",
            "storePathRootDir": str(root / f"store{suffix}"),
            "mappedFileSizeCommitLog": str(64 << 20),
            **(broker_lines or {}),
        }
        (root / f"broker{suffix}.conf").write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
        home = root / f"home{suffix}" if suffix else root  # each broker its own log files
        home.mkdir(exist_ok=True)
        servers.append(("gateway.broker", f"broker{suffix}.conf", home))
    procs = []
    for module, conf, home in servers:
        command = [sys.executable, "-m", module, "-c", str(root / conf)]
        procs.append(
            subprocess.Popen(
                command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ, HOME=str(home))
            )
        )  # logs under HOME/logs
    return procs, f"127.0.0.1:{ns_port}", broker_addr


def wait_registered(namesrv: str, timeout: float = 60, broker_id: int | None = None) -> None:
    """Until the NameServer lists a broker (with ``broker_id``, that id of broker-a: a slave, say)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, SetupError):
            resp = rpc(namesrv, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, language="JAVA"))
            table = fastjson.loads(resp.body).get("brokerAddrTable") if resp.code == ResponseCode.SUCCESS else None
            ids = {str(k) for k in (table or {}).get("broker-a", {}).get("brokerAddrs", {})}
            if table and (broker_id is None or str(broker_id) in ids):
                return
        time.sleep(0.2)
    raise SystemExit("the broker did not register in time")


def load(broker: str, topics: int, queues: int, connections: int) -> list[socket.socket]:
    """Create the topics, then open the connections and send a heartbeat on each; the sockets stay open."""
    for i in range(topics):
        resp = rpc(broker, create_topic_request(f"RssTopic{i}", queues))
        if resp.code != ResponseCode.SUCCESS:
            raise SystemExit(f"topic {i}: {resp.code} {resp.remark}")
    host, _, port = broker.rpartition(":")
    socks = []
    for i in range(connections):
        s = socket.create_connection((host, int(port)), timeout=10)
        body = fastjson.dumps(HeartbeatData(f"127.0.0.1@rss-{i}", [ProducerData("rss_pg")]))
        request = RemotingCommand.request(RequestCode.HEART_BEAT, body=body, language="JAVA")
        request.opaque = 1
        s.sendall(encode(request))
        socks.append(s)
    for s in socks:  # every heartbeat answered
        if not s.recv(65536):
            raise SystemExit("a connection was closed")
    return socks


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.rss", description=__doc__.splitlines()[0])
    p.add_argument("--namesrv", help="a running NameServer (with --broker and both pids)")
    p.add_argument("--broker")
    p.add_argument("--namesrv-pid", type=int)
    p.add_argument("--broker-pid", type=int)
    p.add_argument("--topics", type=int, default=1000)
    p.add_argument("--queues", type=int, default=8)
    p.add_argument("--connections", type=int, default=500)
    args = p.parse_args(argv)
    with contextlib.ExitStack() as stack:
        if args.namesrv:
            if not (args.broker and args.namesrv_pid and args.broker_pid):
                p.error("--namesrv needs --broker, --namesrv-pid and --broker-pid")
            namesrv, broker, pids = args.namesrv, args.broker, (args.namesrv_pid, args.broker_pid)
            label = "measured pair"
        else:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rmq-rss-")))
            procs, namesrv, broker = start_ours(root)
            for proc in procs:
                stack.callback(proc.wait, 15)
                stack.callback(proc.terminate)
            pids = (procs[0].pid, procs[1].pid)
            label = "rocketmq-gateway"
        wait_registered(namesrv)
        time.sleep(3)  # settled
        idle = [memory(pid) for pid in pids]
        started = time.monotonic()
        socks = load(broker, args.topics, args.queues, args.connections)
        for s in socks:
            stack.callback(s.close)
        time.sleep(3)
        loaded = [memory(pid) for pid in pids]
        took = time.monotonic() - started
    total_idle = idle[0][0] + idle[1][0]
    ref = sum(APACHE_IDLE_MB)
    print(f"{label}: NameServer + broker resident memory (MB), VmRSS (heap RssAnon)")
    print(f"  idle                        {idle[0][0]:6.1f} ({idle[0][1]:.1f}) + {idle[1][0]:6.1f} ({idle[1][1]:.1f})"
          f" = {total_idle:.1f}")  # fmt: skip
    print(f"  {args.topics} topics x {args.queues} queues, {args.connections} connections"
          f"  {loaded[0][0]:6.1f} ({loaded[0][1]:.1f}) + {loaded[1][0]:6.1f} ({loaded[1][1]:.1f})"
          f" = {loaded[0][0] + loaded[1][0]:.1f}   (set up in {took:.1f} s)")  # fmt: skip
    print(f"  idle vs Apache 4.9.8's {APACHE_IDLE_MB[0]} + {APACHE_IDLE_MB[1]} = {ref} MB (issue figure, not measured"
          f" here): {total_idle / ref:.2f}x (goal <= 0.20x)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
