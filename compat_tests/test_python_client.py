"""Acceptance: our Python client (blocking facade) against the servers in a child process.

1,000 messages sent are consumed exactly once by a push consumer, bodies, tags, keys and user
properties intact; after a broker restart nothing is lost and the group resumes from its committed
offsets: a new member gets only what was sent after, a member that lived through the restart goes on.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable

import pytest

from gateway.client import ConsumeStatus, Message, MessageExt, MessageQueue, MQClientError, blocking, build_message
from gateway.remoting.message import MessageConst

from .servers import GatewayServers

pytestmark = pytest.mark.compat

QUEUES = 4


class Inbox:
    """A thread-safe listener that records every delivery."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.messages: dict[str, MessageExt] = {}

    def __call__(self, msgs: list[MessageExt]) -> ConsumeStatus:
        with self.lock:
            for m in msgs:
                self.counts[m.uniq_key or ""] += 1
                self.messages[m.uniq_key or ""] = m
        return ConsumeStatus.CONSUME_SUCCESS

    def wait_for(self, n: int, timeout: float = 40.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.counts) < n:
            assert time.monotonic() < deadline, f"{len(self.counts)} of {n} messages consumed after {timeout}s"
            time.sleep(0.05)
        time.sleep(0.5)  # a duplicate would show up now


def _consumer(servers: GatewayServers, group: str, topic: str, inbox: Inbox) -> blocking.PushConsumer:
    consumer = blocking.PushConsumer(group, servers.namesrv_addr)
    consumer.subscribe(topic, "*")
    consumer.register_message_listener(inbox)
    consumer.start()
    return consumer


def _send(servers: GatewayServers, topic: str, n: int, start: int = 0) -> dict[str, Message]:
    sent = {}
    with blocking.Producer(f"py-producer-{start}", servers.namesrv_addr) as producer:
        for i in range(start, start + n):
            msg = build_message(
                topic,
                f"message {i} ✓".encode() + bytes([i % 256]),
                tags=f"Tag{i % 3}",
                keys=[f"key-{i}", "python"],
                properties={"index": str(i), "origin": "python-client", "ключ": "значение"},
            )
            sent[producer.send(msg).msg_id] = msg
    return sent


def _assert_intact(sent: dict[str, Message], inbox: Inbox) -> None:
    assert set(inbox.counts) == set(sent)
    assert set(inbox.counts.values()) == {1}
    for msg_id, msg in sent.items():
        got = inbox.messages[msg_id]
        assert (got.topic, got.body, got.tags, got.keys) == (msg.topic, msg.body, msg.tags, msg.keys)
        for key, value in msg.properties.items():
            if key != MessageConst.WAIT_STORE_MSG_OK:
                assert got.properties[key] == value


def _restart(servers: GatewayServers, topic: str) -> None:
    """Restart the servers; return once the broker has registered ``topic`` with the name server again."""
    servers.restart()
    with blocking.Admin(servers.namesrv_addr) as admin:
        deadline = time.monotonic() + 10
        while True:
            try:
                admin.get_route(topic)
                return
            except MQClientError:
                assert time.monotonic() < deadline, f"{topic} not routed again after the restart"
                time.sleep(0.05)


def _stored(servers: GatewayServers, topic: str) -> int:
    with blocking.Admin(servers.namesrv_addr) as admin:
        return sum(admin.max_offset(MessageQueue(topic, "broker-a", q)) for q in range(QUEUES))


def _bounded(fn: Callable[[], None], seconds: float) -> None:
    started = time.monotonic()
    fn()
    assert time.monotonic() - started < seconds


def test_exactly_once_and_resume_after_broker_restart(fresh_servers: GatewayServers) -> None:
    topic, group = "PythonClientAcceptance", "python-acceptance"
    fresh_servers.create_topic(topic, QUEUES)

    sent = _send(fresh_servers, topic, 1000)
    inbox = Inbox()
    consumer = _consumer(fresh_servers, group, topic, inbox)
    inbox.wait_for(1000)
    _bounded(consumer.shutdown, 10)
    _assert_intact(sent, inbox)

    _restart(fresh_servers, topic)
    assert _stored(fresh_servers, topic) == 1000  # nothing lost

    later = _send(fresh_servers, topic, 200, start=1000)
    resumed = Inbox()
    consumer = _consumer(fresh_servers, group, topic, resumed)
    try:
        resumed.wait_for(200)
        _assert_intact(later, resumed)  # only the new ones, each once
    finally:
        consumer.shutdown()


def test_consumer_lives_through_broker_restart(fresh_servers: GatewayServers) -> None:
    topic, group = "PythonClientRestart", "python-restart"
    fresh_servers.create_topic(topic, QUEUES)
    inbox = Inbox()
    consumer = _consumer(fresh_servers, group, topic, inbox)
    try:
        before = _send(fresh_servers, topic, 300)
        inbox.wait_for(300)
        _restart(fresh_servers, topic)
        after = _send(fresh_servers, topic, 300, start=300)
        inbox.wait_for(600)
        _assert_intact(before | after, inbox)
    finally:
        consumer.shutdown()

    # The group's committed offsets cover everything: a newcomer finds nothing to consume.
    late = Inbox()
    newcomer = _consumer(fresh_servers, group, topic, late)
    try:
        time.sleep(1.0)
        assert not late.counts
    finally:
        newcomer.shutdown()
