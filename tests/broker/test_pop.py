"""POP consumption over remoting against a broker on 127.0.0.1: pop, ack, batch ack, change invisible time,
revival through the pop retry topic, long polling, filters, restart."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
import pytest_twisted
from twisted.internet import defer

from gateway.broker.pop import revive as revive_module
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
    init_mode: int = 0,
) -> PopMessageRequestHeader:
    return PopMessageRequestHeader(
        consumer_group=group,
        topic=topic,
        queue_id=queue_id,
        max_msg_nums=max_nums,
        invisible_time=invisible_ms,
        poll_time=poll_ms,
        born_time=int(time.time() * 1000),
        init_mode=init_mode,
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


@pytest_twisted.ensureDeferred
async def test_long_polling_woken_by_arrival_and_timeout(pop_broker: BrokerUnderTest, remoting: RemotingClient) -> None:
    await create_topic(pop_broker, "PopWait", 2)
    # Nothing there: the pop waits its pollTime, then answers POLLING_TIMEOUT.
    started = time.monotonic()
    empty = await pop(remoting, pop_broker, pop_header("PopWait", poll_ms=800))
    waited = time.monotonic() - started
    assert empty.code == ResponseCode.POLLING_TIMEOUT and 0.7 <= waited < 3.0
    # A message stored while a pop waits answers it at once.
    started = time.monotonic()
    waiting = defer.ensureDeferred(pop(remoting, pop_broker, pop_header("PopWait", poll_ms=10000)))
    await sleep(0.5)
    assert (await send(pop_broker, "PopWait", b"late", {}, queue_id=1)).code == ResponseCode.SUCCESS
    found = await waiting
    assert [m.body for m in found.messages] == [b"late"] and time.monotonic() - started < 5.0
    # A pop whose pollTime ended long before it arrived is refused as Apache does.
    stale = pop_header("PopWait", poll_ms=100)
    stale.born_time -= 10000
    resp = await pop_broker.call(RemotingCommand.request(RequestCode.POP_MESSAGE, stale.encode()))
    assert resp.code == ResponseCode.POLLING_TIMEOUT
    assert resp.remark == "the broker[127.0.0.1] pop message is timeout too much"
    # The client reads that header-less answer as nothing found (the Java client's nulls), not as an error.
    late = await pop(remoting, pop_broker, stale)
    assert (late.code, late.messages, late.rest_num) == (ResponseCode.POLLING_TIMEOUT, [], 0)


@pytest_twisted.ensureDeferred
async def test_polling_full(make_broker, remoting: RemotingClient) -> None:  # type: ignore[no-untyped-def]
    broker = make_broker(maxPopPollingSize="1", **POP_CONFIG)
    broker.start()
    try:
        await create_topic(broker, "PopFull", 1)
        first = defer.ensureDeferred(pop(remoting, broker, pop_header("PopFull", poll_ms=1500)))
        await sleep(0.2)
        second = await pop(remoting, broker, pop_header("PopFull", poll_ms=1500))
        assert second.code == ResponseCode.POLLING_FULL
        assert (await first).code == ResponseCode.POLLING_TIMEOUT
    finally:
        await broker.stop()


@pytest_twisted.ensureDeferred
async def test_change_invisible_time_extends_and_shortens(
    pop_broker: BrokerUnderTest, remoting: RemotingClient
) -> None:
    await fill(pop_broker, "PopChange", [b"short", b"long"])
    client = api(remoting)
    first = await pop(remoting, pop_broker, pop_header("PopChange", invisible_ms=1000))
    ck = {m.body: m.properties[PROPERTY_POP_CK] for m in first.messages}
    # "long" was due in 1 s: now in 60 s. "short" was due in 1 s too: made due at once (a new checkpoint).
    extended = await client.change_invisible_time(pop_broker.addr, "pg", "PopChange", ck[b"long"], 60000)
    assert extended.invisible_time == 60000 and extended.pop_time >= first.pop_time
    assert extended.revive_qid == ExtraInfo.parse(ck[b"long"]).revive_qid
    await client.change_invisible_time(pop_broker.addr, "pg", "PopChange", ck[b"short"], 0)
    back = await pop_until(remoting, pop_broker, "PopChange", 8.0, invisible_ms=60000)
    assert [m.body for m in back.messages] == [b"short"] and back.messages[0].reconsume_times == 1
    later = await pop_until(remoting, pop_broker, "PopChange", 3.0, invisible_ms=60000)
    assert later.messages == []


@pytest_twisted.ensureDeferred
async def test_restart_keeps_acks_and_revives_the_rest(make_broker, remoting: RemotingClient) -> None:  # type: ignore[no-untyped-def]
    broker = make_broker(**POP_CONFIG)
    broker.start()
    try:
        await fill(broker, "PopRestart", [b"acked", b"pending"])
        first = await pop(remoting, broker, pop_header("PopRestart", invisible_ms=2000))
        ck = {m.body: m.properties[PROPERTY_POP_CK] for m in first.messages}
        await api(remoting).ack_message(broker.addr, "pg", "PopRestart", ck[b"acked"])
    finally:
        await broker.stop()
    broker.start()
    try:
        back = await pop_until(remoting, broker, "PopRestart", 9.0, invisible_ms=30000)
        assert [m.body for m in back.messages] == [b"pending"] and back.messages[0].reconsume_times == 1
        await api(remoting).ack_message(broker.addr, "pg", "PopRestart", back.messages[0].properties[PROPERTY_POP_CK])
        await sleep(0.5)  # a revive pass commits the revived checkpoint's offset
    finally:
        await broker.stop()
    # The revive offsets were kept: the checkpoint revived before this restart is not revived again.
    broker.start()
    try:
        later = await pop_until(remoting, broker, "PopRestart", 4.0, invisible_ms=30000)
        assert later.messages == []
    finally:
        await broker.stop()


@pytest_twisted.ensureDeferred
async def test_tag_and_sql92_filters(pop_broker: BrokerUnderTest, remoting: RemotingClient) -> None:
    await create_topic(pop_broker, "PopFilter", 1)
    for i, tag in enumerate(["A", "B", "A", "C"]):
        await send(pop_broker, "PopFilter", f"{tag}{i}".encode(), {"TAGS": tag, "n": str(i)})
    tags = await pop(remoting, pop_broker, pop_header("PopFilter", "tagGroup", exp="A || C", exp_type="TAG"))
    assert [m.body for m in tags.messages] == [b"A0", b"A2", b"C3"]
    sql = await pop(remoting, pop_broker, pop_header("PopFilter", "sqlGroup", exp="n > 1", exp_type="SQL92"))
    assert [m.body for m in sql.messages] == [b"A2", b"C3"]
    # The filtered-out messages are passed over for good: the group's offset is at the end.
    again = await pop(remoting, pop_broker, pop_header("PopFilter", "sqlGroup", exp="n > 1", exp_type="SQL92"))
    assert again.messages == [] and again.rest_num == 0
    bad = pop_header("PopFilter", "sqlGroup", exp="n >", exp_type="SQL92")
    resp = await pop_broker.call(RemotingCommand.request(RequestCode.POP_MESSAGE, bad.encode()))
    assert (resp.code, resp.remark) == (
        ResponseCode.SUBSCRIPTION_PARSE_FAILED,
        "parse the consumer's subscription failed",
    )


@pytest_twisted.ensureDeferred
async def test_dead_letter_after_max_attempts(pop_broker: BrokerUnderTest, remoting: RemotingClient) -> None:
    """Apache's pop DLQ path: the revive service always re-puts into the retry topic; the consumer side (the
    proxy's PopMessageResultFilter, the Java client) sends a message popped too often back with delay level
    -1 (CONSUMER_SEND_MSG_BACK), which lands it in %DLQ%group, and acks it."""
    await fill(pop_broker, "PopDlq", [b"poison"])
    first = await pop(remoting, pop_broker, pop_header("PopDlq", "dlqGroup", invisible_ms=1000))
    back = await pop_until(remoting, pop_broker, "PopDlq", 8.0, group="dlqGroup", invisible_ms=1000)
    (msg,) = back.messages
    assert msg.reconsume_times == 1 and first.messages[0].body == b"poison"
    client = api(remoting)
    await client.consumer_send_message_back(pop_broker.addr, "broker-a", msg, "dlqGroup", -1, 0)
    await client.ack_message(pop_broker.addr, "dlqGroup", "PopDlq", msg.properties[PROPERTY_POP_CK])
    pulled = await pop_broker.call(pull_request("%DLQ%dlqGroup", 0, 0, sub="*", group="dlqGroup"))
    assert pulled.code == ResponseCode.SUCCESS
    (dead,) = decode_records(pulled.body)
    assert dead.body == b"poison" and dead.uniq_key == msg.uniq_key
    later = await pop_until(remoting, pop_broker, "PopDlq", 4.0, group="dlqGroup", invisible_ms=1000)
    assert later.messages == []


@pytest_twisted.ensureDeferred
async def test_refusals(make_broker, remoting: RemotingClient) -> None:  # type: ignore[no-untyped-def]
    broker = make_broker(autoCreateSubscriptionGroup="false", **POP_CONFIG)
    broker.start()
    try:
        await create_topic(broker, "PopNo", 2)

        async def call(code: int, ext: dict[str, str]) -> RemotingCommand:
            return await broker.call(RemotingCommand.request(code, ext))

        resp = await call(RequestCode.POP_MESSAGE, pop_header("PopNo", "nobody").encode())
        assert resp.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
        assert resp.remark == "subscription group [nobody] does not exist, http://rocketmq.apache.org/docs/faq/"
        resp = await call(RequestCode.POP_MESSAGE, pop_header("PopNo", "TOOLS_CONSUMER", max_nums=33).encode())
        assert (resp.code, resp.remark) == (
            ResponseCode.INVALID_PARAMETER,
            "the broker[127.0.0.1] pop message's num is greater than 32",
        )
        resp = await call(RequestCode.POP_MESSAGE, pop_header("Nowhere", "TOOLS_CONSUMER").encode())
        assert resp.code == ResponseCode.TOPIC_NOT_EXIST
        resp = await call(RequestCode.POP_MESSAGE, pop_header("PopNo", "TOOLS_CONSUMER", queue_id=2).encode())
        assert resp.code == ResponseCode.INVALID_PARAMETER and resp.remark.startswith("queueId[2] is illegal")
        ack = {"consumerGroup": "g", "topic": "PopNo", "queueId": "0", "extraInfo": "0 1 2", "offset": "0"}
        resp = await call(RequestCode.ACK_MESSAGE, ack)
        assert resp.code == ResponseCode.SYSTEM_ERROR
        assert resp.remark == "IllegalArgumentException: getBrokerName fail, extraInfoStrs length 3"
        resp = await call(RequestCode.ACK_MESSAGE, {**ack, "offset": "5"})
        assert (resp.code, resp.remark) == (
            ResponseCode.NO_MESSAGE,
            "offset is illegal, key:PopNo@0, commit:5, store:0~0",
        )
        resp = await call(RequestCode.ACK_MESSAGE, {**ack, "queueId": "7"})
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL and resp.remark.startswith("queueId[7] is illegal")
        resp = await call(RequestCode.ACK_MESSAGE, {k: v for k, v in ack.items() if k != "extraInfo"})
        assert resp.code == ResponseCode.SYSTEM_ERROR and resp.remark.endswith("<extra_info> is null")
        resp = await broker.call(RemotingCommand.request(RequestCode.BATCH_ACK_MESSAGE, None, b'{"acks":[]}'))
        assert resp.code == ResponseCode.NO_MESSAGE
    finally:
        await broker.stop()


@pytest_twisted.ensureDeferred
async def test_revive_holds_a_bounded_number_of_checkpoints(
    make_broker,  # type: ignore[no-untyped-def]
    remoting: RemotingClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past MAX_PENDING held checkpoints a revive queue passes over the later ones and reads them again once
    the held ones are revived: nothing is lost, acks still count."""
    monkeypatch.setattr(revive_module, "MAX_PENDING", 1)
    broker = make_broker(reviveQueueNum="1", **POP_CONFIG)
    broker.start()
    try:
        await fill(broker, "PopCap", [b"c0", b"c1", b"c2"])
        ck = {}
        for _ in range(3):  # three pops, three checkpoints in revive queue 0
            (msg,) = (await pop(remoting, broker, pop_header("PopCap", invisible_ms=1000, max_nums=1))).messages
            ck[msg.body] = msg.properties[PROPERTY_POP_CK]
        await api(remoting).ack_message(broker.addr, "pg", "PopCap", ck[b"c1"])
        seen: list[bytes] = []
        deadline = time.monotonic() + 12.0
        while len(seen) < 2 and time.monotonic() < deadline:
            got = await pop_until(remoting, broker, "PopCap", 1.0, invisible_ms=60000)
            seen += [m.body for m in got.messages]
        assert sorted(seen) == [b"c0", b"c2"], seen
    finally:
        await broker.stop()


@pytest_twisted.ensureDeferred
async def test_new_group_start_by_init_mode(make_broker, remoting: RemotingClient) -> None:  # type: ignore[no-untyped-def]
    """ConsumeInitMode.MIN starts a new group at the queue's first message; MAX at its last, unless the queue
    starts at 0 and that message is in memory (initPopOffsetByCheckMsgInMem, on by default)."""
    for in_mem, expected in (("true", [b"i0", b"i1", b"i2"]), ("false", [b"i2"])):
        broker = make_broker(initPopOffsetByCheckMsgInMem=in_mem, **POP_CONFIG)
        broker.start()
        try:
            topic = f"PopInit{in_mem}"
            await fill(broker, topic, [b"i0", b"i1", b"i2"])
            latest = await pop(remoting, broker, pop_header(topic, "maxGroup", init_mode=1))
            assert [m.body for m in latest.messages] == expected
            earliest = await pop(remoting, broker, pop_header(topic, "minGroup", init_mode=0))
            assert [m.body for m in earliest.messages] == [b"i0", b"i1", b"i2"]
        finally:
            await broker.stop()


@pytest_twisted.ensureDeferred
async def test_pop_over_queues_counts_the_rest(pop_broker: BrokerUnderTest, remoting: RemotingClient) -> None:
    """A pop of every queue reads them in turn from a random one, one checkpoint per queue read; restNum counts
    what it left."""
    await create_topic(pop_broker, "PopQueues", 4)
    for q in range(4):
        for i in range(2):
            sent = await send(pop_broker, "PopQueues", f"q{q}m{i}".encode(), {}, queue_id=q)
            assert sent.code == ResponseCode.SUCCESS
    request = RemotingCommand.request(RequestCode.POP_MESSAGE, pop_header("PopQueues", max_nums=3).encode())
    resp = await pop_broker.call(request)
    answer = PopMessageResponseHeader.decode(resp.ext_fields)
    msgs = decode_records(resp.body)
    assert len(msgs) == 3 and answer.rest_num == 5
    starts = answer.start_offset_info.split(";")
    assert len(starts) == 2 and all(s.startswith("0 ") and s.endswith(" 0") for s in starts)
    queues = [int(s.split(" ")[1]) for s in starts]
    assert sorted({m.queue_id for m in msgs}) == sorted(queues) and (queues[1] - queues[0]) % 4 == 1
    got = [m.body for m in msgs]
    for _ in range(3):
        more = await pop(remoting, pop_broker, pop_header("PopQueues", max_nums=3))
        got += [m.body for m in more.messages]
    assert sorted(got) == sorted(f"q{q}m{i}".encode() for q in range(4) for i in range(2))
