"""Hostile topic and group names, replayed through every request code that carries one (issue 8 items 2, 3, 10).

Each name is refused with INVALID_PARAMETER (29) and 5.x's remark where it is decoded; nothing is created
or removed outside the store; the broker keeps serving.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import pytest_twisted

from gateway.broker.config import load_broker_config
from gateway.config import ConfigError
from gateway.remoting.client import RemotingClient
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import (
    ConsumerSendMsgBackRequestHeader,
    CreateTopicRequestHeader,
    PullMessageRequestHeader,
    SendMessageRequestHeader,
)
from tests.broker.conftest import BrokerUnderTest, sleep
from tests.broker.test_broker_server import create_topic, send

MARK = "pwned_by_name"
TMP = tempfile.gettempdir()  # where an escaping name would most likely land
HOSTILE = [
    f"../../../../../..{TMP}/{MARK}",
    f"../../{MARK}",
    f"{MARK}/../../x",
    f"{MARK}\n",  # Python's `$` matches before a trailing newline
    f"{MARK} x",
    f"{MARK}\x00",
    "..",
    "",
    MARK * 20,  # too long for a topic and a group
]


def _header(code: int, names: dict[str, str]) -> dict[str, str]:
    """A well-formed header of ``code`` with the given topic/group fields set."""
    topic = names.get("topic", "Legal_Topic")
    group = names.get("group", "Legal_Group")
    if code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2):
        h = SendMessageRequestHeader(group, topic, names.get("default", "TBW102"), 4, 0, 0, 1, 0, "")
        return h.encode_v2() if code == RequestCode.SEND_MESSAGE_V2 else h.encode()
    if code == RequestCode.PULL_MESSAGE:
        return PullMessageRequestHeader(group, topic, 0, 0, 32, 0x4, 0, 0, "*", 0, "TAG").encode()
    if code == RequestCode.CONSUMER_SEND_MSG_BACK:
        return ConsumerSendMsgBackRequestHeader(0, group, -1, origin_topic=names.get("origin")).encode()
    if code == RequestCode.UPDATE_AND_CREATE_TOPIC:
        return CreateTopicRequestHeader(topic, names.get("default", "TBW102"), 1, 1, 6, "SINGLE_TAG").encode()
    return {
        "topic": topic,
        "consumerGroup": group,
        "producerGroup": group,
        "groupName": group,
        "group": group,
        "queueId": "0",
        "commitOffset": "0",
        "timestamp": "0",
        "key": "k",
        "maxNum": "1",
        "beginTimestamp": "0",
        "endTimestamp": "1",
        "clientID": "c",
        "tranStateTableOffset": "0",
        "commitLogOffset": "0",
        "commitOrRollback": "0",
        "msgId": "m",
    }


# (request code, which names it carries)
BROKER_CODES = [
    (RequestCode.SEND_MESSAGE, ("topic", "group", "default")),
    (RequestCode.SEND_MESSAGE_V2, ("topic", "group", "default")),
    (RequestCode.PULL_MESSAGE, ("topic", "group")),
    (RequestCode.QUERY_CONSUMER_OFFSET, ("topic", "group")),
    (RequestCode.UPDATE_CONSUMER_OFFSET, ("topic", "group")),
    (RequestCode.GET_MAX_OFFSET, ("topic",)),
    (RequestCode.GET_MIN_OFFSET, ("topic",)),
    (RequestCode.GET_EARLIEST_MSG_STORETIME, ("topic",)),
    (RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, ("topic",)),
    (RequestCode.UPDATE_AND_CREATE_TOPIC, ("topic", "default")),
    (RequestCode.DELETE_TOPIC_IN_BROKER, ("topic",)),
    (RequestCode.GET_TOPIC_STATS_INFO, ("topic",)),
    (RequestCode.GET_TOPIC_CONFIG, ("topic",)),
    (RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, ("topic",)),
    (RequestCode.GET_CONSUME_STATS, ("topic", "group")),
    (RequestCode.GET_CONSUMER_LIST_BY_GROUP, ("group",)),
    (RequestCode.GET_CONSUMER_CONNECTION_LIST, ("group",)),
    (RequestCode.GET_PRODUCER_CONNECTION_LIST, ("group",)),
    (RequestCode.DELETE_SUBSCRIPTIONGROUP, ("group",)),
    (RequestCode.UNREGISTER_CLIENT, ("group",)),
    (RequestCode.CONSUMER_SEND_MSG_BACK, ("group", "origin")),
    (RequestCode.QUERY_MESSAGE, ("topic",)),
    (RequestCode.END_TRANSACTION, ("group",)),
]
# Optional name fields: blank there means absent, as in Java.
OPTIONAL = {
    (RequestCode.GET_CONSUME_STATS, "topic"),
    (RequestCode.UNREGISTER_CLIENT, "group"),
    (RequestCode.CONSUMER_SEND_MSG_BACK, "origin"),
}


def _escaped(root: Path) -> list[str]:
    """Files or directories named after MARK anywhere they could land: the test's tree and the temp dir."""
    found = [str(p) for p in root.rglob(f"*{MARK}*")]
    found += [e.path for e in os.scandir(TMP) if MARK in e.name]
    return found


@pytest_twisted.ensureDeferred
async def test_every_broker_code_refuses_hostile_names(broker: BrokerUnderTest, tmp_path: Path) -> None:
    await create_topic(broker, "Legal_Topic", 2)
    before = set((tmp_path / "store").rglob("*"))
    for code, carried in BROKER_CODES:
        for field in carried:
            for bad in HOSTILE:
                if bad == "" and (code, field) in OPTIONAL:
                    continue  # an optional field left blank is simply absent
                req = RemotingCommand.request(code, _header(code, {field: bad}))
                resp = await broker.call(req)
                assert resp.code == ResponseCode.INVALID_PARAMETER, (code, field, bad, resp)
                assert "specified" in resp.remark and ("topic" in resp.remark or "group" in resp.remark)
                assert "\n" not in resp.remark and "\x00" not in resp.remark
    assert _escaped(tmp_path) == []
    assert set((tmp_path / "store").rglob("*")) - before == set(), "a refused request left files in the store"
    resp = await send(broker, "Legal_Topic", b"still serving", {})
    assert resp.code == ResponseCode.SUCCESS


@pytest_twisted.ensureDeferred
async def test_send_back_with_traversing_group_creates_nothing(broker: BrokerUnderTest, tmp_path: Path) -> None:
    # The attack: %DLQ% + group became a directory path, and delayLevel=-1 sends straight to the DLQ.
    resp = await send(broker, "Legal_Topic", b"m", {})
    assert resp.code == ResponseCode.SUCCESS
    header = ConsumerSendMsgBackRequestHeader(0, f"../../../..{TMP}/{MARK}", -1).encode()
    resp = await broker.call(RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, header))
    assert resp.code == ResponseCode.INVALID_PARAMETER
    assert _escaped(tmp_path) == []
    assert not any(t.startswith("%DLQ%..") for t in broker.controller.topics.table)


@pytest_twisted.ensureDeferred
async def test_heartbeat_with_hostile_group_is_refused(broker: BrokerUnderTest, tmp_path: Path) -> None:
    from tests.broker.test_broker_server import heartbeat

    for bad in HOSTILE[:6]:
        resp = await broker.call(heartbeat("client-1", bad, "Legal_Topic"))
        assert resp.code == ResponseCode.INVALID_PARAMETER, (bad, resp)
        resp = await broker.call(heartbeat("client-1", "Legal_Group", bad))
        assert resp.code == ResponseCode.INVALID_PARAMETER, (bad, resp)
    assert _escaped(tmp_path) == []
    assert not any(MARK in g for g in broker.controller.groups.table)


RESERVED = [
    "SCHEDULE_TOPIC_XXXX",
    "TBW102",
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "SELF_TEST_TOPIC",
    "OFFSET_MOVED_EVENT",
    "BenchmarkTest",
    "RMQ_SYS_TRACE_TOPIC",
    "rmq_sys_wheel_timer",
    "DefaultCluster",
    "broker-a",
    "DefaultCluster_REPLY_TOPIC",
]


@pytest.mark.parametrize("code", [RequestCode.DELETE_TOPIC_IN_BROKER, RequestCode.UPDATE_AND_CREATE_TOPIC])
@pytest_twisted.ensureDeferred
async def test_system_topics_cannot_be_deleted_or_redefined(broker: BrokerUnderTest, code: int) -> None:
    topics = broker.controller.topics
    for topic in RESERVED:
        before = topics.select(topic)
        resp = await broker.call(RemotingCommand.request(code, _header(code, {"topic": topic})))
        assert resp.code == ResponseCode.INVALID_PARAMETER, (topic, resp)
        assert "conflict with system" in resp.remark
        assert topics.select(topic) == before


@pytest_twisted.ensureDeferred
async def test_delayed_message_survives_an_attempt_to_delete_the_schedule_topic(make_broker) -> None:
    b = make_broker(messageDelayLevel="1s 2s")
    b.start()
    try:
        await create_topic(b, "Delayed", 1)
        resp = await send(b, "Delayed", b"later", {"DELAY": "1"})
        assert resp.code == ResponseCode.SUCCESS
        req = RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "SCHEDULE_TOPIC_XXXX"})
        assert (await b.call(req)).code == ResponseCode.INVALID_PARAMETER
        # TBW102 too: auto-creation keeps working.
        req = RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "TBW102"})
        assert (await b.call(req)).code == ResponseCode.INVALID_PARAMETER
        assert (await send(b, "AutoCreated", b"x", {})).code == ResponseCode.SUCCESS
        for _ in range(60):
            if b.controller.store.get_max_offset_in_queue("Delayed", 0) == 1:
                break
            await sleep(0.1)
        assert b.controller.store.get_max_offset_in_queue("Delayed", 0) == 1, "the delayed message was lost"
    finally:
        await b.stop()


@pytest_twisted.ensureDeferred
async def test_newline_topic_is_refused_on_send_and_create(broker: BrokerUnderTest) -> None:
    resp = await send(broker, "abc\n", b"x", {})
    assert resp.code == ResponseCode.INVALID_PARAMETER
    assert resp.ext_fields.get("MSG_REGION") == "DefaultRegion"  # send answers carry the region, errors too
    req = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, _header(17, {"topic": "abc\n"}))
    assert (await broker.call(req)).code == ResponseCode.INVALID_PARAMETER
    assert broker.controller.topics.select("abc\n") is None and broker.controller.topics.select("abc") is None


@pytest_twisted.ensureDeferred
async def test_offsets_only_for_known_topics_and_queues(broker: BrokerUnderTest) -> None:
    await create_topic(broker, "Two", 2)
    offsets = broker.controller.offsets.offset_table

    async def commit(topic: str, queue_id: int) -> int:
        ext = {"consumerGroup": "cg", "topic": topic, "queueId": str(queue_id), "commitOffset": "5"}
        return (await broker.call(RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, ext))).code

    assert await commit("Two", 1) == ResponseCode.SUCCESS
    assert await commit("NoSuchTopic", 0) == ResponseCode.TOPIC_NOT_EXIST
    assert await commit("Two", 2) == ResponseCode.INVALID_PARAMETER
    assert await commit("Two", 2**31 - 1) == ResponseCode.INVALID_PARAMETER
    assert await commit("Two", -1) == ResponseCode.INVALID_PARAMETER
    assert set(offsets) == {"Two@cg"} and offsets["Two@cg"] == {1: 5}


@pytest_twisted.ensureDeferred
async def test_namesrv_refuses_hostile_topics(namesrv, addr: str) -> None:
    client = RemotingClient()
    try:
        for code in (RequestCode.GET_ROUTEINFO_BY_TOPIC, RequestCode.DELETE_TOPIC_IN_NAMESRV):
            for bad in HOSTILE:
                resp = await client.invoke(addr, RemotingCommand.request(code, {"topic": bad}), 5)
                assert resp.code == ResponseCode.INVALID_PARAMETER, (code, bad, resp)
        resp = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}), 5)
        assert resp.code == ResponseCode.TOPIC_NOT_EXIST
    finally:
        await client.close()


def test_broker_and_cluster_names_are_checked_at_load(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=../b\n")
    with pytest.raises(ConfigError, match=r"broker.conf: key brokerName: .*illegal characters"):
        load_broker_config(str(conf))
    with pytest.raises(ConfigError, match="command line: key brokerClusterName"):
        load_broker_config(None, {"brokerClusterName": "a b"})
