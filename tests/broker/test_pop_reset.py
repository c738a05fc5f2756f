"""Resetting a POP group's offsets over remoting (mqadmin resetOffsetByTime: INVOKE_BROKER_TO_RESET_OFFSET while
the group is online, its fallback UPDATE_CONSUMER_OFFSET while it is not) moves the pop offset and drops what the
group had in flight and the orderly batch holding the queue, as Apache 5.3.3's server-side reset does
(PopInflightMessageCounter.clearInFlightMessageNum, ConsumerOrderInfoManager.clearBlock)."""

from __future__ import annotations

import re

import pytest_twisted

from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import UpdateConsumerOffsetRequestHeader

from .conftest import BrokerUnderTest
from .test_broker_server import create_topic, heartbeat
from .test_pop_fifo import GROUP, TOPIC, fill, pop


async def pop_inflight(b: BrokerUnderTest) -> int:
    """popInflight of the group's queue 0 as GET_CONSUME_STATS shows it (absent: none)."""
    request = RemotingCommand.request(RequestCode.GET_CONSUME_STATS, {"consumerGroup": GROUP, "topic": TOPIC})
    resp = await b.call(request)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    found = re.search(rb'"popInflight":(\d+)', resp.body)
    return int(found.group(1)) if found else 0


async def held_batch(b: BrokerUnderTest) -> None:
    """An orderly batch of the queue's three messages popped, unacked: the queue is held."""
    await create_topic(b, TOPIC, 1)
    await fill(b, 0, ["m0", "m1", "m2"])
    first = await pop(b, queue_id=0, invisible_ms=60000)
    assert first.bodies() == ["m0", "m1", "m2"]
    assert (await pop(b, queue_id=0, invisible_ms=60000)).messages == []
    assert await pop_inflight(b) == 3


@pytest_twisted.ensureDeferred
async def test_reset_of_an_online_pop_group_clears_its_inflight_and_orderly_block(broker: BrokerUnderTest) -> None:
    b = broker
    await held_batch(b)
    assert (await b.call(heartbeat("pop-client", GROUP, TOPIC))).code == ResponseCode.SUCCESS
    ext = {"topic": TOPIC, "group": GROUP, "timestamp": "0", "isForce": "true"}
    resp = await b.call(RemotingCommand.request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ext))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert await pop_inflight(b) == 0
    # Not held for the rest of the 60 s: the batch comes again from the reset offset, as a first delivery.
    again = await pop(b, queue_id=0, invisible_ms=60000)
    assert again.bodies() == ["m0", "m1", "m2"]
    assert [again.reconsume_times(m) for m in again.messages] == [0, 0, 0]
    assert await pop_inflight(b) == 3
    # To the end (-1): nothing left to pop, nothing in flight.
    resp = await b.call(RemotingCommand.request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {**ext, "timestamp": "-1"}))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert await pop_inflight(b) == 0
    assert (await pop(b, queue_id=0, invisible_ms=60000)).messages == []
    assert b.controller is not None and b.controller.offsets.query_offset(GROUP, TOPIC, 0) == 3


@pytest_twisted.ensureDeferred
async def test_reset_of_an_offline_pop_group_by_offset_update_clears_them_too(broker: BrokerUnderTest) -> None:
    b = broker
    await held_batch(b)
    ext = {"topic": TOPIC, "group": GROUP, "timestamp": "0", "isForce": "true"}
    resp = await b.call(RemotingCommand.request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ext))
    assert resp.code == ResponseCode.CONSUMER_NOT_ONLINE
    assert await pop_inflight(b) == 3  # refused: nothing changed
    # mqadmin's fallback: each queue's offset set directly.
    header = UpdateConsumerOffsetRequestHeader(consumer_group=GROUP, topic=TOPIC, queue_id=0, commit_offset=1)
    resp = await b.call(RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, header.encode()))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert await pop_inflight(b) == 0
    assert (await pop(b, queue_id=0, invisible_ms=60000)).bodies() == ["m1", "m2"]
    # The same offset committed again is no reset: the new batch keeps the queue.
    resp = await b.call(RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, header.encode()))
    assert resp.code == ResponseCode.SUCCESS
    assert await pop_inflight(b) == 2 and (await pop(b, queue_id=0, invisible_ms=60000)).messages == []
