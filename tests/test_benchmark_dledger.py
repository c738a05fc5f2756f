"""benchmarks/dledger.py's own logic: a group that elects nobody, or whose member dies, is reported in one clear
line, and the table sets ours beside Apache's (the measuring itself runs in the benchmark, not here)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.dledger import IGNORED_KEY, GroupMember, RunningGroup, parse_args, render, wait_leader
from benchmarks.wire import SetupError
from compat_tests.servers import free_port


@pytest.fixture
def group(tmp_path: Path) -> Iterator[RunningGroup]:
    """Three live processes that answer nothing on their DLedger ports, the way our broker is before its wiring."""
    members = []
    for i in range(3):
        log = tmp_path / f"n{i}.out"
        log.write_text(f"[gateway.config#warn] n{i}.conf: {IGNORED_KEY}\n")
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        members.append(GroupMember(f"n{i}", f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}", proc, log))
    running = RunningGroup("ours", "127.0.0.1:1", members, [])
    yield running
    for m in members:
        m.proc.kill()
        m.proc.wait()


def test_no_leader_is_one_clear_line(group: RunningGroup) -> None:
    with pytest.raises(SetupError) as e:
        wait_leader(group, 0.5)
    assert str(e.value) == (
        f"no DLedger leader elected in 0.5 s (no leader known to n0, n1, n2); the brokers' logs say "
        f"'{IGNORED_KEY}': this build does not run DLedger mode"
    )


def test_a_member_that_exits_is_named_with_its_log(group: RunningGroup) -> None:
    member = group.members[1]
    member.log.write_text("first\nbroker: the port is taken\n")
    member.proc.kill()
    member.proc.wait()
    with pytest.raises(SetupError, match=r"^n1 exited with -9:\nfirst\nbroker: the port is taken\n$"):
        wait_leader(group, 5)


def _row(target: str, rate: float, p99: float, cpu: float) -> dict:
    return {
        "target": target,
        "leader": "n0",
        "elected_s": 6.0,
        "rate": rate,
        "p50_ms": 10.0,
        "p99_ms": p99,
        "errors": {},
        "leader_cpu_per_10k": cpu / 2,
        "followers_cpu_per_10k": cpu / 2,
        "group_cpu_per_10k": cpu,
    }


def test_render_sets_ours_beside_apache_and_shows_failures() -> None:
    rows = [_row("ours", 6000, 30.0, 2.0), _row("apache", 5000, 40.0, 4.0), {"target": "ours", "failed": "why"}]
    text = render(rows)
    assert "ours    FAILED: why" in text
    assert "msgs/s 1.20, p50 1.00, p99 0.75, group CPU/10k 0.50" in text
    assert "ours/Apache" not in render([rows[1], rows[2]])


def test_render_sets_ours_beside_the_tree_before() -> None:
    rows = [_row("ours", 6000, 30.0, 2.0), _row("before", 4000, 60.0, 2.5)]
    text = render(rows)
    assert "ours/before, medians\n  msgs/s 1.50, p50 1.00, p99 0.50, group CPU/10k 0.80" in text
    assert "ours/Apache" not in text and "before/Apache" not in text


def test_before_must_be_a_source_tree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        parse_args(["--only", "ours", "--before", str(tmp_path)])
    assert e.value.code == 2
    assert f"--before: {tmp_path} is not a source tree of the gateway" in capsys.readouterr().err
