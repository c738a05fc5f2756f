"""Compatibility tests: the Apache C++ client (rocketmq-client-cpp 1.0.1 in PyPI ``rocketmq==0.4.4``).

Each scenario runs ``python -m compat_tests.cpp_client <command>`` in a child process with its own
``HOME`` (the library writes logs under ``$HOME/logs/rocketmq-cpp``), bounded by a timeout; the child
prints JSON lines that the test checks. See compat_tests/cpp_client.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import QueryConsumerOffsetRequestHeader

from .checks import check_exactly_once
from .cpp_client import EXIT_TIMEOUT, expected
from .servers import call

# Only look for the package: loading its library into the test process is what the children are for.
if importlib.util.find_spec("rocketmq") is None:
    pytest.skip("PyPI rocketmq==0.4.4 (the C++ client) is not installed", allow_module_level=True)

pytestmark = pytest.mark.compat

ROOT = Path(__file__).resolve().parent.parent
SLACK = 20.0  # seconds a child gets beyond its own --timeout before it is killed from here


def _unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def _env(home: Path) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    return dict(os.environ, HOME=str(home), PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT))


def _command(command: str, servers: Any, topic: str, group: str, timeout: float, *extra: Any) -> list[str]:
    return [
        sys.executable,
        "-m",
        "compat_tests.cpp_client",
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


def _parse(stdout: str) -> list[dict[str, Any]]:
    events = []
    for line in stdout.splitlines():
        if line.startswith("{"):
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
    return events


class Run:
    """A finished child: exit code, JSON events and a description for assertion messages."""

    def __init__(self, what: str, returncode: int | None, stdout: str, stderr: str, home: Path) -> None:
        self.what = what
        self.returncode = returncode
        self.events = _parse(stdout)
        self.stdout = stdout
        self.stderr = stderr
        self.home = home

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("event") == kind]

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.of("msg")

    def describe(self) -> str:
        lines = self.stdout.splitlines()
        text = (
            f"{self.what}: exit code {self.returncode}\n--- stdout (first/last lines) ---\n"
            + "\n".join([*lines[:10], "...", *lines[-10:]])
            + f"\n--- stderr ---\n{self.stderr[-3000:]}"
        )
        logs = sorted((self.home / "logs" / "rocketmq-cpp").glob("*"), key=lambda p: p.stat().st_mtime)
        if logs:
            text += "\n--- client log (tail) ---\n" + logs[-1].read_text(errors="replace")[-3000:]
        return text


def run_cpp(home: Path, command: str, servers: Any, topic: str, group: str, *extra: Any, timeout: float = 60) -> Run:
    cmd = _command(command, servers, topic, group, timeout, *extra)
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=timeout + SLACK,
            env=_env(home),
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        run = Run(command, None, out, err, home)
        pytest.fail(f"{command} was killed after {timeout + SLACK}s\n{run.describe()}")
    return Run(command, proc.returncode, proc.stdout, proc.stderr, home)


class Background:
    """A child consumer (or, with ``command="produce"``, a producer) running until its stdin is closed; a
    thread collects its JSON lines."""

    def __init__(
        self, home: Path, servers: Any, topic: str, group: str, *extra: Any, timeout: float = 60, command="consume"
    ) -> None:
        self.home = home
        self.timeout = timeout
        self.command = command
        until_closed = ("--expect", 0) if command == "consume" else ("--count", 0)
        self.proc = subprocess.Popen(
            _command(command, servers, topic, group, timeout, *until_closed, *extra),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(home),
            cwd=ROOT,
        )
        self.lines: list[str] = []
        self.err: list[str] = []
        self._lock = threading.Lock()
        self._pumps = [
            threading.Thread(target=self._pump, args=(self.proc.stdout, self.lines), daemon=True),
            threading.Thread(target=self._pump, args=(self.proc.stderr, self.err), daemon=True),
        ]
        for pump in self._pumps:
            pump.start()

    def _pump(self, stream: Any, sink: list[str]) -> None:
        for line in stream:
            with self._lock:
                sink.append(line)

    def events(self) -> list[dict[str, Any]]:
        with self._lock:
            return _parse("".join(self.lines))

    def wait_started(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(e.get("event") == "started" for e in self.events()):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        pytest.fail("push consumer did not start:\n" + self.finish().describe())

    def finish(self, timeout: float = 40) -> Run:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pump in self._pumps:  # the child is gone: its pipes reach EOF
            pump.join(5)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        with self._lock:
            return Run(self.command, self.proc.returncode, "".join(self.lines), "".join(self.err), self.home)


def produce(
    tmp_path: Path,
    servers: Any,
    topic: str,
    run_id: str,
    count: int,
    mode: str = "sync",
    start: int = 0,
    timeout: float = 60,
) -> Run:
    run = run_cpp(
        tmp_path / "home-producer",
        "produce",
        servers,
        topic,
        _unique("cpp_pg"),
        "--run",
        run_id,
        "--count",
        count,
        "--start",
        start,
        "--mode",
        mode,
        timeout=timeout,
    )
    assert run.returncode == 0, run.describe()
    done = run.of("done")
    assert done and done[-1]["sent"] == count and not done[-1]["failed"], run.describe()
    return run


def check_messages(
    messages: Iterable[dict[str, Any]], run_id: str, indexes: Iterable[int], topic: str, what: str
) -> None:
    """Every message of ``run_id`` numbered in ``indexes`` arrived exactly once, intact, and nothing else."""
    check_exactly_once(messages, run_id, indexes, topic, what, lambda i: expected(run_id, i))


def pull_all(tmp_path: Path, servers: Any, topic: str, timeout: float = 60) -> Run:
    run = run_cpp(tmp_path / "home-pull", "pull", servers, topic, _unique("cpp_pull"), timeout=timeout)
    assert run.returncode == 0 and run.of("done"), run.describe()
    return run


def consume(
    tmp_path: Path,
    servers: Any,
    topic: str,
    group: str,
    expect: int,
    *extra: Any,
    linger: float = 3.0,
    timeout: float = 60,
) -> Run:
    run = run_cpp(
        tmp_path / f"home-consumer-{group}",
        "consume",
        servers,
        topic,
        group,
        "--expect",
        expect,
        "--linger",
        linger,
        *extra,
        timeout=timeout,
    )
    if run.returncode == EXIT_TIMEOUT:
        pytest.fail(f"push consumer got {len(run.messages)} of {expect} messages in {timeout}s\n{run.describe()}")
    assert run.returncode == 0, run.describe()
    return run


@pytest.mark.parametrize("mode", ["sync", "async", "oneway"])
def test_send_modes_are_all_stored(servers, tmp_path, mode):
    """Every message the C++ producer sent (sync/async/oneway) is stored once, intact, for a pull consumer."""
    topic = _unique(f"CppSend_{mode}")
    servers.create_topic(topic, queues=4)
    run_id = _unique(mode)
    sent = produce(tmp_path, servers, topic, run_id, 60, mode=mode)
    if mode != "oneway":
        acked = sent.of("sent")
        assert sorted(e["i"] for e in acked) == list(range(60)), sent.describe()
        # This client reports its UNIQ_KEY as msgId; the offset is the broker's queueOffset.
        assert len({e["msg_id"] for e in acked if e["msg_id"]}) == 60, "send results lack or repeat msgIds"
        assert all(0 <= e["offset"] < 60 for e in acked), "a send result with an impossible queue offset"
    pulled = pull_all(tmp_path, servers, topic)
    check_messages(pulled.messages, run_id, range(60), topic, f"pull after {mode} sends")
    queues = Counter(m["queue_id"] for m in pulled.messages)
    assert set(queues) <= {0, 1, 2, 3}, f"messages in queues {sorted(queues)} of a 4-queue topic"
    for q in queues:
        offsets = sorted(m["queue_offset"] for m in pulled.messages if m["queue_id"] == q)
        assert offsets == list(range(len(offsets))), f"queue {q} offsets are not 0..n-1: {offsets}"


def test_send_batch_is_one_message_per_call_as_with_apache(servers, tmp_path):
    """``send_batch`` of this client version sends SEND_MESSAGE (10) with extField ``"batch":"1"``; Java's
    Boolean.parseBoolean("1") is false, so Apache 4.9 stores each call as ONE message whose body is the batch
    encoding (TOTALSIZE first, so the NUL-terminated body the wrapper returns is empty). Same here."""
    topic = _unique("CppSend_batch")
    servers.create_topic(topic, queues=4)
    run_id = _unique("batch")
    sent = produce(tmp_path, servers, topic, run_id, 60, mode="batch")
    calls = sent.of("batch")
    assert [c["n"] for c in calls] == [10] * 6, sent.describe()
    pulled = pull_all(tmp_path, servers, topic).messages
    assert len(pulled) == len(calls), f"{len(calls)} send_batch calls stored as {len(pulled)} messages"
    inner_bodies = min(
        sum(len(expected(run_id, i)["body"].encode()) + 22 for i in range(c["first"], c["first"] + c["n"]))
        for c in calls
    )
    for msg in pulled:
        assert (msg["body"], msg["tags"], msg["keys"]) == ("", "", ""), msg
        assert msg["store_size"] > inner_bodies, f"record of {msg['store_size']} bytes cannot hold a batch"
    assert sorted(c["offset"] for c in calls) == sorted(m["queue_offset"] for m in pulled), "offsets differ"


def test_push_consumer_round_trip_with_tag_filter(servers, tmp_path):
    """A push consumer gets bodies, tags, keys and user properties intact, and only the tags it subscribed to."""
    topic = _unique("CppPush")
    servers.create_topic(topic, queues=4)
    run_id = _unique("push")
    produce(tmp_path, servers, topic, run_id, 90)
    everything = consume(tmp_path, servers, topic, _unique("cpp_all"), 90)
    check_messages(everything.messages, run_id, range(90), topic, "push consumer '*'")
    filtered = consume(tmp_path, servers, topic, _unique("cpp_tags"), 60, "--expression", "Tag0 || Tag2")
    check_messages(filtered.messages, run_id, [i for i in range(90) if i % 3 != 1], topic, "push 'Tag0 || Tag2'")


def group_members(servers: Any, group: str) -> list[str]:
    from gateway.remoting.codes import RequestCode
    from gateway.remoting.command import RemotingCommand

    resp = call(
        servers.broker_addr, RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
    )
    if resp.code != 0 or not resp.body:
        return []
    return list(json.loads(resp.body).get("consumerIdList") or [])


def test_consumer_group_shares_queues(servers, tmp_path):
    """Two push consumers of one group split the queues: each message is consumed once, both get some."""
    topic = _unique("CppGroup")
    servers.create_topic(topic, queues=4)
    group = _unique("cpp_group")
    members = [
        Background(tmp_path / f"home-member-{name}", servers, topic, group, "--instance", name, timeout=90)
        for name in ("memberA", "memberB")
    ]
    try:
        for member in members:
            member.wait_started()
        deadline = time.monotonic() + 20
        while len(group_members(servers, group)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(group_members(servers, group)) == 2, "the broker does not list both members of the group"
        time.sleep(3)  # NOTIFY_CONSUMER_IDS_CHANGED makes both members rebalance at once
        run_id = _unique("group")
        produce(tmp_path, servers, topic, run_id, 200)
        deadline, last = time.monotonic() + 45, -1
        while time.monotonic() < deadline:
            total = sum(len([e for e in m.events() if e.get("event") == "msg"]) for m in members)
            if total >= 200 and total == last:
                break
            last = total
            time.sleep(2)
    finally:
        runs = [m.finish() for m in members]
    for run in runs:
        assert run.returncode == 0, run.describe()
    check_messages([m for run in runs for m in run.messages], run_id, range(200), topic, "group of two")
    counts = [len(run.messages) for run in runs]
    queues = [{m["queue_id"] for m in run.messages} for run in runs]
    assert all(counts), f"one member got nothing: {counts} messages from queues {queues}"
    assert not queues[0] & queues[1], f"both members consumed from queues {sorted(queues[0] & queues[1])}"


def test_acceptance_1000_messages_exactly_once_and_resume_after_restart(fresh_servers, tmp_path):
    """1,000 C++-produced messages consumed once each, intact; after a restart nothing is lost and the group
    resumes from its committed offset."""
    servers = fresh_servers
    topic = _unique("CppAccept")
    servers.create_topic(topic, queues=4)
    group = _unique("cpp_accept")
    first, second = _unique("first"), _unique("second")
    produce(tmp_path, servers, topic, first, 1000, timeout=90)
    consumed = consume(tmp_path, servers, topic, group, 1000, timeout=90)
    check_messages(consumed.messages, first, range(1000), topic, "first 1,000")
    time.sleep(0.5)  # a commit the client sent as it shut down, read by now
    before = committed_offsets(servers.broker_addr, group, topic, 4)
    assert len(before) == 4, f"the group has offsets for queues {sorted(before)} only"

    servers.restart()

    stored = pull_all(tmp_path, servers, topic)
    check_messages(stored.messages, first, range(1000), topic, "stored after restart")
    # The client commits offsets every 5 s and, oneway, as it shuts down; what reached the broker is what the group
    # resumes from: the first run's messages at or past those offsets come again, exactly once, and nothing before.
    committed = committed_offsets(servers.broker_addr, group, topic, 4)
    assert committed == before, "the broker did not keep the group's offsets over its restart"
    again = [int(m["props"]["idx"]) for m in stored.messages if m["queue_offset"] >= committed[m["queue_id"]]]
    assert len(again) < 1000, f"the group committed nothing of the first run: {committed}"
    produce(tmp_path, servers, topic, second, 100, start=1000)
    resumed = consume(tmp_path, servers, topic, group, 100 + len(again), linger=4.0)
    firsts = [m for m in resumed.messages if m["props"].get("run") == first]
    check_messages(firsts, first, again, topic, f"first run's after the committed offsets {committed}")
    seconds = [m for m in resumed.messages if m["props"].get("run") != first]
    check_messages(seconds, second, range(1000, 1100), topic, "same group after restart")


def committed_offsets(broker: str, group: str, topic: str, queues: int) -> dict[int, int]:
    """The consumer offsets the broker at ``broker`` has for ``group`` (QUERY_CONSUMER_OFFSET), by queue id: the
    queues it has one for."""
    out = {}
    for queue_id in range(queues):
        header = QueryConsumerOffsetRequestHeader(consumer_group=group, topic=topic, queue_id=queue_id).encode()
        response = call(broker, RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, header), 5)
        if response.code == ResponseCode.SUCCESS:
            out[queue_id] = int(response.ext_fields["offset"])
    return out
