"""Compatibility tests: the pure-JavaScript client npm ``ali-ons@3.12.0`` against our servers.

compat_tests/node/onsclient.js (``produce`` / ``consume``) runs under ``node`` in a child process bounded
by a timeout and prints JSON lines. ``npm --prefix compat_tests/node install`` (done by scripts/test)
installs the pinned client from package-lock.json. ali-ons does not auto-create topics, so every test
creates its topic first, as an operator would.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from .checks import check_exactly_once

NODE_DIR = Path(__file__).resolve().parent / "node"
SCRIPT = NODE_DIR / "onsclient.js"
NODE = shutil.which("node")

if NODE is None:
    pytest.skip("node is not installed: the ali-ons tests need Node.js", allow_module_level=True)
if not (NODE_DIR / "node_modules" / "ali-ons").is_dir():
    pytest.skip(
        "ali-ons is not installed: run `npm --prefix compat_tests/node install` (scripts/test does)",
        allow_module_level=True,
    )

pytestmark = pytest.mark.compat

EXIT_TIMEOUT = 3
SLACK = 20.0  # seconds a child gets beyond its own --timeout before it is killed from here
PROPS = ("run", "idx", "user-prop")


def _unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def expected(run: str, i: int) -> dict[str, Any]:
    """Message ``i`` of ``run``; every 100th body is over 4 KiB, which ali-ons sends zlib-compressed."""
    filler = "y" * 5000 if i % 100 == 7 else "x" * (i % 40)
    return {
        "body": f"{run} ons message {i} \u00e9\u00e8 \u4e2d\u6587 {filler}",
        "tags": f"Tag{i % 3}",
        "keys": [f"{run}-key-{i}", f"alt-{i}"],
        "props": {"run": run, "idx": str(i), "user-prop": f"value {i} = \u00fc"},
    }


class Run:
    def __init__(self, what: str, returncode: int | None, stdout: str, stderr: str) -> None:
        self.what = what
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.events = []
        for line in stdout.splitlines():
            if line.startswith("{"):
                try:
                    self.events.append(json.loads(line))
                except ValueError:
                    continue

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("event") == kind]

    def describe(self) -> str:
        lines = self.stdout.splitlines()
        return (
            f"{self.what}: exit code {self.returncode}\n--- stdout (first/last lines) ---\n"
            + "\n".join([*lines[:10], "...", *lines[-10:]])
            + f"\n--- stderr ---\n{self.stderr[-4000:]}"
        )


def run_node(command: str, servers: Any, topic: str, group: str, *extra: Any, timeout: float = 60) -> Run:
    assert NODE is not None
    cmd = [
        NODE,
        str(SCRIPT),
        command,
        "--namesrv",
        servers.namesrv_addr,
        "--topic",
        topic,
        "--group",
        group,
        "--timeout",
        str(timeout),
        *(str(x) for x in extra),
    ]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout + SLACK, cwd=NODE_DIR, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        pytest.fail(f"{command} was killed after {timeout + SLACK}s\n{Run(command, None, out, err).describe()}")
    return Run(command, proc.returncode, proc.stdout, proc.stderr)


def produce(tmp_path: Path, servers: Any, topic: str, run_id: str, indexes: Iterable[int], timeout: float = 60) -> Run:
    indexes = list(indexes)
    spec_file = tmp_path / f"{run_id}.jsonl"
    spec_file.write_text(
        "".join(json.dumps({"i": i, **expected(run_id, i)}, ensure_ascii=False) + "\n" for i in indexes),
        encoding="utf-8",
    )
    run = run_node("produce", servers, topic, _unique("ons_pg"), "--messages", spec_file, timeout=timeout)
    done = run.of("done")
    assert run.returncode == 0 and done, run.describe()
    assert done[-1]["sent"] == len(indexes) and not done[-1]["failed"], run.describe()
    acked = run.of("sent")
    assert sorted(e["i"] for e in acked) == sorted(indexes), run.describe()
    assert len({e["msgId"] for e in acked}) == len(indexes), "send results repeat message ids"
    return run


def consume(servers: Any, topic: str, group: str, expect: int, linger: float = 3.0, timeout: float = 60) -> Run:
    run = run_node(
        "consume",
        servers,
        topic,
        group,
        "--expect",
        expect,
        "--linger",
        linger,
        "--props",
        ",".join(PROPS),
        timeout=timeout,
    )
    if run.returncode == EXIT_TIMEOUT:
        pytest.fail(f"consumer got {len(run.of('msg'))} of {expect} messages in {timeout}s\n{run.describe()}")
    assert run.returncode == 0 and run.of("done"), run.describe()
    return run


def check_messages(
    messages: Iterable[dict[str, Any]], run_id: str, indexes: Iterable[int], topic: str, what: str
) -> None:
    """Every message of ``run_id`` numbered in ``indexes`` arrived exactly once, intact, and nothing else."""

    def expected_of(i: int) -> dict[str, Any]:
        spec = expected(run_id, i)
        return {**spec, "keys": " ".join(spec["keys"])}  # ali-ons gives the keys as one string

    check_exactly_once(messages, run_id, indexes, topic, what, expected_of)


def test_produce_and_consume_round_trip(servers, tmp_path):
    """Bodies (one zlib-compressed), tags, keys and user properties survive ali-ons → broker → ali-ons."""
    topic = _unique("OnsRound")
    servers.create_topic(topic, queues=4)
    run_id = _unique("round")
    sent = produce(tmp_path, servers, topic, run_id, range(30))
    assert {int(e["queueId"]) for e in sent.of("sent")} <= {0, 1, 2, 3}, sent.describe()
    got = consume(servers, topic, _unique("ons_cg"), 30)
    check_messages(got.of("msg"), run_id, range(30), topic, "round trip")
    assert all(m["reconsumeTimes"] == 0 for m in got.of("msg")), "a first delivery with reconsumeTimes > 0"


def test_unknown_topic_is_refused(servers, tmp_path):
    """ali-ons does not auto-create: a send to a topic nobody created fails (code 17 with Apache)."""
    topic = _unique("OnsMissing")
    spec_file = tmp_path / "one.jsonl"
    spec_file.write_text(json.dumps({"i": 0, **expected("missing", 0)}) + "\n", encoding="utf-8")
    run = run_node("produce", servers, topic, _unique("ons_pg"), "--messages", spec_file, "--retries", 0, timeout=30)
    assert run.returncode != 0 and not run.of("sent"), run.describe()


def test_acceptance_1000_messages_exactly_once_and_resume_after_restart(fresh_servers, tmp_path):
    """1,000 ali-ons messages consumed once each; after a restart nothing is lost and the group resumes from
    its committed offset."""
    servers = fresh_servers
    topic = _unique("OnsAccept")
    servers.create_topic(topic, queues=4)
    group = _unique("ons_accept")
    first, second = _unique("first"), _unique("second")
    produce(tmp_path, servers, topic, first, range(1000), timeout=90)
    consumed = consume(servers, topic, group, 1000, timeout=90)
    check_messages(consumed.of("msg"), first, range(1000), topic, "first 1,000")

    servers.restart()

    produce(tmp_path, servers, topic, second, range(1000, 1100))
    resumed = consume(servers, topic, group, 100, linger=4.0)
    check_messages(resumed.of("msg"), second, range(1000, 1100), topic, "same group after restart")
    everything = consume(servers, topic, _unique("ons_all"), 1100, timeout=90).of("msg")
    for run_id, indexes in ((first, range(1000)), (second, range(1000, 1100))):
        check_messages(
            [m for m in everything if (m.get("props") or {}).get("run") == run_id],
            run_id,
            indexes,
            topic,
            "a new group after the restart",
        )
    assert len(everything) == 1100, f"a new group got {len(everything)} messages, 1,100 stored"
