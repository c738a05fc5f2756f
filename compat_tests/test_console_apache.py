"""The cluster console's read pages against Apache 4.9.8's NameServer and broker, run when
``ROCKETMQ_BROKER_CLASSPATH`` names its jars: traffic from the C++ client, then every read page in Chromium."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from .apache_broker import CLASSPATH, CLASSPATH_ENV

if not CLASSPATH:
    pytest.skip(f"Apache broker not given: set {CLASSPATH_ENV} to 4.9.8's lib/* jars", allow_module_level=True)

from tests.console.browser import in_chromium, needs_chromium, shot
from tests.console.conftest import console_process, end_process

from .apache_broker import apache_cluster
from .test_cpp_client import consume, produce

pytestmark = [pytest.mark.compat, needs_chromium]
TOPIC, GROUP = "ConsoleApacheTopic", "console_apache_cg"


def test_read_pages_against_apache_4_9_8(tmp_path: Path) -> None:
    with apache_cluster(tmp_path) as (namesrv, _broker):
        clients = SimpleNamespace(namesrv_addr=namesrv)
        sent = produce(tmp_path, clients, TOPIC, "apache", 10).of("sent")
        consume(tmp_path, clients, TOPIC, GROUP, 10)
        proc, base = console_process(namesrv)
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
                    ("producers", f"/producers?topic={TOPIC}&group=NoSuchPG"),
                    ("dlq", f"/dlq?group={GROUP}"),
                    ("trace", f"/trace?topic={TOPIC}&key=apache-key-3"),
                    ("client_list", f"/groups?filter={GROUP}"),
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
            end_process(proc)
    assert "broker-a" in seen["cluster"] and "V4_9_8" in seen["cluster"]
    assert TOPIC in seen["topics"]
    assert "broker-a" in seen["topic"] and GROUP in seen["topic"]
    assert GROUP in seen["groups"]
    assert TOPIC in seen["group"] and "Total lag: 0" in seen["group"]
    assert "1 found" in seen["by_key"] and "10 found" in seen["by_time"]
    assert "apache message 3" in seen["message"] and "apache-key-3 alt-3" in seen["message"]
    assert "Not found the producer group connection: NoSuchPG" in seen["producers"]
    assert f"group {GROUP} has no dead-letter topic" in seen["dlq"]
    assert "1 found" in seen["trace"]
    assert GROUP in seen["client_list"]
    assert len(sent) == 10
