"""Config-change flood: many new consumer groups (or auto-created topics) at once, and what other clients see.

    python -m benchmarks.flood                                 # 3000 new groups against this tree
    python -m benchmarks.flood --src "$BASE" --src .           # $BASE: a checkout of the commit before, alternating
    python -m benchmarks.flood --kind send --requests 1000     # new topics through TBW102 instead

Each run starts a NameServer and a Broker in one child process (as ``python -m gateway`` does), importing
``gateway`` from the ``--src`` tree, with a temporary store. A victim process sends GET_MAX_OFFSET every
``--interval`` over its own connection and records each latency, while the flood sends N HEART_BEATs each
naming a new consumer group (or N SEND_MESSAGEs each to a new topic through TBW102) from M connections
with W requests in flight each. The child counts the REGISTER_BROKER requests its NameServer receives,
the broker registrations that failed or timed out (its log) and the config files written. After the
flood the servers are stopped (SIGINT) and the config files are checked to hold every group or topic.
"""

from __future__ import annotations

import argparse
import array
import collections
import json
import multiprocessing
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.remoting.codec import FrameDecoder, encode
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand

# Not a RocketMQ code: the child's NameServer answers it with its counters.
STATS_CODE = 31337
_READY = "flood-serve ready:"
_REPO = Path(__file__).resolve().parent.parent


def _request(code: int, ext: dict[str, str] | None = None, body: bytes = b"") -> RemotingCommand:
    return RemotingCommand.request(code, ext, body, language="JAVA", version=409)


def _heartbeat(group: str, client_id: str) -> RemotingCommand:
    """What a 4.9 push consumer of ``group`` subscribed to one topic sends."""
    consumer = {
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
        "consumeType": "CONSUME_PASSIVELY",
        "groupName": group,
        "messageModel": "CLUSTERING",
        "subscriptionDataSet": [
            {
                "classFilterMode": False,
                "codeSet": [],
                "expressionType": "TAG",
                "subString": "*",
                "subVersion": 1,
                "tagsSet": [],
                "topic": "FloodTopic",
            }
        ],
        "unitMode": False,
    }
    body = json.dumps({"clientID": client_id, "consumerDataSet": [consumer], "producerDataSet": []})
    return _request(RequestCode.HEART_BEAT, body=body.encode())


def _send(topic: str) -> RemotingCommand:
    """SEND_MESSAGE to a topic the broker does not know: it is created from TBW102."""
    ext = {
        "producerGroup": "flood_producer",
        "topic": topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": "0",
        "sysFlag": "0",
        "bornTimestamp": str(int(time.time() * 1000)),
        "flag": "0",
        "properties": "WAIT\x01true\x02",
    }
    return _request(RequestCode.SEND_MESSAGE, ext, b"flood")


def _call(sock: socket.socket, decoder: FrameDecoder, request: RemotingCommand) -> RemotingCommand:
    """One request/response on a blocking socket; requests the server sends meanwhile are skipped."""
    sock.sendall(encode(request))
    while True:
        data = sock.recv(1 << 16)
        if not data:
            raise ConnectionError("connection closed")
        for cmd in decoder.feed(data):
            if cmd.is_response and cmd.opaque == request.opaque:
                return cmd


def _stats(namesrv: str) -> dict[str, Any]:
    host, _, port = namesrv.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        return json.loads(_call(sock, FrameDecoder(), _request(STATS_CODE)).body)


# ---------------------------------------------------------------------------------------------- the child


def serve(store: Path, broker_set: list[str]) -> None:
    """The child: NameServer + Broker with counters (imports ``gateway`` from whatever tree is on PYTHONPATH)."""
    from twisted.logger import LogLevel, globalLogPublisher

    import gateway.broker.managers as managers
    from gateway.__main__ import GatewayService
    from gateway.broker.config import load_broker_config
    from gateway.broker.controller import BrokerController
    from gateway.namesrv.config import load_namesrv_config
    from gateway.namesrv.service import NamesrvController
    from gateway.runner import run_services, start_logging

    counts: collections.Counter[str] = collections.Counter()
    write = managers.write_atomically

    def counted_write(path: Any, data: bytes) -> None:
        counts[f"write {Path(path).name}"] += 1
        write(path, data)

    managers.write_atomically = counted_write

    def observe(event: dict[str, Any]) -> None:
        if event.get("log_level") == LogLevel.warn and str(event.get("log_format", "")).startswith("register broker"):
            counts["registration failed"] += 1

    def hook(channel: Any, request: RemotingCommand) -> RemotingCommand | None:
        if request.code == RequestCode.REGISTER_BROKER:
            counts["REGISTER_BROKER"] += 1
        elif request.code == STATS_CODE:
            return request.response(ResponseCode.SUCCESS, body=json.dumps(counts).encode())
        return None

    namesrv_cfg = load_namesrv_config(None, {"listenPort": "0", "bindAddress": "127.0.0.1"})
    props = {
        "brokerClusterName": "DefaultCluster",
        "brokerName": "broker-a",
        "brokerIP1": "127.0.0.1",
        "bindAddress": "127.0.0.1",
        "listenPort": "0",
        "storePathRootDir": str(store),
        **dict(kv.split("=", 1) for kv in broker_set),
    }
    broker_cfg, store_cfg = load_broker_config(None, props)
    start_logging("info")
    globalLogPublisher.addObserver(observe)

    def build(reactor: Any) -> list[Any]:
        namesrv = NamesrvController(namesrv_cfg, reactor)
        namesrv.dispatcher.hooks.append(hook)
        return [GatewayService(namesrv, BrokerController(broker_cfg, store_cfg, reactor))]

    def ready(services: list[Any]) -> str:
        cfg = services[0].broker.config
        return f"{_READY} namesrv {cfg.namesrvAddr} broker {cfg.broker_addr}"

    run_services(build, ready)


class Servers:
    """The child process running :func:`serve` from ``src``, its log in ``log``."""

    def __init__(self, src: Path, store: Path, broker_set: list[str]) -> None:
        self.log = store.parent / "servers.log"
        env = dict(os.environ, PYTHONPATH=str(src), PYTHONUNBUFFERED="1")
        cmd = [sys.executable, str(Path(__file__).resolve()), "--serve", str(store)]
        cmd += [f"--broker-set={kv}" for kv in broker_set]
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=src)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.proc.poll() is None:
            for line in self.log.read_text().splitlines():
                if line.startswith(_READY):
                    _, self.namesrv, _, self.broker = line[len(_READY) :].split()
                    return
            time.sleep(0.1)
        self.proc.kill()
        raise RuntimeError("servers did not start:\n" + self.log.read_text()[-5000:])

    def stop(self) -> float:
        """SIGINT and wait; the seconds a clean stop took."""
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return time.monotonic() - t0


# ---------------------------------------------------------------------------------------------- the victim


def _victim(broker: str, interval: float, stop: Any, pipe: Any) -> None:
    """GET_MAX_OFFSET every ``interval`` seconds until ``stop`` is set; sends the latencies (us) through ``pipe``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    host, _, port = broker.rpartition(":")
    lat = array.array("I")
    failed = 0
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        decoder = FrameDecoder()
        pipe.send("ready")
        next_at = time.monotonic()
        while not stop.is_set():
            req = _request(RequestCode.GET_MAX_OFFSET, {"topic": "SELF_TEST_TOPIC", "queueId": "0"})
            t0 = time.monotonic_ns()
            try:
                resp = _call(sock, decoder, req)
            except OSError:
                failed += 1
                break
            lat.append((time.monotonic_ns() - t0) // 1000)
            failed += resp.code != ResponseCode.SUCCESS
            next_at += interval
            time.sleep(max(0.0, next_at - time.monotonic()))
            next_at = max(next_at, time.monotonic())
    pipe.send({"lat": lat.tobytes(), "failed": failed})


# ---------------------------------------------------------------------------------------------- the flood


@dataclass(slots=True)
class _FloodConn:
    sock: socket.socket
    decoder: FrameDecoder
    inflight: set[int]
    backlog: bytearray


def flood(broker: str, requests: list[RemotingCommand], connections: int, window: int, timeout: float) -> dict:
    """Send ``requests`` over ``connections`` sockets, ``window`` in flight on each; seconds and codes."""
    host, _, port = broker.rpartition(":")
    sel = selectors.DefaultSelector()
    conns = []
    for _ in range(connections):
        sock = socket.create_connection((host, int(port)), timeout=10)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        conn = _FloodConn(sock, FrameDecoder(), set(), bytearray())
        sel.register(sock, selectors.EVENT_READ, conn)
        conns.append(conn)
    todo = collections.deque(requests)
    codes: collections.Counter[int] = collections.Counter()

    def fill(c: _FloodConn) -> None:
        while todo and len(c.inflight) < window:
            req = todo.popleft()
            req.opaque = len(todo) + 1
            c.inflight.add(req.opaque)
            c.backlog += encode(req)
        if c.backlog:
            n = c.sock.send(c.backlog)
            del c.backlog[:n]

    t0 = time.monotonic()
    for c in conns:
        fill(c)
    deadline = t0 + timeout
    while any(c.inflight for c in conns) and time.monotonic() < deadline:
        for key, _ in sel.select(0.5):
            c = key.data
            data = c.sock.recv(1 << 18)
            if not data:
                raise ConnectionError("the broker closed a flood connection")
            for cmd in c.decoder.feed(data):
                if cmd.is_response and cmd.opaque in c.inflight:
                    c.inflight.discard(cmd.opaque)
                    codes[cmd.code] += 1
            fill(c)
    seconds = time.monotonic() - t0
    lost = sum(len(c.inflight) for c in conns)
    for c in conns:
        c.sock.close()
    return {"seconds": seconds, "codes": dict(codes), "unanswered": lost}


# ---------------------------------------------------------------------------------------------- a run


def _ms(values: array.array, q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))] / 1000.0 if values else float("nan")


def run_once(src: Path, args: argparse.Namespace, tag: str) -> dict[str, Any]:
    """Start the servers from ``src``, flood them while the victim measures, stop them, check the files."""
    with tempfile.TemporaryDirectory(prefix="flood-") as tmp:
        store = Path(tmp) / "store"
        servers = Servers(src, store, args.broker_set)
        try:
            if args.kind == "heartbeat":
                names = [f"flood_{tag}_{i}" for i in range(args.requests)]
                reqs = [_heartbeat(g, f"127.0.0.1@flood{i % args.connections}") for i, g in enumerate(names)]
            else:
                names = [f"FloodTopic_{tag}_{i}" for i in range(args.requests)]
                reqs = [_send(t) for t in names]
            ctx = multiprocessing.get_context("spawn")
            stop = ctx.Event()
            recv, send = ctx.Pipe(duplex=False)
            victim = ctx.Process(target=_victim, args=(servers.broker, args.interval, stop, send), daemon=True)
            victim.start()
            if not recv.poll(30) or recv.recv() != "ready":
                raise RuntimeError("the victim did not connect")
            before = _stats(servers.namesrv)
            result = flood(servers.broker, reqs, args.connections, args.window, args.timeout)
            stop.set()
            during = _stats(servers.namesrv)
            report = recv.recv() if recv.poll(60) else {"lat": b"", "failed": -1}
            victim.join(10)
            time.sleep(args.settle)
            after = _stats(servers.namesrv)
        finally:
            stop_seconds = servers.stop()
        lat = array.array("I")
        lat.frombytes(report["lat"])
        lat = array.array("I", sorted(lat))
        file = store / "config" / ("subscriptionGroup.json" if args.kind == "heartbeat" else "topics.json")
        text = file.read_text() if file.exists() else ""
        persisted = sum(f'"{name}"' in text for name in names)
        writes = {k[len("write ") :]: v for k, v in after.items() if k.startswith("write ")}
        return {
            "src": str(src),
            "kind": args.kind,
            "requests": args.requests,
            "seconds": result["seconds"],
            "codes": result["codes"],
            "unanswered": result["unanswered"],
            "victim_requests": len(lat),
            "victim_failed": report["failed"],
            "victim_p50_ms": _ms(lat, 0.5),
            "victim_p99_ms": _ms(lat, 0.99),
            "victim_max_ms": lat[-1] / 1000.0 if lat else float("nan"),
            "registrations_during": during.get("REGISTER_BROKER", 0) - before.get("REGISTER_BROKER", 0),
            "registrations_total": after.get("REGISTER_BROKER", 0) - before.get("REGISTER_BROKER", 0),
            "registrations_failed": after.get("registration failed", 0),
            "writes_during": sum(v for k, v in during.items() if k.startswith("write "))
            - sum(v for k, v in before.items() if k.startswith("write ")),
            "writes": writes,
            "stop_seconds": stop_seconds,
            "persisted": persisted,
        }


def render(r: dict[str, Any]) -> str:
    """Two lines per run."""
    what = "heartbeats with new groups" if r["kind"] == "heartbeat" else "sends to new topics"
    codes = ", ".join(f"{k}: {v}" for k, v in sorted(r["codes"].items(), key=lambda kv: int(kv[0])))
    writes = ", ".join(f"{k} {v}" for k, v in sorted(r["writes"].items()))
    return (
        f"{r['src']}: {r['requests']} {what} in {r['seconds']:.2f} s ({r['requests'] / r['seconds']:.0f}/s),"
        f" codes {{{codes}}}, unanswered {r['unanswered']}\n"
        f"  victim: {r['victim_requests']} GET_MAX_OFFSET, p50 {r['victim_p50_ms']:.2f} ms,"
        f" p99 {r['victim_p99_ms']:.2f} ms, max {r['victim_max_ms']:.2f} ms, failed {r['victim_failed']}\n"
        f"  REGISTER_BROKER at the NameServer: {r['registrations_during']} during the flood, "
        f"{r['registrations_total']} until settled; failed/timed out: {r['registrations_failed']}\n"
        f"  config writes during the flood: {r['writes_during']} (whole run: {writes or 'none'}); stop took"
        f" {r['stop_seconds']:.2f} s; {r['persisted']}/{r['requests']} names in the config file after stop"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.flood", description=__doc__.split("\n\n")[0])
    p.add_argument("--src", action="append", type=Path, help="source tree to run (repeatable; default this one)")
    p.add_argument("--kind", choices=("heartbeat", "send"), default="heartbeat")
    p.add_argument("--requests", type=int, default=3000, help="new groups or topics (default 3000)")
    p.add_argument("--connections", type=int, default=8, help="flood connections (default 8)")
    p.add_argument("--window", type=int, default=1, help="requests in flight per connection (default 1)")
    p.add_argument("--interval", type=float, default=0.01, help="victim request interval in s (default 0.01)")
    p.add_argument("--rounds", type=int, default=1, help="runs per source tree, alternating (default 1)")
    p.add_argument("--settle", type=float, default=2.0, help="wait after the flood before stopping (default 2 s)")
    p.add_argument("--timeout", type=float, default=900.0, help="flood time limit in s (default 900)")
    p.add_argument("--broker-set", action="append", default=[], metavar="KEY=VALUE", help="extra broker setting")
    p.add_argument("--save", metavar="JSON", help="write the results here")
    p.add_argument("--serve", metavar="STORE", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if min(args.requests, args.connections, args.window, args.rounds) < 1:
        p.error("--requests, --connections, --window and --rounds must be at least 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.serve:
        serve(Path(args.serve), args.broker_set)
        return
    srcs = [s.resolve() for s in args.src or [_REPO]]
    results = []
    for n in range(args.rounds):
        for i, src in enumerate(srcs):
            r = run_once(src, args, f"{n}{i}")
            print(render(r), flush=True)
            results.append(r)
    if args.save:
        Path(args.save).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
