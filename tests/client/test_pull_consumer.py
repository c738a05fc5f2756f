"""Pull consumer: statuses, exact tag filtering, long polling, committed offsets, offset queries."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest_twisted
from twisted.internet import reactor
from twisted.internet.task import deferLater

from gateway.client import MessageQueue, Producer, PullConsumer, PullStatus, build_message
from gateway.remoting.message import MessageConst

from .conftest import Servers, group_name


@pytest_twisted.async_yield_fixture
async def producer(servers: Servers) -> AsyncIterator[Producer]:
    p = Producer(group_name("pg"), servers.namesrv_addr)
    await p.start()
    yield p
    await p.shutdown()


@pytest_twisted.async_yield_fixture
async def consumer(servers: Servers) -> AsyncIterator[PullConsumer]:
    c = PullConsumer(group_name("cg"), servers.namesrv_addr)
    await c.start()
    yield c
    await c.shutdown()


async def one_queue_topic(servers: Servers, producer: Producer, tags: list[str]) -> MessageQueue:
    topic = await servers.topic(1)
    for i, tag in enumerate(tags):
        await producer.send(build_message(topic, b"m%d" % i, tags=tag))
    return MessageQueue(topic, "broker-a", 0)


@pytest_twisted.ensureDeferred
async def test_pull_statuses(servers: Servers, producer: Producer, consumer: PullConsumer) -> None:
    mq = await one_queue_topic(servers, producer, ["A", "B", "A"])
    assert await consumer.fetch_subscribe_message_queues(mq.topic) == [mq]

    found = await consumer.pull(mq, "*", 0, 32)
    assert found.status is PullStatus.FOUND
    assert (found.next_begin_offset, found.min_offset, found.max_offset) == (3, 0, 3)
    assert [m.body for m in found.messages] == [b"m0", b"m1", b"m2"]
    assert [m.queue_offset for m in found.messages] == [0, 1, 2]
    assert found.messages[0].properties[MessageConst.MAX_OFFSET] == "3"

    partial = await consumer.pull(mq, "*", 1, 1)
    assert ([m.body for m in partial.messages], partial.next_begin_offset) == ([b"m1"], 2)

    assert (await consumer.pull(mq, "*", 3, 32)).status is PullStatus.NO_NEW_MSG
    illegal = await consumer.pull(mq, "*", 10, 32)
    assert (illegal.status, illegal.next_begin_offset) == (PullStatus.OFFSET_ILLEGAL, 3)
    unmatched = await consumer.pull(mq, "C", 0, 32)
    assert (unmatched.status, unmatched.next_begin_offset) == (PullStatus.NO_MATCHED_MSG, 3)


@pytest_twisted.ensureDeferred
async def test_tags_are_matched_exactly_on_the_client(
    servers: Servers, producer: Producer, consumer: PullConsumer
) -> None:
    # "Aa" and "BB" have the same Java hash code: the broker cannot tell them apart, the client can.
    mq = await one_queue_topic(servers, producer, ["Aa", "BB", "C", "Aa"])
    result = await consumer.pull(mq, "Aa", 0, 32)
    assert [m.body for m in result.messages] == [b"m0", b"m3"]
    either = await consumer.pull(mq, "BB || C", 0, 32)
    assert [m.tags for m in either.messages] == ["BB", "C"]


@pytest_twisted.ensureDeferred
async def test_blocking_pull_waits_for_a_message(servers: Servers, producer: Producer, consumer: PullConsumer) -> None:
    mq = await one_queue_topic(servers, producer, ["A"])
    started = reactor.seconds()
    waiting = consumer.pull(mq, "*", 1, 32, block=True)
    await deferLater(reactor, 0.3, lambda: None)
    assert not waiting.called  # held by the broker
    await producer.send(build_message(mq.topic, b"late"))
    result = await waiting
    assert [m.body for m in result.messages] == [b"late"]
    assert reactor.seconds() - started < 5


@pytest_twisted.ensureDeferred
async def test_consumer_offsets(servers: Servers, producer: Producer, consumer: PullConsumer) -> None:
    mq = await one_queue_topic(servers, producer, ["A"] * 5)
    consumer.update_consume_offset(mq, 3)
    assert await consumer.fetch_consume_offset(mq, from_store=False) == 3
    consumer.persist_consumer_offset()
    assert await consumer.fetch_consume_offset(mq) == 3

    other = PullConsumer(consumer.group, client=None, namesrv_addr=servers.namesrv_addr)
    await other.start()
    try:
        assert await other.fetch_consume_offset(mq) == 3
        other.update_consume_offset(mq, 4)
    finally:
        await other.shutdown()  # persists what it holds
    assert await consumer.fetch_consume_offset(mq) == 4


@pytest_twisted.ensureDeferred
async def test_offset_queries(servers: Servers, producer: Producer, consumer: PullConsumer) -> None:
    topic = await servers.topic(1)
    mq = MessageQueue(topic, "broker-a", 0)
    stamps = []
    for i in range(3):
        stamps.append(int(time.time() * 1000))
        await producer.send(build_message(topic, b"m%d" % i))
        await deferLater(reactor, 0.02, lambda: None)
    assert await consumer.max_offset(mq) == 3
    assert await consumer.min_offset(mq) == 0
    earliest = await consumer.earliest_msg_store_time(mq)
    assert stamps[0] - 1000 <= earliest <= stamps[1]
    assert await consumer.search_offset(mq, stamps[2] + 5) == 2
    assert await consumer.search_offset(mq, 0) == 0
