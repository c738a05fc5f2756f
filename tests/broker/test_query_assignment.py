"""QUERY_ASSIGNMENT / SET_MESSAGE_REQUEST_MODE / GET_ALL_MESSAGE_REQUEST_MODE (Apache 5.3.3's
QueryAssignmentProcessor): a NameServer and a broker in this process; the expected bodies are written out as
Apache's fastjson writes them (alphabetical properties, enum names, nulls left out)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.logger import LogLevel, formatEvent, globalLogPublisher

from gateway.broker.config import load_broker_config
from gateway.broker.processors.query_assignment import allocate_for_pop
from gateway.client.rebalance import allocate_averagely, allocate_averagely_by_circle
from gateway.config import ConfigError
from gateway.remoting import fastjson
from gateway.remoting.bodies import (
    MessageModel,
    MessageQueue,
    MessageRequestMode,
    QueryAssignmentRequestBody,
    SetMessageRequestModeRequestBody,
)
from gateway.remoting.client import RemotingClient
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from tests.ha.test_slave_sync import Pair, make_pair
from tests.namesrv.conftest import namesrv, namesrv_config  # noqa: F401

from .conftest import BrokerUnderTest, sleep
from .test_broker_server import create_topic, heartbeat
from .test_pop_frames import java_request

TOPIC = "AssignTopic"
Q = [MessageQueue(TOPIC, "broker-a", i) for i in range(4)]


def test_allocation_strategies_as_java() -> None:
    cids = ["a", "b", "c"]
    assert [allocate_averagely(c, Q, cids) for c in cids] == [Q[0:2], Q[2:3], Q[3:4]]
    assert [allocate_averagely_by_circle(c, Q, cids) for c in cids] == [[Q[0], Q[3]], [Q[1]], [Q[2]]]
    assert allocate_averagely_by_circle("stranger", Q, cids) == []
    # allocate4Pop: share <= 0 or >= members - 1: every queue, as "any queue" (-1) of the broker.
    anyq = [MessageQueue(TOPIC, "broker-a", -1)] * 4
    assert allocate_for_pop(allocate_averagely, "a", Q, cids, -1) == anyq
    assert allocate_for_pop(allocate_averagely, "a", Q, cids, 2) == anyq
    # share 1 of 4 members: a's own queue and b's.
    four = ["a", "b", "c", "d"]
    assert allocate_for_pop(allocate_averagely, "a", Q, four, 1) == [Q[0], Q[1]]
    assert allocate_for_pop(allocate_averagely, "d", Q, four, 1) == [Q[3], Q[0]]
    # More members than queues: one queue each, round the queues.
    six = [*four, "e", "f"]
    assert allocate_for_pop(allocate_averagely, "f", Q, six, 1) == [Q[1]]


@pytest_twisted.async_yield_fixture
async def routed(tmp_path: Path, remoting: RemotingClient, namesrv) -> AsyncIterator[BrokerUnderTest]:  # noqa: F811
    b = BrokerUnderTest(tmp_path, remoting, namesrvAddr=f"127.0.0.1:{namesrv.port}")
    await b.start().when_ready()
    await create_topic(b, TOPIC, 4)
    yield b
    await b.stop()


def query(client_id: str, group: str = "qa_cg", strategy: str = "AVG", model: str = "CLUSTERING") -> RemotingCommand:
    body = QueryAssignmentRequestBody(TOPIC, group, client_id, strategy, MessageModel[model])
    return RemotingCommand.request(RequestCode.QUERY_ASSIGNMENT, body=fastjson.dumps(body))


def set_mode(mode: str, share: int, topic: str = TOPIC, group: str = "qa_cg") -> RemotingCommand:
    body = SetMessageRequestModeRequestBody(topic, group, MessageRequestMode[mode], share)
    return RemotingCommand.request(RequestCode.SET_MESSAGE_REQUEST_MODE, body=fastjson.dumps(body))


def assigned(resp: RemotingCommand) -> list[tuple[int, str]]:
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return sorted(
        (a["messageQueue"]["queueId"], a["mode"]) for a in fastjson.loads(resp.body)["messageQueueAssignments"]
    )


@pytest_twisted.ensureDeferred
async def test_pull_and_pop_mode_groups_get_their_assignments(routed: BrokerUnderTest) -> None:
    b = routed
    # Members are channels (as Java): cid-2 heartbeats over a connection of its own.
    assert (await b.call(heartbeat("cid-1", "qa_cg", TOPIC))).code == ResponseCode.SUCCESS
    other = RemotingClient(reactor)
    try:
        resp = await other.invoke(b.addr, heartbeat("cid-2", "qa_cg", TOPIC), 5.0)
        assert resp.code == ResponseCode.SUCCESS
        await check_assignments(b)
    finally:
        await other.close()


async def check_assignments(b: BrokerUnderTest) -> None:
    # The frame as a 5.3.3 Java client writes it (MQClientAPIImpl.queryAssignment), Apache's answer byte for byte.
    wire = (
        b'{"clientId":"cid-1","consumerGroup":"qa_cg","messageModel":"CLUSTERING",'
        b'"strategyName":"AVG","topic":"AssignTopic"}'
    )
    resp = await b.call(java_request(RequestCode.QUERY_ASSIGNMENT, {}, wire))
    assert resp.code == ResponseCode.SUCCESS and resp.remark is None
    assert resp.body == (
        b'{"messageQueueAssignments":['
        b'{"messageQueue":{"brokerName":"broker-a","queueId":0,"topic":"AssignTopic"},"mode":"PULL"},'
        b'{"messageQueue":{"brokerName":"broker-a","queueId":1,"topic":"AssignTopic"},"mode":"PULL"}]}'
    )
    assert assigned(await b.call(query("cid-2"))) == [(2, "PULL"), (3, "PULL")]
    assert assigned(await b.call(query("cid-2", strategy="AVG_BY_CIRCLE"))) == [(1, "PULL"), (3, "PULL")]
    assert assigned(await b.call(query("cid-1", model="BROADCASTING"))) == [(i, "PULL") for i in range(4)]
    # An unknown strategy, or a group with no member here: no property (the client keeps what it has).
    assert (await b.call(query("cid-1", strategy="CONSISTENT_HASH"))).body == b"{}"
    assert (await b.call(query("cid-1", group="nobody_cg"))).body == b"{}"

    # POP with the default share (-1 from the set request here): every member pops every queue, id -1.
    resp = await b.call(set_mode("POP", -1))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    resp = await b.call(query("cid-2"))
    assert resp.body == (
        b'{"messageQueueAssignments":[{"messageQueue":{"brokerName":"broker-a","queueId":-1,'
        b'"topic":"AssignTopic"},"mode":"POP"}]}'
    )
    # Persisted as Apache's messageRequestMode.json, and read back at start.
    path = b.root / "store" / "config" / "messageRequestMode.json"
    assert path.read_bytes() == (
        b'{"messageRequestModeMap":{"AssignTopic":{"qa_cg":'
        b'{"consumerGroup":"qa_cg","mode":"POP","popShareQueueNum":-1,"topic":"AssignTopic"}}}}'
    )
    modes = await b.call(RemotingCommand.request(RequestCode.GET_ALL_MESSAGE_REQUEST_MODE))
    assert modes.code == ResponseCode.SUCCESS and modes.body == path.read_bytes()


@pytest_twisted.ensureDeferred
async def test_set_message_request_mode_refusals(routed: BrokerUnderTest) -> None:
    b = routed
    resp = await b.call(set_mode("POP", 0, topic="%RETRY%qa_cg"))
    assert (resp.code, resp.remark) == (ResponseCode.NO_PERMISSION, "retry topic is not allowed to set mode")
    resp = await b.call(set_mode("POP", 0, topic="NoSuchTopic"))
    assert (resp.code, resp.remark) == (ResponseCode.TOPIC_NOT_EXIST, "topic[NoSuchTopic] not exist")
    assert b.controller is not None
    b.controller.config.autoCreateSubscriptionGroup = False
    resp = await b.call(set_mode("POP", 0, group="unknown_cg"))
    assert (resp.code, resp.remark) == (ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, "subscription group does not exist")
    # A bad name in the body is refused where it is read.
    bad = b'{"consumerGroup":"qa_cg","mode":"POP","topic":"bad topic!"}'
    resp = await b.call(RemotingCommand.request(RequestCode.SET_MESSAGE_REQUEST_MODE, body=bad))
    assert resp.code != ResponseCode.SUCCESS
    assert b.controller.request_modes.table == {}


@pytest_twisted.ensureDeferred
async def test_modes_survive_restart_and_reach_the_slave(tmp_path: Path, remoting: RemotingClient, namesrv) -> None:  # noqa: F811
    pair: Pair = make_pair(tmp_path, remoting, f"127.0.0.1:{namesrv.port}")
    await pair.start()
    try:
        master, slave = pair.master, pair.slave
        await create_topic(master, TOPIC, 4)
        resp = await master.call(set_mode("POP", 1))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert slave.controller is not None
        await slave.controller.slave_sync.sync_all()
        mode = slave.controller.request_modes.get(TOPIC, "qa_cg")
        assert mode is not None and (mode.mode, mode.pop_share_queue_num) == (MessageRequestMode.POP, 1)
        assert (slave.root / "store" / "config" / "messageRequestMode.json").exists()
        # A 4.x master does not know the request: the slave's other tables still sync, and no error is logged.
        assert master.controller is not None
        del master.controller.dispatcher._handlers[RequestCode.GET_ALL_MESSAGE_REQUEST_MODE]
        errors: list[str] = []

        def observer(event: dict) -> None:
            if event.get("log_level") in (LogLevel.error, LogLevel.critical):
                errors.append(formatEvent(event))

        globalLogPublisher.addObserver(observer)
        try:
            await create_topic(master, "LaterTopic", 1)
            await slave.controller.slave_sync.sync_all()
        finally:
            globalLogPublisher.removeObserver(observer)
        assert "LaterTopic" in slave.controller.topics.table and errors == []
        assert slave.controller.request_modes.get(TOPIC, "qa_cg") == mode
        await master.stop()
        await sleep(0)
        master.start()
        assert master.controller is not None
        assert master.controller.request_modes.get(TOPIC, "qa_cg") == mode
    finally:
        await pair.stop()


@pytest_twisted.ensureDeferred
async def test_default_mode_from_the_broker_config(tmp_path: Path, remoting: RemotingClient, namesrv) -> None:  # noqa: F811
    b = BrokerUnderTest(
        tmp_path,
        remoting,
        namesrvAddr=f"127.0.0.1:{namesrv.port}",
        defaultMessageRequestMode="POP",
        defaultPopShareQueueNum="0",
    )
    await b.start().when_ready()
    try:
        await create_topic(b, TOPIC, 4)
        assert (await b.call(heartbeat("cid-1", "qa_cg", TOPIC))).code == ResponseCode.SUCCESS
        # A lone POP member sharing with none (0 >= members - 1): every queue, as -1.
        assert assigned(await b.call(query("cid-1"))) == [(-1, "POP")]
        # A retry topic is always pulled, whatever the default.
        body = QueryAssignmentRequestBody("%RETRY%qa_cg", "qa_cg", "cid-1", "AVG")
        resp = await b.call(RemotingCommand.request(RequestCode.QUERY_ASSIGNMENT, body=fastjson.dumps(body)))
        assert {a["mode"] for a in fastjson.loads(resp.body)["messageQueueAssignments"]} == {"PULL"}
    finally:
        await b.stop()


def test_bad_settings_are_one_line_errors() -> None:
    with pytest.raises(ConfigError) as caught:
        load_broker_config(None, {"defaultMessageRequestMode": "pop"})
    assert str(caught.value) == "command line: key defaultMessageRequestMode: 'pop' is not one of PULL, POP"
    with pytest.raises(ConfigError, match="key loadBalancePollNameServerInterval: 0 is not at least 1 ms"):
        load_broker_config(None, {"loadBalancePollNameServerInterval": "0"})
