"""Subscription groups (subscriptionGroup.json) and the group rules pulls obey; consumer offsets persisted
periodically and at shutdown, kept for groups that left."""

from __future__ import annotations

from typing import Any

import orjson
import pytest_twisted

from gateway.remoting import fastjson
from gateway.remoting.bodies import ConsumerData, HeartbeatData, MessageModel, SubscriptionData
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import GetSubscriptionGroupConfigRequestHeader

from .conftest import BrokerUnderTest, sleep
from .test_broker_server import create_topic, pull_request, send


def heartbeat(group: str, topic: str, model: MessageModel = MessageModel.CLUSTERING) -> RemotingCommand:
    consumer = ConsumerData(group, message_model=model, subscription_data_set=[SubscriptionData.build(topic, "*")])
    data = HeartbeatData("client-g", consumer_data_set=[consumer])
    return RemotingCommand.request(RequestCode.HEART_BEAT, body=orjson.dumps(data.to_json()))


async def update_group(broker: BrokerUnderTest, **settings: Any) -> None:
    # As mqadmin updateSubGroup sends it (5.x properties included, which 4.x ignores).
    body = {"groupName": "sg", "consumeEnable": True, "retryQueueNums": 1, "groupSysFlag": 0, "attributes": {}}
    body.update(settings)
    resp = await broker.call(
        RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=orjson.dumps(body))
    )
    assert resp.code == ResponseCode.SUCCESS, resp.remark


@pytest_twisted.ensureDeferred
async def test_group_settings_govern_pulls(broker: BrokerUnderTest) -> None:
    await create_topic(broker, "Grp", 1)
    await send(broker, "Grp", b"m", {})
    await update_group(broker, retryQueueNums=3, retryMaxTimes=5, consumeEnable=False)
    resp = await broker.call(RemotingCommand.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
    sg = fastjson.loads(resp.body)["subscriptionGroupTable"]["sg"]
    assert (sg["retryQueueNums"], sg["retryMaxTimes"], sg["consumeEnable"]) == (3, 5, False)
    assert (await broker.call(heartbeat("sg", "Grp"))).code == ResponseCode.SUCCESS
    assert broker.controller.topics.select("%RETRY%sg").read_queue_nums == 3
    resp = await broker.call(pull_request("Grp", 0, 0, group="sg"))
    assert resp.code == ResponseCode.NO_PERMISSION and resp.remark == "subscription group no permission, sg"
    await update_group(broker, consumeEnable=True, consumeBroadcastEnable=False)
    assert (await broker.call(pull_request("Grp", 0, 0, group="sg"))).code == ResponseCode.SUCCESS
    await broker.call(heartbeat("sg", "Grp", MessageModel.BROADCASTING))
    resp = await broker.call(pull_request("Grp", 0, 0, group="sg"))
    assert resp.code == ResponseCode.NO_PERMISSION and "can not consume by broadcast way" in resp.remark
    # With the subscription in the pull itself the broadcast check does not apply (as in Apache).
    assert (await broker.call(pull_request("Grp", 0, 0, group="sg", sub="*"))).code == ResponseCode.SUCCESS
    resp = await broker.call(RemotingCommand.request(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "sg"}))
    assert resp.code == ResponseCode.SUCCESS and "sg" not in broker.controller.groups.table


@pytest_twisted.ensureDeferred
async def test_groups_without_auto_create(make_broker) -> None:
    b = make_broker(autoCreateSubscriptionGroup="false")
    b.start()
    try:
        await create_topic(b, "NoAuto", 1)
        assert (await b.call(heartbeat("sg", "NoAuto"))).code == ResponseCode.SUCCESS
        assert b.controller.topics.select("%RETRY%sg") is None
        resp = await b.call(pull_request("NoAuto", 0, 0, group="sg"))
        assert resp.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST and "[sg] does not exist" in resp.remark
        await update_group(b)
        assert (await b.call(pull_request("NoAuto", 0, 0, group="sg"))).code == ResponseCode.PULL_NOT_FOUND
    finally:
        await b.stop()


def commit(offset: int) -> RemotingCommand:
    ext = {"consumerGroup": "sg", "topic": "Kept", "queueId": "0", "commitOffset": str(offset)}
    return RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, ext)


@pytest_twisted.ensureDeferred
async def test_groups_and_offsets_survive_restart(make_broker) -> None:
    b = make_broker(flushConsumerOffsetInterval="3600000")
    b.start()
    await create_topic(b, "Kept", 1)
    await update_group(b, retryMaxTimes=3)
    await b.call(heartbeat("sg", "Kept"))
    await b.call(commit(9))
    # The group leaves; its offsets stay and the shutdown writes them.
    unregister = RemotingCommand.request(RequestCode.UNREGISTER_CLIENT, {"clientID": "client-g", "consumerGroup": "sg"})
    assert (await b.call(unregister)).code == ResponseCode.SUCCESS
    assert b.controller.consumers.get("sg") is None
    port = b.controller.config.listenPort
    await b.stop()
    await sleep(0.1)
    b.overrides.update(listenPort=str(port), flushConsumerOffsetInterval="200")
    b.start()
    try:
        assert b.controller.groups.table["sg"].retry_max_times == 3
        query = {"consumerGroup": "sg", "topic": "Kept", "queueId": "0"}
        resp = await b.call(RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, query))
        assert resp.ext_fields["offset"] == "9"
        # Between restarts the periodic flush (flushConsumerOffsetInterval) writes new commits.
        await b.call(commit(11))
        offsets_file = b.root / "store" / "config" / "consumerOffset.json"
        for _ in range(50):
            if b'"Kept@sg":{0:11}' in offsets_file.read_bytes():
                break
            await sleep(0.05)
        else:
            raise AssertionError("consumer offsets were not flushed periodically")
    finally:
        await b.stop()


@pytest_twisted.ensureDeferred
async def test_5x_fifo_and_retry_policy_persisted(make_broker) -> None:
    b = make_broker()
    b.start()
    try:
        policy = {"type": "EXPONENTIAL", "exponentialRetryPolicy": {"initial": 1000, "max": 60000, "multiplier": 3}}
        await update_group(b, groupName="fifo5", consumeMessageOrderly=True, retryMaxTimes=2, groupRetryPolicy=policy)
        await update_group(b, groupName="plain4")
        # A negative delay would make the SDKs sleep a negative time: refused, the group unchanged.
        bad = {"groupName": "fifo5", "groupRetryPolicy": {"customizedRetryPolicy": {"next": [1000, -1]}}}
        resp = await b.call(
            RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=orjson.dumps(bad))
        )
        assert resp.code == ResponseCode.INVALID_PARAMETER and "'next': -1 must not be negative" in resp.remark
    finally:
        await b.stop()
    table = fastjson.loads((b.root / "store" / "config" / "subscriptionGroup.json").read_bytes())
    table = table["subscriptionGroupTable"]
    # fastjson's order, as 5.3.3 writes them; a group without 5.x settings keeps 4.9.8's fields only.
    assert list(table["fifo5"]) == [
        "brokerId",
        "consumeBroadcastEnable",
        "consumeEnable",
        "consumeFromMinEnable",
        "consumeMessageOrderly",
        "groupName",
        "groupRetryPolicy",
        "notifyConsumerIdsChangedEnable",
        "retryMaxTimes",
        "retryQueueNums",
        "whichBrokerWhenConsumeSlowly",
    ]
    assert table["fifo5"]["groupRetryPolicy"] == policy
    assert "consumeMessageOrderly" not in table["plain4"] and "groupRetryPolicy" not in table["plain4"]
    b.start()  # read back after a restart, and served to a 5.x proxy
    try:
        header = GetSubscriptionGroupConfigRequestHeader("fifo5")
        resp = await b.call(RemotingCommand.request(RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, header.encode()))
        served = fastjson.loads(resp.body)
        assert served["consumeMessageOrderly"] is True and served["retryMaxTimes"] == 2
        assert served["groupRetryPolicy"]["exponentialRetryPolicy"] == policy["exponentialRetryPolicy"]
    finally:
        await b.stop()
