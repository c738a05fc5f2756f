"""No single request runs unbounded work on the reactor (issue 8 item 4): queue counts are capped and the
heavy statistics requests run in slices, so other clients keep being answered."""

from __future__ import annotations

import orjson
import pytest_twisted
from twisted.internet.defer import DeferredList

from gateway.remoting import fastjson
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import CreateTopicRequestHeader
from tests.broker.conftest import BrokerUnderTest


def _create(topic: str, read: int, write: int) -> RemotingCommand:
    h = CreateTopicRequestHeader(topic, "TBW102", read, write, 6, "SINGLE_TAG")
    return RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, h.encode())


@pytest_twisted.ensureDeferred
async def test_queue_counts_are_capped(broker: BrokerUnderTest) -> None:
    for read, write in ((2**31 - 1, 2**31 - 1), (1, 1025), (1025, 1), (-1, 1), (1, -5)):
        resp = await broker.call(_create("Huge", read, write))
        assert resp.code == ResponseCode.INVALID_PARAMETER and "maxTopicQueueNums" in resp.remark, resp
    assert broker.controller.topics.select("Huge") is None
    assert (await broker.call(_create("Huge", 1024, 1024))).code == ResponseCode.SUCCESS
    body = orjson.dumps({"groupName": "g1", "retryQueueNums": 1_000_000})
    resp = await broker.call(RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None, body))
    assert resp.code == ResponseCode.INVALID_PARAMETER and "retryQueueNums" in resp.remark
    assert "g1" not in broker.controller.groups.table


@pytest_twisted.ensureDeferred
async def test_the_cap_is_a_broker_setting(make_broker) -> None:
    b = make_broker(maxTopicQueueNums="4")
    b.start()
    try:
        assert (await b.call(_create("Five", 5, 5))).code == ResponseCode.INVALID_PARAMETER
        assert (await b.call(_create("Four", 4, 4))).code == ResponseCode.SUCCESS
    finally:
        await b.stop()


@pytest_twisted.ensureDeferred
async def test_other_clients_are_answered_while_topic_stats_run(broker: BrokerUnderTest) -> None:
    assert (await broker.call(_create("Wide", 1024, 1024))).code == ResponseCode.SUCCESS
    order: list[str] = []

    def record(resp: RemotingCommand, name: str) -> RemotingCommand:
        order.append(name)
        return resp

    stats = []
    for _ in range(8):
        req = RemotingCommand.request(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "Wide"})
        stats.append(broker.call(req, timeout=30).addCallback(record, "stats"))
    ping = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": "Wide", "queueId": "0"})
    pinged = broker.call(ping).addCallback(record, "ping")
    results = await DeferredList([*stats, pinged], fireOnOneErrback=True, consumeErrors=True)
    assert all(ok for ok, _ in results)
    # The ping went in after all eight stats requests and still did not wait for all of them.
    assert order.index("ping") < len(order) - 1, order
    table = fastjson.loads(results[0][1].body)["offsetTable"]
    assert len(table) == 1024 and {"topic": "Wide", "brokerName": "broker-a", "queueId": 1023} in list(table)
    ext = {"consumerGroup": "cg", "topic": "Wide", "queueId": "7", "commitOffset": "0"}
    assert (await broker.call(RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, ext))).code == 0
    req = RemotingCommand.request(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "cg"})
    stats = fastjson.loads((await broker.call(req)).body)
    assert stats["consumeTps"] == 0.0 and len(stats["offsetTable"]) == 1024
