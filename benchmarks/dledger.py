"""Send throughput and latency of a three-broker DLedger group, ours beside Apache 4.9.8's, in one run.

    python -m benchmarks.dledger                            # ours and Apache's, 2 rounds, alternating
    python -m benchmarks.dledger --only apache              # Apache's group alone
    python -m benchmarks.dledger --apache-home DIR --rounds 4 --save run.json
    python -m benchmarks.dledger --only ours --before DIR    # ours beside ours from another tree (a change's cost)

Each round starts, for each target in turn (the order alternating from round to round), a NameServer and three
brokers of one DLedger group on temporary stores and loopback ports: ``enableDLegerCommitLog=true``,
``dLegerGroup``, ``dLegerPeers`` (``n0-127.0.0.1:P0;n1-...;n2-...``), ``dLegerSelfId``, one ``brokerName``. Ours
runs ``python -m gateway.namesrv`` and ``python -m gateway.broker -c``; Apache's NamesrvStartup and BrokerStartup
(as ``versus.py`` starts them: G1, ``--apache-heap``) from ``--apache-home DIR`` (``DIR/lib/*.jar`` and
``DIR/conf/logback_*.xml``) or, without it, from the jars ``$ROCKETMQ_BROKER_CLASSPATH`` names. It waits until
every member names the same leader (DLedger's METADATA RPC on their DLedger ports) and the NameServer routes that
leader as brokerId 0, sends ``--warmup`` seconds unmeasured, then runs the send phase of ``throughput.py`` against
the group (16 connections x 4 in flight, 1 KB; each send answered once a majority holds it): msgs/s, p50/p99,
CPU per 10k messages of the leader, of the two followers and of the group. ``--before DIR`` adds the target
``before``: our group run from the source tree DIR (its C extensions built), to measure a change in one run.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compat_tests.apache_broker import CLASSPATH, CLASSPATH_ENV, LOGBACK
from compat_tests.apache_dledger import leader_seen
from compat_tests.servers import call, free_port
from gateway.remoting import fastjson
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand

from . import throughput, versus
from .ha_pair import _load_args, _median
from .rss import stop_process
from .wire import SetupError

GROUP = "RaftNode00"
BROKER_NAME = "broker-a"
SIZE = 3
# Our broker before its DLedger wiring: it warns about keys it does not know and runs as a plain master.
IGNORED_KEY = "unknown key enableDLegerCommitLog ignored"


@dataclass
class GroupMember:
    self_id: str
    broker_addr: str
    dledger_addr: str
    proc: subprocess.Popen[bytes]
    log: Path


@dataclass
class RunningGroup:
    target: str
    namesrv: str
    members: list[GroupMember]
    others: list[subprocess.Popen[bytes]]  # the NameServer

    def stop(self) -> None:
        for proc in [*(m.proc for m in self.members), *self.others]:
            stop_process(proc)


def dledger_lines(self_id: str, peers: str) -> dict[str, str]:
    """The broker settings that make a member of the group (Apache's names)."""
    return {
        "brokerClusterName": "DefaultCluster",
        "brokerName": BROKER_NAME,
        "enableDLegerCommitLog": "true",
        "dLegerGroup": GROUP,
        "dLegerPeers": peers,
        "dLegerSelfId": self_id,
        "mappedFileSizeCommitLog": str(64 << 20),
    }


def _peers() -> tuple[list[str], str]:
    addrs = [f"127.0.0.1:{free_port()}" for _ in range(SIZE)]
    return addrs, ";".join(f"n{i}-{a}" for i, a in enumerate(addrs))


def _python(module: str, conf: Path, root: Path, tree: Path | None = None) -> subprocess.Popen[bytes]:
    """``python -m module -c conf``, its output in ``conf`` with the suffix ``.out``, HOME (its logs) ``root``;
    the module from the source ``tree`` when given."""
    env = dict(os.environ, HOME=str(root))
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    with open(conf.with_suffix(".out"), "wb") as out:  # the child keeps its own descriptor
        command = [sys.executable, "-m", module, "-c", str(conf)]
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tree)


@contextlib.contextmanager
def our_group(args: argparse.Namespace, root: Path, tree: Path | None = None) -> Iterator[RunningGroup]:
    """Our NameServer and three ``python -m gateway.broker`` members (from the source ``tree`` when given)."""
    ns_port = free_port()
    ns_conf = root / "namesrv.properties"
    ns_conf.write_text(f"listenPort={ns_port}\nbindAddress=127.0.0.1\nkvConfigPath={root / 'kv.json'}\n")
    namesrv = _python("gateway.namesrv", ns_conf, root, tree)
    dledger, peers = _peers()
    group = RunningGroup("ours" if tree is None else "before", f"127.0.0.1:{ns_port}", [], [namesrv])
    try:
        for i, dledger_addr in enumerate(dledger):
            port = free_port()
            lines = {
                **dledger_lines(f"n{i}", peers),
                "brokerIP1": "127.0.0.1",
                "bindAddress": "127.0.0.1",
                "listenPort": str(port),
                "namesrvAddr": group.namesrv,
                "storePathRootDir": str(root / f"n{i}" / "store"),
            }
            conf = root / f"n{i}.conf"
            conf.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
            proc = _python("gateway.broker", conf, root, tree)
            group.members.append(
                GroupMember(f"n{i}", f"127.0.0.1:{port}", dledger_addr, proc, conf.with_suffix(".out"))
            )
        yield group
    finally:
        group.stop()


def apache_home(args: argparse.Namespace, root: Path) -> Path:
    """``--apache-home``, else a home under ``root`` whose lib/ links the jars of ``$ROCKETMQ_BROKER_CLASSPATH``."""
    if args.apache_home is not None:
        return args.apache_home
    home = root / "apache-home"
    (home / "lib").mkdir(parents=True)
    (home / "conf").mkdir()
    for jar in CLASSPATH.split(os.pathsep):
        link = home / "lib" / Path(jar).name
        if jar and not link.exists():
            link.symlink_to(jar)
    for name in ("logback_broker.xml", "logback_namesrv.xml"):
        (home / "conf" / name).write_text(LOGBACK)
    return home


@contextlib.contextmanager
def apache_group(args: argparse.Namespace, root: Path) -> Iterator[RunningGroup]:
    """Apache's NameServer and three BrokerStartups, as ``versus.py`` starts them."""
    home = apache_home(args, root)
    dledger, peers = _peers()
    pair = versus.start_apache(home, root, dledger_lines("n0", peers), args.apache_heap)
    namesrv, n0 = pair.procs
    group = RunningGroup("apache", pair.namesrv, [], [namesrv])
    group.members.append(GroupMember("n0", pair.broker, dledger[0], n0, root / "broker.out"))
    try:
        for i in range(1, SIZE):
            proc, addr = versus.start_apache_broker(
                home, root, f"n{i}", pair.namesrv, dledger_lines(f"n{i}", peers), args.apache_heap
            )
            group.members.append(GroupMember(f"n{i}", addr, dledger[i], proc, root / f"n{i}.out"))
        yield group
    finally:
        group.stop()


def _tail(path: Path, lines: int = 5) -> str:
    with contextlib.suppress(OSError):
        return "".join(path.read_text(errors="replace").splitlines(keepends=True)[-lines:])
    return ""


def wait_leader(group: RunningGroup, timeout: float) -> GroupMember:
    """The member every member names as leader (DLedger's METADATA); SetupError saying why if none in time."""
    deadline = time.monotonic() + timeout
    by_id = {m.self_id: m for m in group.members}
    while True:
        for m in group.members:
            if m.proc.poll() is not None:
                raise SetupError(f"{m.self_id} exited with {m.proc.returncode}:\n{_tail(m.log)}")
        seen = {leader_seen(m.dledger_addr, m.self_id, GROUP) for m in group.members}
        if len(seen) == 1 and None not in seen:
            return by_id[seen.pop()]  # type: ignore[index]
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    silent = [m.self_id for m in group.members if leader_seen(m.dledger_addr, m.self_id, GROUP) is None]
    why = f"no DLedger leader elected in {timeout:g} s (no leader known to {', '.join(silent) or 'nobody'})"
    if any(IGNORED_KEY in m.log.read_text(errors="replace") for m in group.members if m.log.exists()):
        why += f"; the brokers' logs say '{IGNORED_KEY}': this build does not run DLedger mode"
    raise SetupError(why)


def master_of(namesrv: str) -> str | None:
    """The address the NameServer routes as brokerId 0 of the group's broker name."""
    resp = call(namesrv, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), 3)
    if resp.code != ResponseCode.SUCCESS or not resp.body:
        return None
    addrs = fastjson.loads(resp.body).get("brokerAddrTable", {}).get(BROKER_NAME, {}).get("brokerAddrs", {})
    return {int(k): v for k, v in addrs.items()}.get(0)


def wait_master(group: RunningGroup, leader: GroupMember, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError):
            if master_of(group.namesrv) == leader.broker_addr:
                return
        if time.monotonic() > deadline:
            raise SetupError(f"the leader {leader.self_id} was not routed as master in {timeout:g} s")
        time.sleep(0.2)


def before_group(args: argparse.Namespace, root: Path) -> contextlib.AbstractContextManager[RunningGroup]:
    """Our group from the tree ``--before`` names."""
    return our_group(args, root, args.before)


STARTERS: dict[str, Callable[[argparse.Namespace, Path], contextlib.AbstractContextManager[RunningGroup]]] = {
    "ours": our_group,
    "apache": apache_group,
    "before": before_group,
}


def measure(args: argparse.Namespace, target: str) -> dict[str, Any]:
    """One target's group, started afresh: election time, then warm-up and the measured send phase."""
    root = Path(tempfile.mkdtemp(prefix=f"rmq-dledger-bench-{target}-"))
    try:
        with STARTERS[target](args, root) as group:
            started = time.monotonic()
            leader = wait_leader(group, args.elect_timeout)
            elected = time.monotonic() - started
            wait_master(group, leader)
            with throughput.affinity_kept():
                if args.warmup:
                    throughput.benchmark(_load_args(args, args.warmup), group.namesrv, None, f"{target} warm-up")
                followers = [throughput.CpuMeter(m.proc.pid) for m in group.members if m is not leader]
                for meter in followers:
                    meter.start()
                results = throughput.benchmark(
                    _load_args(args, args.duration), group.namesrv, leader.proc.pid, f"{target} DLedger x{SIZE}"
                )
                for meter in followers:
                    meter.stop()
            send = results["send"]
            rate = send["rate"]
            follower_cores = sum(m.broker or 0.0 for m in followers)
            leader_cores = send["broker_cpu"] or 0.0
            return {
                "target": target,
                "leader": leader.self_id,
                "elected_s": elected,
                **throughput.send_summary(send),
                "leader_cpu_per_10k": leader_cores * 1e4 / rate if rate else None,
                "followers_cpu_per_10k": follower_cores * 1e4 / rate if rate else None,
                "group_cpu_per_10k": (leader_cores + follower_cores) * 1e4 / rate if rate else None,
            }
    except SetupError as e:
        return {"target": target, "failed": str(e)}
    finally:
        shutil.rmtree(root, ignore_errors=True)


_RATIOS = (
    ("rate", "msgs/s"),
    ("p50_ms", "p50"),
    ("p99_ms", "p99"),
    ("group_cpu_per_10k", "group CPU/10k"),
)


def _ratios(rows: list[dict[str, Any]], target: str, other: str) -> str | None:
    """The medians of ``target``'s runs over ``other``'s, None unless both ran."""
    mine = [r for r in rows if r["target"] == target and "failed" not in r]
    theirs = [r for r in rows if r["target"] == other and "failed" not in r]
    if not mine or not theirs:
        return None
    parts = []
    for key, label in _RATIOS:
        a, b = _median(mine, (key,)), _median(theirs, (key,))
        if a is not None and b:
            parts.append(f"{label} {a / b:.2f}")
    return "  " + ", ".join(parts)


def render(rows: list[dict[str, Any]]) -> str:
    """Every run, then the medians of ours over Apache's and over ``before``'s where both ran."""
    lines = [
        f"{'target':7} {'leader':6} {'elect s':>7} {'msgs/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'errors':>6} "
        f"{'CPU/10k leader/followers/group':>30}"
    ]
    for r in rows:
        if "failed" in r:
            lines.append(f"{r['target']:7} FAILED: {r['failed']}")
            continue
        cpu = "/".join(
            f"{r[k]:.2f}" if r[k] is not None else "-"
            for k in ("leader_cpu_per_10k", "followers_cpu_per_10k", "group_cpu_per_10k")
        )
        lines.append(
            f"{r['target']:7} {r['leader']:6} {r['elected_s']:7.1f} {r['rate']:8.0f} {r['p50_ms'] or 0:7.2f} "
            f"{r['p99_ms'] or 0:7.2f} {sum(r['errors'].values()) if r['errors'] else 0:6d} {cpu:>30}"
        )
    for target, other, title in (
        ("ours", "apache", "ours/Apache, medians (goal: msgs/s >= 1.0; latency and CPU <= 1.0)"),
        ("ours", "before", "ours/before, medians"),
        ("before", "apache", "before/Apache, medians"),
    ):
        ratios = _ratios(rows, target, other)
        if ratios is not None:
            lines += ["", title, ratios]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.dledger", description=__doc__.split("\n\n")[0])
    p.add_argument("--only", choices=sorted(STARTERS), help="measure one target only")
    p.add_argument("--rounds", type=int, default=2, help="rounds, the order of the targets alternating (default 2)")
    p.add_argument("--duration", type=float, default=10.0, help="seconds of measured sends (default 10)")
    p.add_argument("--warmup", type=float, default=5.0, help="seconds of unmeasured sends first (default 5)")
    p.add_argument("--size", type=int, default=1024, help="body bytes (default 1024)")
    p.add_argument("--connections", type=int, default=16, help="producer connections (default 16)")
    p.add_argument("--elect-timeout", type=float, default=60.0, help="seconds to wait for a leader (default 60)")
    p.add_argument("--apache-home", type=Path, help=f"an Apache 4.9.8 distribution (default: ${CLASSPATH_ENV}'s jars)")
    p.add_argument("--apache-heap", default="1g", help="Apache brokers' -Xms/-Xmx (default 1g)")
    p.add_argument("--before", type=Path, metavar="DIR", help="also run our group from the source tree DIR")
    p.add_argument("--save", metavar="JSON", help="write every run's figures there")
    args = p.parse_args(argv)
    if args.rounds < 1 or args.duration <= 0 or args.warmup < 0:
        p.error("--rounds must be >= 1, --duration > 0 and --warmup >= 0")
    if args.before is not None and not (args.before / "gateway" / "broker" / "__main__.py").is_file():
        p.error(f"--before: {args.before} is not a source tree of the gateway (no gateway/broker/__main__.py)")
    if args.apache_home is not None and not list((args.apache_home / "lib").glob("*.jar")):
        p.error(f"--apache-home: no jars in {args.apache_home / 'lib'}")
    wants_apache = args.only in (None, "apache")
    if wants_apache and args.apache_home is None and "dledger" not in CLASSPATH:
        if args.only == "apache":
            p.error(f"Apache's side needs --apache-home DIR or ${CLASSPATH_ENV} naming 4.9.8's jars (with DLedger)")
        print(f"Apache's side skipped: neither --apache-home nor ${CLASSPATH_ENV} given", file=sys.stderr)
        args.only = "ours"
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    targets = [args.only] if args.only else ["ours", "apache"]
    if args.before is not None:
        targets.append("before")
    rows = []
    for i in range(args.rounds):
        for target in targets if i % 2 == 0 else targets[::-1]:
            print(f"--- round {i + 1}: {target}", flush=True)
            row = measure(args, target)
            if "failed" in row:
                print(f"{target}: {row['failed']}", file=sys.stderr, flush=True)
            rows.append(row)
    print()
    print(f"{platform.node()}, {os.cpu_count()} cores, {datetime.datetime.now():%F %T}, DLedger group of {SIZE}")
    print(render(rows))
    if args.save:
        Path(args.save).write_text(json.dumps(rows, indent=2) + "\n")
    if any("failed" in r for r in rows):
        return 2
    return 1 if any(r["errors"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
