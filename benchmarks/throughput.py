"""Send and drain throughput of a RocketMQ NameServer + Broker, ours or Apache's, over the remoting protocol.

    python -m benchmarks.throughput                          # starts our servers (temporary store)
    python -m benchmarks.throughput --flush SYNC_FLUSH       # ... with flushDiskType=SYNC_FLUSH
    python -m benchmarks.throughput --namesrv 127.0.0.1:9876 # whatever that NameServer routes to

Phase 1 (send): resolve the topic route (creating the topic through TBW102 or UPDATE_AND_CREATE_TOPIC),
then N connections each keep up to W SEND_MESSAGE_V2 requests in flight, round-robin over the queues,
until the duration or the message count is reached. Phase 2 (drain): pipelined PULL_MESSAGE (32
messages, no suspend) over every queue from the offsets recorded before phase 1, advancing by
nextBeginOffset, and check that exactly the stored messages come back. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import array
import collections
import contextlib
import datetime
import itertools
import json
import multiprocessing
import os
import platform
import re
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compat_tests.servers import GatewayServers
from gateway.remoting.codec import FrameDecoder, ProtocolError
from gateway.remoting.codes import ResponseCode, response_code_text
from gateway.remoting.command import RemotingCommand
from gateway.remoting.message import MessageConst, decode_records

from .wire import (
    STORED_CODES,
    QueueRef,
    SendFrameBuilder,
    SetupError,
    ensure_topic,
    max_offset,
    pull_frame,
    scan_records,
)

# Apache RocketMQ 4.9.8 on this 2-core machine: 16 producer threads, 1 KB bodies, ASYNC_FLUSH.
APACHE_SEND = 37000.0
APACHE_DRAIN = 250000.0
MB = 1_000_000
_LINE_NO = re.compile(r":\d+\)$")
_PROJECT_FRAME = "(gateway/"
_READ = selectors.EVENT_READ
_WRITE = selectors.EVENT_WRITE


# ---------------------------------------------------------------------------------------------- connections


class _Conn:
    """A non-blocking client socket with a frame decoder and a write backlog, registered in a selector."""

    def __init__(self, addr: str, sel: selectors.BaseSelector) -> None:
        host, _, port = addr.rpartition(":")
        self.addr = addr
        self.sock = socket.create_connection((host.strip("[]"), int(port)), timeout=5)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setblocking(False)
        self.sel = sel
        self.decoder = FrameDecoder()
        self.backlog = bytearray()
        self.next_opaque = 1
        sel.register(self.sock, _READ, self)

    def write(self, data: bytes) -> None:
        """Send now, keeping what the socket does not take for :meth:`flush`."""
        if not self.backlog:
            try:
                n = self.sock.send(data)
            except BlockingIOError:
                n = 0
            if n == len(data):
                return
            data = data[n:]
            self.sel.modify(self.sock, _READ | _WRITE, self)
        self.backlog += data

    def flush(self) -> None:
        """The socket is writable: send the backlog."""
        try:
            n = self.sock.send(self.backlog)
        except BlockingIOError:
            return
        del self.backlog[:n]
        if not self.backlog:
            self.sel.modify(self.sock, _READ, self)

    def read(self) -> list[RemotingCommand] | None:
        """The responses that arrived; None once the connection is unusable (closed, reset, bad frame)."""
        try:
            data = self.sock.recv(1 << 18)
        except BlockingIOError:
            return []
        except OSError:
            return None
        if not data:
            return None
        try:
            return self.decoder.feed(data)
        except ProtocolError:
            return None

    def close(self) -> None:
        """Unregister and close."""
        self.sel.unregister(self.sock)
        self.sock.close()


# ---------------------------------------------------------------------------------------------- send phase


@dataclass(frozen=True, slots=True)
class SendPlan:
    """What every send worker needs (pickled into the worker processes)."""

    topic: str
    producer_group: str
    tag: str
    body: bytes
    default_queue_nums: int
    queues: tuple[QueueRef, ...]
    connections: int
    window: int
    duration: float
    messages: int
    timeout: float


class _SendConn(_Conn):
    """One producer connection: its broker's queues, its share of the message count, requests in flight."""

    def __init__(self, plan: SendPlan, index: int, builder: SendFrameBuilder, sel: selectors.BaseSelector) -> None:
        brokers = sorted({q.addr for q in plan.queues})
        addr = brokers[index % len(brokers)]
        super().__init__(addr, sel)
        mine = [q for q in plan.queues if q.addr == addr]
        self.queue_ids = [q.queue_id for q in mine]
        self.broker_name = mine[0].broker_name
        self.rr = index // len(brokers)
        self.quota = plan.messages // plan.connections + (index < plan.messages % plan.connections)
        self.builder = builder
        self.template = builder.template(self.broker_name)
        self.window = plan.window
        self.inflight: dict[int, tuple[int, int]] = {}
        self.stored: collections.Counter[int] = collections.Counter()

    def fill(self, now: int, deadline: int) -> None:
        """Top the window up with new messages, unless the quota or the time is used up."""
        k = min(self.window - len(self.inflight), self.quota) if now < deadline else 0
        if k <= 0:
            return
        ids = self.queue_ids
        rr = self.rr
        qids = [ids[(rr + i) % len(ids)] for i in range(k)]
        self.rr = rr + k
        self.quota -= k
        opaque = self.next_opaque
        self.next_opaque = opaque + k
        inflight = self.inflight
        for i, qid in enumerate(qids):
            inflight[opaque + i] = (now, qid)
        self.write(b"".join(self.builder.frames(self.template, qids, opaque)))


def _send_worker(plan: SendPlan, conn_ids: list[int], barrier: Any, pipe: Any) -> None:
    """Worker process: open its connections, wait for the others, send until done, report through ``pipe``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    sel = selectors.DefaultSelector()
    try:
        builder = SendFrameBuilder(plan.topic, plan.producer_group, plan.tag, plan.body, plan.default_queue_nums)
        conns = [_SendConn(plan, j, builder, sel) for j in conn_ids]
    except OSError as e:
        barrier.abort()
        pipe.send({"error": f"connect: {e}"})
        return
    try:
        barrier.wait(30)
    except threading.BrokenBarrierError:
        pipe.send({"error": "another worker failed to start"})
        return
    cpu0 = time.process_time()
    t0 = time.monotonic_ns()
    deadline = t0 + int(plan.duration * 1e9)
    hard_stop = deadline + int(plan.timeout * 1e9)
    lat = array.array("I")  # microseconds
    codes: collections.Counter[int] = collections.Counter()
    failures: collections.Counter[str] = collections.Counter()
    last = t0
    for c in conns:
        c.fill(t0, deadline)
    active = {c for c in conns if c.inflight}
    while active and time.monotonic_ns() < hard_stop:
        for key, mask in sel.select(0.2):
            c = key.data
            if mask & _WRITE:
                c.flush()
            if not mask & _READ:
                continue
            cmds = c.read()
            now = time.monotonic_ns()
            if cmds is None:
                failures["connection lost with requests in flight"] += len(c.inflight)
                c.inflight.clear()
                c.close()
                active.discard(c)
                continue
            if not cmds:
                continue
            inflight = c.inflight
            stored = c.stored
            for cmd in cmds:
                sent = inflight.pop(cmd.opaque, None)
                if sent is None:
                    continue
                lat.append((now - sent[0]) // 1000)
                code = cmd.code
                codes[code] += 1
                if code in STORED_CODES:
                    stored[sent[1]] += 1
            last = now
            c.fill(now, deadline)
            if not inflight:
                active.discard(c)
    for c in active:
        failures["no response (timeout)"] += len(c.inflight)
    pipe.send(
        {
            "start_ns": t0,
            "end_ns": last,
            "cpu": time.process_time() - cpu0,
            "codes": dict(codes),
            "failures": dict(failures),
            "stored": [(c.broker_name, c.addr, qid, n) for c in conns for qid, n in c.stored.items()],
            "lat": lat.tobytes(),
        }
    )


# ---------------------------------------------------------------------------------------------- drain phase


@dataclass(slots=True)
class _Cursor:
    """A contiguous range of one queue, read from ``offset`` up to ``end`` by successive pulls."""

    queue: QueueRef
    offset: int
    end: int
    conn: _Conn
    retry_at: int = 0


@dataclass(slots=True)
class DrainResult:
    """What the drain phase saw."""

    messages: int = 0
    record_bytes: int = 0
    seconds: float = 0.0
    pulls: int = 0
    codes: collections.Counter[int] = field(default_factory=collections.Counter)
    problems: list[str] = field(default_factory=list)
    cpu: float = 0.0


def _check_sample(body: bytes, plan: SendPlan) -> list[str]:
    """Decode the first pulled record fully and compare it with what was sent."""
    m = decode_records(body)[0]
    problems = []
    if m.topic != plan.topic:
        problems.append(f"pulled record has topic {m.topic!r}")
    if m.body != plan.body:
        problems.append("pulled record's body differs from the body sent")
    if m.tags != plan.tag:
        problems.append(f"pulled record has TAGS {m.tags!r}")
    if len(m.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, "")) != 32:
        problems.append("pulled record has no 32-char UNIQ_KEY")
    return problems


def run_drain(
    plan: SendPlan,
    ranges: dict[QueueRef, tuple[int, int]],
    group: str,
    batch: int,
    window: int,
    connections: int,
    timeout: float,
) -> DrainResult:
    """Pull every range to its end, ``window`` cursors per queue, over ``connections`` sockets per broker."""
    res = DrainResult()
    sel = selectors.DefaultSelector()
    conns: dict[str, list[_Conn]] = {}
    for addr in sorted({q.addr for q in ranges}):
        conns[addr] = [_Conn(addr, sel) for _ in range(connections)]
    cursors = []
    for q, (lo, hi) in sorted(ranges.items(), key=lambda kv: (kv[0].addr, kv[0].queue_id)):
        bounds = [lo + (hi - lo) * k // window for k in range(window + 1)]
        for a, b in itertools.pairwise(bounds):
            if a < b:
                pool = conns[q.addr]
                cursors.append(_Cursor(q, a, b, pool[len(cursors) % len(pool)]))
    inflight: dict[tuple[_Conn, int], _Cursor] = {}
    waiting: list[_Cursor] = []

    def pull(cur: _Cursor) -> None:
        c = cur.conn
        opaque = c.next_opaque
        c.next_opaque += 1
        inflight[(c, opaque)] = cur
        res.pulls += 1
        c.write(pull_frame(group, cur.queue, plan.topic, cur.offset, batch, opaque))

    cpu0 = time.process_time()
    t0 = time.monotonic_ns()
    last = t0
    deadline = t0 + int(timeout * 1e9)
    sampled = False
    for cur in cursors:
        pull(cur)
    while (inflight or waiting) and time.monotonic_ns() < deadline:
        now = time.monotonic_ns()
        for cur in [w for w in waiting if w.retry_at <= now]:
            waiting.remove(cur)
            pull(cur)
        for key, mask in sel.select(0.01 if waiting else 0.2):
            c = key.data
            if mask & _WRITE:
                c.flush()
            if not mask & _READ:
                continue
            cmds = c.read()
            if cmds is None:
                raise SetupError(f"lost a pull connection to {c.addr}")
            now = time.monotonic_ns()
            for cmd in cmds:
                cur = inflight.pop((c, cmd.opaque), None)
                if cur is None:
                    continue
                last = now
                res.codes[cmd.code] += 1
                next_offset = int(cmd.ext("nextBeginOffset", "-1"))
                if cmd.code == ResponseCode.SUCCESS:
                    n, size, ok = scan_records(cmd.body, cur.offset, cur.end)
                    if not ok:
                        res.problems.append(f"malformed PULL body from {cur.queue} at offset {cur.offset}")
                    elif not sampled:
                        res.problems.extend(_check_sample(cmd.body, plan))
                        sampled = True
                    res.messages += n
                    res.record_bytes += size
                    if next_offset <= cur.offset:
                        res.problems.append(f"{cur.queue}: nextBeginOffset {next_offset} after offset {cur.offset}")
                        continue
                    cur.offset = next_offset
                    if cur.offset < cur.end:
                        pull(cur)
                elif cmd.code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY):
                    # Not dispatched yet (the consume queue lags the commitlog): ask again shortly.
                    cur.offset = max(cur.offset, next_offset)
                    if cur.offset < cur.end:
                        cur.retry_at = now + (10_000_000 if cmd.code == ResponseCode.PULL_NOT_FOUND else 0)
                        waiting.append(cur)
                else:
                    res.problems.append(f"{cur.queue} offset {cur.offset}: code {cmd.code} {cmd.remark}")
    if inflight or waiting:
        res.problems.append(f"drain timed out after {timeout:.0f} s with {len(inflight) + len(waiting)} ranges open")
    res.seconds = (last - t0) / 1e9
    res.cpu = time.process_time() - cpu0
    for pool in conns.values():
        for c in pool:
            c.close()
    return res


# ---------------------------------------------------------------------------------------------- measuring


def _stat_cpu(path: Path) -> float | None:
    """CPU seconds (user + system) in the ``stat`` file of a process or thread."""
    try:
        stat = path.read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _proc_cpu(pid: int | None) -> float | None:
    """CPU seconds (user + system) used so far by process ``pid``."""
    return None if pid is None else _stat_cpu(Path(f"/proc/{pid}/stat"))


def _threads_cpu(pid: int | None) -> dict[str, float]:
    """CPU seconds used so far by each thread of process ``pid``, by thread id."""
    if pid is None:
        return {}
    with contextlib.suppress(OSError):
        tasks = os.listdir(f"/proc/{pid}/task")
        return {t: cpu for t in tasks if (cpu := _stat_cpu(Path(f"/proc/{pid}/task/{t}/stat"))) is not None}
    return {}


def _runs_gateway(pid: int) -> bool:
    """Whether process ``pid`` is ours (``python -m gateway...``): its main thread is the reactor."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(opt == b"-m" and module.split(b".")[0] == b"gateway" for opt, module in itertools.pairwise(argv))


def _machine_cpu() -> tuple[int, int]:
    """(busy, total) jiffies over all cores, from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]
    total = sum(values[:8])
    return total - idle, total


class CpuMeter:
    """CPU use of the broker process, of its busiest thread, of our broker's reactor thread and of the whole machine
    between start() and stop()."""

    def __init__(self, broker_pid: int | None) -> None:
        self.broker_pid = broker_pid
        self.broker: float | None = None
        # A broker whose busiest thread uses a whole core cannot go faster with more cores.
        self.busiest_thread: float | None = None
        # Ours runs the reactor on its main thread (thread id = pid); Apache's main thread only waits.
        self._reactor_tid = str(broker_pid) if broker_pid is not None and _runs_gateway(broker_pid) else None
        self.reactor_thread: float | None = None
        self.machine: float | None = None

    def start(self) -> None:
        """Take the first sample."""
        self._t = time.monotonic()
        self._b = _proc_cpu(self.broker_pid)
        self._threads = _threads_cpu(self.broker_pid)
        self._m = _machine_cpu()

    def stop(self) -> None:
        """Take the second sample: ``broker``, ``busiest_thread`` and ``reactor_thread`` (ours only) in cores,
        ``machine`` as a fraction of all cores."""
        wall = time.monotonic() - self._t
        b = _proc_cpu(self.broker_pid)
        if b is not None and self._b is not None and wall > 0:
            self.broker = (b - self._b) / wall
            used = {t: cpu - self._threads.get(t, 0.0) for t, cpu in _threads_cpu(self.broker_pid).items()}
            self.busiest_thread = max(used.values(), default=0.0) / wall
            if self._reactor_tid in used:
                self.reactor_thread = used[self._reactor_tid] / wall
        busy, total = _machine_cpu()
        if total > self._m[1]:
            self.machine = (busy - self._m[0]) / (total - self._m[1])


class Profiler:
    """py-spy sampling one process during a phase; writes collapsed stacks and prints the top functions."""

    def __init__(self, pid: int | None, out_dir: Path | None) -> None:
        self.pid = pid
        self.out_dir = out_dir
        self.proc: subprocess.Popen[bytes] | None = None
        self.path: Path | None = None

    def start(self, phase: str) -> None:
        """Attach py-spy (``pip install py-spy``) if a directory and a Python broker pid were given."""
        if self.out_dir is None or self.pid is None:
            return
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.out_dir / f"{phase}.txt"
        self.proc = subprocess.Popen(
            [
                "py-spy",
                "record",
                "--pid",
                str(self.pid),
                "--rate",
                "200",
                "--format",
                "raw",
                "--nonblocking",
                "--output",
                str(self.path),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1.0)  # let it attach before the load starts

    def stop(self, top: int = 10) -> list[str]:
        """Detach; lines giving the functions with the most samples, on top of the stack and anywhere in it."""
        if self.proc is None or self.path is None:
            return []
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        if not self.path.exists():
            return [f"py-spy wrote nothing to {self.path}"]
        own: collections.Counter[str] = collections.Counter()
        ours: collections.Counter[str] = collections.Counter()
        total = 0
        for line in self.path.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            n = int(count)
            total += n
            # Frames look like "func (path/file.py:123)"; count per function, not per line.
            frames = [_LINE_NO.sub(")", f) for f in stack.split(";")]
            own[frames[-1]] += n
            ours[next((f for f in reversed(frames) if _PROJECT_FRAME in f), frames[-1])] += n
        if not total:
            return [f"py-spy {self.path}: no samples"]
        lines = [f"py-spy {self.path} ({total} samples); self time:"]
        lines += [f"  {n * 100 / total:5.1f}%  {frame}" for frame, n in own.most_common(top)]
        lines.append("  by innermost gateway function (the reactor's own work shows as the entry point):")
        lines += [f"  {n * 100 / total:5.1f}%  {frame}" for frame, n in ours.most_common(top)]
        return lines


# ---------------------------------------------------------------------------------------------- phases


def _percentile(sorted_values: array.array, q: float) -> float:
    """The ``q`` quantile of sorted microsecond values, in milliseconds."""
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))] / 1000.0


def per_message_us(cores: float | None, rate: float) -> float | None:
    """CPU microseconds per message of a thread or process that used ``cores`` while ``rate`` messages/s went by."""
    return cores * 1e6 / rate if cores is not None and rate > 0 else None


def cores_used(send: dict[str, Any]) -> dict[str, float | None]:
    """Of a :func:`run_send` result: the generator's cores and the whole machine's busy cores (who set the rate)."""
    generator, machine = send.get("generator_cpu"), send.get("machine_cpu")
    return {
        "generator_cores": sum(generator) if generator else None,
        "machine_cores": machine * (os.cpu_count() or 1) if machine is not None else None,
    }


def send_summary(send: dict[str, Any]) -> dict[str, Any]:
    """The figures of a :func:`run_send` result that the side-by-side tools keep: rate, p50/p99, errors."""
    return {key: send[key] for key in ("rate", "p50_ms", "p99_ms", "errors")}


def run_send(plan: SendPlan, procs: int, meter: CpuMeter, profiler: Profiler) -> dict[str, Any]:
    """Run the send workers and merge their reports."""
    ctx = multiprocessing.get_context("spawn")
    procs = min(procs, plan.connections)
    barrier = ctx.Barrier(procs + 1)
    workers = []
    for p in range(procs):
        ids = list(range(p, plan.connections, procs))
        recv, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_send_worker, args=(plan, ids, barrier, send), daemon=True)
        proc.start()
        workers.append((proc, recv))
    profiler.start("send")
    with contextlib.suppress(threading.BrokenBarrierError):  # the workers report why
        barrier.wait(60)
    meter.start()
    reports = []
    limit = time.monotonic() + plan.duration + plan.timeout + 60
    for proc, recv in workers:
        if recv.poll(max(0.0, limit - time.monotonic())):
            reports.append(recv.recv())
        else:
            reports.append({"error": "worker sent no report"})
        proc.join(10)
    meter.stop()
    hot = profiler.stop()
    errors = [r["error"] for r in reports if "error" in r]
    if errors:
        raise SetupError("; ".join(errors))
    codes: collections.Counter[int] = collections.Counter()
    failures: collections.Counter[str] = collections.Counter()
    stored: collections.Counter[tuple[str, str, int]] = collections.Counter()
    lat = array.array("I")
    for r in reports:
        codes.update(r["codes"])
        failures.update(r["failures"])
        for broker, addr, qid, n in r["stored"]:
            stored[(broker, addr, qid)] += n
        chunk = array.array("I")
        chunk.frombytes(r["lat"])
        lat.extend(chunk)
    seconds = (max(r["end_ns"] for r in reports) - min(r["start_ns"] for r in reports)) / 1e9
    lat = array.array("I", sorted(lat))
    ok = sum(n for code, n in codes.items() if code in STORED_CODES)
    errors_by_code = {response_code_text(code): n for code, n in codes.items() if code != ResponseCode.SUCCESS}
    errors_by_code.update(failures)
    rate = ok / seconds if seconds > 0 else 0.0
    return {
        "messages": ok,
        "seconds": seconds,
        "rate": rate,
        "mb_s": ok * len(plan.body) / MB / seconds if seconds > 0 else 0.0,
        "p50_ms": _percentile(lat, 0.5) if lat else None,
        "p99_ms": _percentile(lat, 0.99) if lat else None,
        "p999_ms": _percentile(lat, 0.999) if lat else None,
        "errors": errors_by_code,
        "generator_cpu": [r["cpu"] / seconds for r in reports] if seconds > 0 else [],
        "broker_cpu": meter.broker,
        "broker_busiest_thread": meter.busiest_thread,
        "broker_reactor_thread": meter.reactor_thread,
        "reactor_thread_us_per_msg": per_message_us(meter.reactor_thread, rate),
        "machine_cpu": meter.machine,
        "stored_per_queue": {f"{b}:{q}": n for (b, _a, q), n in sorted(stored.items())},
        "hot_spots": hot,
    }


# ---------------------------------------------------------------------------------------------- report


def _fmt(v: float | None, spec: str) -> str:
    """``v`` formatted, or ``-`` when there is no value."""
    return "-" if v is None else format(v, spec)


def render(results: dict[str, Any], baseline: dict[str, Any]) -> str:
    """The compact table printed at the end."""
    s, d = results["send"], results.get("drain")
    rows = [
        f"{'phase':<6}{'msgs':>9}{'secs':>7}{'msgs/s':>10}{'MB/s':>8}{'p50 ms':>8}{'p99 ms':>8}"
        f"{'p999 ms':>9}{'baseline':>10}{'ratio':>7}"
    ]
    for name, r in (("send", s), ("drain", d)):
        if r is None:
            continue
        base = baseline.get(name)
        rows.append(
            f"{name:<6}{r['messages']:>9}{r['seconds']:>7.2f}{r['rate']:>10.0f}{r['mb_s']:>8.1f}"
            f"{_fmt(r.get('p50_ms'), '.2f'):>8}{_fmt(r.get('p99_ms'), '.2f'):>8}{_fmt(r.get('p999_ms'), '.2f'):>9}"
            f"{_fmt(base, '.0f'):>10}{_fmt(r['rate'] / base if base else None, '.2f'):>7}"
        )
    if baseline.get("send_p99") and s["p99_ms"]:
        rows.append(
            f"{'':<6}baseline latency p50 {baseline['send_p50']:.2f} ms, p99 {baseline['send_p99']:.2f} ms "
            f"(ratio p50 {s['p50_ms'] / baseline['send_p50']:.2f}, p99 {s['p99_ms'] / baseline['send_p99']:.2f})"
        )
    rows.append(f"baseline: {baseline['source']}")
    errors = ", ".join(f"{k}: {v}" for k, v in s["errors"].items()) or "none"
    rows.append(f"send errors: {errors}")
    if (results.get("busy_before") or 0) > 0.15:
        rows.append(f"WARNING: the machine was {results['busy_before'] * 100:.0f}% busy before the run")
    rows.append(
        "cpu send:  " + _cpu_line("generator", s["generator_cpu"], s["broker_cpu"], s["machine_cpu"], s["rate"])
    )
    if s.get("broker_busiest_thread") is not None:
        rows.append("           " + _threads_line(s, baseline.get("send_reactor_us")))
    if d is not None:
        rows.append(
            "cpu drain: " + _cpu_line("consumer", [d["consumer_cpu"]], d["broker_cpu"], d["machine_cpu"], d["rate"])
        )
        if d.get("broker_busiest_thread") is not None:
            rows.append("           " + _threads_line(d, baseline.get("drain_reactor_us")))
        rows.append(f"verify: {d['verify']}")
    for r in (s, d):
        if r is not None and r.get("hot_spots"):
            rows.extend(r["hot_spots"])
    return "\n".join(rows)


def _threads_line(r: dict[str, Any], baseline_us: float | None) -> str:
    """Our reactor thread's CPU, in % of a core and per message (beside ``baseline_us``, a saved run's), and the
    broker's busiest thread's; for a broker without a reactor thread (Apache's) the busiest thread's per message."""
    busiest = f"the broker's busiest thread {r['broker_busiest_thread'] * 100:.0f}% of a core"
    reactor = r.get("broker_reactor_thread")
    if reactor is None:
        return f"{busiest}, {_fmt(per_message_us(r['broker_busiest_thread'], r['rate']), '.1f')} us CPU/msg"
    line = f"reactor thread {reactor * 100:.0f}% of a core, {_fmt(r['reactor_thread_us_per_msg'], '.1f')} us CPU/msg"
    if baseline_us is not None:
        line += f" (baseline {baseline_us:.1f})"
    return f"{line}; {busiest}"


def _cpu_line(client: str, client_cores: list[float], broker: float | None, machine: float | None, rate: float) -> str:
    """Client and broker CPU in % of one core (broker also per message), the machine's busy cores, the rest."""
    ncpu = os.cpu_count() or 1
    line = f"{client} {' + '.join(f'{c * 100:.0f}%' for c in client_cores)}, broker "
    line += "n/a" if broker is None else f"{broker * 100:.0f}%"
    if broker is not None and rate > 0:
        line += f" ({broker * 1e6 / rate:.0f} us CPU/msg = {broker * 1e4 / rate:.2f} CPU-s per 10k)"
    if machine is not None:
        line += f", machine {machine * ncpu:.2f} of {ncpu} cores busy"
        if broker is not None:
            line += f" (other processes and kernel {max(0.0, machine * ncpu - broker - sum(client_cores)):.2f})"
    return line


def load_baseline(args: argparse.Namespace) -> dict[str, Any]:
    """The Apache figures given on the command line, or the figures of a saved run (``--compare``)."""
    if args.compare is None:
        return {
            "source": "Apache RocketMQ 4.9.8, 2 cores, 16 producer threads, ASYNC_FLUSH (--baseline-send/-drain)",
            "send": args.baseline_send,
            "drain": args.baseline_drain,
        }
    prev = json.loads(Path(args.compare).read_text())
    return {
        "source": f"{args.compare} ({prev['date']}, {prev['target']})",
        "send": prev["send"]["rate"],
        "drain": prev["drain"]["rate"] if prev.get("drain") else None,
        "send_p50": prev["send"]["p50_ms"],
        "send_p99": prev["send"]["p99_ms"],
        # runs saved before the reactor thread was measured have none
        "send_reactor_us": prev["send"].get("reactor_thread_us_per_msg"),
        "drain_reactor_us": (prev.get("drain") or {}).get("reactor_thread_us_per_msg"),
    }


# ---------------------------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.throughput", description=__doc__.split("\n\n")[0])
    target = p.add_argument_group("target")
    target.add_argument("--namesrv", help="HOST:PORT of a running NameServer; default: start our servers")
    target.add_argument(
        "--flush",
        choices=("ASYNC_FLUSH", "SYNC_FLUSH"),
        default="ASYNC_FLUSH",
        help="flushDiskType of the servers we start (default ASYNC_FLUSH)",
    )
    target.add_argument(
        "--broker-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra broker.conf line for the servers we start (repeatable)",
    )
    target.add_argument("--broker-pid", type=int, help="pid of an external broker, for its CPU use and --profile")
    target.add_argument(
        "--broker-cpus", help="pin the broker (ours, or --broker-pid's, all its threads) to these CPUs, e.g. 0 or 0,1"
    )
    target.add_argument("--generator-cpus", help="pin this tool and its generator processes to these CPUs")
    load = p.add_argument_group("load")
    load.add_argument("--topic", default="BenchmarkThroughput")
    load.add_argument(
        "--create",
        choices=("auto", "admin"),
        default="auto",
        help="create a missing topic through TBW102 (auto) or UPDATE_AND_CREATE_TOPIC (admin)",
    )
    load.add_argument("--queues", type=int, default=8, help="queues of a created topic (default 8)")
    load.add_argument("--size", type=int, default=1024, help="message body bytes (default 1024)")
    load.add_argument("--tag", default="TagA")
    load.add_argument("--connections", type=int, default=16, help="producer connections (default 16)")
    load.add_argument("--window", type=int, default=4, help="sends in flight per connection (default 4)")
    load.add_argument("--procs", type=int, default=1, help="generator processes (default 1)")
    load.add_argument("--duration", type=float, default=10.0, help="send phase limit in seconds (default 10)")
    load.add_argument("--messages", type=int, default=200_000, help="send phase limit in messages (default 200000)")
    load.add_argument("--timeout", type=float, default=30.0, help="wait for late responses / drain (default 30 s)")
    drain = p.add_argument_group("drain")
    drain.add_argument("--no-drain", action="store_true", help="skip phase 2")
    drain.add_argument("--pull-batch", type=int, default=32, help="maxMsgNums per pull (default 32)")
    drain.add_argument("--pull-window", type=int, default=2, help="pulls in flight per queue (default 2)")
    drain.add_argument("--pull-connections", type=int, default=1, help="pull connections per broker (default 1)")
    drain.add_argument("--drain-repeat", type=int, default=1, help="drain this many times, report the best (default 1)")
    out = p.add_argument_group("output")
    out.add_argument("--baseline-send", type=float, default=APACHE_SEND)
    out.add_argument("--baseline-drain", type=float, default=APACHE_DRAIN)
    out.add_argument("--save", metavar="JSON", help="write the results here")
    out.add_argument("--compare", metavar="JSON", help="ratios against a run saved with --save")
    out.add_argument(
        "--profile",
        metavar="DIR",
        type=Path,
        help="py-spy the (Python) broker during each phase; collapsed stacks go to DIR",
    )
    args = p.parse_args(argv)
    for name in (
        "queues",
        "size",
        "connections",
        "window",
        "procs",
        "messages",
        "pull_batch",
        "pull_window",
        "pull_connections",
        "drain_repeat",
    ):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if any("=" not in kv for kv in args.broker_set):
        p.error("--broker-set takes KEY=VALUE")
    if not 0 < args.duration <= 3600 or not 0 < args.timeout <= 3600:
        p.error("--duration and --timeout must be in (0, 3600] seconds")
    return args


def parse_cpus(text: str) -> set[int]:
    """``0,2-3`` as {0, 2, 3}."""
    cpus: set[int] = set()
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of ``pid`` on ``cpus`` (what ``taskset -a -p`` does)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(tid), cpus)


@contextlib.contextmanager
def affinity_kept() -> Iterator[None]:
    """Whatever ``throughput.benchmark`` pins this process to is undone afterwards."""
    cpus = os.sched_getaffinity(0)
    try:
        yield
    finally:
        os.sched_setaffinity(0, cpus)


def benchmark(args: argparse.Namespace, namesrv: str, broker_pid: int | None, target: str) -> dict[str, Any]:
    """Both phases against ``namesrv``; the results dict that --save writes."""
    if args.generator_cpus:
        os.sched_setaffinity(0, parse_cpus(args.generator_cpus))  # the generator processes inherit it
    if args.broker_cpus and broker_pid:
        pin(broker_pid, parse_cpus(args.broker_cpus))
        target += f", broker on CPUs {args.broker_cpus}"
    body = bytes((i * 31 + 7) & 0xFF for i in range(args.size))
    builder = SendFrameBuilder(args.topic, "benchmark_producer", args.tag, body, args.queues)
    queues = ensure_topic(namesrv, args.topic, args.queues, args.create, builder)
    starts = {q: max_offset(q, args.topic) for q in queues}
    plan = SendPlan(
        topic=args.topic,
        producer_group="benchmark_producer",
        tag=args.tag,
        body=body,
        default_queue_nums=args.queues,
        queues=tuple(queues),
        connections=args.connections,
        window=args.window,
        duration=args.duration,
        messages=args.messages,
        timeout=args.timeout,
    )
    profiler = Profiler(broker_pid, args.profile)
    idle = CpuMeter(None)
    idle.start()
    time.sleep(1.0)
    idle.stop()
    print(
        f"{target}: topic {args.topic}, {len(queues)} queues, {args.size} B bodies, {args.connections} connections"
        f" x {args.window} in flight, {args.procs} generator process(es), up to {args.duration:g} s or"
        f" {args.messages} messages",
        flush=True,
    )
    send = run_send(plan, args.procs, CpuMeter(broker_pid), profiler)
    results: dict[str, Any] = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}",
        "target": target,
        "busy_before": idle.machine,
        "options": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "send": send,
        "drain": None,
    }
    if args.no_drain:
        return results
    ends = {q: max_offset(q, args.topic) for q in queues}
    meter = CpuMeter(broker_pid)
    profiler.start("drain")
    meter.start()
    runs = [
        run_drain(
            plan,
            {q: (starts[q], ends[q]) for q in queues},
            "benchmark_consumer",
            args.pull_batch,
            args.pull_window,
            args.pull_connections,
            args.timeout,
        )
        for _ in range(args.drain_repeat)
    ]
    res = min(runs, key=lambda r: r.seconds)  # the best of --drain-repeat
    hot = profiler.stop()
    meter.stop()
    problems = list(res.problems)
    for q in queues:
        sent = send["stored_per_queue"].get(f"{q.broker_name}:{q.queue_id}", 0)
        if ends[q] - starts[q] != sent:
            problems.append(f"{q.broker_name}:{q.queue_id} grew by {ends[q] - starts[q]} but {sent} were stored")
    if res.messages != send["messages"]:
        problems.append(f"drained {res.messages} of {send['messages']} stored messages")
    rate = res.messages / res.seconds if res.seconds > 0 else 0.0
    results["drain"] = {
        "messages": res.messages,
        "seconds": res.seconds,
        "rate": rate,
        "mb_s": res.messages * args.size / MB / res.seconds if res.seconds > 0 else 0.0,
        "record_mb_s": res.record_bytes / MB / res.seconds if res.seconds > 0 else 0.0,
        "pulls": res.pulls,
        "codes": {response_code_text(c): n for c, n in res.codes.items()},
        "consumer_cpu": res.cpu / res.seconds if res.seconds > 0 else 0.0,
        "broker_cpu": meter.broker,
        "broker_busiest_thread": meter.busiest_thread,
        "broker_reactor_thread": meter.reactor_thread,
        "reactor_thread_us_per_msg": per_message_us(meter.reactor_thread, rate),
        "machine_cpu": meter.machine,
        "verify": "; ".join(problems[:10]) if problems else f"OK, {res.messages} sent = drained, offsets match",
        "hot_spots": hot,
    }
    return results


def _log_excerpt(lines: list[str], limit: int = 40) -> str:
    """The server log from its first error on (or its tail)."""
    marks = ("Traceback", "Unhandled Error", "#error]", "#critical]")
    first = next((i for i, line in enumerate(lines) if any(m in line for m in marks)), max(0, len(lines) - limit))
    return "".join(lines[first : first + limit])


def main(argv: list[str] | None = None) -> int:
    """Entry point; 0 when both phases ran without errors and the drain matched the sends."""
    args = parse_args(argv)
    baseline = load_baseline(args)
    servers = None
    try:
        with contextlib.ExitStack() as stack:
            if args.namesrv:
                results = benchmark(args, args.namesrv, args.broker_pid, f"namesrv {args.namesrv}")
            else:
                tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="rmq-bench-"))
                extra = dict(kv.split("=", 1) for kv in args.broker_set)
                extra["flushDiskType"] = args.flush
                servers = GatewayServers(Path(tmp), extra_config=extra)
                try:
                    servers.start()
                except RuntimeError:  # no ready line in time; the log is printed below
                    raise SetupError("our servers did not start") from None
                stack.callback(servers.stop)
                pid = servers.proc.pid
                results = benchmark(args, servers.namesrv_addr, pid, f"rocketmq-gateway {args.flush} (pid {pid})")
    except SetupError as e:
        print(f"benchmark failed: {e}", file=sys.stderr)
        if servers is not None:
            print("server log:\n" + _log_excerpt(servers.output), file=sys.stderr)
        return 2
    print(render(results, baseline))
    if args.save:
        Path(args.save).write_text(json.dumps(results, indent=2) + "\n")
    s, d = results["send"], results["drain"]
    clean = not s["errors"] and (d is None or d["verify"].startswith("OK"))
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
