"""SQL92 filtering on the broker: subscriptions compiled at heartbeat, CHECK_CLIENT_CONFIG, and pulls that
skip records whose properties do not match (both from the heartbeat's registry and from the pull header)."""

from __future__ import annotations

import orjson
import pytest_twisted
from twisted.internet import reactor

from gateway.remoting.bodies import ConsumerData, HeartbeatData, SubscriptionData
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import PullMessageRequestHeader, PullSysFlag
from gateway.remoting.message import decode_records

from .conftest import BrokerUnderTest, sleep
from .test_broker_server import create_topic, send


def sql_sub(topic: str, expression: str, version: int = 1000) -> SubscriptionData:
    sub = SubscriptionData.build(topic, expression, "SQL92")
    sub.sub_version = version
    return sub


def heartbeat(group: str, *subs: SubscriptionData) -> RemotingCommand:
    data = HeartbeatData("client-1", consumer_data_set=[ConsumerData(group, subscription_data_set=list(subs))])
    return RemotingCommand.request(RequestCode.HEART_BEAT, body=orjson.dumps(data.to_json()))


def pull(
    topic: str, offset: int, group: str, *, expression: str | None = None, suspend: bool = False, version: int = 0
) -> RemotingCommand:
    """A pull served from the heartbeat's subscription, or from ``expression`` (SQL92) in the header."""
    flag = (PullSysFlag.SUBSCRIPTION if expression is not None else 0) | (PullSysFlag.SUSPEND if suspend else 0)
    header = PullMessageRequestHeader(
        consumer_group=group,
        topic=topic,
        queue_id=0,
        queue_offset=offset,
        max_msg_nums=32,
        sys_flag=flag,
        commit_offset=0,
        suspend_timeout_millis=5000,
        subscription=expression,
        sub_version=version,
        expression_type="SQL92" if expression is not None else None,
    )
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, header.encode())


def check_config(expression: str, expression_type: str = "SQL92") -> RemotingCommand:
    sub = SubscriptionData.build("Any", expression, expression_type)
    body = {"clientId": "client-1", "group": "g", "subscriptionData": sub.to_json()}
    return RemotingCommand.request(RequestCode.CHECK_CLIENT_CONFIG, body=orjson.dumps(body))


async def fill(broker: BrokerUnderTest, topic: str, n: int) -> None:
    await create_topic(broker, topic, 1)
    for i in range(n):
        props = {"idx": str(i), "TAGS": f"T{i % 2}", "region": "eu" if i < n // 2 else "us"}
        assert (await send(broker, topic, f"m{i}".encode(), props)).code == ResponseCode.SUCCESS


def indexes(resp: RemotingCommand) -> list[int]:
    return [int(m.properties["idx"]) for m in decode_records(resp.body)]


@pytest_twisted.ensureDeferred
async def test_registered_expression_filters_pulls(make_broker) -> None:
    b = make_broker(enablePropertyFilter="true")
    b.start()
    try:
        await fill(b, "Sql", 10)
        resp = await b.call(heartbeat("gsql", sql_sub("Sql", "idx >= 3 AND TAGS = 'T1' OR region IS NULL")))
        assert resp.code == ResponseCode.SUCCESS
        resp = await b.call(pull("Sql", 0, "gsql"))
        assert resp.code == ResponseCode.SUCCESS
        assert indexes(resp) == [3, 5, 7, 9]
        assert resp.ext_fields["nextBeginOffset"] == "10" and resp.ext_fields["maxOffset"] == "10"
        # Nothing left matching from 8 on but 9; from 10 the queue is at its end.
        resp = await b.call(pull("Sql", 8, "gsql"))
        assert indexes(resp) == [9]
        # A new expression replaces the old one once its subVersion is newer; an older one is ignored.
        await b.call(heartbeat("gsql", sql_sub("Sql", "region = 'eu' AND idx BETWEEN 1 AND 2", 2000)))
        await b.call(heartbeat("gsql", sql_sub("Sql", "TRUE", 1500)))
        resp = await b.call(pull("Sql", 0, "gsql"))
        assert indexes(resp) == [1, 2]
        # No record matches: PULL_RETRY_IMMEDIATELY, and the consumer moves past what was scanned.
        resp = await b.call(pull("Sql", 5, "gsql"))
        assert resp.code == ResponseCode.PULL_RETRY_IMMEDIATELY and resp.ext_fields["nextBeginOffset"] == "10"
    finally:
        await b.stop()


@pytest_twisted.ensureDeferred
async def test_expression_in_pull_header(make_broker) -> None:
    b = make_broker(enablePropertyFilter="true")
    b.start()
    try:
        await fill(b, "SqlHdr", 6)
        resp = await b.call(pull("SqlHdr", 0, "ghdr", expression="idx IN ('0', '4') OR idx > 4"))
        assert resp.code == ResponseCode.SUCCESS and indexes(resp) == [0, 4, 5]
        resp = await b.call(pull("SqlHdr", 0, "ghdr", expression="idx >"))
        assert (resp.code, resp.remark) == (
            ResponseCode.SUBSCRIPTION_PARSE_FAILED,
            "parse the consumer's subscription failed",
        )
        # A held pull wakes for a matching arrival.
        started = reactor.seconds()
        held = b.call(pull("SqlHdr", 6, "ghdr", expression="idx = '100'", suspend=True), timeout=10)
        await sleep(0.2)
        await send(b, "SqlHdr", b"late", {"idx": "100"})
        resp = await held
        assert resp.code == ResponseCode.SUCCESS and indexes(resp) == [100]
        assert reactor.seconds() - started < 3
    finally:
        await b.stop()


@pytest_twisted.ensureDeferred
async def test_bad_expression_answers_as_apache(make_broker) -> None:
    b = make_broker(enablePropertyFilter="true")
    b.start()
    try:
        await fill(b, "SqlBad", 2)
        resp = await b.call(check_config("idx > 1 AND TAGS IN ('a')"))
        assert resp.code == ResponseCode.SUCCESS
        resp = await b.call(check_config("idx >> 1"))
        assert resp.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "Invalid MessageSelector" in resp.remark
        resp = await b.call(check_config("a BETWEEN 3 AND 1"))
        assert resp.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "Illegal values of between" in resp.remark
        resp = await b.call(check_config("TagA || TagB", "TAG"))
        assert resp.code == ResponseCode.SUCCESS
        # Apache accepts the heartbeat and logs the parse error; the group's pulls then report it.
        resp = await b.call(heartbeat("gbad", sql_sub("SqlBad", "idx >> 1")))
        assert resp.code == ResponseCode.SUCCESS
        resp = await b.call(pull("SqlBad", 0, "gbad"))
        assert resp.code == ResponseCode.FILTER_DATA_NOT_EXIST
        # A good expression later fixes it; a bad one after a good one removes it again.
        await b.call(heartbeat("gbad", sql_sub("SqlBad", "idx = 1", 2000)))
        assert indexes(await b.call(pull("SqlBad", 0, "gbad"))) == [1]
        await b.call(heartbeat("gbad", sql_sub("SqlBad", "idx = ", 3000)))
        assert (await b.call(pull("SqlBad", 0, "gbad"))).code == ResponseCode.FILTER_DATA_NOT_EXIST
    finally:
        await b.stop()


@pytest_twisted.ensureDeferred
async def test_property_filter_disabled(broker: BrokerUnderTest) -> None:
    await fill(broker, "SqlOff", 1)
    resp = await broker.call(check_config("idx = 1"))
    assert resp.code == ResponseCode.SYSTEM_ERROR and "does not support" in resp.remark
    await broker.call(heartbeat("goff", sql_sub("SqlOff", "idx = 0")))
    for request in (pull("SqlOff", 0, "goff"), pull("SqlOff", 0, "goff", expression="idx = 0")):
        resp = await broker.call(request)
        assert resp.code == ResponseCode.SYSTEM_ERROR and resp.remark.endswith("filter message by SQL92")
