"""POP consumption over remoting against a broker on 127.0.0.1: pop, ack, batch ack, change invisible time,
revival through the pop retry topic, long polling, filters, restart."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest_twisted

from gateway.broker.pop.records import REVIVE_GROUP, revive_topic
from gateway.client.api import MQClientAPI, PopResult
from gateway.remoting.bodies import BatchAck, BatchAckMessageRequestBody
from gateway.remoting.client import RemotingClient
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.extra_info import PROPERTY_POP_CK, ExtraInfo
from gateway.remoting.headers import PopMessageRequestHeader, PopMessageResponseHeader
from gateway.remoting.message import decode_records

from .conftest import BrokerUnderTest, sleep
from .test_broker_server import create_topic, pull_request, send

# Fast revival: a pass every 200 ms, idle queues at most one pass behind.
POP_CONFIG = {"reviveInterval": "200", "reviveMaxSlow": "1"}


def pop_header(
    topic: str,
    group: str = "pg",
    *,
    invisible_ms: int = 1000,
    poll_ms: int = 0,
    queue_id: int = -1,
    exp: str | None = None,
    exp_type: str | None = None,
    max_nums: int = 32,
) -> PopMessageRequestHeader:
    return PopMessageRequestHeader(
        consumer_group=group,
        topic=topic,
        queue_id=queue_id,
        max_msg_nums=max_nums,
        invisible_time=invisible_ms,
        poll_time=poll_ms,
        born_time=int(time.time() * 1000),
        init_mode=0,
        exp_type=exp_type,
        exp=exp,
    )


@pytest_twisted.async_yield_fixture
async def pop_broker(make_broker) -> AsyncIterator[BrokerUnderTest]:  # type: ignore[no-untyped-def]
    b = make_broker(**POP_CONFIG)
    b.start()
    yield b
    await b.stop()


def api(remoting: RemotingClient) -> MQClientAPI:
    return MQClientAPI(remoting, ["127.0.0.1:9"])


async def pop(remoting: RemotingClient, broker: BrokerUnderTest, header: PopMessageRequestHeader) -> PopResult:
    return await api(remoting).pop_message(broker.addr, "broker-a", header, 10.0)


async def pop_until(
    remoting: RemotingClient, broker: BrokerUnderTest, topic: str, seconds: float, **kw: object
) -> PopResult:
    """Pop every 200 ms until something comes (or ``seconds`` pass)."""
    deadline = time.monotonic() + seconds
    while True:
        result = await pop(remoting, broker, pop_header(topic, **kw))  # type: ignore[arg-type]
        if result.messages or time.monotonic() > deadline:
            return result
        await sleep(0.2)


async def fill(broker: BrokerUnderTest, topic: str, bodies: list[bytes], queues: int = 1, **props: str) -> None:
    await create_topic(broker, topic, queues)
    for body in bodies:
        resp = await send(broker, topic, body, dict(props))
        assert resp.code == ResponseCode.SUCCESS, resp.remark


@pytest_twisted.ensureDeferred
async def test_pop_answer_carries_apache_offset_info(pop_broker: BrokerUnderTest, remoting: RemotingClient) -> None:
    await fill(pop_broker, "PopInfo", [b"a", b"b", b"c"])
    request = RemotingCommand.request(RequestCode.POP_MESSAGE, pop_header("PopInfo", invisible_ms=30000).encode())
    resp = await pop_broker.call(request)
    assert resp.code == ResponseCode.SUCCESS and resp.remark == "FOUND"
    answer = PopMessageResponseHeader.decode(resp.ext_fields)
    assert answer.invisible_time == 30000 and answer.rest_num == 0
    assert 0 <= answer.revive_qid < 8
    assert abs(answer.pop_time - time.time() * 1000) < 5000
    assert answer.start_offset_info == "0 0 0" and answer.msg_offset_info == "0 0 0,1,2"
    msgs = decode_records(resp.body)
    assert [m.body for m in msgs] == [b"a", b"b", b"c"]
    assert all(PROPERTY_POP_CK not in m.properties for m in msgs)  # the client builds them, as Apache's does
    # The group's offset moved past them: a second pop finds nothing and says so at once (no pollTime).
    again = await pop_broker.call(
        RemotingCommand.request(RequestCode.POP_MESSAGE, pop_header("PopInfo", invisible_ms=30000).encode())
    )
    assert again.code == ResponseCode.POLLING_TIMEOUT and again.remark == "NO_MESSAGE_IN_QUEUE"
    assert PopMessageResponseHeader.decode(again.ext_fields).rest_num == 0
    # The checkpoint went to the cluster's revive topic through the timer topic (due 1 s before revival).
    controller = pop_broker.controller
    assert controller is not None
    assert controller.topics.select(revive_topic("DefaultCluster")).read_queue_nums == 8


@pytest_twisted.ensureDeferred
async def test_acked_stay_acked_unacked_come_back_from_retry(
    pop_broker: BrokerUnderTest, remoting: RemotingClient
) -> None:
    await fill(pop_broker, "PopAck", [b"m0", b"m1", b"m2"])
    first = await pop(remoting, pop_broker, pop_header("PopAck", invisible_ms=1000))
    assert [m.body for m in first.messages] == [b"m0", b"m1", b"m2"]
    ck = {m.body: m.properties[PROPERTY_POP_CK] for m in first.messages}
    info = ExtraInfo.parse(ck[b"m0"])
    assert (info.ck_queue_offset, info.pop_time, info.invisible_time) == (0, first.pop_time, 1000)
    assert (info.retry, info.broker_name, info.queue_id, info.queue_offset) == ("0", "broker-a", 0, 0)
    client = api(remoting)
    await client.ack_message(pop_broker.addr, "pg", "PopAck", ck[b"m0"])
    m1 = ExtraInfo.parse(ck[b"m1"])
    batch = BatchAck("pg", "PopAck", "0", m1.ck_queue_offset, 0, m1.revive_qid, m1.pop_time, 1000, frozenset({1}))
    await client.batch_ack_message(pop_broker.addr, BatchAckMessageRequestBody("broker-a", [batch]))
    back = await pop_until(remoting, pop_broker, "PopAck", 8.0, invisible_ms=1000)
    assert [m.body for m in back.messages] == [b"m2"]
    (msg,) = back.messages
    assert msg.topic == "PopAck" and msg.reconsume_times == 1
    assert msg.properties["1ST_POP_TIME"] == str(first.pop_time)
    assert msg.uniq_key == first.messages[2].uniq_key
    retry_info = ExtraInfo.parse(msg.properties[PROPERTY_POP_CK])
    assert (retry_info.retry, retry_info.queue_id, retry_info.queue_offset) == ("1", 0, 0)
    # Acked (from the retry topic this time), it never comes back; nor do m0 and m1.
    await client.ack_message(pop_broker.addr, "pg", "PopAck", msg.properties[PROPERTY_POP_CK])
    later = await pop_until(remoting, pop_broker, "PopAck", 4.5, invisible_ms=1000)
    assert later.messages == [] and later.code == ResponseCode.POLLING_TIMEOUT
    # The revive group's offsets moved on (committed as consumer offsets, which slaves copy).
    controller = pop_broker.controller
    assert controller is not None
    topic = revive_topic("DefaultCluster")
    assert any(controller.offsets.query_offset(REVIVE_GROUP, topic, q) >= 0 for q in range(8))
