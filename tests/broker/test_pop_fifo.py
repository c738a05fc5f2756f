"""Orderly POP, PEEK_MESSAGE, NOTIFICATION and POLLING_INFO over real sockets (Apache 5.3.3's behaviour).

Orderly pops (``order=true``) hand out one batch per queue at a time, in queue order; the next batch of a queue
comes only once the previous one is acked, or once its invisible time has passed, and then the same messages
come back with their consumed count one higher in ``orderCountInfo`` (what clients turn into reconsume times).
"""

from __future__ import annotations

import time

import orjson
import pytest_twisted
from twisted.internet import reactor

from gateway.acl.permission import SUB
from gateway.acl.plain_access_validator import PlainAccessValidator
from gateway.client.api import MQClientAPI
from gateway.remoting.bodies import BatchAck, BatchAckMessageRequestBody
from gateway.remoting.client import RemotingClient
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.extra_info import PROPERTY_POP_CK, ExtraInfo
from gateway.remoting.headers import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    NotificationRequestHeader,
    PeekMessageRequestHeader,
    PollingInfoRequestHeader,
    PopMessageRequestHeader,
)
from gateway.remoting.message import MessageExt, decode_records

from .conftest import BrokerUnderTest, sleep
from .test_broker_server import create_topic, send, send_header
from .test_pop_frames import java_pop_ext, java_request

TOPIC = "FifoTopic"
GROUP = "fifo_cg"


def now_ms() -> int:
    return int(time.time() * 1000)


async def fill(b: BrokerUnderTest, queue_id: int, bodies: list[str]) -> None:
    for body in bodies:
        resp = await send(b, TOPIC, body.encode(), {"TAGS": "t"}, queue_id)
        assert resp.code == ResponseCode.SUCCESS, resp.remark


def pop_request(
    queue_id: int = -1, max_nums: int = 32, invisible_ms: int = 60000, poll_ms: int = 0, order: bool = True
) -> RemotingCommand:
    header = PopMessageRequestHeader(
        consumer_group=GROUP,
        topic=TOPIC,
        queue_id=queue_id,
        max_msg_nums=max_nums,
        invisible_time=invisible_ms,
        poll_time=poll_ms,
        born_time=now_ms(),
        init_mode=0,
        exp_type="TAG",
        exp="*",
        order=order,
    )
    return RemotingCommand.request(RequestCode.POP_MESSAGE, header.encode())


class Popped:
    def __init__(self, resp: RemotingCommand) -> None:
        self.resp = resp
        ext = resp.ext_fields or {}
        self.pop_time = int(ext.get("popTime", "0"))
        self.revive_qid = int(ext.get("reviveQid", "0"))
        self.invisible_time = int(ext.get("invisibleTime", "0"))
        self.messages: list[MessageExt] = decode_records(resp.body) if resp.body else []
        # ExtraInfoUtil.parseOrderCountInfo: "retry qo<queueId>%<offset> count" and "retry queueId count".
        self.order_counts: dict[str, int] = {}
        for entry in filter(None, (ext.get("orderCountInfo") or "").split(";")):
            _kind, key, count = entry.split(" ")
            self.order_counts[key] = int(count)

    def bodies(self, queue_id: int | None = None) -> list[str]:
        return [m.body.decode() for m in self.messages if queue_id is None or m.queue_id == queue_id]

    def reconsume_times(self, m: MessageExt) -> int:
        """What a 5.x client sets: the offset's count, else the queue's."""
        count = self.order_counts.get(f"qo{m.queue_id}%{m.queue_offset}")
        return count if count is not None else self.order_counts.get(str(m.queue_id), 0)

    def extra_info(self, m: MessageExt) -> str:
        """The POP_CK a client builds for an orderly message (ExtraInfoUtil.buildExtraInfo)."""
        offset = m.queue_offset
        return f"{offset} {self.pop_time} {self.invisible_time} {self.revive_qid} 0 broker-a {m.queue_id} {offset}"


async def pop(b: BrokerUnderTest, **kw) -> Popped:
    return Popped(await b.call(pop_request(**kw)))


async def ack(b: BrokerUnderTest, popped: Popped, m: MessageExt) -> RemotingCommand:
    header = AckMessageRequestHeader(
        consumer_group=GROUP, topic=TOPIC, queue_id=m.queue_id, extra_info=popped.extra_info(m), offset=m.queue_offset
    )
    return await b.call(RemotingCommand.request(RequestCode.ACK_MESSAGE, header.encode()))


@pytest_twisted.ensureDeferred
async def test_orderly_pop_holds_each_queue_until_its_batch_is_acked(broker: BrokerUnderTest) -> None:
    b = broker
    await create_topic(b, TOPIC, 2)
    await fill(b, 0, ["a0", "a1", "a2"])
    await fill(b, 1, ["b0", "b1"])
    first = await pop(b, max_nums=2)
    assert first.resp.code == ResponseCode.SUCCESS, first.resp.remark
    assert first.revive_qid == 999  # KeyBuilder.POP_ORDER_REVIVE_QUEUE
    # One queue's first two messages, in order.
    (qid,) = {m.queue_id for m in first.messages}
    expected = {0: ["a0", "a1"], 1: ["b0", "b1"]}[qid]
    assert first.bodies() == expected
    assert first.order_counts == {str(qid): 0}
    # The other queue is free; this one is held.
    second = await pop(b, max_nums=32)
    other = 1 - qid
    assert {m.queue_id for m in second.messages} == {other}
    assert second.bodies() == {0: ["a0", "a1", "a2"], 1: ["b0", "b1"]}[other]
    third = await pop(b)
    assert third.resp.code == ResponseCode.POLLING_TIMEOUT and third.messages == []
    # Acking one of the two is not enough; acking both releases the queue from where the batch ended.
    assert (await ack(b, first, first.messages[1])).code == ResponseCode.SUCCESS
    assert (await pop(b)).messages == []
    assert b.controller is not None
    assert b.controller.offsets.query_offset(GROUP, TOPIC, qid) == 0  # commits stop at the first unacked
    assert (await ack(b, first, first.messages[0])).code == ResponseCode.SUCCESS
    assert b.controller.offsets.query_offset(GROUP, TOPIC, qid) == 2
    if qid == 0:
        assert (await pop(b, queue_id=0)).bodies() == ["a2"]
    else:
        assert (await pop(b, queue_id=1)).resp.code == ResponseCode.POLLING_TIMEOUT  # b0, b1 were all
    # An ack below the committed offset is ignored.
    assert (await ack(b, first, first.messages[0])).code == ResponseCode.SUCCESS


@pytest_twisted.ensureDeferred
async def test_unacked_batch_comes_back_in_order_with_reconsume_times_plus_one(broker: BrokerUnderTest) -> None:
    b = broker
    await create_topic(b, TOPIC, 1)
    await fill(b, 0, ["m0", "m1", "m2"])
    first = await pop(b, queue_id=0, invisible_ms=1000)
    assert first.bodies() == ["m0", "m1", "m2"]
    assert [first.reconsume_times(m) for m in first.messages] == [0, 0, 0]
    # ExtraInfoUtil's form: per queue "kind queueId leastCount", before it "kind qo<queueId>%<offset> count" for
    # each offset consumed before.
    assert first.resp.ext_fields is not None and first.resp.ext_fields["orderCountInfo"] == "0 0 0"
    assert (await pop(b, queue_id=0, invisible_ms=1000)).messages == []
    await sleep(1.1)
    again = await pop(b, queue_id=0, invisible_ms=1000)
    assert again.bodies() == ["m0", "m1", "m2"]
    assert [again.reconsume_times(m) for m in again.messages] == [1, 1, 1]
    assert again.resp.ext_fields is not None
    assert again.resp.ext_fields["orderCountInfo"] == "0 qo0%0 1;0 qo0%1 1;0 qo0%2 1;0 0 1"
    # A pop held while the queue is blocked wakes when the batch turns visible again (the lock's release).
    started = time.monotonic()
    held = Popped(await b.call(pop_request(queue_id=0, invisible_ms=60000, poll_ms=5000), timeout=10))
    assert held.bodies() == ["m0", "m1", "m2"] and time.monotonic() - started < 2.5
    assert [held.reconsume_times(m) for m in held.messages] == [2, 2, 2]
    # The earlier pops' acks are stale now; the last pop's count.
    assert (await ack(b, first, first.messages[0])).code == ResponseCode.SUCCESS
    assert b.controller is not None
    assert b.controller.offsets.query_offset(GROUP, TOPIC, 0) == 0
    for m in held.messages:
        assert (await ack(b, held, m)).code == ResponseCode.SUCCESS
    assert b.controller.offsets.query_offset(GROUP, TOPIC, 0) == 3


@pytest_twisted.ensureDeferred
async def test_java_client_orderly_pop_frame(broker: BrokerUnderTest) -> None:
    b = broker
    await create_topic(b, TOPIC, 1)
    await fill(b, 0, ["m0", "m1"])
    ext = {**java_pop_ext(TOPIC, GROUP, poll=False), "order": "true", "attemptId": "attempt-1"}
    first = Popped(await b.call(java_request(RequestCode.POP_MESSAGE, ext)))
    assert first.bodies() == ["m0", "m1"]
    assert first.resp.ext_fields is not None
    assert {k: first.resp.ext_fields[k] for k in ("reviveQid", "startOffsetInfo", "msgOffsetInfo")} == {
        "reviveQid": "999",
        "startOffsetInfo": "0 0 0",
        "msgOffsetInfo": "0 0 0,1",
    }
    # The same attempt retried (a client that lost the answer) gets the batch again, counts unchanged.
    again = Popped(await b.call(java_request(RequestCode.POP_MESSAGE, ext)))
    assert again.bodies() == ["m0", "m1"] and again.order_counts == {"0": 0}
    other = Popped(await b.call(java_request(RequestCode.POP_MESSAGE, {**ext, "attemptId": "attempt-2"})))
    assert other.messages == []


@pytest_twisted.ensureDeferred
async def test_change_invisible_time_of_an_orderly_message(broker: BrokerUnderTest) -> None:
    b = broker
    await create_topic(b, TOPIC, 1)
    await fill(b, 0, ["m0"])
    first = await pop(b, queue_id=0, invisible_ms=60000)
    (m,) = first.messages
    header = ChangeInvisibleTimeRequestHeader(
        consumer_group=GROUP,
        topic=TOPIC,
        queue_id=0,
        extra_info=first.extra_info(m),
        offset=0,
        invisible_time=500,
    )
    resp = await b.call(RemotingCommand.request(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, header.encode()))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert resp.ext_fields is not None and int(resp.ext_fields["popTime"]) == first.pop_time
    assert resp.ext_fields["reviveQid"] == "999"
    await sleep(0.6)
    again = await pop(b, queue_id=0)
    assert again.bodies() == ["m0"] and again.reconsume_times(again.messages[0]) == 1


@pytest_twisted.ensureDeferred
async def test_held_orderly_pop_wakes_when_the_batch_is_acked(broker: BrokerUnderTest) -> None:
    b = broker
    await create_topic(b, TOPIC, 1)
    await fill(b, 0, ["m0", "m1"])
    first = await pop(b, queue_id=0, max_nums=1)
    started = time.monotonic()
    waiting = b.call(pop_request(queue_id=0, poll_ms=5000), timeout=10)
    await sleep(0.2)
    info = await b.call(
        RemotingCommand.request(RequestCode.POLLING_INFO, PollingInfoRequestHeader(GROUP, TOPIC, 0).encode())
    )
    assert info.code == ResponseCode.SUCCESS and info.ext_fields == {"pollingNum": "1"}
    assert (await ack(b, first, first.messages[0])).code == ResponseCode.SUCCESS
    woken = Popped(await waiting)
    assert woken.bodies() == ["m1"] and time.monotonic() - started < 3
    info = await b.call(
        RemotingCommand.request(RequestCode.POLLING_INFO, PollingInfoRequestHeader(GROUP, TOPIC, 0).encode())
    )
    assert info.ext_fields == {"pollingNum": "0"}


@pytest_twisted.ensureDeferred
async def test_order_info_survives_a_restart(make_broker) -> None:
    b = make_broker()
    b.start()
    try:
        await create_topic(b, TOPIC, 1)
        await fill(b, 0, ["m0", "m1"])
        first = await pop(b, queue_id=0, invisible_ms=60000)
        assert first.bodies() == ["m0", "m1"]
        await b.stop()
        b.start()
        assert (await pop(b, queue_id=0)).messages == []  # still held by the unacked batch
        for m in first.messages:
            assert (await ack(b, first, m)).code == ResponseCode.SUCCESS
        assert b.controller is not None
        assert b.controller.offsets.query_offset(GROUP, TOPIC, 0) == 2
    finally:
        await b.stop()


def peek_request(queue_id: int = -1, max_nums: int = 32) -> RemotingCommand:
    header = PeekMessageRequestHeader(topic=TOPIC, queue_id=queue_id, max_msg_nums=max_nums, consumer_group=GROUP)
    return RemotingCommand.request(RequestCode.PEEK_MESSAGE, header.encode())


@pytest_twisted.ensureDeferred
async def test_peek_does_not_change_offsets(broker: BrokerUnderTest) -> None:
    b = broker
    await create_topic(b, TOPIC, 2)
    await fill(b, 0, ["a0", "a1"])
    await fill(b, 1, ["b0"])
    assert b.controller is not None
    for _ in range(2):
        resp = await b.call(peek_request())
        assert resp.code == ResponseCode.SUCCESS and resp.remark == "FOUND"
        assert sorted(m.body.decode() for m in decode_records(resp.body)) == ["a0", "a1", "b0"]
        assert resp.ext_fields is not None and resp.ext_fields["restNum"] == "3"
    assert b.controller.offsets.query_offset(GROUP, TOPIC, 0) == -1
    resp = await b.call(peek_request(queue_id=1, max_nums=1))
    assert [m.body.decode() for m in decode_records(resp.body)] == ["b0"]
    # The group pops queue 0; a peek then starts where the group is.
    assert (await pop(b, queue_id=0, order=False)).bodies() == ["a0", "a1"]
    resp = await b.call(peek_request(queue_id=0))
    assert (resp.code, resp.remark) == (ResponseCode.PULL_NOT_FOUND, "NO_MESSAGE_IN_QUEUE")
    resp = await b.call(peek_request(queue_id=7))
    assert resp.code == ResponseCode.INVALID_PARAMETER
    assert resp.remark.startswith("queueId[7] is illegal, topic:[FifoTopic] topicConfig.readQueueNums:[2]")


def notification_request(queue_id: int = -1, poll_ms: int = 1000, order: bool = False) -> RemotingCommand:
    header = NotificationRequestHeader(
        consumer_group=GROUP, topic=TOPIC, queue_id=queue_id, poll_time=poll_ms, born_time=now_ms(), order=order
    )
    return RemotingCommand.request(RequestCode.NOTIFICATION, header.encode())


@pytest_twisted.ensureDeferred
async def test_notification_answers_on_arrival_or_after_its_poll_time(broker: BrokerUnderTest) -> None:
    b = broker
    await create_topic(b, TOPIC, 2)
    started = time.monotonic()
    resp = await b.call(notification_request(poll_ms=500))
    assert resp.code == ResponseCode.SUCCESS
    assert resp.ext_fields == {"hasMsg": "false", "pollingFull": "false"}
    assert time.monotonic() - started >= 0.45
    # A message arriving while it waits answers it at once.
    started = time.monotonic()
    waiting = b.call(notification_request(queue_id=1, poll_ms=5000), timeout=10)
    await sleep(0.2)
    other = RemotingClient(reactor)
    try:
        req = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, send_header(TOPIC, {}, 1), b"x")
        assert (await other.invoke(b.addr, req, 5)).code == ResponseCode.SUCCESS
    finally:
        await other.close()
    resp = await waiting
    assert resp.ext_fields == {"hasMsg": "true", "pollingFull": "false"}
    assert time.monotonic() - started < 3
    # Now there is one: answered at once; an orderly notification of a held queue says there is none.
    assert (await b.call(notification_request(queue_id=1, poll_ms=0))).ext_fields["hasMsg"] == "true"
    await pop(b, queue_id=1)
    resp = await b.call(notification_request(queue_id=1, poll_ms=0, order=True))
    assert resp.ext_fields["hasMsg"] == "false"
    # One held on a blocked queue is answered when the batch turns visible again.
    await fill(b, 0, ["y"])
    assert (await pop(b, queue_id=0, invisible_ms=800)).bodies() == ["y"]
    resp = await b.call(notification_request(queue_id=0, poll_ms=0, order=True))
    assert resp.ext_fields["hasMsg"] == "false"
    started = time.monotonic()
    resp = await b.call(notification_request(queue_id=0, poll_ms=5000, order=True), timeout=10)
    assert resp.ext_fields["hasMsg"] == "true" and time.monotonic() - started < 2.5


@pytest_twisted.ensureDeferred
async def test_our_client_pops_orderly_with_reconsume_times_and_acks_by_pop_ck(
    broker: BrokerUnderTest, remoting: RemotingClient
) -> None:
    b = broker
    await create_topic(b, TOPIC, 2)
    await fill(b, 0, ["a0", "a1"])
    await fill(b, 1, ["b0"])
    api = MQClientAPI(remoting, ["127.0.0.1:9"])

    async def pop_orderly() -> list[MessageExt]:
        header = PopMessageRequestHeader.decode(pop_request(invisible_ms=1000).ext_fields or {})
        return (await api.pop_message(b.addr, "broker-a", header, 5.0)).messages

    first = await pop_orderly()
    assert sorted(m.body.decode() for m in first) == ["a0", "a1", "b0"]
    assert {m.reconsume_times for m in first} == {0}
    # Queue 1's message acked by its POP_CK (batch ack of an orderly pop); queue 0's left to come back.
    b0 = next(m for m in first if m.queue_id == 1)
    info = ExtraInfo.parse(b0.properties[PROPERTY_POP_CK])
    assert info.revive_qid == 999
    batch = BatchAck(GROUP, TOPIC, "0", 0, 1, 999, info.pop_time, info.invisible_time, frozenset({0}))
    await api.batch_ack_message(b.addr, BatchAckMessageRequestBody("broker-a", [batch]))
    await sleep(1.1)
    again = await pop_orderly()
    assert [(m.body.decode(), m.reconsume_times) for m in again] == [("a0", 1), ("a1", 1)]
    for m in again:
        await api.ack_message(b.addr, GROUP, TOPIC, m.properties[PROPERTY_POP_CK])
    assert b.controller is not None
    assert b.controller.offsets.query_offset(GROUP, TOPIC, 0) == 2
    assert b.controller.offsets.query_offset(GROUP, TOPIC, 1) == 1


HOSTILE_NAMES = ["../../x", "x\n", "x y", ""]


@pytest_twisted.ensureDeferred
async def test_hostile_names_are_refused_where_decoded(broker: BrokerUnderTest) -> None:
    b = broker
    await create_topic(b, TOPIC, 1)
    for bad in HOSTILE_NAMES:
        for field in ("topic", "consumerGroup"):
            for code, ext in (
                (RequestCode.PEEK_MESSAGE, peek_request().ext_fields),
                (RequestCode.NOTIFICATION, notification_request(poll_ms=0).ext_fields),
                (RequestCode.POLLING_INFO, PollingInfoRequestHeader(GROUP, TOPIC, 0).encode()),
            ):
                resp = await b.call(RemotingCommand.request(code, {**(ext or {}), field: bad}))
                assert resp.code == ResponseCode.INVALID_PARAMETER, (code, field, bad, resp.remark)
            body = {"topic": TOPIC, "consumerGroup": GROUP, "clientId": "c", "strategyName": "AVG", "mode": "POP"}
            for code in (RequestCode.QUERY_ASSIGNMENT, RequestCode.SET_MESSAGE_REQUEST_MODE):
                resp = await b.call(RemotingCommand.request(code, body=orjson.dumps({**body, field: bad})))
                assert resp.code == ResponseCode.INVALID_PARAMETER, (code, field, bad, resp.remark)
    assert b.controller is not None and b.controller.request_modes.table == {}


def test_acl_needs_sub_on_group_and_topic() -> None:
    """With aclEnable, peeks, notifications and polling-info requests need SUB on their group and topic (5.x's
    @RocketMQResource fields); QUERY_ASSIGNMENT and SET_MESSAGE_REQUEST_MODE carry no header and need none,
    as in 5.3.3."""
    for request in (
        peek_request(),
        notification_request(),
        RemotingCommand.request(RequestCode.POLLING_INFO, PollingInfoRequestHeader(GROUP, TOPIC, 0).encode()),
    ):
        assert PlainAccessValidator.needed_resources(request) == {f"%RETRY%{GROUP}": SUB, TOPIC: SUB}
    assert PlainAccessValidator.needed_resources(RemotingCommand.request(RequestCode.QUERY_ASSIGNMENT, {})) == {}
