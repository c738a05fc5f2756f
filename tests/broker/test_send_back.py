"""CONSUMER_SEND_MSG_BACK and %RETRY% sends: retry topic with delay level 3 + reconsumeTimes, dead letters."""

from __future__ import annotations

import pytest_twisted

from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import ConsumerSendMsgBackRequestHeader, SendMessageRequestHeader
from gateway.remoting.message import decode_offset_message_id, properties_to_string
from gateway.remoting.names import SCHEDULE_TOPIC

from .conftest import BrokerUnderTest
from .test_broker_server import create_topic, send
from .test_schedule import FAST_LEVELS, pull_all, wait_for


async def send_back(
    broker: BrokerUnderTest, offset: int, group: str, delay_level: int = 0, max_reconsume_times: int | None = None
) -> RemotingCommand:
    header = ConsumerSendMsgBackRequestHeader(
        offset=offset,
        group=group,
        delay_level=delay_level,
        origin_msg_id="ignored",
        origin_topic="Orig",
        max_reconsume_times=max_reconsume_times,
    )
    return await broker.call(RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, header.encode()))


@pytest_twisted.ensureDeferred
async def test_send_back_retries_with_growing_delay_then_dead_letters(make_broker) -> None:
    broker = make_broker(messageDelayLevel=FAST_LEVELS)
    broker.start()
    try:
        await create_topic(broker, "Orig", 1)
        sent = await send(broker, "Orig", b"fragile", {"TAGS": "tg", "UNIQ_KEY": "U1", "KEYS": "k"})
        first_id = sent.ext_fields["msgId"]
        offset = decode_offset_message_id(first_id)[1]
        resp = await send_back(broker, offset, "cg", max_reconsume_times=2)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        (parked,) = await pull_all(broker, SCHEDULE_TOPIC, 2)  # level 3 + 0 reconsumes
        assert parked.properties["REAL_TOPIC"] == "%RETRY%cg"
        (retry,) = await wait_for(broker, "%RETRY%cg", 1)
        assert retry.reconsume_times == 1 and retry.body == b"fragile" and retry.tags == "tg"
        assert retry.properties["RETRY_TOPIC"] == "Orig" and retry.properties["ORIGIN_MESSAGE_ID"] == first_id
        assert retry.properties["UNIQ_KEY"] == "U1" and "DELAY" not in retry.properties
        assert retry.born_timestamp == (await pull_all(broker, "Orig"))[0].born_timestamp

        # Second failure: the retry goes back with level 4, keeping its original topic and id.
        resp = await send_back(broker, retry.commitlog_offset, "cg", max_reconsume_times=2)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert len(await pull_all(broker, SCHEDULE_TOPIC, 3)) == 1
        second = (await wait_for(broker, "%RETRY%cg", 2))[1]
        assert second.reconsume_times == 2 and second.properties["RETRY_TOPIC"] == "Orig"
        assert second.properties["ORIGIN_MESSAGE_ID"] == first_id

        # reconsumeTimes reached the client's maximum: dead letter, at once.
        resp = await send_back(broker, second.commitlog_offset, "cg", max_reconsume_times=2)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        (dead,) = await pull_all(broker, "%DLQ%cg")
        assert dead.reconsume_times == 3 and dead.properties["RETRY_TOPIC"] == "Orig"
        assert "DELAY" not in dead.properties
        tc = broker.controller.topics.select("%DLQ%cg")
        assert (tc.read_queue_nums, tc.perm) == (1, 6)
    finally:
        await broker.stop()


@pytest_twisted.ensureDeferred
async def test_send_back_group_maximum_negative_level_and_errors(make_broker) -> None:
    broker = make_broker(messageDelayLevel=FAST_LEVELS, autoCreateSubscriptionGroup="false")
    broker.start()
    try:
        await create_topic(broker, "Orig2", 1)
        offset = decode_offset_message_id((await send(broker, "Orig2", b"x", {})).ext_fields["msgId"])[1]
        resp = await send_back(broker, offset, "unknown-group")
        assert resp.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
        group = "TOOLS_CONSUMER"  # exists on every broker
        resp = await send_back(broker, offset + 1, group)
        assert resp.code == ResponseCode.SYSTEM_ERROR and "look message by offset failed" in resp.remark
        resp = await send_back(broker, offset, group, delay_level=-1)
        assert resp.code == ResponseCode.SUCCESS
        assert len(await pull_all(broker, f"%DLQ%{group}", group=group)) == 1
        assert await pull_all(broker, f"%RETRY%{group}", group=group) == []
        # The group's retryMaxTimes (16) applies when the client names none.
        broker.controller.groups.table[group].retry_max_times = 0
        assert (await send_back(broker, offset, group)).code == ResponseCode.SUCCESS
        assert len(await pull_all(broker, f"%DLQ%{group}", group=group)) == 2
    finally:
        await broker.stop()


@pytest_twisted.ensureDeferred
async def test_client_resent_retry_message_goes_to_dlq_after_its_maximum(broker: BrokerUnderTest) -> None:
    """Java's fallback: the client sends to %RETRY% itself with reconsumeTimes/maxReconsumeTimes in the header."""

    async def resend(reconsume: int) -> RemotingCommand:
        header = SendMessageRequestHeader(
            producer_group="CLIENT_INNER_PRODUCER",
            topic="%RETRY%cg3",
            default_topic="TBW102",
            default_topic_queue_nums=4,
            queue_id=0,
            sys_flag=0,
            born_timestamp=1,
            flag=0,
            properties=properties_to_string({"RETRY_TOPIC": "T", "DELAY": "3"}),
            reconsume_times=reconsume,
            max_reconsume_times=3,
        )
        return await broker.call(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header.encode_v2(), b"r"))

    assert (await resend(2)).code == ResponseCode.SUCCESS
    assert len(await pull_all(broker, SCHEDULE_TOPIC, 2)) == 1
    resp = await resend(3)
    assert resp.code == ResponseCode.SUCCESS
    (dead,) = await pull_all(broker, "%DLQ%cg3")
    assert "DELAY" not in dead.properties and dead.properties["RETRY_TOPIC"] == "T"


@pytest_twisted.ensureDeferred
async def test_retry_parked_across_a_restart_comes_back_once(make_broker) -> None:
    broker = make_broker(messageDelayLevel=FAST_LEVELS)
    broker.start()
    await create_topic(broker, "OrigRestart", 1)
    sent = await send(broker, "OrigRestart", b"again", {})
    resp = await send_back(broker, decode_offset_message_id(sent.ext_fields["msgId"])[1], "cgr")
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    await broker.stop()  # level 3 (3 s) is not up yet
    broker.start()
    try:
        (retry,) = await wait_for(broker, "%RETRY%cgr", 1)
        assert retry.body == b"again" and retry.reconsume_times == 1
        await broker.stop()
        broker.start()
        await wait_for(broker, "%RETRY%cgr", 2, timeout=1.0)
        assert len(await pull_all(broker, "%RETRY%cgr")) == 1, "delivered twice"
    finally:
        await broker.stop()
