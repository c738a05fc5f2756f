"""The console's frame: pages over HTTP against a two-broker cluster, escaping, CSRF, read-only refusal."""

from __future__ import annotations

from typing import Any

import pytest_twisted
from twisted.internet.threads import deferToThread

from .browser import in_chromium, needs_chromium, shot
from .conftest import Cluster, http


@pytest_twisted.ensureDeferred
async def test_cluster_page_lists_both_brokers(cluster: Cluster) -> None:
    base = cluster.console()
    status, page = await deferToThread(http, f"{base}/")
    assert status == 200, page
    assert "DefaultCluster" in page and "broker-a" in page and "broker-b" in page
    status, page = await deferToThread(http, f"{base}/no-such-page")
    assert status == 404 and "no page /no-such-page" in page


@pytest_twisted.ensureDeferred
async def test_a_post_without_the_session_token_is_refused(cluster: Cluster) -> None:
    base = cluster.console(writable=True)
    status, page = await deferToThread(http, f"{base}/logout", b"csrf=guess")
    assert status == 403 and "stale or missing form token" in page


@needs_chromium
@pytest_twisted.ensureDeferred
async def test_the_cluster_page_in_chromium(cluster: Cluster) -> None:
    base = cluster.console()

    def steps(page: Any) -> str:
        page.goto(f"{base}/")
        shot(page, "cluster")
        return page.inner_text("main")

    text = await deferToThread(in_chromium, steps)
    assert "broker-a" in text and "broker-b" in text


@pytest_twisted.ensureDeferred
async def test_broker_page_shows_status_and_config_of_known_brokers_only(cluster: Cluster) -> None:
    base = cluster.console()
    addr = cluster.brokers["broker-b"].config.broker_addr
    status, page = await deferToThread(http, f"{base}/broker?addr={addr}")
    assert status == 200, page
    assert "Broker broker-b" in page and "brokerVersionDesc" in page and "<td>brokerName</td><td>broker-b</td>" in page
    # An address the NameServers do not list is never dialled from a query string.
    status, page = await deferToThread(http, f"{base}/broker?addr=127.0.0.1:22")
    assert status == 400 and "no broker at 127.0.0.1:22 in the cluster" in page
