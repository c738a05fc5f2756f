"""RocketMQ 5 clients through our gRPC endpoint beside 4.x clients through remoting, on one ``python -m gateway``.

    python -m benchmarks.sdk5                       # 2000 x 1 KB per path, 4 sending threads, 1 round
    python -m benchmarks.sdk5 --messages 5000 --rounds 3

Each round runs both paths against the same process (namesrv + broker + gRPC endpoint), in alternating order:

* ``grpc``: the official 5.x Python SDK (``rocketmq-python-client``, in its own venv: ``compat_tests/sdk5.py``),
  ``benchmarks/sdk5_driver.py`` in a child process: ``Producer.send`` from ``--threads`` threads, then a
  SimpleConsumer receiving ``--batch`` at a time (POP in the broker) and acking each message;
* ``remoting``: our 4.x Python client (``gateway.client.blocking``) in a child process, the same sends from the
  same number of threads, then pulls of ``--batch`` per queue with the offset committed after each.

Printed: send msgs/s and p50/p99 latency, receive msgs/s and p99 of one receive (or pull) call, and the server
process's CPU per message over each phase (its threads' ``/proc/<pid>/task/*/schedstat``), with gRPC/remoting
ratios. Each path uses a topic and group of its own so that neither sees the other's messages.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from compat_tests.sdk5 import sdk5_python
from compat_tests.servers import GatewayServers

from .sdk5_driver import cpu, timed_sends

DRIVER = Path(__file__).with_name("sdk5_driver.py")
QUEUES = 8
_names = itertools.count()


def _proc_cpu(pid: int) -> float:
    """CPU seconds the threads of ``pid`` ran so far, from their schedstat (nanoseconds, unlike stat's ticks)."""
    total = 0
    for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        with contextlib.suppress(OSError):  # a thread that just ended
            total += int(stat.read_text().split()[0])
    return total / 1e9


def _pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of sorted ``values``, in ms."""
    return values[min(len(values) - 1, int(q * len(values)))] * 1000 if values else float("nan")


def remoting_driver(a: dict[str, Any]) -> dict[str, Any]:
    """The remoting side, in its own process: our 4.x client's sends from threads, then pulls per queue."""
    from gateway.client import blocking, build_message
    from gateway.client.consumer import PullStatus

    body = b"x" * a["size"]
    with blocking.Producer(f"{a['group']}P", a["namesrv"]) as producer:
        producer.send(build_message(a["topic"], body))  # routes and connection, outside the timing
        figures = timed_sends(
            lambda: producer.send(build_message(a["topic"], body)), a["threads"], a["messages"] // a["threads"]
        )

    wanted, received, pull_latencies = figures["sent"] + 1, 0, []
    with blocking.PullConsumer(a["group"], a["namesrv"]) as consumer:
        queues = consumer.fetch_subscribe_message_queues(a["topic"])
        offsets = {mq: 0 for mq in queues}
        cpu0, start = cpu(), time.perf_counter()
        deadline = start + 120
        while received < wanted and time.perf_counter() < deadline:
            for mq in queues:
                call = time.perf_counter()
                result = consumer.pull(mq, "*", offsets[mq], a["batch"])
                pull_latencies.append(time.perf_counter() - call)
                if result.status is PullStatus.FOUND:
                    received += len(result.messages)
                    offsets[mq] = result.next_begin_offset
                    consumer.update_consume_offset(mq, offsets[mq])
        consumer.persist_consumer_offset()
    figures.update(
        received=received - 1,  # less the message sent before the timing
        receive_s=time.perf_counter() - start,
        receive_latencies=sorted(pull_latencies),
        receive_client_cpu=cpu() - cpu0,
    )
    return figures


def _run_driver(argv: list[str], server_pid: int) -> tuple[dict[str, Any], float, float]:
    """The driver's JSON figures and the CPU seconds the server process used up to the end of the sends (start-up
    included) and over the receives, split where the driver prints its phase line."""
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        before = _proc_cpu(server_pid)
        sent = before
        lines = []
        for line in proc.stdout:
            if line.startswith('{"phase"'):
                sent = _proc_cpu(server_pid)
            lines.append(line)
        after = _proc_cpu(server_pid)
        err = proc.stderr.read()
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"driver failed ({proc.returncode}):\n{err[-3000:]}")
    return json.loads(lines[-1]), sent - before, after - sent


def measure(servers: GatewayServers, path: str, args: argparse.Namespace) -> dict[str, Any]:
    """One path's run: the driver's figures plus the server's CPU per message over the whole run."""
    from gateway.client import blocking

    n = next(_names)
    topic, group = f"BenchSdk5{path.title()}{n}", f"BenchSdk5{path.title()}G{n}"
    with blocking.Admin(servers.namesrv_addr) as admin:
        admin.create_topic(topic, QUEUES)
    spec = {"topic": topic, "group": group, "messages": args.messages, "size": args.size, "threads": args.threads}
    spec["batch"] = args.batch
    if path == "grpc":
        argv = [sdk5_python(), str(DRIVER), json.dumps({**spec, "endpoint": servers.grpc_addr})]
    else:
        argv = [
            sys.executable,
            "-m",
            "benchmarks.sdk5",
            "--driver",
            json.dumps({**spec, "namesrv": servers.namesrv_addr}),
        ]
    assert servers.proc is not None
    figures, send_cpu, receive_cpu = _run_driver(argv, servers.proc.pid)
    sent = max(1, figures["sent"])
    return {
        "path": path,
        "send_rate": figures["sent"] / figures["send_s"],
        "send_p50": _pct(figures["send_latencies"], 0.5),
        "send_p99": _pct(figures["send_latencies"], 0.99),
        "receive_rate": figures["received"] / figures["receive_s"],
        "receive_p99": _pct(figures["receive_latencies"], 0.99),
        "received_all": figures["received"] == figures["sent"],
        "server_send_cpu_us": send_cpu / sent * 1e6,
        "server_receive_cpu_us": receive_cpu / sent * 1e6,
        "client_send_cpu_us": figures["send_client_cpu"] / sent * 1e6,
        "client_receive_cpu_us": figures["receive_client_cpu"] / sent * 1e6,
    }


COLUMNS = [
    ("send msgs/s", "send_rate", "{:.0f}", "higher"),
    ("send p50 ms", "send_p50", "{:.2f}", "lower"),
    ("send p99 ms", "send_p99", "{:.2f}", "lower"),
    ("receive msgs/s", "receive_rate", "{:.0f}", "higher"),
    ("receive call p99 ms", "receive_p99", "{:.1f}", "lower"),
    ("server CPU µs/msg, send", "server_send_cpu_us", "{:.0f}", "lower"),
    ("server CPU µs/msg, receive (+ack)", "server_receive_cpu_us", "{:.0f}", "lower"),
    ("client CPU µs/msg, send", "client_send_cpu_us", "{:.0f}", "lower"),
    ("client CPU µs/msg, receive (+ack)", "client_receive_cpu_us", "{:.0f}", "lower"),
]


def render(rows: list[dict[str, Any]]) -> str:
    """Medians over the rounds per path, and gRPC / remoting."""
    by_path = {p: [r for r in rows if r["path"] == p] for p in ("grpc", "remoting")}
    if not all(by_path.values()):
        return "\n".join(json.dumps(r) for r in rows)
    lines = [f"{'':34} {'gRPC (5.x SDK)':>15} {'remoting (4.x)':>15} {'gRPC/remoting':>14}  goal"]
    for title, key, fmt, goal in COLUMNS:
        g, r = (statistics.median(x[key] for x in by_path[p]) for p in ("grpc", "remoting"))
        ratio = f"{g / r:.2f}" if r else "-"
        lines.append(f"{title:34} {fmt.format(g):>15} {fmt.format(r):>15} {ratio:>14}  {goal}")
    complete = all(r["received_all"] for r in rows)
    lines.append(f"every message received on both paths: {'yes' if complete else 'NO'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sdk5", description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2000, help="messages per path and round")
    parser.add_argument("--size", type=int, default=1024, help="body bytes")
    parser.add_argument("--threads", type=int, default=4, help="sending threads of each client")
    parser.add_argument("--batch", type=int, default=32, help="messages per receive (gRPC) or pull (remoting)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds, each path once per round, order alternating")
    parser.add_argument("--only", choices=("grpc", "remoting"), help="measure one path (e.g. to profile it)")
    parser.add_argument("--driver", help=argparse.SUPPRESS)  # the remoting side's child process
    args = parser.parse_args(argv)
    if args.driver:
        print(json.dumps(remoting_driver(json.loads(args.driver))), flush=True)
        return 0
    sdk5_python()  # make the SDK's venv before anything is timed
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-sdk5-") as tmp:
        servers = GatewayServers(Path(tmp)).start()
        try:
            for i in range(args.rounds):
                order = ("grpc", "remoting") if i % 2 == 0 else ("remoting", "grpc")
                for path in [p for p in order if args.only in (None, p)]:
                    rows.append(measure(servers, path, args))
                    print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        finally:
            servers.stop()
    print(f"{args.messages} x {args.size} B per path, {args.threads} sending threads, batch {args.batch}, "
          f"{args.rounds} round(s), one python -m gateway")  # fmt: skip
    print(render(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
