"""PullMessage, UpdateOffset, GetOffset and QueryOffset through the gRPC endpoint of a real broker (grpcio client)."""

from __future__ import annotations

import time
from typing import Any

import pytest_twisted
from twisted.internet.threads import deferToThread

from gateway.proxy.v2 import definition_pb2 as pb
from gateway.proxy.v2 import service_pb2 as spb
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from tests.client.conftest import sleep
from tests.proxy import test_service
from tests.proxy.test_service import SERVICE, Proxy, message

proxy = test_service.proxy  # the module's broker with its gRPC endpoint

GROUP = pb.Resource(name="OffsetGroup")


def queue(topic: str, queue_id: int = 0, broker: str = "broker-a") -> pb.MessageQueue:
    return pb.MessageQueue(topic=pb.Resource(name=topic), id=queue_id, broker=pb.Broker(name=broker))


async def pull(proxy: Proxy, request: spb.PullMessageRequest) -> tuple[pb.Status, list[pb.Message], int | None]:
    """The stream's status, messages and next offset."""
    fn = proxy.channel.unary_stream(
        SERVICE + "PullMessage", spb.PullMessageRequest.SerializeToString, spb.PullMessageResponse.FromString
    )

    def run() -> list[Any]:
        return list(fn(request, timeout=10, metadata=[("x-mq-client-id", "pull-client")]))

    responses = await deferToThread(run)
    status, messages, next_offset = None, [], None
    for r in responses:
        which = r.WhichOneof("content")
        if which == "status":
            status = r.status
        elif which == "message":
            messages.append(r.message)
        else:
            next_offset = r.next_offset
    return status, messages, next_offset


async def send(proxy: Proxy, topic: str, tag: str, key: str) -> None:
    msg = message(topic, tag=tag, keys=[key])
    msg.user_properties["color"] = "red"
    response = await proxy.call("SendMessage", spb.SendMessageRequest(messages=[msg]), spb.SendMessageResponse)
    assert response.status.code == pb.Code.OK


@pytest_twisted.ensureDeferred
async def test_pull_a_queue_by_offset(proxy: Proxy) -> None:
    topic = await proxy.topic(queues=1)
    before = int(time.time() * 1000)
    for i, tag in enumerate("AAB"):
        await send(proxy, topic, tag, f"k{i}")
    mq = queue(topic)

    status, messages, next_offset = await pull(
        proxy, spb.PullMessageRequest(group=GROUP, message_queue=mq, offset=0, batch_size=10)
    )
    assert status.code == pb.Code.OK and next_offset == 3
    assert [m.system_properties.queue_offset for m in messages] == [0, 1, 2]
    assert [m.system_properties.tag for m in messages] == ["A", "A", "B"]
    assert list(messages[2].system_properties.keys) == ["k2"] and messages[2].body == b"body"
    assert dict(messages[0].user_properties) == {"color": "red"}
    assert messages[0].system_properties.delivery_attempt == 1

    by_tag = pb.FilterExpression(type=pb.FilterType.TAG, expression="B")
    status, messages, next_offset = await pull(
        proxy, spb.PullMessageRequest(group=GROUP, message_queue=mq, offset=0, batch_size=10, filter_expression=by_tag)
    )
    assert status.code == pb.Code.OK and [m.system_properties.tag for m in messages] == ["B"] and next_offset == 3

    status, messages, next_offset = await pull(
        proxy, spb.PullMessageRequest(group=GROUP, message_queue=mq, offset=1, batch_size=1)
    )
    assert status.code == pb.Code.OK and [m.system_properties.queue_offset for m in messages] == [1]
    assert next_offset == 2

    # At the end: nothing yet, continue at the end (a short long polling ends without a message).
    request = spb.PullMessageRequest(group=GROUP, message_queue=mq, offset=3, batch_size=10)
    request.long_polling_timeout.FromMilliseconds(200)
    status, messages, next_offset = await pull(proxy, request)
    assert status.code == pb.Code.MESSAGE_NOT_FOUND and messages == [] and next_offset == 3

    # Past the end: the broker's offset to go on from.
    status, messages, next_offset = await pull(
        proxy, spb.PullMessageRequest(group=GROUP, message_queue=mq, offset=100, batch_size=10)
    )
    assert status.code == pb.Code.ILLEGAL_OFFSET and messages == [] and next_offset == 3

    status, _, next_offset = await pull(
        proxy, spb.PullMessageRequest(group=GROUP, message_queue=mq, offset=-1, batch_size=10)
    )
    assert status == pb.Status(code=pb.Code.ILLEGAL_OFFSET, message="illegal offset -1") and next_offset is None

    status, _, _ = await pull(
        proxy, spb.PullMessageRequest(group=GROUP, message_queue=queue(topic, broker="nobody"), offset=0, batch_size=1)
    )
    assert status.code == pb.Code.TOPIC_NOT_FOUND

    async def query(policy: int, at_ms: int | None = None) -> spb.QueryOffsetResponse:
        request = spb.QueryOffsetRequest(message_queue=mq, query_offset_policy=policy)
        if at_ms is not None:
            request.timestamp.FromMilliseconds(at_ms)
        return await proxy.call("QueryOffset", request, spb.QueryOffsetResponse)

    assert (await query(pb.QueryOffsetPolicy.BEGINNING)).offset == 0
    assert (await query(pb.QueryOffsetPolicy.END)).offset == 3
    assert (await query(pb.QueryOffsetPolicy.TIMESTAMP, before - 60_000)).offset == 0
    missing = await query(pb.QueryOffsetPolicy.TIMESTAMP)
    assert missing.status.code == pb.Code.BAD_REQUEST


@pytest_twisted.ensureDeferred
async def test_update_and_get_a_group_offset(proxy: Proxy) -> None:
    topic = await proxy.topic(queues=2)
    for i in range(3):
        await send(proxy, topic, "A", f"k{i}")
    mq = queue(topic, 1)

    async def get() -> spb.GetOffsetResponse:
        return await proxy.call("GetOffset", spb.GetOffsetRequest(group=GROUP, message_queue=mq), spb.GetOffsetResponse)

    async def update(offset: int) -> spb.UpdateOffsetResponse:
        request = spb.UpdateOffsetRequest(group=GROUP, message_queue=mq, offset=offset)
        return await proxy.call("UpdateOffset", request, spb.UpdateOffsetResponse)

    assert (await get()).status.code == pb.Code.OFFSET_NOT_FOUND
    assert (await update(1)).status.code == pb.Code.OK
    answer = await get()
    assert answer.status.code == pb.Code.OK and answer.offset == 1
    assert (await update(-5)).status.code == pb.Code.ILLEGAL_OFFSET
    assert (await get()).offset == 1
    bad_group = spb.GetOffsetRequest(group=pb.Resource(name="bad group!"), message_queue=mq)
    assert (await proxy.call("GetOffset", bad_group, spb.GetOffsetResponse)).status.code == (
        pb.Code.ILLEGAL_CONSUMER_GROUP
    )


async def set_broker_config(proxy: Proxy, line: str) -> None:
    """UPDATE_BROKER_CONFIG, as mqadmin updateBrokerConfig sends it."""
    request = RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG, None, line.encode())
    response = await proxy.admin.client.api.remoting.invoke(proxy.broker_addr, request, 5)
    assert response.code == ResponseCode.SUCCESS


async def recall(proxy: Proxy, topic: str, handle: str) -> spb.RecallMessageResponse:
    request = spb.RecallMessageRequest(topic=pb.Resource(name=topic), recall_handle=handle)
    return await proxy.call("RecallMessage", request, spb.RecallMessageResponse)


@pytest_twisted.ensureDeferred
async def test_a_recalled_delayed_message_is_never_delivered(proxy: Proxy) -> None:
    topic = await proxy.topic(queues=1)
    due_ms = int(time.time() * 1000) + 4000  # the recall below must come before it, on a loaded machine too
    sent = {}
    for name in ("recalled", "kept", "now"):
        msg = message(topic, tag=name)
        if name != "now":
            msg.system_properties.delivery_timestamp.FromMilliseconds(due_ms)
        response = await proxy.call("SendMessage", spb.SendMessageRequest(messages=[msg]), spb.SendMessageResponse)
        [entry] = response.entries
        assert entry.status.code == pb.Code.OK
        sent[name] = entry
    assert sent["recalled"].recall_handle and sent["kept"].recall_handle
    assert sent["now"].recall_handle == ""  # only a message waiting for its time can be recalled
    handle = sent["recalled"].recall_handle

    # Off by default, as in Apache.
    refused = await recall(proxy, topic, handle)
    assert refused.status.code != pb.Code.OK and refused.status.message == "recall failed, operation is forbidden"
    await set_broker_config(proxy, "recallMessageEnable=true\n")
    try:
        bad = await recall(proxy, topic, "bm90IGEgaGFuZGxl")
        assert bad.status == pb.Status(code=pb.Code.BAD_REQUEST, message="recall handle is invalid")
        other = await proxy.topic(queues=1)
        mismatch = await recall(proxy, other, handle)
        assert mismatch.status.code != pb.Code.OK and mismatch.status.message == "recall failed, topic not match"
        answer = await recall(proxy, topic, handle)
        assert answer.status.code == pb.Code.OK and answer.message_id == sent["recalled"].message_id
    finally:
        await set_broker_config(proxy, "recallMessageEnable=false\n")

    # The kept one arrives after its time; the recalled one (and its marker) never does.
    tags: list[str] = []
    offset = 0
    deadline = time.monotonic() + 15
    while "kept" not in tags and time.monotonic() < deadline:
        _, messages, next_offset = await pull(
            proxy, spb.PullMessageRequest(group=GROUP, message_queue=queue(topic), offset=offset, batch_size=10)
        )
        tags += [m.system_properties.tag for m in messages]
        offset = next_offset if next_offset is not None else offset
        await sleep(0.2)
    assert "kept" in tags
    assert int(time.time() * 1000) > due_ms + 1
    await sleep(1.0)  # a later timer pass delivers nothing more
    _, messages, _ = await pull(
        proxy, spb.PullMessageRequest(group=GROUP, message_queue=queue(topic), offset=offset, batch_size=10)
    )
    tags += [m.system_properties.tag for m in messages]
    assert sorted(tags) == ["kept", "now"]
    # Too late: the handle's time has passed.
    await set_broker_config(proxy, "recallMessageEnable=true\n")
    try:
        late = await recall(proxy, topic, sent["kept"].recall_handle)
        assert late.status.message == "recall failed, timestamp invalid"
    finally:
        await set_broker_config(proxy, "recallMessageEnable=false\n")
