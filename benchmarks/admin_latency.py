"""Latency of an ordinary client while other clients run the heaviest admin requests.

    python -m benchmarks.admin_latency [--queues 1024] [--heavy 4] [--seconds 5]

Starts our NameServer + Broker (temporary store, loopback), creates a topic with ``--queues`` queues and
one message in each, then measures a client that sends GET_MAX_OFFSET every 10 ms: first alone, then while
``--heavy`` clients each loop GET_TOPIC_STATS_INFO and GET_CONSUME_STATS over the whole topic. Prints the
ping's p50/p99/max in both phases and how long the heavy requests took.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path

from compat_tests.servers import GatewayServers, call
from gateway.remoting.codec import FrameDecoder, encode
from gateway.remoting.codes import RequestCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import SendMessageRequestHeader

TOPIC = "AdminLatency"
GROUP = "admin_latency_cg"


class Connection:
    """One persistent blocking connection: ``ask(request)`` returns the response."""

    def __init__(self, addr: str) -> None:
        host, _, port = addr.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=60)
        self.decoder = FrameDecoder()
        self.opaque = 0

    def ask(self, request: RemotingCommand) -> RemotingCommand:
        self.opaque += 1
        request.opaque = self.opaque
        self.sock.sendall(encode(request))
        while True:
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("closed")
            for cmd in self.decoder.feed(data):
                if cmd.opaque == self.opaque:
                    return cmd


def ping(addr: str, stop: threading.Event, out: list[float]) -> None:
    conn = Connection(addr)
    while not stop.is_set():
        t0 = time.perf_counter()
        conn.ask(RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": "0"}))
        out.append(time.perf_counter() - t0)
        time.sleep(0.01)


def heavy(addr: str, stop: threading.Event, out: list[float]) -> None:
    conn = Connection(addr)
    requests = [
        (RequestCode.GET_TOPIC_STATS_INFO, {"topic": TOPIC}),
        (RequestCode.GET_CONSUME_STATS, {"consumerGroup": GROUP, "topic": TOPIC}),
    ]
    i = 0
    while not stop.is_set():
        code, ext = requests[i % 2]
        t0 = time.perf_counter()
        resp = conn.ask(RemotingCommand.request(code, ext))
        assert resp.code == 0, resp.remark
        out.append(time.perf_counter() - t0)
        i += 1


def run_phase(addr: str, n_heavy: int, seconds: float) -> tuple[list[float], list[float]]:
    stop = threading.Event()
    pings: list[float] = []
    heavies: list[float] = []
    threads = [threading.Thread(target=ping, args=(addr, stop, pings))]
    threads += [threading.Thread(target=heavy, args=(addr, stop, heavies)) for _ in range(n_heavy)]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    return pings, heavies


def _ms(values: list[float]) -> str:
    if not values:
        return "n/a"
    v = sorted(values)
    p99 = v[min(len(v) - 1, int(len(v) * 0.99))]
    return f"p50 {statistics.median(v) * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms, max {v[-1] * 1e3:.2f} ms (n={len(v)})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queues", type=int, default=1024)
    ap.add_argument("--heavy", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        servers = GatewayServers(Path(tmp), {"maxTopicQueueNums": str(args.queues)}).start()
        try:
            servers.create_topic(TOPIC, args.queues)
            conn = Connection(servers.broker_addr)
            for qid in range(args.queues):
                h = SendMessageRequestHeader("admin_latency_pg", TOPIC, "TBW102", 4, qid, 0, 0, 0, "")
                assert conn.ask(RemotingCommand.request(RequestCode.SEND_MESSAGE, h.encode(), b"m")).code == 0
                ext = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": str(qid), "commitOffset": "1"}
                assert conn.ask(RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, ext)).code == 0
            call(servers.broker_addr, RemotingCommand.request(RequestCode.GET_TOPIC_STATS_INFO, {"topic": TOPIC}))
            alone, _ = run_phase(servers.broker_addr, 0, args.seconds)
            loaded, heavies = run_phase(servers.broker_addr, args.heavy, args.seconds)
        finally:
            servers.stop()
    print(f"topic with {args.queues} queues; {args.heavy} clients looping GET_TOPIC_STATS_INFO/GET_CONSUME_STATS")
    print(f"ping alone:         {_ms(alone)}")
    print(f"ping under load:    {_ms(loaded)}")
    print(f"heavy request time: {_ms(heavies)}")


if __name__ == "__main__":
    main()
