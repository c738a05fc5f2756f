"""Servers as child processes for fault tests: start them from properties files, freeze or kill them, drive
them with blocking producers and read back what they hold."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from compat_tests.servers import call
from gateway.remoting import fastjson
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.message import decode_records
from tests.broker.test_broker_server import pull_request, send_header


def until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except OSError:
            value = None
        if value:
            return value
        assert time.monotonic() < deadline, f"{what} not reached in {timeout} s"
        time.sleep(0.05)


class Proc:
    """A child ``python -m <module> -c <file>`` (or another ``argv``) whose output is kept in a log file."""

    def __init__(self, module: str, conf: Path, root: Path, argv: list[str] | None = None) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1", HOME=str(root))
        self.log = open(root / f"{conf.stem}.log", "w")  # noqa: SIM115
        self.proc = subprocess.Popen(
            argv or [sys.executable, "-m", module, "-c", str(conf)], stdout=self.log, stderr=subprocess.STDOUT, env=env
        )

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)  # stopped or not
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a frozen one too
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()


def write_properties(path: Path, props: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def has_topic(addr: str, topic: str) -> bool:
    resp = call(addr, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG), 3)
    return topic in fastjson.loads(resp.body).get("topicConfigTable", {})


def bodies(addr: str, topic: str, queues: int) -> Counter[bytes]:
    found: Counter[bytes] = Counter()
    for queue_id in range(queues):
        offset = 0
        while True:
            resp = call(addr, pull_request(topic, queue_id, offset, sub="*", timeout_ms=0), 5)
            if resp.code != ResponseCode.SUCCESS:
                break
            msgs = decode_records(resp.body)
            found.update(m.body for m in msgs)
            offset = int(resp.ext_fields["nextBeginOffset"])
    return found


class Producer(threading.Thread):
    """Sends numbered messages to ``topic`` at whatever ``target()`` says until stopped; remembers what was
    acknowledged and counts every answer code."""

    def __init__(self, n: int, topic: str, queues: int, target: Callable[[], str], stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.n, self.topic, self.queues, self.target, self.stop_event = n, topic, queues, target, stop
        self.codes: Counter[int] = Counter()
        self.acked: list[bytes] = []
        self.failed = 0

    def run(self) -> None:
        i = 0
        while not self.stop_event.is_set():
            body = b"p%d-%d" % (self.n, i)
            i += 1
            addr = self.target()
            header = send_header(self.topic, {}, i % self.queues)
            req = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header, body)
            try:
                resp = call(addr, req, 5)
            except OSError:
                self.failed += 1
                time.sleep(0.02)
                continue
            self.codes[resp.code] += 1
            if resp.code == ResponseCode.SUCCESS:
                self.acked.append(body)
            else:
                self.failed += 1
