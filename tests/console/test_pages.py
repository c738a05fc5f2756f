"""The console's cluster, topic, consumer-group and producer pages in Chromium, against two brokers with traffic
from the Python client and the C++ client (``rocketmq==0.4.4``, a child process)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest_twisted
from twisted.internet.threads import deferToThread

from compat_tests.servers import free_port
from compat_tests.test_cpp_client import _command, _env, produce
from gateway.admin.ext import AdminExt
from gateway.client import Producer, build_message
from tests.broker.test_pop import pop_header
from tests.namesrv.support import register_request

from .browser import ROOT, in_chromium, needs_chromium, shot
from .conftest import Cluster, consumer_of, http, wait_until


def _cpp_consumer(tmp_path: Path, cluster: Cluster, topic: str, group: str) -> subprocess.Popen[str]:
    """The C++ push consumer of ``group``, online until its stdin is closed."""
    cmd = _command("consume", cluster, topic, group, 60, "--expect", 0)
    return subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
        env=_env(tmp_path / "home-cpp-consumer"), cwd=ROOT,
    )  # fmt: skip


@needs_chromium
@pytest_twisted.ensureDeferred
async def test_pages_show_both_brokers_and_both_clients(cluster: Cluster, tmp_path: Path) -> None:
    topic, group = "ConsolePagesTopic", "ConsolePagesCG"
    await cluster.admin.create_topic(topic, 2)
    producer = Producer("ConsolePagesPG", cluster.namesrv_addr)
    await producer.start()
    consumer, received = consumer_of(cluster, group, topic)
    cpp = None
    try:
        for i in range(12):
            assert (await producer.send(build_message(topic, b"python %d" % i, keys=f"k{i}"))).msg_id
        await deferToThread(produce, tmp_path, cluster, topic, "console", 8)
        await consumer.start()
        await wait_until(lambda: len(received) >= 20, 20, "the Python consumer got the 20 messages")
        await producer.client.send_heartbeat_to_all_brokers()  # as its 30 s heartbeat would: its connection listed
        cpp = _cpp_consumer(tmp_path, cluster, topic, "ConsoleCppCG")
        await wait_until(lambda: _online(cluster, "ConsoleCppCG"), 30, "the C++ consumer online")
        base = cluster.console()

        def steps(page: Any) -> dict[str, str]:
            seen = {}
            for name, path in (
                ("cluster", "/"),
                ("topics", "/topics"),
                ("topic", f"/topic?topic={topic}"),
                ("groups", "/groups"),
                ("group", f"/group?group={group}"),
                ("cpp_group", "/group?group=ConsoleCppCG"),
                ("producers", f"/producers?topic={topic}&group=ConsolePagesPG"),
            ):
                page.goto(base + path)
                shot(page, f"pages-{name}")
                seen[name] = page.inner_text("main")
            return seen

        seen = await deferToThread(in_chromium, steps)
    finally:
        if cpp is not None:
            cpp.stdin.close()  # type: ignore[union-attr]
            await deferToThread(cpp.wait, 30)
        await consumer.shutdown()
        await producer.shutdown()
    assert "broker-a" in seen["cluster"] and "broker-b" in seen["cluster"] and "MASTER" in seen["cluster"]
    assert topic in seen["topics"]
    # 20 messages over 2 queues on each of the 2 brokers: the status lists the 4 queues with the max offsets the
    # consumer saw (its last offset + 1 in each queue).
    names = {b.config.broker_addr: name for name, b in cluster.brokers.items()}
    expected: dict[tuple[str, int], int] = {}
    for m in received:
        key = (names[m.store_host], m.queue_id)
        expected[key] = max(expected.get(key, 0), m.queue_offset + 1)
    status = re.findall(r"^(broker-[ab])\t(\d+)\t(\d+)\t(\d+)\t", seen["topic"], re.M)
    assert {(b, int(q)): int(max_offset) for b, q, _, max_offset in status} == expected
    assert len(expected) == 4 and sum(expected.values()) == 20
    assert group in seen["topic"] and "ConsoleCppCG" in seen["topic"]
    assert group in seen["groups"] and "ConsoleCppCG" in seen["groups"]
    assert re.search(rf"^{re.escape(consumer.client.client_id)}\t127\.0\.0\.1:\d+\tPYTHON\t", seen["group"], re.M)
    # Its progress: each of the 4 queues held by the Python consumer (mqadmin consumerProgress -s).
    held = re.findall(rf"^{topic}\tbroker-[ab]\t\d\t\d+\t\d+\t(.*?)\t", seen["group"], re.M)
    assert held == [consumer.client.client_id.split("@")[0]] * 4, seen["group"]
    assert re.search(r"\t127\.0\.0\.1:\d+\tCPP\t", seen["cpp_group"]), seen["cpp_group"]
    assert producer.client.client_id in seen["producers"]


def _online(cluster: Cluster, group: str) -> bool:
    return any(group in b.consumers.table for b in cluster.brokers.values())


@pytest_twisted.ensureDeferred
async def test_bad_names_are_400_and_hostile_values_are_escaped(cluster: Cluster) -> None:
    base = cluster.console()
    status, page = await deferToThread(http, f"{base}/topic?topic=..%2Fetc")
    assert status == 400 and "contains illegal characters" in page
    status, page = await deferToThread(http, f"{base}/group?group=%3Cscript%3E")
    assert status == 400 and "<script>" not in page and "&lt;script&gt;" in page
    status, page = await deferToThread(http, f"{base}/topics?filter=%3Cb%3Ex")
    assert status == 200 and "<b>x" not in page and "&lt;b&gt;x" in page
    status, page = await deferToThread(http, f"{base}/topics?kind=nope")
    assert status == 400 and "kind must be one of" in page
    status, page = await deferToThread(http, f"{base}/producers?topic=TBW102&group=NoSuchPG")
    assert status == 200 and "Not found the producer group connection: NoSuchPG" in page
    status, page = await deferToThread(http, f"{base}/dlq?group=NoSuchCG")
    assert status == 200 and "group NoSuchCG has no dead-letter topic %DLQ%NoSuchCG" in page


@pytest_twisted.ensureDeferred
async def test_a_group_popping_is_listed_as_pop(cluster: Cluster) -> None:
    await cluster.admin.create_topic("ConsolePopTopic", 1)
    producer = Producer("ConsolePopPG", cluster.namesrv_addr)
    await producer.start()
    try:
        for i in range(3):
            await producer.send(build_message("ConsolePopTopic", b"pop %d" % i))
    finally:
        await producer.shutdown()
    popped = 0
    for name, broker in cluster.brokers.items():
        header = pop_header("ConsolePopTopic", "ConsolePopCG", invisible_ms=60_000)
        result = await cluster.admin.client.api.pop_message(broker.config.broker_addr, name, header, 10.0)
        popped += len(result.messages)
    assert popped == 3
    base = cluster.console()
    status, page = await deferToThread(http, f"{base}/groups?filter=ConsolePop")
    assert status == 200 and re.search(r">ConsolePopCG</a></td><td class=\"n\">0</td><td>POP</td>", page), page


@needs_chromium
@pytest_twisted.ensureDeferred
async def test_a_consumers_running_info_from_its_group_page(cluster: Cluster) -> None:
    await cluster.admin.create_topic("ConsoleClientTopic", 2)
    consumer, _ = consumer_of(cluster, "ConsoleClientCG", "ConsoleClientTopic")
    await consumer.start()
    try:
        await wait_until(lambda: _online(cluster, "ConsoleClientCG"), 20, "the consumer online")
        await wait_until(lambda: len(consumer.rebalance.process_queue_table) == 4, 20, "its 4 queues")
        base = cluster.console()

        def steps(page: Any) -> str:
            page.goto(f"{base}/group?group=ConsoleClientCG")
            page.locator("main table a", has_text=consumer.client.client_id).click()
            page.wait_for_load_state()
            shot(page, "pages-client")
            return page.inner_text("main")

        text = await deferToThread(in_chromium, steps)
    finally:
        await consumer.shutdown()
    assert f"Consumer {consumer.client.client_id}" in text and "PROP_CONSUME_TYPE" in text
    # Its process queues: 2 queues on each broker.
    assert text.count("ConsoleClientTopic\tbroker-a") == 2 and text.count("ConsoleClientTopic\tbroker-b") == 2
    status, page = await deferToThread(http, f"{base}/client?group=ConsoleClientCG&clientId=nobody")
    assert status == 400 and "nobody is not a client of ConsoleClientCG on any broker" in page


@pytest_twisted.ensureDeferred
async def test_a_broker_that_does_not_answer_shows_its_error_in_its_row(cluster: Cluster) -> None:
    # Two slaves of broker-b registered as a broker would and gone: one address where nothing listens, one where
    # the NameServer answers (an error code: GET_BROKER_RUNTIME_INFO is not its request).
    dead_port = free_port()
    dead, wrong = f"127.0.0.1:{dead_port}", cluster.namesrv_addr
    registrar = AdminExt(cluster.namesrv_addr)  # the NameServer keeps them while this connection is open
    try:
        for broker_id, addr in ((1, dead), (2, wrong)):
            request = register_request("broker-b", addr, {}, broker_id=broker_id, ha_server_addr="")
            await deferToThread(registrar.call, cluster.namesrv_addr, request.code, request.ext_fields, request.body)
        status, page = await deferToThread(http, cluster.console() + "/")
    finally:
        registrar.close()
    assert status == 200, page
    rows = {re.search(r">([\d.:]+)</a>", row)[1]: row for row in re.findall(r"<tr><td>broker-.*?</tr>", page, re.S)}
    assert len(rows) == 4, page
    assert "SLAVE" in rows[dead] and f'class="error">{dead}: ' in rows[dead] and "Connection refused" in rows[dead]
    assert "SLAVE" in rows[wrong] and "request type 28 not supported" in rows[wrong]
    masters = [row for addr, row in rows.items() if addr not in (dead, wrong)]
    assert all("MASTER" in row and "V4_9_8" in row and "error" not in row for row in masters)
