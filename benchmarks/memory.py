"""Broker memory while 1,000 connections each declare a 16 MiB frame and trickle it (the memory budget at work).

    python -m benchmarks.memory                       # the broker's default remotingMaxBufferedBytes (512 MiB)
    python -m benchmarks.memory --cap 128MiB          # remotingMaxBufferedBytes=134217728
    python -m benchmarks.memory --connections 200 --duration 10

Starts ``python -m gateway`` (NameServer + broker in one process, temporary store) and, on loopback only:

* **attack**: ``--connections`` sockets, each sending a length prefix that declares the largest frame
  allowed (16 MiB) and then ``--chunk`` bytes every ``--interval`` seconds, never completing it; a socket
  the broker closes is reopened (``--no-reconnect`` to stop that), so the pressure lasts ``--duration``.
* **probes**, before, during and after the attack: a producer on a connection opened before the attack
  sends a 1 KiB message every 20 ms (request written to response read), and another sends a
  4 MiB - 4 KiB message every second (the largest a normal producer sends).
* **memory** of the server process from ``/proc/PID/status`` every 50 ms: RssAnon (heap, what the budget
  bounds) and VmRSS (also the mapped commitlog pages the 4 MiB producer writes), against the values before
  the attack plus the cap; VmHWM (the kernel's own peak VmRSS) at the end.

It stops by itself; the exit status is 1 when the peak RssAnon went past its value before the attack + cap +
``--overhead`` or a probe failed during the attack, 2 when the servers did not start.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import selectors
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from compat_tests.servers import GatewayServers
from gateway.broker.config import BrokerConfig
from gateway.remoting.codec import FrameDecoder
from gateway.remoting.codes import MAX_FRAME_LENGTH

from .wire import STORED_CODES, SendFrameBuilder, SetupError, ensure_topic

MiB = 1024 * 1024
TOPIC = "BenchmarkMemory"
_SIZE = re.compile(r"(\d+)\s*(KiB|MiB|GiB|)$", re.IGNORECASE)
_UNITS = {"": 1, "kib": 1024, "mib": MiB, "gib": 1024 * MiB}
# The longest frame a peer may declare: length + 4 <= MAX_FRAME_LENGTH.
_PREFIX = struct.pack(">i", MAX_FRAME_LENGTH - 4)
_PHASES = ("before", "during", "after")


def parse_size(text: str) -> int:
    """``536870912``, ``512MiB``, ``64 KiB``..."""
    m = _SIZE.match(text.strip())
    if m is None:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def status_kib(pid: int) -> dict[str, int]:
    """The memory lines of /proc/PID/status (VmRSS, VmHWM, RssAnon, RssFile...), in KiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if value.endswith(" kB"):
            out[key] = int(value.split()[0])
    return out


class RssSampler(threading.Thread):
    """VmRSS and RssAnon (heap: what the budget bounds) every 50 ms, the highest kept per phase.

    RssFile is mostly the store's mapped commitlog, which the 4 MiB producer fills: page cache, not heap.
    """

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.phase = "before"
        self.peak: dict[str, dict[str, int]] = {p: {"VmRSS": 0, "RssAnon": 0} for p in _PHASES}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.05):
            with contextlib.suppress(OSError):
                now = status_kib(self.pid)
                peak = self.peak[self.phase]
                for key in peak:
                    peak[key] = max(peak[key], now[key])


@dataclass
class ProbeStats:
    """Latencies (ms) and failures of one probe, per phase."""

    latencies: dict[str, list[float]] = field(default_factory=lambda: {p: [] for p in _PHASES})
    errors: dict[str, list[str]] = field(default_factory=lambda: {p: [] for p in _PHASES})

    def line(self, phase: str) -> str:
        lat = sorted(self.latencies[phase])
        errors = self.errors[phase]
        if not lat:
            return f"no answer ({len(errors)} errors: {errors[:1]})"
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
        text = f"{len(lat):5d} sends  p50 {statistics.median(lat):7.1f}  p99 {p99:7.1f}  max {lat[-1]:7.1f} ms"
        return text + (f"  {len(errors)} errors, e.g. {errors[0]}" if errors else "")


class Producer(threading.Thread):
    """Sends one message at a time on one connection, opened before the attack, every ``period`` seconds."""

    def __init__(self, addr: str, broker_name: str, body_size: int, period: float, sampler: RssSampler) -> None:
        super().__init__(daemon=True)
        self.builder = SendFrameBuilder(TOPIC, "BenchmarkMemoryProducer", "TagA", b"m" * body_size, 4)
        self.template = self.builder.template(broker_name)
        self.period = period
        self.sampler = sampler
        self.stats = ProbeStats()
        self.stop = threading.Event()
        host, _, port = addr.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10)

    def run(self) -> None:
        decoder = FrameDecoder()
        opaque = 0
        while not self.stop.wait(self.period):
            phase = self.sampler.phase
            opaque += 1
            started = time.perf_counter()
            try:
                self.sock.sendall(b"".join(self.builder.frames(self.template, [opaque % 4], opaque)))
                resp = None
                while resp is None:
                    data = self.sock.recv(1 << 20)
                    if not data:
                        raise ConnectionError("closed by the broker")
                    resp = next((c for c in decoder.feed(data) if c.opaque == opaque), None)
            except TimeoutError as e:  # the answer may still come; it is told apart by its opaque
                self.stats.errors[phase].append(repr(e))
                continue
            except OSError as e:
                self.stats.errors[phase].append(repr(e))
                return
            if resp.code in STORED_CODES:
                self.stats.latencies[phase].append((time.perf_counter() - started) * 1000)
            else:
                self.stats.errors[phase].append(f"code {resp.code} {resp.remark}")


@dataclass
class AttackStats:
    opened: int = 0
    closed_by_broker: int = 0
    bytes_sent: int = 0
    connect_errors: int = 0


class Attack:
    """Sockets that each declare a 16 MiB frame and trickle it, never finishing; reopened when closed."""

    def __init__(self, addr: str, connections: int, chunk: int, reconnect: bool) -> None:
        host, _, port = addr.rpartition(":")
        self.target = (host, int(port))
        self.connections = connections
        self.chunk = memoryview(bytes(chunk))
        self.reconnect = reconnect
        self.sel = selectors.DefaultSelector()
        self.sent: dict[socket.socket, int] = {}
        self.stats = AttackStats()

    def open(self, n: int) -> None:
        for _ in range(n):
            try:
                sock = socket.create_connection(self.target, timeout=5)
            except OSError:
                self.stats.connect_errors += 1
                continue
            sock.setblocking(False)
            sock.send(_PREFIX)
            self.sent[sock] = 0
            self.sel.register(sock, selectors.EVENT_READ)
            self.stats.opened += 1

    def drop(self, sock: socket.socket) -> None:
        self.sel.unregister(sock)
        del self.sent[sock]
        sock.close()
        self.stats.closed_by_broker += 1

    def tick(self) -> None:
        """One trickle to every open socket, then notice closed ones and (maybe) reopen that many."""
        limit = MAX_FRAME_LENGTH - 8  # never the last byte
        for sock, sent in list(self.sent.items()):
            if sent >= limit:
                continue
            try:
                n = sock.send(self.chunk[: limit - sent])
            except BlockingIOError:
                continue
            except OSError:  # reset by the broker
                self.drop(sock)
                continue
            self.sent[sock] = sent + n
            self.stats.bytes_sent += n
        for key, _ in self.sel.select(0):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                data = sock.recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                self.drop(sock)
        if self.reconnect:
            self.open(min(100, self.connections - len(self.sent)))

    def close(self) -> None:
        for sock in list(self.sent):
            self.sel.unregister(sock)
            sock.close()
        self.sent.clear()
        self.sel.close()


def run(args: argparse.Namespace) -> int:
    cap = args.cap or BrokerConfig().remotingMaxBufferedBytes
    extra = {"remotingMaxBufferedBytes": str(args.cap)} if args.cap else {}
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        servers = GatewayServers(Path(tmp), extra_config=extra)
        try:
            servers.start()
        except RuntimeError as e:
            print(e, file=sys.stderr)
            return 2
        try:
            return measure(args, servers, cap)
        except SetupError as e:
            print(e, file=sys.stderr)
            return 2
        finally:
            servers.stop()


def measure(args: argparse.Namespace, servers: GatewayServers, cap: int) -> int:
    assert servers.proc is not None
    pid = servers.proc.pid
    small = SendFrameBuilder(TOPIC, "BenchmarkMemoryProducer", "TagA", b"m" * 1024, 4)
    queues = ensure_topic(servers.namesrv_addr, TOPIC, 4, "auto", small)
    broker_name = queues[0].broker_name
    sampler = RssSampler(pid)
    probes = {
        "1 KiB every 20 ms": Producer(servers.broker_addr, broker_name, 1024, 0.02, sampler),
        "4 MiB - 4 KiB every 1 s": Producer(servers.broker_addr, broker_name, 4 * MiB - 4096, 1.0, sampler),
    }
    baseline = status_kib(pid)
    sampler.start()
    for probe in probes.values():
        probe.start()
    time.sleep(3)

    print(
        f"server pid {pid}, remotingMaxBufferedBytes {cap / MiB:.0f} MiB, baseline VmRSS"
        f" {baseline['VmRSS'] / 1024:.0f} MiB (RssAnon {baseline['RssAnon'] / 1024:.0f} MiB); "
        f"attack: {args.connections} connections x 16 MiB declared, {args.chunk} B every {args.interval} s each,"
        f" for {args.duration} s",
        flush=True,
    )
    attack = Attack(servers.broker_addr, args.connections, args.chunk, not args.no_reconnect)
    sampler.phase = "during"
    started = time.monotonic()
    attack.open(args.connections)
    opened_in = time.monotonic() - started
    deadline = started + args.duration
    next_report = started + 5
    while (now := time.monotonic()) < deadline:
        attack.tick()
        if now >= next_report:
            next_report += 5
            print(
                f"  t={now - started:4.0f} s  RssAnon {status_kib(pid)['RssAnon'] / 1024:6.0f} MiB"
                f"  open {len(attack.sent):5d}  closed by broker {attack.stats.closed_by_broker:6d}"
                f"  sent {attack.stats.bytes_sent / MiB:7.0f} MiB",
                flush=True,
            )
        time.sleep(max(0.0, args.interval - (time.monotonic() - now)))
    attack.close()
    sampler.phase = "after"
    time.sleep(3)
    for probe in probes.values():
        probe.stop.set()
        probe.join(10)
    sampler.stop.set()
    sampler.join()
    after = status_kib(pid)
    during = sampler.peak["during"]
    over = during["RssAnon"] - baseline["RssAnon"] - cap // 1024
    evictions = sum("remotingMaxBufferedBytes=" in line for line in servers.output)
    a = attack.stats
    print(
        f"attack: opened {a.opened} connections ({a.connect_errors} connect errors, all {args.connections} in"
        f" {opened_in:.1f} s), {a.closed_by_broker} closed by the broker ({evictions} logged as over the budget),"
        f" {a.bytes_sent / MiB:.0f} MiB sent"
    )
    for key in ("RssAnon", "VmRSS"):
        print(
            f"{key}: before {baseline[key] / 1024:.0f} MiB, peak during the attack {during[key] / 1024:.0f} MiB,"
            f" 3 s after {after[key] / 1024:.0f} MiB"
        )
    print(
        f"VmHWM (kernel's peak VmRSS) {after['VmHWM'] / 1024:.0f} MiB; RssAnon peak - before ="
        f" {(during['RssAnon'] - baseline['RssAnon']) / 1024:.0f} MiB against a cap of {cap / MiB:.0f} MiB:"
        f" {over / 1024:+.0f} MiB past the cap (allowed overhead {args.overhead / MiB:.0f} MiB)"
    )
    failed = over * 1024 > args.overhead
    for name, probe in probes.items():
        print(f"producer {name}:")
        for phase in _PHASES:
            print(f"  {phase:6s}  {probe.stats.line(phase)}")
        failed |= bool(probe.stats.errors["during"]) or not probe.stats.latencies["during"]
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.memory", description=__doc__.splitlines()[0])
    parser.add_argument("--cap", type=parse_size, default=0, help="remotingMaxBufferedBytes (default: the broker's)")
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--chunk", type=parse_size, default=8 * 1024, help="bytes per connection per interval")
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between trickles")
    parser.add_argument("--duration", type=float, default=25.0, help="seconds of attack")
    parser.add_argument("--no-reconnect", action="store_true", help="do not reopen connections the broker closed")
    parser.add_argument(
        "--overhead", type=parse_size, default=256 * MiB, help="RssAnon allowed past baseline + cap (else exit 1)"
    )
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
