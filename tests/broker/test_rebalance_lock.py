"""LOCK_BATCH_MQ / UNLOCK_BATCH_MQ: one holder per queue, renewal, expiry, unlock only by the holder."""

from __future__ import annotations

import pytest_twisted

from gateway.broker.rebalance_lock import RebalanceLockManager
from gateway.remoting import fastjson
from gateway.remoting.bodies import LockBatchRequestBody, LockBatchResponseBody, MessageQueue
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand

from .conftest import sleep

Q = [MessageQueue("Ordered", "broker-a", i) for i in range(4)]


def test_lock_manager_rules() -> None:
    now = [0]
    locks = RebalanceLockManager(60000, clock=lambda: now[0])
    assert locks.try_lock_batch("g", Q[:2], "A") == {Q[0], Q[1]}
    assert locks.try_lock_batch("g", Q[1:3], "B") == {Q[2]}
    assert locks.try_lock_batch("other-group", Q[:1], "B") == {Q[0]}  # groups lock apart
    locks.unlock_batch("g", [Q[0], Q[2]], "A")  # only A's own lock goes
    assert locks.try_lock_batch("g", Q[:3], "B") == {Q[0], Q[2]}
    now[0] = 59000
    assert locks.try_lock_batch("g", [Q[1]], "A") == {Q[1]}  # A renews Q1
    now[0] = 60001  # B took Q0 and Q2 at 0 and never renewed them
    assert locks.try_lock_batch("g", Q[:3], "C") == {Q[0], Q[2]}
    now[0] = 119000
    assert locks.try_lock_batch("g", [Q[1]], "C") == set()
    now[0] = 119001
    assert locks.try_lock_batch("g", [Q[1]], "C") == {Q[1]}


def _body(group: str, client: str, mqs: list[MessageQueue]) -> bytes:
    return fastjson.dumps(LockBatchRequestBody(group, client, mqs))


@pytest_twisted.ensureDeferred
async def test_lock_requests_over_the_wire(make_broker) -> None:
    b = make_broker(rebalanceLockMaxLiveTime="400")
    b.start()
    try:

        async def lock(client: str, mqs: list[MessageQueue]) -> list[MessageQueue]:
            resp = await b.call(RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, body=_body("og", client, mqs)))
            assert resp.code == ResponseCode.SUCCESS
            return sorted(LockBatchResponseBody.from_json(fastjson.loads(resp.body)).lock_ok_mq_set)

        async def unlock(client: str, mqs: list[MessageQueue]) -> None:
            resp = await b.call(RemotingCommand.request(RequestCode.UNLOCK_BATCH_MQ, body=_body("og", client, mqs)))
            assert resp.code == ResponseCode.SUCCESS

        assert await lock("A", Q[:2]) == Q[:2]
        assert await lock("B", Q[1:3]) == [Q[2]]
        await unlock("B", [Q[1]])  # not B's: nothing happens
        assert await lock("B", [Q[1]]) == []
        await unlock("A", [Q[1]])
        assert await lock("B", [Q[1]]) == [Q[1]]
        # A stops renewing Q0; once its lock is older than lockMaxLiveTime another member may take it.
        assert await lock("B", [Q[0]]) == []
        await sleep(0.5)
        assert await lock("B", [Q[0]]) == [Q[0]]
        # Java's wire form: {"lockOKMQSet":[{"brokerName":..,"queueId":..,"topic":..}]}.
        resp = await b.call(RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, body=_body("og", "B", [Q[0]])))
        assert resp.body == b'{"lockOKMQSet":[{"brokerName":"broker-a","queueId":0,"topic":"Ordered"}]}'
    finally:
        await b.stop()
