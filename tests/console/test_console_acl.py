"""Who may act: with ACL on, only an admin account logged in (the console signs with it); with ACL off, only a
writable console; never without the session's form token; never on a non-loopback address without ACL."""

from __future__ import annotations

import http.cookiejar
import re
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest_twisted
from twisted.internet.threads import deferToThread

from .browser import in_chromium, needs_chromium, shot
from .conftest import Cluster, start_cluster, stop_cluster

ACL_YML = """\
accounts:
  - accessKey: console-reader
    secretKey: reader-secret-1
    admin: false
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
  - accessKey: console-admin
    secretKey: admin-secret-1
    admin: true
"""


class Browser:
    """A cookie-keeping HTTP client: a session of the console, as a browser has."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))

    def get(self, path: str) -> tuple[int, str]:
        return self._open(urllib.request.Request(self.base + path))

    def post(self, path: str, fields: dict[str, str], token: bool = True) -> tuple[int, str]:
        if token:
            fields = {"csrf": self.token(), **fields}
        return self._open(urllib.request.Request(self.base + path, urllib.parse.urlencode(fields).encode()))

    def token(self) -> str:
        m = re.search(r'name="csrf" value="([^"]+)"', self.get("/login")[1])
        assert m is not None
        return m.group(1)

    def _open(self, request: urllib.request.Request) -> tuple[int, str]:
        try:
            with self.opener.open(request, timeout=20) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()


@pytest_twisted.async_yield_fixture
async def acl_cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    home = tmp_path / "home"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "plain_acl.yml").write_text(ACL_YML)
    cluster = await start_cluster(tmp_path, aclEnable="true", rocketmqHome=str(home))
    yield cluster
    await stop_cluster(cluster)


def _topics(cluster: Cluster) -> set[str]:
    return {t for b in cluster.brokers.values() for t in b.topics.table}


@pytest_twisted.ensureDeferred
async def test_with_acl_only_an_admin_login_may_act(acl_cluster: Cluster) -> None:
    cluster = acl_cluster
    base = cluster.console(access_key="console-reader", secret_key="reader-secret-1")
    browser = Browser(base)
    status, page = await deferToThread(browser.get, "/")
    assert status == 200 and "broker-a" in page and "Log in" in page  # the reader account reads the cluster
    create = {"topic": "AclConsoleTopic", "readQueueNums": "2", "writeQueueNums": "2"}
    status, page = await deferToThread(browser.post, "/topic/update", create)
    assert status == 403 and "actions need an admin account: log in first" in page
    status, page = await deferToThread(browser.post, "/login", {"accessKey": "console-admin", "secretKey": "wrong"})
    assert status == 403 and "login refused" in page
    login = {"accessKey": "console-reader", "secretKey": "reader-secret-1"}
    status, page = await deferToThread(browser.post, "/login", login)
    assert status == 403 and "login refused" in page  # the ACL accounts are an admin's to read
    assert "AclConsoleTopic" not in _topics(cluster)

    login = {"accessKey": "console-admin", "secretKey": "admin-secret-1"}
    status, page = await deferToThread(browser.post, "/login", login)
    assert status == 200 and "logged in as console-admin" in page
    status, page = await deferToThread(browser.post, "/topic/update", create)
    assert status == 200 and "create topic to" in page, page
    assert "AclConsoleTopic" in _topics(cluster)
    status, page = await deferToThread(browser.post, "/logout", {})
    assert "logged out" in page
    status, page = await deferToThread(browser.post, "/topic/delete", {"topic": "AclConsoleTopic"})
    assert status == 403 and "AclConsoleTopic" in _topics(cluster)


@needs_chromium
@pytest_twisted.ensureDeferred
async def test_login_form_in_chromium(acl_cluster: Cluster) -> None:
    base = acl_cluster.console(access_key="console-reader", secret_key="reader-secret-1")

    def steps(page: Any) -> str:
        page.goto(f"{base}/login")
        page.fill("[name=accessKey]", "console-admin")
        page.fill("[name=secretKey]", "admin-secret-1")
        page.locator("main button").click()
        page.wait_for_load_state()
        shot(page, "acl-logged-in")
        page.goto(f"{base}/topics")
        return page.inner_text("body")

    text = await deferToThread(in_chromium, steps)
    assert "logged in as console-admin" in text or "console-admin" in text
    assert "Create topic" in text  # the forms show once an admin is logged in


@pytest_twisted.ensureDeferred
async def test_without_acl_a_read_only_console_refuses_every_action(cluster: Cluster) -> None:
    browser = Browser(cluster.console())
    for path in ("/topic/update", "/topic/delete", "/group/update", "/group/reset-offset", "/broker/write-perm"):
        status, page = await deferToThread(browser.post, path, {"topic": "ReadOnlyTopic", "group": "g"})
        assert status == 403 and "read-only (consoleWritable=false)" in page
    status, page = await deferToThread(browser.post, "/topic/update", {"topic": "X"}, False)
    assert status == 403 and "stale or missing form token" in page
    assert "ReadOnlyTopic" not in _topics(cluster)


def test_no_remote_listening_without_acl() -> None:
    cmd = [sys.executable, "-m", "gateway", "console", "-n", "127.0.0.1:9876", "--host", "0.0.0.0"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "configuration error: consoleHost in the command line: 0.0.0.0 is not a loopback address and the cluster "
        "has no ACL (give an account, or set consoleAllowRemote=true to serve it anyway)"
    ]
    result = subprocess.run([*cmd[:-2], "--port", "70000"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "consolePort" in result.stderr and "Traceback" not in result.stderr
