"""PullMessage, UpdateOffset, GetOffset and QueryOffset through the gRPC endpoint of a real broker (grpcio client)."""

from __future__ import annotations

import time
from typing import Any

import pytest_twisted
from twisted.internet.threads import deferToThread

from gateway.proxy.v2 import definition_pb2 as pb
from gateway.proxy.v2 import service_pb2 as spb
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
