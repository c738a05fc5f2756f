"""Producer against in-process servers: every send mode round-trips exactly; routing, retries, auto-create."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred

from compat_tests.servers import free_port
from gateway.broker.config import load_broker_config
from gateway.broker.controller import BrokerController
from gateway.client import (
    Message,
    MessageExt,
    MessageQueue,
    MQClientError,
    Producer,
    PullConsumer,
    PullStatus,
    SendResult,
    SendStatus,
    build_message,
)
from gateway.remoting.message import MessageConst, MessageSysFlag

from .conftest import Servers, group_name, sleep

SYSTEM_PROPERTIES = {MessageConst.WAIT_STORE_MSG_OK, MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX}


@pytest_twisted.async_yield_fixture
async def producer(servers: Servers) -> AsyncIterator[Producer]:
    p = Producer(group_name("pg"), servers.namesrv_addr)
    await p.start()
    yield p
    await p.shutdown()


@pytest_twisted.async_yield_fixture
async def reader(servers: Servers) -> AsyncIterator[PullConsumer]:
    c = PullConsumer(group_name("reader"), servers.namesrv_addr)
    await c.start()
    yield c
    await c.shutdown()


async def pull_all(consumer: PullConsumer, topic: str) -> list[MessageExt]:
    """Every message of the topic, queue by queue."""
    out = []
    for mq in await consumer.fetch_subscribe_message_queues(topic):
        offset = 0
        while True:
            result = await consumer.pull(mq, "*", offset, 32)
            if result.status is not PullStatus.FOUND:
                break
            out.extend(result.messages)
            offset = result.next_begin_offset
    return out


def uniq_key(msg: Message) -> str:
    return msg.properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX]


def assert_round_trip(sent: Message, got: MessageExt) -> None:
    assert (got.topic, got.body, got.flag, got.tags, got.keys) == (
        sent.topic,
        sent.body,
        sent.flag,
        sent.tags,
        sent.keys,
    )
    user = {k: v for k, v in sent.properties.items() if k not in SYSTEM_PROPERTIES}
    assert {k: got.properties.get(k) for k in user} == user
    assert got.uniq_key == uniq_key(sent)


def _message(topic: str, i: int, mode: str) -> Message:
    return build_message(
        topic,
        f"{mode} body {i} ünïcødé \x00\xff".encode(),
        tags=f"Tag{mode}",
        keys=[f"key-{mode}-{i}", "shared"],
        properties={"mode": mode, "index": str(i), "日本": "語"},
        flag=i,
    )


@pytest_twisted.ensureDeferred
async def test_sync_async_oneway_batch_round_trip(servers: Servers, producer: Producer, reader: PullConsumer) -> None:
    topic = await servers.topic()
    sent: list[Message] = []
    results: list[SendResult] = []
    for i in range(5):
        sent.append(_message(topic, i, "sync"))
        results.append(await producer.send(sent[-1]))

    async_done: Deferred[None] = Deferred()
    async_results: list[SendResult] = []

    def on_success(result: SendResult) -> None:
        async_results.append(result)
        if len(async_results) == 5:
            async_done.callback(None)

    for i in range(5):
        sent.append(_message(topic, i, "async"))
        producer.send_async(sent[-1], on_success, async_done.errback)
    await async_done
    for i in range(5):
        sent.append(_message(topic, i, "oneway"))
        await producer.send_oneway(sent[-1])
    batch = [_message(topic, i, "batch") for i in range(5)]
    sent.extend(batch)
    batch_result = await producer.send_batch(batch)

    for r in [*results, *async_results, batch_result]:
        assert r.status is SendStatus.SEND_OK
        assert (r.queue.topic, r.queue.broker_name) == (topic, "broker-a")
    assert batch_result.msg_id == ",".join(uniq_key(m) for m in batch)
    assert len(batch_result.offset_msg_id.split(",")) == 5

    got = await pull_all(reader, topic)
    for _ in range(50):  # oneway sends are not acknowledged: give them a moment
        if len(got) == len(sent):
            break
        await sleep(0.05)
        got = await pull_all(reader, topic)
    by_key = {m.uniq_key: m for m in got}
    assert len(by_key) == len(got) == len(sent)
    for msg in sent:
        assert_round_trip(msg, by_key[uniq_key(msg)])
    for r in results:
        stored = by_key[r.msg_id]
        assert (stored.msg_id, stored.queue_id, stored.queue_offset) == (
            r.offset_msg_id,
            r.queue.queue_id,
            r.queue_offset,
        )
    # A batch is stored as consecutive messages of one queue.
    offsets = sorted(by_key[uniq_key(m)].queue_offset for m in batch)
    assert offsets == list(range(batch_result.queue_offset, batch_result.queue_offset + 5))
    assert {by_key[uniq_key(m)].queue_id for m in batch} == {batch_result.queue.queue_id}


@pytest_twisted.ensureDeferred
async def test_large_body_is_compressed_and_restored(
    servers: Servers, producer: Producer, reader: PullConsumer
) -> None:
    topic = await servers.topic(1)
    body = bytes(random.Random(7).choice(b"abcdefgh") for _ in range(20000))
    result = await producer.send(build_message(topic, body, tags="big"))
    pulled = await reader.pull(result.queue, "*", result.queue_offset, 1)
    got = pulled.messages[0]
    assert got.body == body
    assert got.sys_flag & MessageSysFlag.COMPRESSED_FLAG
    assert got.store_size < len(body)  # stored compressed


@pytest_twisted.ensureDeferred
async def test_unknown_topic_is_created_through_tbw102(servers: Servers, producer: Producer) -> None:
    topic = group_name("AutoCreated")
    result = await producer.send(build_message(topic, b"first"))
    assert result.status is SendStatus.SEND_OK
    route = await servers.admin.get_route(topic)
    # min(defaultTopicQueueNums 4, TBW102's 8) queues.
    assert [(q.read_queue_nums, q.write_queue_nums) for q in route.queue_datas] == [(4, 4)]
    queues = await producer.fetch_publish_message_queues(topic)
    assert len(queues) == 4


@pytest_twisted.ensureDeferred
async def test_send_to_a_queue_and_by_selector(servers: Servers, producer: Producer, reader: PullConsumer) -> None:
    topic = await servers.topic(4)
    target = MessageQueue(topic, "broker-a", 2)
    for i in range(3):
        assert (await producer.send(build_message(topic, b"q%d" % i), queue=target)).queue == target

    def by_order_id(queues: list[MessageQueue], msg: Message, order_id: int) -> MessageQueue:
        return queues[order_id % len(queues)]

    for step in range(5):
        for order_id in (10, 11):
            msg = build_message(topic, f"{order_id}:{step}".encode())
            result = await producer.send(msg, selector=by_order_id, arg=order_id)
            assert result.queue.queue_id == order_id % 4
    # Ordered: each order's messages sit in one queue in send order.
    for order_id in (10, 11):
        pulled = await reader.pull(MessageQueue(topic, "broker-a", order_id % 4), "*", 0, 32)
        steps = [m.body.decode().split(":")[1] for m in pulled.messages if m.body.startswith(b"%d:" % order_id)]
        assert steps == [str(s) for s in range(5)]


@pytest_twisted.ensureDeferred
async def test_invalid_messages_are_refused(servers: Servers, producer: Producer) -> None:
    topic = await servers.topic(1)
    with pytest.raises(MQClientError, match="body length is zero"):
        await producer.send(build_message(topic, b""))
    with pytest.raises(MQClientError, match="illegal characters"):
        await producer.send(build_message("bad topic!", b"x"))
    with pytest.raises(MQClientError, match="forbidden"):
        await producer.send(build_message("SCHEDULE_TOPIC_XXXX", b"x"))
    with pytest.raises(MQClientError, match="same"):
        await producer.send_batch([build_message(topic, b"a"), build_message(topic + "x", b"b")])


@pytest_twisted.ensureDeferred
async def test_no_route_says_which_name_servers_did_not_answer(servers: Servers, reader: PullConsumer) -> None:
    down = f"127.0.0.1:{free_port()};127.0.0.1:{free_port()}"
    producer = Producer(group_name("pg"), down)
    consumer = PullConsumer(group_name("reader"), down)
    await producer.start()
    await consumer.start()
    try:
        with pytest.raises(MQClientError) as sent:
            await producer.send(build_message("NoRouteTopic", b"x"))
        assert str(sent.value).startswith(
            f"No route info of this topic: NoRouteTopic, no name server answered ({down}): "
        )
        assert "Connection refused" in str(sent.value)
        with pytest.raises(MQClientError) as fetched:
            await consumer.fetch_subscribe_message_queues("NoRouteTopic")
        assert str(fetched.value).startswith(
            f"Can not find Message Queue for this topic, NoRouteTopic, no name server answered ({down}): "
        )
    finally:
        await producer.shutdown()
        await consumer.shutdown()
    # A name server that answers but has no route: RocketMQ's words alone.
    with pytest.raises(MQClientError) as fetched:
        await reader.fetch_subscribe_message_queues("NoRouteTopic")
    assert str(fetched.value) == "Can not find Message Queue for this topic, NoRouteTopic"


def broker_b(servers: Servers, tmp_path: Path) -> BrokerController:
    """A second broker, broker-b, of the servers' name server (not started)."""
    broker_cfg, store_cfg = load_broker_config(
        None,
        {
            "bindAddress": "127.0.0.1",
            "brokerIP1": "127.0.0.1",
            "brokerName": "broker-b",
            "listenPort": "0",
            "storePathRootDir": str(tmp_path / "store-b"),
            "namesrvAddr": servers.namesrv_addr,
        },
    )
    return BrokerController(broker_cfg, store_cfg, reactor)


@pytest_twisted.ensureDeferred
async def test_the_broker_answers_update_topic_once_the_name_server_routes_it(servers: Servers) -> None:
    """As Apache's broker (registerIncrementBrokerData before the answer): the route is there at the answer,
    where ours registered it a tenth of a second later."""
    topic = group_name("RoutedAtOnce")
    await servers.admin.create_topic(topic, 2, broker_addr=servers.broker_addr, route_timeout=0)  # one route query
    route = await servers.admin.client.api.get_topic_route(topic)
    assert route is not None and [(q.broker_name, q.write_queue_nums) for q in route.queue_datas] == [("broker-a", 2)]


@pytest_twisted.ensureDeferred
async def test_create_topic_fires_once_the_route_names_every_master(servers: Servers, tmp_path: Path) -> None:
    """Without a broker address the topic is made on every master TBW102 routes to, and the call fires once the
    name server routes it to each of them (a producer's first route would otherwise miss the later one)."""
    second = broker_b(servers, tmp_path)
    second.startService()
    try:
        for _ in range(200):  # broker-b heard by the name server: TBW102 routes to it
            route = await servers.admin.client.api.get_topic_route("TBW102")
            if route is not None and "broker-b" in {d.broker_name for d in route.broker_datas}:
                break
            await sleep(0.05)
        topic = group_name("OnEveryMaster")
        await servers.admin.create_topic(topic, 2)
        route = await servers.admin.client.api.get_topic_route(topic)
        assert route is not None
        assert {d.broker_name for d in route.broker_datas} == {"broker-a", "broker-b"}
        assert sorted((q.broker_name, q.write_queue_nums) for q in route.queue_datas) == [
            ("broker-a", 2),
            ("broker-b", 2),
        ]
    finally:
        await second.stopService()


@pytest_twisted.ensureDeferred
async def test_failed_broker_is_retried_on_another(servers: Servers, producer: Producer, tmp_path: Path) -> None:
    """A second broker serves the topic, then goes away: sends that pick it retry on broker-a."""
    broker = broker_b(servers, tmp_path)
    broker_cfg = broker.config
    broker.startService()
    stopped = False
    try:
        topic = group_name("TwoBrokers")
        await servers.admin.create_topic(topic, 2, broker_addr=servers.broker_addr)
        await servers.admin.create_topic(topic, 2, broker_addr=broker_cfg.broker_addr)
        for _ in range(50):
            if len(await producer.fetch_publish_message_queues(topic)) == 4:
                break
            await producer.client.update_topic_route_from_namesrv(topic)
            await sleep(0.05)
        assert len(await producer.fetch_publish_message_queues(topic)) == 4
        await broker.stopService()
        stopped = True
        # The producer's cached route still has broker-b (it refreshes every 30 s).
        results = [await producer.send(build_message(topic, b"m%d" % i)) for i in range(8)]
        assert {r.queue.broker_name for r in results} == {"broker-a"}
    finally:
        if not stopped:
            await broker.stopService()
