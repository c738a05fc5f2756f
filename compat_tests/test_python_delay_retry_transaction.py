"""Our Python client (blocking facade) against the servers in a child process: delayed messages, consume retries
and transactions whose outcome is only known at check-back, with the broker restarted while all three wait.

Servers use FAST_CONFIG (level 3 = 2 s; halves older than 2 s are checked back every second).
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from gateway.client import ConsumeStatus, LocalTransactionState, Message, MessageExt, blocking, build_message

from .servers import GatewayServers
from .test_python_client import QUEUES, _restart

pytestmark = pytest.mark.compat


class Decided:
    """Commits bodies starting with ``c``; ``u`` ones stay unknown until the broker asks, then commit."""

    def __init__(self) -> None:
        self.checked: Counter[bytes] = Counter()

    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        if msg.body.startswith(b"c"):
            return LocalTransactionState.COMMIT_MESSAGE
        if msg.body.startswith(b"r"):
            return LocalTransactionState.ROLLBACK_MESSAGE
        return LocalTransactionState.UNKNOW

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        self.checked[msg.body] += 1
        return LocalTransactionState.COMMIT_MESSAGE


class FailingOnce:
    """Records successes by body; answers RECONSUME_LATER to the first delivery of bodies starting with ``f``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done: Counter[bytes] = Counter()
        self.failed: Counter[bytes] = Counter()

    def __call__(self, msgs: list[MessageExt]) -> ConsumeStatus:
        with self.lock:
            for m in msgs:
                if m.body.startswith(b"f") and m.reconsume_times == 0:
                    self.failed[m.body] += 1
                    return ConsumeStatus.RECONSUME_LATER
            for m in msgs:
                self.done[m.body] += 1
        return ConsumeStatus.CONSUME_SUCCESS


def test_delay_retry_and_transactions_across_a_restart(fresh_fast_servers: GatewayServers) -> None:
    servers = fresh_fast_servers
    topic = "PythonDelayRetryTx"
    servers.create_topic(topic, QUEUES)
    listener = Decided()
    inbox = FailingOnce()
    consumer = blocking.PushConsumer("py-drt", servers.namesrv_addr)
    consumer.subscribe(topic, "*")
    consumer.register_message_listener(inbox)
    consumer.start()
    expected = set()
    try:
        with blocking.TransactionProducer("py-drt-tx", servers.namesrv_addr, transaction_listener=listener) as tx:
            for i in range(5):
                for kind in (b"c", b"r", b"u"):
                    body = kind + b"%d" % i
                    result = tx.send_message_in_transaction(build_message(topic, body))
                    assert result.send_result.queue.topic == topic
                    expected |= {body} if kind != b"r" else set()
            with blocking.Producer("py-drt-pg", servers.namesrv_addr) as producer:
                for i in range(5):
                    producer.send(build_message(topic, b"d%d" % i, delay_level=4))
                    producer.send(build_message(topic, b"f%d" % i))
                    expected |= {b"d%d" % i, b"f%d" % i}
            deadline = time.monotonic() + 20
            while sum(inbox.failed.values()) < 5:
                assert time.monotonic() < deadline, "the first attempts did not fail"
                time.sleep(0.05)
            # Now the delayed messages and the retries are parked, and the unknown halves wait for a check.
            _restart(servers, topic)
            deadline = time.monotonic() + 60
            while set(inbox.done) != expected:
                assert time.monotonic() < deadline, f"missing after the restart: {sorted(expected - set(inbox.done))}"
                time.sleep(0.1)
            time.sleep(3)  # a duplicate would show up now
    finally:
        consumer.shutdown()
    assert set(inbox.done.values()) == {1}, f"delivered twice: {[b for b, n in inbox.done.items() if n > 1]}"
    assert set(inbox.failed.values()) == {1}
    assert {b for b in listener.checked if b.startswith(b"c")} == set(), "a committed half was checked back"
    assert {b for b in listener.checked if b.startswith(b"u")} == {b"u%d" % i for i in range(5)}
