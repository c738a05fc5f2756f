"""Log files as Apache's operators expect them: one per component under the log directory, rotated by size
(and day) with a bounded number kept, JSON lines when asked, and a console with only the start/stop lines,
warnings and errors; checked on the observers and on a real ``python -m gateway`` process."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from twisted.logger import Logger, LogLevel, LogPublisher

from compat_tests.servers import default_sigint
from gateway.logs import ComponentFilesObserver, LogSettings, console_observer, default_log_dir

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def opened() -> Iterator[list[ComponentFilesObserver]]:
    """Observers made by a test, closed after it."""
    made: list[ComponentFilesObserver] = []
    yield made
    for files in made:
        files.close()


def _publisher(
    settings: LogSettings, console: io.StringIO, opened: list[ComponentFilesObserver]
) -> tuple[LogPublisher, ComponentFilesObserver]:
    files = ComponentFilesObserver(settings, "gateway.log")
    opened.append(files)
    return LogPublisher(files, console_observer(settings, console)), files


def test_components_levels_and_console(tmp_path: Path, opened) -> None:
    console = io.StringIO()
    publisher, _ = _publisher(LogSettings(tmp_path), console, opened)
    Logger("gateway.store.commit_log", observer=publisher).info("store line {n}", n=1)
    Logger("gateway.remoting.protocol", observer=publisher).warn("remoting warning")
    Logger("gateway.broker.transaction.service", observer=publisher).info("transaction line")
    Logger("gateway.broker.controller", observer=publisher).info("broker boot success", console=True)
    Logger("gateway.broker.controller", observer=publisher).debug("not at info")
    Logger("gateway.namesrv.routes", observer=publisher).error("namesrv error")
    Logger("somewhere.else", observer=publisher).info("other line")
    assert "store line 1" in (tmp_path / "store.log").read_text()
    assert "remoting warning" in (tmp_path / "remoting.log").read_text()
    assert "transaction line" in (tmp_path / "transaction.log").read_text()
    broker = (tmp_path / "broker.log").read_text()
    assert "broker boot success" in broker and "not at info" not in broker
    assert "namesrv error" in (tmp_path / "namesrv.log").read_text()
    assert "other line" in (tmp_path / "gateway.log").read_text()
    shown = console.getvalue()
    assert "remoting warning" in shown and "namesrv error" in shown and "broker boot success" in shown
    assert "store line" not in shown and "transaction line" not in shown


def test_rotation_keeps_a_bounded_number_of_files(tmp_path: Path, opened) -> None:
    publisher, files = _publisher(LogSettings(tmp_path, max_size=2000, max_files=3), io.StringIO(), opened)
    log = Logger("gateway.store.flush", observer=publisher)
    for i in range(200):
        log.info("line {i} {pad}", i=i, pad="x" * 80)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["store.log", "store.log.1", "store.log.2", "store.log.3"]
    assert all(p.stat().st_size <= 2000 + 200 for p in tmp_path.iterdir())
    assert "line 199" in (tmp_path / "store.log").read_text()
    # A new day rotates too.
    out = files.files["store.log"]
    out.day -= 1
    log.info("tomorrow")
    assert (tmp_path / "store.log").read_text().strip().endswith("tomorrow")


def test_json_lines(tmp_path: Path, opened) -> None:
    publisher, _ = _publisher(LogSettings(tmp_path, json_lines=True), io.StringIO(), opened)
    log = Logger("gateway.broker.processors.send", observer=publisher)
    log.info("sent {n} messages", n=3)
    try:
        raise ValueError("boom")
    except ValueError:
        log.failure("send failed")
    first, second = (json.loads(line) for line in (tmp_path / "broker.log").read_text().splitlines())
    assert (first["level"], first["logger"], first["message"]) == (
        "INFO",
        "gateway.broker.processors.send",
        "sent 3 messages",
    )
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}$", first["time"])
    assert second["level"] == "CRITICAL" and "ValueError: boom" in second["error"]


def test_default_dir_follows_home_and_env(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("ROCKETMQ_LOG_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_log_dir() == tmp_path / "logs" / "rocketmqlogs"
    monkeypatch.setenv("ROCKETMQ_LOG_DIR", str(tmp_path / "elsewhere"))
    assert default_log_dir() == tmp_path / "elsewhere"
    assert LogLevel.levelWithName("warn") == LogSettings(tmp_path).console_level


def test_gateway_process_writes_component_files(tmp_path: Path) -> None:
    """``python -m gateway``: the console has the ready line and the stop lines; the files have the rest."""
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    env.pop("ROCKETMQ_LOG_DIR", None)
    conf = tmp_path / "broker.conf"
    conf.write_text(f"listenPort=0\ngrpcServerPort=0\nstorePathRootDir={tmp_path / 'store'}\nbrokerIP1=127.0.0.1\n")
    command = [sys.executable, "-m", "gateway", "--namesrv-port", "0", "--broker-config", str(conf), "--log-json"]
    with subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=default_sigint,
    ) as proc:  # fmt: skip
        try:
            assert proc.stdout is not None
            ready = proc.stdout.readline()
            deadline = time.monotonic() + 30
            while "rocketmq-gateway ready" not in ready and time.monotonic() < deadline:
                ready = proc.stdout.readline()
            assert "rocketmq-gateway ready" in ready
            proc.send_signal(signal.SIGINT)
            rest, _ = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
    log_dir = tmp_path / "logs" / "rocketmqlogs"
    files = {p.name for p in log_dir.iterdir()}
    assert {"broker.log", "store.log", "namesrv.log"} <= files
    store = [json.loads(line) for line in (log_dir / "store.log").read_text().splitlines()]
    assert store and all(r["logger"].startswith("gateway.store") for r in store)
    broker = [json.loads(line) for line in (log_dir / "broker.log").read_text().splitlines()]
    messages = " ".join(r["message"] for r in broker)
    assert "store recovered" in messages and "boot success" in messages
    assert "NameServer stopped" in rest and "store recovered" not in rest
