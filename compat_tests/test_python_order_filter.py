"""Our Python client (blocking facade) against the servers in a child process: SQL92 subscriptions, orderly
consumers with broker locks and ordered sends, broadcasting; with a broker restart in the middle of a flow,
after which nothing is lost and nothing is delivered twice."""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.client import (
    ClientInstance,
    ConsumeOrderlyStatus,
    ConsumeStatus,
    MessageExt,
    MessageModel,
    MessageSelector,
    blocking,
    build_message,
)

from .servers import GatewayServers
from .test_cpp_client import committed_offsets, group_members

pytestmark = pytest.mark.compat

KEYS = 8


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[GatewayServers]:
    s = GatewayServers(tmp_path / "gateway", {"enablePropertyFilter": "true"}).start()
    yield s
    s.kill()


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout}s"
        time.sleep(0.05)
    time.sleep(0.5)  # a duplicate would show up now


def fast_client(servers: GatewayServers, name: str) -> ClientInstance:
    """A client instance that rebalances every second (not every 20 s), made in the facade's reactor thread."""
    rt = blocking.ReactorThread.default()
    return rt.call(ClientInstance, servers.namesrv_addr, reactor=rt.reactor, instance_name=name, rebalance_interval=1.0)


class Orderly:
    """An orderly listener shared by the members of a group: per-key sequences and overlapping queues."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active: dict[int, str] = {}
        self.overlaps: list[str] = []
        self.seen: dict[int, list[int]] = defaultdict(list)

    def member(self, name: str) -> Callable[[list[MessageExt]], ConsumeOrderlyStatus]:
        def listener(msgs: list[MessageExt]) -> ConsumeOrderlyStatus:
            queue = msgs[0].queue_id
            with self.lock:
                if queue in self.active:
                    self.overlaps.append(f"queue {queue}: {name} and {self.active[queue]}")
                self.active[queue] = name
            time.sleep(0.002)
            with self.lock:
                for m in msgs:
                    key, seq = map(int, m.body.split(b":"))
                    self.seen[key].append(seq)
                del self.active[queue]
            return ConsumeOrderlyStatus.SUCCESS

        return listener

    def count(self) -> int:
        with self.lock:
            return sum(map(len, self.seen.values()))


def send_ordered(producer: blocking.Producer, topic: str, seqs: range) -> None:
    for seq in seqs:
        for key in range(KEYS):
            msg = build_message(topic, b"%d:%d" % (key, seq))
            producer.send(msg, selector=lambda queues, _msg, k: queues[k % len(queues)], arg=key)


def orderly_member(servers: GatewayServers, group: str, topic: str, checker: Orderly, name: str) -> Any:
    consumer = blocking.PushConsumer(group, servers.namesrv_addr, client=fast_client(servers, f"{group}-{name}"))
    consumer.subscribe(topic, "*")
    consumer.register_message_listener_orderly(checker.member(name), lock_interval=1.0)
    consumer.start()
    return consumer


def test_two_orderly_members_and_a_broker_restart(servers: GatewayServers) -> None:
    """Per-key ordered sends; a second orderly member joins, then the broker restarts: every key is consumed
    in send order, exactly once, and no queue is ever in two members' listeners at once.

    A restarted broker knows no member until its heartbeat: the first member back may rebalance alone, lock the
    other's queues and start them from the broker's offsets, as Apache's clients would, while the other still holds
    them. RocketMQ promises order and once only in a settled group, so the members' offsets are put on the broker
    before it stops and the next messages are sent once the group has settled again."""
    topic = "PyOrdered"
    servers.create_topic(topic, 4, order=True)
    checker = Orderly()
    with blocking.Producer("py-order-pg", servers.namesrv_addr) as producer:
        first = orderly_member(servers, "py-order", topic, checker, "A")
        second = None
        try:
            send_ordered(producer, topic, range(0, 20))
            second = orderly_member(servers, "py-order", topic, checker, "B")
            send_ordered(producer, topic, range(20, 40))
            wait_until(lambda: checker.count() >= KEYS * 40, "the first 40 of each key")

            def split() -> bool:
                mine, theirs = first.assigned_queues(), second.assigned_queues()
                return not mine & theirs and {q.queue_id for q in mine | theirs if q.topic == topic} == {0, 1, 2, 3}

            wait_until(split, "the queues split between the members")
            first.persist_consumer_offset()
            second.persist_consumer_offset()
            wait_until(
                lambda: committed_offsets(servers.broker_addr, "py-order", topic, 4) == dict.fromkeys(range(4), 80),
                "every consumed offset on the broker",
            )
            servers.restart()
            # Until both members are back on the broker and have rebalanced with each other, one may take the
            # other's queues (their client-side locks outlive the broker's): nothing is sent in that window.
            wait_until(lambda: len(group_members(servers, "py-order")) == 2, "both members back on the broker")
            wait_until(split, "the queues split between the members again")
            time.sleep(1.5)  # a rebalance begun before the second member was back has ended
            assert split()
            send_ordered(producer, topic, range(40, 60))
            wait_until(lambda: checker.count() >= KEYS * 60, "every message after the restart")
        finally:
            first.shutdown()
            if second is not None:
                second.shutdown()
    assert checker.overlaps == []
    assert dict(checker.seen) == {key: list(range(60)) for key in range(KEYS)}


def test_sql92_and_broadcasting_across_a_restart(servers: GatewayServers, tmp_path: Path) -> None:
    """A SQL92 member gets exactly the matching messages and two BROADCASTING members get all of them,
    before and after a broker restart, each once."""
    topic = "PySqlBroadcast"
    servers.create_topic(topic, 4)
    sql_got: Counter[str] = Counter()
    bc_got: list[Counter[str]] = [Counter(), Counter()]
    lock = threading.Lock()

    def record(into: Counter[str]) -> Callable[[list[MessageExt]], ConsumeStatus]:
        def listener(msgs: list[MessageExt]) -> ConsumeStatus:
            with lock:
                into.update(m.uniq_key or "" for m in msgs)
            return ConsumeStatus.CONSUME_SUCCESS

        return listener

    sql = blocking.PushConsumer("py-sql", servers.namesrv_addr)
    sql.subscribe(topic, MessageSelector.by_sql("amount BETWEEN 100 AND 300 AND currency = 'EUR'"))
    sql.register_message_listener(record(sql_got))
    sql.start()
    members = []
    for k in range(2):
        member = blocking.PushConsumer(
            "py-broadcast",
            servers.namesrv_addr,
            message_model=MessageModel.BROADCASTING,
            offset_store_dir=str(tmp_path / "offsets"),
            client=fast_client(servers, f"bc-{k}"),
        )
        member.subscribe(topic, "*")
        member.register_message_listener(record(bc_got[k]))
        member.start()
        members.append(member)
    sent: list[str] = []
    wanted: set[str] = set()
    try:
        with blocking.Producer("py-sql-pg", servers.namesrv_addr) as producer:
            for phase in range(2):
                for i in range(60):
                    amount, currency = (i * 10, "EUR" if i % 2 else "USD")
                    msg = build_message(topic, b"%d" % i, properties={"amount": str(amount), "currency": currency})
                    msg_id = producer.send(msg).msg_id
                    sent.append(msg_id)
                    if 100 <= amount <= 300 and currency == "EUR":
                        wanted.add(msg_id)
                wait_until(lambda: len(sql_got) >= len(wanted), "the matching messages")
                wait_until(lambda: all(len(c) >= len(sent) for c in bc_got), "every message to each member")
                if phase == 0:
                    servers.restart()
    finally:
        sql.shutdown()
        for member in members:
            member.shutdown()
    assert set(sql_got) == wanted and set(sql_got.values()) == {1}
    for c in bc_got:
        assert set(c) == set(sent) and set(c.values()) == {1}
    # The broker never kept the broadcasting group's offsets: each member keeps its own file.
    assert len(list((tmp_path / "offsets").glob("*/py-broadcast/offsets.json"))) == 2
