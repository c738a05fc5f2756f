"""The console's actions in Chromium (a writable console on a cluster without ACL): each form changes the
cluster as mqadmin would, checked over remoting."""

from __future__ import annotations

from typing import Any

import pytest_twisted
from twisted.internet.threads import deferToThread

from gateway.admin.ext import AdminExt
from gateway.client import ConsumeStatus, Producer, build_message
from gateway.remoting.codes import RequestCode
from gateway.remoting.headers import UpdateConsumerOffsetRequestHeader

from .browser import in_chromium, needs_chromium, shot
from .conftest import Cluster, consumer_of, wait_until

TOPIC, GROUP = "ConsoleActTopic", "ConsoleActCG"


def _submit(page: Any, form: str, fields: dict[str, str], button: str | None = None) -> str:
    """Fill ``fields`` of the form ``#form``, press its (named) button; the flash line of the page it leads to."""
    for name, value in fields.items():
        target = page.locator(f"#{form} [name={name}]")
        if target.get_attribute("type") == "checkbox":
            target.set_checked(value == "on")
        elif target.evaluate("e => e.tagName") == "SELECT":
            target.select_option(value)
        else:
            target.fill(value)
    page.locator(f"#{form} button" + (f":has-text('{button}')" if button else "")).first.click()
    page.wait_for_load_state()
    return page.inner_text("main")


def _queues(admin: AdminExt, topic: str) -> dict[str, int]:
    return {qd["brokerName"]: qd["readQueueNums"] for qd in admin.topic_route(topic).get("queueDatas", [])}


@needs_chromium
@pytest_twisted.ensureDeferred
async def test_topic_group_and_broker_actions(cluster: Cluster) -> None:
    base = cluster.console(writable=True)
    admin = AdminExt(cluster.namesrv_addr)
    try:

        def create(page: Any) -> list[str]:
            page.goto(f"{base}/topics")
            out = [_submit(page, "create-topic", {"topic": TOPIC, "readQueueNums": "3", "writeQueueNums": "3"})]
            shot(page, "actions-topic-created")
            page.goto(f"{base}/groups")
            out.append(_submit(page, "create-group", {"group": GROUP, "retryMaxTimes": "3"}))
            return out

        topic_line, group_line = await deferToThread(in_chromium, create)
        assert "create topic to" in topic_line and "create subscription group to" in group_line
        assert await deferToThread(_queues, admin, TOPIC) == {"broker-a": 3, "broker-b": 3}
        for addr in (b.config.broker_addr for b in cluster.brokers.values()):
            groups = await deferToThread(admin.subscription_groups, addr)
            assert groups[GROUP]["retryMaxTimes"] == 3

        def update_and_send(page: Any) -> list[str]:
            page.goto(f"{base}/topic?topic={TOPIC}")
            out = [_submit(page, "update-topic", {"readQueueNums": "4", "writeQueueNums": "4"})]
            out.append(_submit(page, "send-message", {"tags": "T", "keys": "console-key", "body": "from the console"}))
            shot(page, "actions-message-sent")
            return out

        updated, sent = await deferToThread(in_chromium, update_and_send)
        assert "create topic to" in updated and "sent to ConsoleActTopic" in sent
        assert await deferToThread(_queues, admin, TOPIC) == {"broker-a": 4, "broker-b": 4}
        found = await deferToThread(admin.query_message, TOPIC, "console-key")
        assert [m.body for m in found] == [b"from the console"]

        # Skip accumulated: with no consumer online the offsets are committed at the queue ends (of a group
        # that has offsets there: Apache's brokers refuse a reset for a group they never saw consume).
        for addr in (b.config.broker_addr for b in cluster.brokers.values()):
            for queue_id in range(4):
                header = UpdateConsumerOffsetRequestHeader(GROUP, TOPIC, queue_id, 0).encode()
                await deferToThread(admin.call, addr, RequestCode.UPDATE_CONSUMER_OFFSET, header)

        def skip(page: Any) -> str:
            page.goto(f"{base}/group?group={GROUP}")
            return _submit(page, "skip-accumulated", {"topic": TOPIC})

        line = await deferToThread(in_chromium, skip)
        assert "accumulated messages skipped" in line and "not reset" not in line, line
        lag = 0
        for addr in (b.config.broker_addr for b in cluster.brokers.values()):
            stats = await deferToThread(admin.consume_stats, addr, GROUP, TOPIC)
            lag += sum(r["brokerOffset"] - r["consumerOffset"] for r in stats["offsetTable"].values())
            assert stats["offsetTable"]
        assert lag == 0

        broker_a = cluster.brokers["broker-a"]

        def write_perm(page: Any) -> str:
            page.goto(f"{base}/")
            row = page.locator("tr", has_text=broker_a.config.broker_addr)
            row.locator("button[value=disable]").click()
            page.wait_for_load_state()
            return page.inner_text("main")

        assert "write permission of" in await deferToThread(in_chromium, write_perm)
        assert broker_a.config.brokerPermission == 4

        def delete(page: Any) -> list[str]:
            page.goto(f"{base}/group?group={GROUP}")
            out = [_submit(page, "delete-group", {"removeOffset": "on"})]
            page.goto(f"{base}/topic?topic={TOPIC}")
            out.append(_submit(page, "delete-topic", {}))
            return out

        group_gone, topic_gone = await deferToThread(in_chromium, delete)
        assert "delete subscription group" in group_gone and f"delete topic [{TOPIC}]" in topic_gone
        assert TOPIC not in await deferToThread(admin.topic_list)
        assert all(GROUP not in b.groups.table for b in cluster.brokers.values())
    finally:
        admin.close()


@needs_chromium
@pytest_twisted.ensureDeferred
async def test_resend_to_a_consumer_and_dead_letters_back_to_their_topic(cluster: Cluster) -> None:
    await cluster.admin.create_topic(TOPIC, 1)
    producer = Producer("ConsoleActPG", cluster.namesrv_addr)
    await producer.start()
    consumer, got = consumer_of(cluster, GROUP, TOPIC)
    dead, _ = consumer_of(cluster, "ConsoleDeadCG", TOPIC, ConsumeStatus.RECONSUME_LATER, max_reconsume_times=0)
    base = cluster.console(writable=True)
    try:
        result = await producer.send(build_message(TOPIC, b"resend me", keys="again"))
        await consumer.start()
        await dead.start()
        await wait_until(lambda: len(got) == 1, 20, "the message consumed once")
        client_id = consumer.client.client_id

        def resend(page: Any) -> str:
            page.goto(f"{base}/message?id={result.offset_msg_id}")
            return _submit(page, "resend-message", {"group": GROUP, "clientId": client_id})

        line = await deferToThread(in_chromium, resend)
        assert f"{client_id} of {GROUP}: CR_SUCCESS" in line, line
        await wait_until(lambda: len(got) == 2, 10, "the message consumed again")

        def dlq(page: Any) -> str:
            for _ in range(40):
                page.goto(f"{base}/dlq?group=ConsoleDeadCG")
                if "1 found" in page.inner_text("main"):
                    break
                page.wait_for_timeout(250)
            shot(page, "actions-dlq")
            page.locator("button", has_text=f"Resend to {TOPIC}").click()
            page.wait_for_load_state()
            return page.inner_text("main")

        line = await deferToThread(in_chromium, dlq)
        assert f"resent to {TOPIC}" in line, line
        # The consumer gets it as a new message of the topic, with its body and keys.
        await wait_until(lambda: len(got) == 3, 20, "the dead letter back on its topic")
        assert got[-1].body == b"resend me" and got[-1].keys == "again" and got[-1].topic == TOPIC

        # Every dead letter the page shows, at once (the one above came back and died again: 2 now).
        def dlq_all(page: Any) -> str:
            for _ in range(40):
                page.goto(f"{base}/dlq?group=ConsoleDeadCG")
                if "2 found" in page.inner_text("main"):
                    break
                page.wait_for_timeout(250)
            return _submit(page, "resend-all", {})

        line = await deferToThread(in_chromium, dlq_all)
        assert line.count(f"resent to {TOPIC}") == 2, line
        await wait_until(lambda: len(got) == 5, 20, "both dead letters back on their topic")
    finally:
        await dead.shutdown()
        await consumer.shutdown()
        await producer.shutdown()
