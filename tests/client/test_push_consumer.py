"""Push consumers: queue sharing, exactly-once in steady state, rebalance on leave, resumed offsets,
broadcasting, tag subscriptions, re-consumption."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any

import pytest_twisted
from twisted.internet.defer import DeferredList

from gateway.client import (
    ConsumeStatus,
    MessageExt,
    MessageModel,
    MessageQueue,
    Producer,
    PullConsumer,
    PushConsumer,
    build_message,
)

from .conftest import Servers, group_name, sleep, wait_until


class Recorder:
    """A listener that records what it gets, by UNIQ_KEY and by queue."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.queues: set[int] = set()
        self.messages: list[MessageExt] = []

    def __call__(self, msgs: list[MessageExt]) -> ConsumeStatus:
        for m in msgs:
            self.counts[m.uniq_key or ""] += 1
            self.queues.add(m.queue_id)
            self.messages.append(m)
        return ConsumeStatus.CONSUME_SUCCESS


@pytest_twisted.async_yield_fixture
async def producer(servers: Servers) -> AsyncIterator[Producer]:
    p = Producer(group_name("pg"), servers.namesrv_addr)
    await p.start()
    yield p
    await p.shutdown()


async def push_consumer(
    servers: Servers, group: str, topic: str, listener: Callable[..., Any], expression: str = "*", **options: Any
) -> PushConsumer:
    c = PushConsumer(group, servers.namesrv_addr, **options)
    c.subscribe(topic, expression)
    c.register_message_listener(listener)
    await c.start()
    return c


async def send_many(producer: Producer, topic: str, n: int, start: int = 0, tag: str = "T") -> list[str]:
    """Send ``n`` messages, 50 in flight at a time; their UNIQ_KEYs."""
    ids: list[str] = []
    for first in range(start, start + n, 50):
        results = await DeferredList(
            [
                producer.send(build_message(topic, b"body-%d" % i, tags=tag))
                for i in range(first, min(first + 50, start + n))
            ],
            fireOnOneErrback=True,
        )
        ids.extend(r.msg_id for _, r in results)
    return ids


async def wait_for_allocation(consumers: Iterable[PushConsumer], queues: int) -> None:
    """Until the members' queues are disjoint and cover the topic."""

    def settled() -> bool:
        sets = [{mq for mq in c.assigned_queues() if not mq.topic.startswith("%RETRY%")} for c in consumers]
        return sum(map(len, sets)) == queues and len(set().union(*sets)) == queues

    await wait_until(settled, what="a stable allocation")


@pytest_twisted.ensureDeferred
async def test_two_members_share_queues_and_consume_exactly_once(servers: Servers, producer: Producer) -> None:
    topic = await servers.topic(8)
    group = group_name("share")
    a, b = Recorder(), Recorder()
    ca = await push_consumer(servers, group, topic, a)
    cb = await push_consumer(servers, group, topic, b)
    try:
        await wait_for_allocation([ca, cb], 8)
        assert len(ca.assigned_queues() - cb.assigned_queues()) > 0
        ids = await send_many(producer, topic, 1000)
        await wait_until(lambda: len(a.counts) + len(b.counts) >= 1000, what="1000 messages consumed")
        await sleep(0.3)  # anything delivered twice would show up now
        total = a.counts + b.counts
        assert set(total) == set(ids) and set(total.values()) == {1}
        assert a.queues.isdisjoint(b.queues) and a.counts and b.counts
        assert {mq.queue_id for mq in ca.assigned_queues() if mq.topic == topic} == a.queues
    finally:
        await ca.shutdown()
        await cb.shutdown()


@pytest_twisted.ensureDeferred
async def test_rebalance_when_a_member_leaves(servers: Servers, producer: Producer) -> None:
    topic = await servers.topic(4)
    group = group_name("leave")
    a, b = Recorder(), Recorder()
    ca = await push_consumer(servers, group, topic, a)
    cb = await push_consumer(servers, group, topic, b)
    try:
        await wait_for_allocation([ca, cb], 4)
        first = await send_many(producer, topic, 200)
        await wait_until(lambda: len(a.counts) + len(b.counts) >= 200, what="first 200")
        await cb.shutdown()
        await wait_for_allocation([ca], 4)
        second = await send_many(producer, topic, 200, start=200)
        await wait_until(lambda: len(a.counts) + len(b.counts) >= 400, what="400 in all")
        await sleep(0.3)
        total = a.counts + b.counts
        assert set(total) == set(first + second) and set(total.values()) == {1}
        assert set(second) <= set(a.counts)
    finally:
        await ca.shutdown()
        await cb.shutdown()


@pytest_twisted.ensureDeferred
async def test_offsets_resume_after_restart(servers: Servers, producer: Producer) -> None:
    topic = await servers.topic(4)
    group = group_name("resume")
    first = Recorder()
    consumer = await push_consumer(servers, group, topic, first)
    old = await send_many(producer, topic, 100)
    await wait_until(lambda: len(first.counts) >= 100, what="first 100")
    await consumer.shutdown()

    reader = PullConsumer(group, servers.namesrv_addr)
    await reader.start()
    try:
        committed = [await reader.fetch_consume_offset(MessageQueue(topic, "broker-a", q)) for q in range(4)]
        maxima = [await reader.max_offset(MessageQueue(topic, "broker-a", q)) for q in range(4)]
        assert committed == maxima and sum(committed) == 100
    finally:
        await reader.shutdown()

    new = await send_many(producer, topic, 100, start=100)
    second = Recorder()
    consumer = await push_consumer(servers, group, topic, second)
    try:
        await wait_until(lambda: len(second.counts) >= 100, what="the 100 new messages")
        await sleep(0.3)
        assert set(second.counts) == set(new) and set(second.counts.values()) == {1}
        assert set(first.counts) == set(old) and set(first.counts.values()) == {1}
    finally:
        await consumer.shutdown()


@pytest_twisted.ensureDeferred
async def test_broadcasting_delivers_everything_to_every_member(
    servers: Servers, producer: Producer, tmp_path: Path
) -> None:
    topic = await servers.topic(4)
    group = group_name("broadcast")
    recorders = [Recorder(), Recorder()]
    consumers = [
        await push_consumer(
            servers, group, topic, r, message_model=MessageModel.BROADCASTING, offset_store_dir=str(tmp_path)
        )
        for r in recorders
    ]
    try:
        assert all(len(c.assigned_queues()) == 4 for c in consumers)
        ids = await send_many(producer, topic, 100)
        await wait_until(lambda: all(len(r.counts) >= 100 for r in recorders), what="100 messages to each")
        for r in recorders:
            assert set(r.counts) == set(ids) and set(r.counts.values()) == {1}
    finally:
        for c in consumers:
            await c.shutdown()
    # Offsets are kept locally, per client id.
    assert len(list(tmp_path.glob(f"*/{group}/offsets.json"))) == 2


@pytest_twisted.ensureDeferred
async def test_tag_subscription(servers: Servers, producer: Producer) -> None:
    topic = await servers.topic(2)
    recorder = Recorder()
    consumer = await push_consumer(servers, group_name("tags"), topic, recorder, "A || B")
    try:
        wanted = await send_many(producer, topic, 20, tag="A") + await send_many(producer, topic, 20, tag="B")
        await send_many(producer, topic, 20, tag="C")
        await wait_until(lambda: len(recorder.counts) >= 40, what="tagged messages")
        await sleep(0.3)
        assert set(recorder.counts) == set(wanted)
        assert {m.tags for m in recorder.messages} == {"A", "B"}
    finally:
        await consumer.shutdown()


@pytest_twisted.ensureDeferred
async def test_reconsume_later_delivers_again(servers: Servers, producer: Producer) -> None:
    topic = await servers.topic(1)
    seen: Counter[str] = Counter()

    async def flaky(msgs: list[MessageExt]) -> ConsumeStatus:
        key = msgs[0].uniq_key or ""
        seen[key] += 1
        return ConsumeStatus.CONSUME_SUCCESS if seen[key] > 1 else ConsumeStatus.RECONSUME_LATER

    consumer = await push_consumer(servers, group_name("flaky"), topic, flaky, reconsume_later_delay=0.2)
    try:
        ids = await send_many(producer, topic, 5)
        await wait_until(lambda: all(seen[i] >= 2 for i in ids), what="second deliveries")
        mq = MessageQueue(topic, "broker-a", 0)
        await wait_until(lambda: consumer.offset_store.read_offset(mq) == 5, what="offset past the retried messages")
    finally:
        await consumer.shutdown()
