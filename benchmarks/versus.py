"""Our NameServer + broker beside Apache RocketMQ's, on this machine, in one run: the figures of the
performance issue with their ratios.

    python -m benchmarks.versus --apache-home DIR            # both, 2 rounds, alternating
    python -m benchmarks.versus                              # ours alone (no ratios)

``DIR`` is an Apache RocketMQ 4.9.8 distribution built outside this repository: ``DIR/lib/*.jar`` (broker,
NameServer, client and, for the Java generator, the example module's jar) and ``DIR/conf/logback_*.xml``.
Every round starts each pair afresh (two processes: NameServer and broker, each store in a temporary
directory), the order of the two pairs alternating from round to round, and measures:

* idle RSS of both processes, after they settled;
* send with ASYNC_FLUSH and SYNC_FLUSH, driven by ``throughput.py``'s generator (16 connections x 4 in
  flight, 1 KB) after ``--warmup`` seconds of the same: msgs/s, p50/p99 latency, broker CPU per 10k messages;
  then the drain of that backlog;
* send driven by Apache's own benchmark ``Producer`` (16 threads, 1 KB), when its class is in ``DIR/lib``:
  messages stored per second (queue offsets) and broker CPU over a window after a warm-up; the same with its
  ``BatchProducer`` (batches of 16, ASYNC_FLUSH only) when that class is there too (4.9.8's build leaves it out);
* send with the broker pinned to 1 core (the generator on the other), then given 2, with the CPU of the broker's
  busiest thread, of the broker process, of the generator and of the whole machine (which of them set the rate);
  and for ours, two broker processes of one cluster on the 2 cores (``scale_out.py``: a broker process per core);
  every round;
* RSS with 1,000 topics x 8 queues and 500 connections that sent a heartbeat (round 1, at the end).

The table gives medians over the rounds and ours/Apache; ``goal`` says which way is better.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from compat_tests.apache_broker import BROKER_STARTUP, NAMESRV_STARTUP, OPENS, apache_java_argv
from compat_tests.servers import GatewayServers, free_port, jdk_tool

from . import rss, scale_out, throughput
from .rss import Pair
from .wire import QueueRef, SendFrameBuilder, SetupError, ensure_topic, max_offset

TOPIC = "BenchmarkVersus"
JAVA_PRODUCER = "org.apache.rocketmq.example.benchmark.Producer"
# Batches of 16 messages; 4.9.8's distribution does not build it: its class from the tag's example source, in a jar
# of DIR/lib, turns the row on.
JAVA_BATCH_PRODUCER = "org.apache.rocketmq.example.benchmark.BatchProducer"
# bin/runbroker.sh's Java 9+ options, without -XX:+AlwaysPreTouch (it would make RSS the heap size).
G1 = [
    "-XX:+UseG1GC",
    "-XX:G1HeapRegionSize=16m",
    "-XX:G1ReservePercent=25",
    "-XX:InitiatingHeapOccupancyPercent=30",
    "-XX:SoftRefLRUPolicyMSPerMB=0",
    "-XX:-OmitStackTraceInFastThrow",
    "-XX:-UseLargePages",
]
# Producer's report line; BatchProducer's adds "Send MPS" and "Average Message RT(ms)".
_PRODUCER_LINE = re.compile(
    r"Send TPS: (\d+) (?:Send MPS: \d+ )?Max RT\(ms\): (\d+) Average RT\(ms\):\s*([\d.]+) "
    r"(?:Average Message RT\(ms\):\s*[\d.]+ )?Send Failed: (\d+)"
)


def apache_classpath(home: Path) -> str:
    """Every jar of ``home/lib``, for ``java -cp``."""
    jars = sorted((home / "lib").glob("*.jar"))
    if not jars:
        raise SetupError(f"no jars in {home / 'lib'}")
    return os.pathsep.join(str(j) for j in jars)


def _apache_process(
    home: Path, user_home: Path, main: str, conf: Path, heap: str, jvm: Sequence[str] = ()
) -> subprocess.Popen[bytes]:
    """Apache's ``main`` from ``home`` with ``-c conf``, its output in ``conf`` with the suffix ``.out``."""
    command = apache_java_argv(
        main,
        conf,
        classpath=apache_classpath(home),
        heap=heap,
        jvm=[f"-Duser.home={user_home}", f"-Drocketmq.home.dir={home}", *G1, *jvm],
    )
    with open(conf.with_suffix(".out"), "wb") as log:  # the child keeps its own descriptor
        return subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, ROCKETMQ_HOME=str(home))
        )


def start_apache(home: Path, root: Path, broker_lines: dict[str, str], heap: str) -> Pair:
    """Apache's NamesrvStartup and BrokerStartup from ``home`` with stores and logs under ``root``."""
    ns_port = free_port()
    (root / "namesrv.properties").write_text(f"listenPort={ns_port}\nkvConfigPath={root / 'kv.json'}\n")
    namesrv = _apache_process(home, root, NAMESRV_STARTUP, root / "namesrv.properties", "256m", ["-Xmn128m"])
    namesrv_addr = f"127.0.0.1:{ns_port}"
    broker, broker_addr = start_apache_broker(home, root, "broker", namesrv_addr, broker_lines, heap)
    return Pair("apache", namesrv_addr, broker_addr, [namesrv, broker])


def start_apache_broker(
    home: Path, root: Path, name: str, namesrv: str, broker_lines: dict[str, str], heap: str
) -> tuple[subprocess.Popen[bytes], str]:
    """Apache's BrokerStartup from ``home``, registering with ``namesrv``: a master of ``broker-a`` unless
    ``broker_lines`` say otherwise; its store and logs under ``root`` (``root/{name}`` for a name other than
    ``broker``), its config and output as ``root/{name}.conf`` and ``.out``. Returns the process and its address."""
    port = free_port()
    user_home = root if name == "broker" else root / name
    user_home.mkdir(parents=True, exist_ok=True)
    store = user_home / "store"
    lines = {
        "brokerClusterName": "DefaultCluster",
        "brokerName": "broker-a",
        "brokerId": "0",
        "brokerIP1": "127.0.0.1",
        "listenPort": str(port),
        "namesrvAddr": namesrv,
        "storePathRootDir": str(store),
        "storePathCommitLog": str(store / "commitlog"),
        "mappedFileSizeCommitLog": str(64 << 20),
        "autoCreateTopicEnable": "true",
        **broker_lines,
    }
    (root / f"{name}.conf").write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
    return _apache_process(home, user_home, BROKER_STARTUP, root / f"{name}.conf", heap), f"127.0.0.1:{port}"


@contextlib.contextmanager
def running(target: str, args: argparse.Namespace, flush: str) -> Iterator[Pair]:
    """A fresh pair of ``target`` with ``flushDiskType=flush``, registered and settled; stopped and its
    stores deleted afterwards."""
    root = Path(tempfile.mkdtemp(prefix=f"rmq-versus-{target}-"))
    lines = {"flushDiskType": flush, **dict(kv.split("=", 1) for kv in args.broker_set)}
    pair = None
    try:
        if target == "ours":
            procs, namesrv, broker = rss.start_ours(root, lines)
            pair = Pair("ours", namesrv, broker, procs)
        else:
            pair = start_apache(args.apache_home, root, lines, args.apache_heap)
        try:
            rss.wait_registered(pair.namesrv, 90)
        except SystemExit:
            out = "".join(p.read_text(errors="replace")[-3000:] for p in sorted(root.glob("*.out")))
            raise SetupError(f"{target}: the broker did not register in time\n{out}") from None
        time.sleep(args.settle)
        yield pair
    finally:
        if pair is not None:
            pair.stop()
        shutil.rmtree(root, ignore_errors=True)


def python_send(args: argparse.Namespace, pair: Pair, drain: bool, extra: Sequence[str] = ()) -> dict[str, Any]:
    """``throughput.py``'s send phase (and drain) against ``pair``."""
    argv = [
        "--namesrv", pair.namesrv, "--broker-pid", str(pair.broker_pid), "--topic", TOPIC, "--create", "admin",
        "--duration", str(args.duration), "--messages", str(args.messages), *extra,
    ]  # fmt: skip
    if not drain:
        argv.append("--no-drain")
    with throughput.affinity_kept():
        return throughput.benchmark(throughput.parse_args(argv), pair.namesrv, pair.broker_pid, pair.target)


def _stored(queues: list[QueueRef]) -> int:
    return sum(max_offset(q, TOPIC) for q in queues)


def java_send(
    args: argparse.Namespace, namesrv: str, broker_pid: int, main: str = JAVA_PRODUCER, extra: Sequence[str] = ()
) -> dict[str, Any]:
    """Apache's benchmark Producer (or ``main`` with ``extra`` options; ``--java-threads`` threads, 1 KB) against the
    broker of ``namesrv``: after ``--java-warmup`` seconds, messages stored and the CPU of process ``broker_pid`` over
    ``--duration`` seconds."""
    queues = ensure_topic(namesrv, TOPIC, 8, "admin", SendFrameBuilder(TOPIC, "pg", "TagA", b"x", 8))
    root = Path(tempfile.mkdtemp(prefix="rmq-versus-producer-"))
    command = [
        jdk_tool("java"), "-server", "-Xms1g", "-Xmx1g", "-Xmn256m", f"-Duser.home={root}", *OPENS,
        "-cp", apache_classpath(args.apache_home), main,
        "-n", namesrv, "-t", TOPIC, "-w", str(args.java_threads), "-s", "1024", *extra,
    ]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    lines: list[tuple[float, bytes]] = []  # (when it was read, the line)

    def read() -> None:
        for line in iter(proc.stdout.readline, b""):  # type: ignore[union-attr]
            lines.append((time.monotonic(), line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        time.sleep(args.java_warmup)
        if proc.poll() is not None:
            raise SetupError(
                "the Java Producer exited:\n" + b"".join(li for _, li in lines).decode(errors="replace")[-3000:]
            )
        meter = throughput.CpuMeter(broker_pid)
        first = _stored(queues)
        meter.start()
        started = time.monotonic()
        time.sleep(args.duration)
        last = _stored(queues)
        seconds = time.monotonic() - started
        meter.stop()
        # The Producer reports every 10 s on the 9 s before: its RT is taken from a report on steady sending, the
        # first one read 9 s or more into the window (waited for, a few seconds at most).
        deadline = time.monotonic() + 11
        while not _reports(lines, started + 9) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        reader.join(5)
        shutil.rmtree(root, ignore_errors=True)
    reports = _reports(lines, started + 9) or _reports(lines, 0)
    rate = (last - first) / seconds
    return {
        "rate": rate,
        "broker_cpu": meter.broker,
        "cpu_per_10k": meter.broker * 1e4 / rate if meter.broker is not None and rate else None,
        "producer_avg_rt_ms": float(reports[0][2]) if reports else None,
        "producer_max_rt_ms": int(reports[-1][1]) if reports else None,
        "producer_failed": int(reports[-1][3]) if reports else 0,
    }


def _reports(lines: list[tuple[float, bytes]], since: float) -> list[tuple[str, ...]]:
    """The Producer's report lines (TPS, max RT, average RT, failed sends so far) read at ``since`` or later."""
    return [
        m.groups() for t, line in lines if t >= since and (m := _PRODUCER_LINE.search(line.decode(errors="replace")))
    ]


def one_target(args: argparse.Namespace, target: str, first_round: bool) -> dict[str, Any]:
    """Every figure of one round for one target."""
    out: dict[str, Any] = {}
    for flush in ("ASYNC_FLUSH", "SYNC_FLUSH"):
        with running(target, args, flush) as pair:
            if flush == "ASYNC_FLUSH":
                out["idle_rss_mb"] = [rss.memory(pair.namesrv_pid)[0], rss.memory(pair.broker_pid)[0]]
            if args.warmup:  # Java compiles its hot paths in the first seconds: not what a running broker does
                python_send(args, pair, drain=False, extra=["--duration", str(args.warmup)])
            res = python_send(args, pair, drain=True)
            out[flush] = {"send": _send_figures(res["send"]), "drain": _drain_figures(res["drain"])}
            if args.java_producer:
                out[flush]["java"] = java_send(args, pair.namesrv, pair.broker_pid)
            if flush == "ASYNC_FLUSH" and args.java_batch_producer:
                batch = java_send(args, pair.namesrv, pair.broker_pid, JAVA_BATCH_PRODUCER, ["-b", "16"])
                out[flush]["java_batch"] = batch
            if flush == "ASYNC_FLUSH" and not args.no_scaling:  # every round: one sample is this VM's noise
                for cpus, gen in (("0", ["--generator-cpus", "1"]), ("0,1", [])):
                    r = python_send(args, pair, drain=False, extra=["--broker-cpus", cpus, *gen])
                    out[f"cores_{cpus}"] = _send_figures(r["send"])
                throughput.pin(pair.broker_pid, throughput.parse_cpus("0,1"))
    if target == "ours" and not args.no_scaling:
        # How ours uses a second core: a broker process per core (Apache's one broker uses both itself).
        cluster = argparse.Namespace(broker_cpus="0,1", generator_cpus=None, procs=1, messages=args.messages,
                                     warmup=args.warmup, duration=args.duration)  # fmt: skip
        out["cores_0,1_process_per_core"] = scale_out.measure(cluster, 2)
    if first_round and args.topics:  # a fresh pair: the sends' mapped commitlog would count in RSS
        with running(target, args, "ASYNC_FLUSH") as pair:
            socks = rss.load(pair.broker, args.topics, 8, args.connections)
            try:
                time.sleep(3)
                out["loaded_rss_mb"] = [rss.memory(pair.namesrv_pid)[0], rss.memory(pair.broker_pid)[0]]
            finally:
                for s in socks:
                    s.close()
    if target == "ours":
        out["idle_rss_one_process_mb"] = one_process_rss(args.settle)
    return out


def one_process_rss(settle: float) -> float:
    """Idle RSS of ``python -m gateway``: our NameServer and broker in one process."""
    with tempfile.TemporaryDirectory(prefix="rmq-versus-one-") as root:
        servers = GatewayServers(Path(root)).start()
        try:
            rss.wait_registered(servers.namesrv_addr)
            time.sleep(settle)
            assert servers.proc is not None
            return rss.memory(servers.proc.pid)[0]
        finally:
            servers.stop()


def _send_figures(s: dict[str, Any]) -> dict[str, Any]:
    rate = s["rate"]
    cpu = s["broker_cpu"] * 1e4 / rate if s["broker_cpu"] is not None and rate else None
    return {
        **throughput.send_summary(s),
        "cpu_per_10k": cpu,
        "busiest_thread": s.get("broker_busiest_thread"),
        "reactor_thread": s.get("broker_reactor_thread"),
        # Who set the rate: a broker or generator near a whole core, or the whole machine busy.
        "broker_cores": s["broker_cpu"],
        **throughput.cores_used(s),
    }


def _drain_figures(d: dict[str, Any]) -> dict[str, Any]:
    rate = d["rate"]
    return {
        "rate": rate,
        "verify": d["verify"],
        "cpu_per_10k": d["broker_cpu"] * 1e4 / rate if d["broker_cpu"] is not None and rate else None,
    }


def idle_rss(r: dict[str, Any]) -> float:
    return sum(r["idle_rss_mb"])


def one_process_rss_of(r: dict[str, Any]) -> float | None:
    return r.get("idle_rss_one_process_mb")


REACTOR_US = "  reactor thread us CPU/msg (Apache: busiest thread)"


def _reactor_us(send: dict[str, Any]) -> float | None:
    """Our reactor thread's CPU per message sent; for Apache (no reactor thread) its busiest thread's."""
    thread = send.get("reactor_thread")
    if thread is None:
        thread = send.get("busiest_thread")
    return throughput.per_message_us(thread, send["rate"])


# (label, path into a target's round, better: "higher" | "lower" | "info" (no goal))
FIGURES: list[tuple[str, Callable[[dict[str, Any]], float | None], str]] = [
    ("send ASYNC_FLUSH msgs/s (Python generator)", lambda r: r["ASYNC_FLUSH"]["send"]["rate"], "higher"),
    ("  p50 latency ms", lambda r: r["ASYNC_FLUSH"]["send"]["p50_ms"], "lower"),
    ("  p99 latency ms", lambda r: r["ASYNC_FLUSH"]["send"]["p99_ms"], "lower"),
    ("  broker CPU-s per 10k sent", lambda r: r["ASYNC_FLUSH"]["send"]["cpu_per_10k"], "lower"),
    (REACTOR_US, lambda r: _reactor_us(r["ASYNC_FLUSH"]["send"]), "info"),
    ("send SYNC_FLUSH msgs/s (Python generator)", lambda r: r["SYNC_FLUSH"]["send"]["rate"], "higher"),
    ("  p50 latency ms", lambda r: r["SYNC_FLUSH"]["send"]["p50_ms"], "lower"),
    ("  p99 latency ms", lambda r: r["SYNC_FLUSH"]["send"]["p99_ms"], "lower"),
    ("  broker CPU-s per 10k sent", lambda r: r["SYNC_FLUSH"]["send"]["cpu_per_10k"], "lower"),
    (REACTOR_US, lambda r: _reactor_us(r["SYNC_FLUSH"]["send"]), "info"),
    ("drain msgs/s (ASYNC_FLUSH backlog)", lambda r: r["ASYNC_FLUSH"]["drain"]["rate"], "higher"),
    ("  broker CPU-s per 10k drained", lambda r: r["ASYNC_FLUSH"]["drain"]["cpu_per_10k"], "lower"),
    ("drain msgs/s (SYNC_FLUSH backlog)", lambda r: r["SYNC_FLUSH"]["drain"]["rate"], "higher"),
    ("send ASYNC_FLUSH msgs/s (Java Producer)", lambda r: r["ASYNC_FLUSH"].get("java", {}).get("rate"), "higher"),
    ("  Producer average RT ms", lambda r: r["ASYNC_FLUSH"].get("java", {}).get("producer_avg_rt_ms"), "lower"),
    ("  broker CPU-s per 10k sent", lambda r: r["ASYNC_FLUSH"].get("java", {}).get("cpu_per_10k"), "lower"),
    ("send ASYNC_FLUSH msgs/s (Java BatchProducer)", lambda r: _batch(r).get("rate"), "higher"),
    ("  broker CPU-s per 10k sent", lambda r: _batch(r).get("cpu_per_10k"), "lower"),
    ("send SYNC_FLUSH msgs/s (Java Producer)", lambda r: r["SYNC_FLUSH"].get("java", {}).get("rate"), "higher"),
    ("  Producer average RT ms", lambda r: r["SYNC_FLUSH"].get("java", {}).get("producer_avg_rt_ms"), "lower"),
    ("  broker CPU-s per 10k sent", lambda r: r["SYNC_FLUSH"].get("java", {}).get("cpu_per_10k"), "lower"),
    ("send, broker on 1 core msgs/s", lambda r: r.get("cores_0", {}).get("rate"), "higher"),
    ("  broker process on its core, cores", lambda r: r.get("cores_0", {}).get("broker_cores"), "info"),
    ("  generator on the other core, cores", lambda r: r.get("cores_0", {}).get("generator_cores"), "info"),
    ("send, broker on 2 cores msgs/s", lambda r: r.get("cores_0,1", {}).get("rate"), "higher"),
    ("  growth 1 -> 2 cores", lambda r: _growth(r), "higher"),
    ("  busiest broker thread on 2 cores, cores", lambda r: r.get("cores_0,1", {}).get("busiest_thread"), "info"),
    ("  broker process + generator on 2 cores, cores", lambda r: _two_core_use(r), "info"),
    ("  the whole machine on 2 cores, cores busy", lambda r: r.get("cores_0,1", {}).get("machine_cores"), "info"),
    ("send msgs/s, 2 cores, ours a broker process per core", lambda r: _per_core(r), "higher"),
    ("  growth 1 -> 2 cores", lambda r: _growth(r, _per_core(r)), "higher"),
    ("  generator beside them, cores", lambda r: _per_core_figure(r, "generator_cores"), "info"),
    ("  the whole machine, cores busy", lambda r: _per_core_figure(r, "machine_cores"), "info"),
    ("idle RSS MB, NameServer + broker", idle_rss, "lower"),
    # against Apache's two processes: that is what it takes to run both there
    ("idle RSS MB, ours in one process (python -m gateway)", one_process_rss_of, "lower"),
    ("RSS MB, --topics x 8 queues, --connections", lambda r: sum(r.get("loaded_rss_mb") or []) or None, "lower"),
]


def _growth(r: dict[str, Any], two: float | None = None) -> float | None:
    """The rate on 2 cores (``two``, else one broker's on CPUs 0-1) over one broker's on CPU 0."""
    one = r.get("cores_0", {}).get("rate")
    two = two or r.get("cores_0,1", {}).get("rate")
    return two / one if one and two else None


def _batch(r: dict[str, Any]) -> dict[str, Any]:
    return r["ASYNC_FLUSH"].get("java_batch", {})


def _two_core_use(r: dict[str, Any]) -> float | None:
    """Cores the broker and the generator used together while sharing CPUs 0-1."""
    two = r.get("cores_0,1", {})
    broker, generator = two.get("broker_cores"), two.get("generator_cores")
    return broker + generator if broker is not None and generator is not None else None


def _per_core(r: dict[str, Any]) -> float | None:
    """Ours: two broker processes of one cluster on CPUs 0-1; Apache's: its one broker there."""
    return r.get("cores_0,1_process_per_core", r.get("cores_0,1", {})).get("rate")


def _per_core_figure(r: dict[str, Any], key: str) -> float | None:
    """A figure of ours with a broker process per core (none for Apache's)."""
    return r.get("cores_0,1_process_per_core", {}).get(key)


def _goal(label: str) -> float:
    """The ratio each figure must reach: issue #29's 1.3x for every rate (sends and drains, with either generator,
    on one core or two), growth from one core to two at least Apache's, latency, CPU and loaded RSS at most Apache's,
    idle RSS at most a fifth."""
    if label.startswith("idle RSS"):
        return 0.2
    return 1.3 if "msgs/s" in label else 1.0


def _median(rounds: list[dict[str, Any]], fn: Callable[[dict[str, Any]], float | None]) -> float | None:
    values = []
    for r in rounds:
        with contextlib.suppress(KeyError, TypeError):
            if (v := fn(r)) is not None:
                values.append(v)
    return statistics.median(values) if values else None


def render(results: dict[str, list[dict[str, Any]]]) -> str:
    """The table: medians over the rounds, ours/Apache, and whether the goal is met."""
    ours, apache = results.get("ours", []), results.get("apache", [])
    rows = [f"{'figure':<52}{'ours':>11}{'Apache':>11}{'ours/Apache':>13}  goal"]
    for label, fn, better in FIGURES:
        a = _median(ours, fn)
        b = _median(apache, idle_rss if fn is one_process_rss_of else fn)
        if a is None and b is None:
            continue
        ratio = a / b if a is not None and b and better != "info" else None
        goal = ""
        if ratio is not None and "growth" in label and b < 1.0:
            # Apache's broker did not grow either: the machine (the generator's share of it) set both rates.
            goal = "not measured: Apache did not grow"
        elif ratio is not None:
            limit = _goal(label)
            met = ratio >= limit if better == "higher" else ratio <= limit
            goal = f"{'>=' if better == 'higher' else '<='} {limit:.1f}: {'met' if met else 'NOT met'}"
        rows.append(
            f"{label:<52}{throughput._fmt(a, ',.2f'):>11}{throughput._fmt(b, ',.2f'):>11}"
            f"{throughput._fmt(ratio, '.2f'):>13}  {goal}"
        )
    problems = [
        f"{target} round {i + 1} {flush}: {text}"
        for target, rounds in results.items()
        for i, r in enumerate(rounds)
        for flush in ("ASYNC_FLUSH", "SYNC_FLUSH")
        for text in _problems(r.get(flush, {}))
    ]
    rows.append("checks: " + ("; ".join(problems) if problems else "every drain matched its sends, no send errors"))
    return "\n".join(rows)


def _problems(phase: dict[str, Any]) -> Iterator[str]:
    if phase.get("send", {}).get("errors"):
        yield f"send errors {phase['send']['errors']}"
    if "drain" in phase and not phase["drain"]["verify"].startswith("OK"):
        yield phase["drain"]["verify"]
    for key, name in (("java", "Producer"), ("java_batch", "BatchProducer")):
        if phase.get(key, {}).get("producer_failed"):
            yield f"Java {name} send failures {phase[key]['producer_failed']}"


def _has_class(home: Path, name: str) -> bool:
    """Whether a jar of ``home/lib`` holds class ``name``."""
    entry = name.replace(".", "/") + ".class"
    for jar in (home / "lib").glob("*.jar"):
        with contextlib.suppress(OSError, zipfile.BadZipFile), zipfile.ZipFile(jar) as z:
            if entry in z.namelist():
                return True
    return False


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.versus", description=__doc__.split("\n\n")[0])
    p.add_argument("--apache-home", type=Path, help="an Apache RocketMQ 4.9.8 distribution (lib/, conf/)")
    p.add_argument("--rounds", type=int, default=2, help="rounds, the order of the pairs alternating (default 2)")
    p.add_argument("--duration", type=float, default=10.0, help="seconds of each send phase (default 10)")
    p.add_argument("--messages", type=int, default=400_000, help="send phase limit in messages (default 400000)")
    p.add_argument("--settle", type=float, default=5.0, help="seconds a fresh pair idles before it is measured")
    p.add_argument("--warmup", type=float, default=5.0, help="seconds of unmeasured sends first (default 5)")
    p.add_argument("--apache-heap", default="1g", help="Apache broker's -Xms/-Xmx (default 1g)")
    p.add_argument("--broker-set", action="append", default=[], metavar="KEY=VALUE", help="a broker.conf line, both")
    p.add_argument("--no-java-producer", dest="java_producer", action="store_false", help="skip Apache's Producer")
    p.add_argument("--java-threads", type=int, default=16, help="the Java Producer's threads (default 16)")
    p.add_argument("--java-warmup", type=float, default=8.0, help="seconds before the Java window (default 8)")
    p.add_argument("--no-scaling", action="store_true", help="skip the 1-core / 2-core sends")
    p.add_argument("--topics", type=int, default=1000, help="topics of the loaded RSS figure (0: skip it)")
    p.add_argument("--connections", type=int, default=500, help="connections of the loaded RSS figure")
    p.add_argument("--save", metavar="JSON", help="write every round's figures here")
    args = p.parse_args(argv)
    if args.apache_home is None:
        args.java_producer = False
    elif not list((args.apache_home / "lib").glob("*.jar")):
        p.error(f"--apache-home: no jars in {args.apache_home / 'lib'}")
    elif args.java_producer and not any("example" in j.name for j in (args.apache_home / "lib").glob("*.jar")):
        print("no rocketmq-example jar in --apache-home/lib: the Java Producer is skipped", file=sys.stderr)
        args.java_producer = False
    args.java_batch_producer = args.java_producer and _has_class(args.apache_home, JAVA_BATCH_PRODUCER)
    if any("=" not in kv for kv in args.broker_set):
        p.error("--broker-set takes KEY=VALUE")
    if (os.cpu_count() or 1) < 2:
        args.no_scaling = True
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    targets = ["ours", "apache"] if args.apache_home else ["ours"]
    results: dict[str, list[dict[str, Any]]] = {t: [] for t in targets}
    try:
        for i in range(args.rounds):
            for target in targets if i % 2 == 0 else targets[::-1]:
                print(f"--- round {i + 1}: {target}", flush=True)
                results[target].append(one_target(args, target, first_round=i == 0))
    except SetupError as e:
        print(f"benchmark failed: {e}", file=sys.stderr)
        return 2
    print()
    now = datetime.datetime.now()
    print(f"{platform.node()}, {os.cpu_count()} cores, {args.rounds} round(s), medians; {now:%F %T}")
    print(render(results))
    if args.save:
        Path(args.save).write_text(json.dumps({"options": _jsonable(vars(args)), "results": results}, indent=2) + "\n")
    clean = not any(
        list(_problems(r.get(flush, {})))
        for rounds in results.values()
        for r in rounds
        for flush in ("ASYNC_FLUSH", "SYNC_FLUSH")
    )
    return 0 if clean else 1


def _jsonable(options: dict[str, Any]) -> dict[str, Any]:
    return {k: str(v) if isinstance(v, Path) else v for k, v in options.items()}


if __name__ == "__main__":
    sys.exit(main())
