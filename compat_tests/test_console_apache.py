"""The cluster console's read pages against Apache 4.9.8's NameServer and broker, run when
``ROCKETMQ_BROKER_CLASSPATH`` names its jars: traffic from the C++ client, then every read page in Chromium."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from .apache_broker import CLASSPATH, CLASSPATH_ENV

if not CLASSPATH:
    pytest.skip(f"Apache broker not given: set {CLASSPATH_ENV} to 4.9.8's lib/* jars", allow_module_level=True)

from tests.console.browser import in_chromium, needs_chromium, shot

from .apache_broker import apache_cluster
from .test_cpp_client import consume, produce

pytestmark = [pytest.mark.compat, needs_chromium]
TOPIC, GROUP = "ConsoleApacheTopic", "console_apache_cg"


def _console(namesrv: str) -> tuple[subprocess.Popen[str], str]:
    """``rocketmq-gateway console`` against ``namesrv``; the process and its URL once it is ready."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "console", "-n", namesrv, "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    found: list[str] = []

    def ready() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            m = re.search(r"console ready: (http://\S+?)/? ", line)
            if m:
                found.append(m.group(1))
                return

    reader = threading.Thread(target=ready, daemon=True)
    reader.start()
    reader.join(30)
    if not found:
        proc.kill()
        raise AssertionError("the console did not start")
    return proc, found[0]


def test_read_pages_against_apache_4_9_8(tmp_path: Path) -> None:
    with apache_cluster(tmp_path) as (namesrv, _broker):
        clients = SimpleNamespace(namesrv_addr=namesrv)
        sent = produce(tmp_path, clients, TOPIC, "apache", 10).of("sent")
        consume(tmp_path, clients, TOPIC, GROUP, 10)
        proc, base = _console(namesrv)
        try:

            def steps(page: Any) -> dict[str, str]:
                seen = {}
                for name, path in (
                    ("cluster", "/"),
                    ("topics", "/topics"),
                    ("topic", f"/topic?topic={TOPIC}"),
                    ("groups", "/groups"),
                    ("group", f"/group?group={GROUP}"),
                    ("by_key", f"/messages?topic={TOPIC}&key=apache-key-3"),
                    ("by_time", f"/messages?topic={TOPIC}"),
                    ("charts", "/charts"),
                ):
                    page.goto(base + path)
                    shot(page, f"apache-{name}")
                    seen[name] = page.inner_text("main")
                # The found message's offset message id links to the message page.
                page.goto(f"{base}/messages?topic={TOPIC}&key=apache-key-3")
                page.locator("main table a").last.click()
                page.wait_for_load_state()
                shot(page, "apache-message")
                seen["message"] = page.inner_text("main")
                return seen

            seen = in_chromium(steps)
        finally:
            proc.terminate()
            proc.wait(30)
            if proc.stdout is not None:
                proc.stdout.close()
    assert "broker-a" in seen["cluster"] and "V4_9_8" in seen["cluster"]
    assert TOPIC in seen["topics"]
    assert "broker-a" in seen["topic"] and GROUP in seen["topic"]
    assert GROUP in seen["groups"]
    assert TOPIC in seen["group"] and "Total lag: 0" in seen["group"]
    assert "1 found" in seen["by_key"] and "10 found" in seen["by_time"]
    assert "apache message 3" in seen["message"] and "apache-key-3 alt-3" in seen["message"]
    assert len(sent) == 10
