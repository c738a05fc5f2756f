"""The console's message, trace and DLQ pages, against two brokers with traffic from a traced Python producer
and consumers (one that sends every message to its dead-letter queue)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest_twisted
from twisted.internet.threads import deferToThread

from gateway.client import ConsumeStatus, Producer, build_message

from .browser import in_chromium, needs_chromium, shot
from .conftest import Cluster, consumer_of, http, sleep, wait_until

TOPIC = "ConsoleMsgTopic"


async def _page_until(url: str, needle: str, timeout: float = 20.0) -> str:
    """The page at ``url`` once it shows ``needle`` (traces and DLQ messages arrive asynchronously)."""
    page = ""
    for _ in range(int(timeout / 0.25)):
        status, page = await deferToThread(http, url)
        if status == 200 and needle in page:
            return page
        await sleep(0.25)
    raise AssertionError(f"{url} never showed {needle!r}:\n{page[-2000:]}")


@needs_chromium
@pytest_twisted.ensureDeferred
async def test_message_trace_and_dlq_pages(cluster: Cluster) -> None:
    await cluster.admin.create_topic(TOPIC, 2)
    producer = Producer("ConsoleMsgPG", cluster.namesrv_addr, enable_msg_trace=True)
    await producer.start()
    consumer, got = consumer_of(cluster, "ConsoleMsgCG", TOPIC, enable_msg_trace=True)
    # Every message it gets goes straight to %DLQ%ConsoleDlqCG (no retry left).
    dead, _ = consumer_of(cluster, "ConsoleDlqCG", TOPIC, ConsumeStatus.RECONSUME_LATER, max_reconsume_times=0)
    bodies = {
        "plain": b"hello console",
        "json": json.dumps({"order": 7, "items": ["a", "b"]}).encode(),
        "binary": bytes(range(256)),
        "hostile": b"<script>alert(1)</script>",
    }
    sent = {}
    try:
        for key, body in bodies.items():
            sent[key] = await producer.send(
                build_message(TOPIC, body, tags="T", keys=key if key != "hostile" else "<x>")
            )
        for i in range(8):
            await producer.send(build_message(TOPIC, b"filler %d" % i, tags="F"))
        await consumer.start()
        await dead.start()
        await wait_until(lambda: len(got) >= 12, 20, "the consumer got the 12 messages")
        base = cluster.console()

        status, page = await deferToThread(http, f"{base}/messages?topic={TOPIC}")
        assert status == 200 and "12 found" in page, page[-3000:]
        # Both brokers' messages are listed (a store host per broker).
        hosts = {b.config.broker_addr for b in cluster.brokers.values()}
        assert all(h in page for h in hosts)
        status, page = await deferToThread(http, f"{base}/messages?topic={TOPIC}&key=json")
        assert status == 200 and "1 found" in page and sent["json"].msg_id in page
        status, page = await deferToThread(http, f"{base}/messages?topic={TOPIC}&msgId={sent['plain'].msg_id}")
        assert status == 200 and "1 found" in page
        offset_id = sent["json"].offset_msg_id
        status, page = await deferToThread(http, f"{base}/messages?id={offset_id}")
        assert status == 200 and "1 found" in page

        status, page = await deferToThread(http, f"{base}/message?id={offset_id}&as=json")
        assert status == 200 and "&#34;order&#34;: 7" in page and "CONSUMED" in page and "ConsoleMsgCG" in page
        status, page = await deferToThread(http, f"{base}/message?id={sent['binary'].offset_msg_id}&as=hex")
        assert status == 200 and "00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f" in page
        status, page = await deferToThread(http, f"{base}/message?id={sent['hostile'].offset_msg_id}")
        assert status == 200 and "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
        assert "&lt;x&gt;" in page and "<x>" not in page

        status, page = await deferToThread(http, f"{base}/trace?topic={TOPIC}&key=plain")
        assert status == 200 and "1 found" in page and f'href="/trace?id={sent["plain"].msg_id}"' in page
        page = await _page_until(f"{base}/trace?id={sent['plain'].msg_id}", "SubAfter")
        assert "Pub" in page and "SubBefore" in page and "ConsoleMsgPG" in page and "ConsoleMsgCG" in page
        assert re.search(r'<rect x="[\d.]+" y="\d+" width="[\d.]+" height="18" class="bar Pub">', page)

        # The dead letters arrive one by one as the consumer gives them back.
        page = await _page_until(f"{base}/dlq?group=ConsoleDlqCG", "12 found")
        assert page.count(f"<td>{TOPIC}</td>") == 12  # the original topic of each dead letter

        def steps(browser_page: Any) -> dict[str, str]:
            seen = {}
            for name, path in (
                ("messages", f"/messages?topic={TOPIC}"),
                ("message", f"/message?id={offset_id}&as=json"),
                ("trace", f"/trace?id={sent['plain'].msg_id}"),
                ("dlq", "/dlq?group=ConsoleDlqCG"),
            ):
                browser_page.goto(base + path)
                shot(browser_page, f"messages-{name}")
                seen[name] = browser_page.inner_text("main")
            return seen

        seen = await deferToThread(in_chromium, steps)
        assert "12 found" in seen["messages"] and '"order": 7' in seen["message"]
        assert ("SubAfter" in seen["trace"] and "ConsoleDlqCG" not in seen["dlq"]) or TOPIC in seen["dlq"]
    finally:
        await dead.shutdown()
        await consumer.shutdown()
        await producer.shutdown()


@pytest_twisted.ensureDeferred
async def test_bad_ids_and_times_are_400(cluster: Cluster) -> None:
    base = cluster.console()
    status, page = await deferToThread(http, f"{base}/message?id=garbage")
    assert status == 400 and "not an offset message id: garbage" in page
    status, page = await deferToThread(http, f"{base}/messages?topic=TBW102&begin=yesterday")
    assert status == 400 and "begin is not a time" in page
    status, page = await deferToThread(http, f"{base}/message?id=0A0B0C0D00002A9F0000000000000000&as=pdf")
    assert status == 400 and "as must be one of text, json, hex" in page
    status, page = await deferToThread(http, f"{base}/dlq?group=..%2F")
    assert status == 400


@pytest_twisted.ensureDeferred
async def test_an_offset_message_id_naming_no_broker_of_the_cluster_is_never_dialled(cluster: Cluster) -> None:
    base = cluster.console(writable=True)
    elsewhere = "7F000001000000160000000000000000"  # 127.0.0.1:22, offset 0
    for path in (f"/message?id={elsewhere}", f"/messages?id={elsewhere}"):
        status, page = await deferToThread(http, base + path)
        assert status == 400 and "no broker at 127.0.0.1:22 in the cluster" in page
