"""The broker over real sockets: sends (V1, V2, batch, golden client frames), pulls with long polling,
heartbeats and group membership, offsets, admin requests, restart."""

from __future__ import annotations

import time

import orjson
import pytest
import pytest_twisted
from twisted.internet import defer, reactor

from compat_tests.servers import create_topic_request
from gateway.remoting import sender
from gateway.remoting.bodies import ConsumerData, HeartbeatData, ProducerData, SubscriptionData
from gateway.remoting.codec import FrameDecoder
from gateway.remoting.codes import RequestCode, ResponseCode, SerializeType
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import CreateTopicRequestHeader, PullMessageRequestHeader, SendMessageRequestHeader
from gateway.remoting.message import decode_offset_message_id, decode_records, encode_batch, properties_to_string
from tests.remoting import golden

from .conftest import BrokerUnderTest, sleep


def golden_request(name: str) -> RemotingCommand:
    (cmd,) = FrameDecoder().feed(golden.frame(name))
    return cmd


def send_header(topic: str, props: dict[str, str], queue_id: int = 0, batch: bool = False) -> dict[str, str]:
    return SendMessageRequestHeader(
        producer_group="pg",
        topic=topic,
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=queue_id,
        sys_flag=0,
        born_timestamp=int(time.time() * 1000),
        flag=0,
        properties=properties_to_string(props),
        reconsume_times=0,
        batch=batch,
    ).encode_v2()


def pull_request(
    topic: str,
    queue_id: int,
    offset: int,
    *,
    suspend: bool = False,
    sub: str | None = None,
    group: str = "cg",
    timeout_ms: int = 15000,
) -> RemotingCommand:
    sys_flag = (0x2 if suspend else 0) | (0x4 if sub is not None else 0)
    return RemotingCommand.request(
        RequestCode.PULL_MESSAGE,
        PullMessageRequestHeader(
            consumer_group=group,
            topic=topic,
            queue_id=queue_id,
            queue_offset=offset,
            max_msg_nums=32,
            sys_flag=sys_flag,
            commit_offset=0,
            suspend_timeout_millis=timeout_ms,
            subscription=sub,
            sub_version=0,
            expression_type="TAG",
        ).encode(),
    )


async def create_topic(broker: BrokerUnderTest, topic: str, queues: int = 4) -> None:
    resp = await broker.call(create_topic_request(topic, queues))
    assert resp.code == ResponseCode.SUCCESS, resp.remark


async def send(broker: BrokerUnderTest, topic: str, body: bytes, props: dict[str, str], queue_id: int = 0):
    req = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, send_header(topic, props, queue_id), body)
    return await broker.call(req)


@pytest_twisted.ensureDeferred
async def test_cpp_golden_send_then_pull(broker: BrokerUnderTest) -> None:
    req = golden_request("cpp_code10_req")
    resp = await broker.call(req)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    ext = resp.ext_fields
    assert all(isinstance(v, str) for v in ext.values())
    assert ext["MSG_REGION"] == "DefaultRegion" and ext["TRACE_ON"] == "true"
    host, phy = decode_offset_message_id(ext["msgId"])
    assert host == broker.addr and phy == 0 and len(ext["msgId"]) == 32
    assert (ext["queueId"], ext["queueOffset"]) == ("0", "0")
    pulled = await broker.call(pull_request("TopicTest", 0, 0, sub="*"))
    assert pulled.code == ResponseCode.SUCCESS
    (msg,) = decode_records(pulled.body)
    assert msg.body == req.body and msg.msg_id == ext["msgId"]
    assert msg.properties["UNIQ_KEY"] == "0100007F000091080000C17B88710100"
    assert "WAIT" not in msg.properties and msg.properties["CLUSTER"] == "DefaultCluster"
    assert msg.born_host.startswith("127.0.0.1:") and msg.store_host == broker.addr


@pytest_twisted.ensureDeferred
async def test_the_broker_answers_from_its_send_thread(make_broker) -> None:
    b = make_broker()
    c = b.start()
    if sender._c_sender is None:
        await b.stop()
        pytest.skip("the C send thread is not built (or ROCKETMQ_GATEWAY_PURE_PYTHON=1)")
    try:
        resp = await b.call(golden_request("cpp_code10_req"))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        (channel,) = c.factory.channels
        assert c.factory.sender is c.send_thread is not None
        assert channel._sender is c.send_thread and channel._channel >= 0
    finally:
        await b.stop()
    assert c.send_thread._stopped


@pytest_twisted.ensureDeferred
async def test_java_golden_v2_auto_creates_topic(broker: BrokerUnderTest) -> None:
    resp = await broker.call(golden_request("java_code310_req"))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    tc = broker.controller.topics.select("TopicTest")
    assert (tc.read_queue_nums, tc.write_queue_nums, tc.perm) == (4, 4, 6)


@pytest_twisted.ensureDeferred
async def test_send_errors(broker: BrokerUnderTest) -> None:
    hdr = send_header("NoSuchTopic", {})
    hdr["c"] = "NotInheritable"
    resp = await broker.call(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, hdr, b"x"))
    assert resp.code == ResponseCode.TOPIC_NOT_EXIST and "not exist" in resp.remark
    assert resp.ext_fields["MSG_REGION"] == "DefaultRegion"
    resp = await send(broker, "bad topic!", b"x", {})
    assert resp.code == ResponseCode.INVALID_PARAMETER and "illegal characters" in resp.remark
    await create_topic(broker, "Small", 2)
    resp = await send(broker, "Small", b"x", {}, queue_id=5)
    assert resp.code == ResponseCode.SYSTEM_ERROR and "queueId[5] is illegal" in resp.remark
    missing = {k: v for k, v in send_header("Small", {}).items() if k != "a"}
    resp = await broker.call(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, missing, b"x"))
    assert resp.code == ResponseCode.SYSTEM_ERROR and "producer_group" in resp.remark
    resp = await send(broker, "Small", b"x" * (4 * 1024 * 1024 + 1), {})
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL


@pytest_twisted.ensureDeferred
async def test_batch_send(broker: BrokerUnderTest) -> None:
    await create_topic(broker, "Batch", 1)
    inner = [(0, f"m{i}".encode(), properties_to_string({"UNIQ_KEY": f"K{i}", "TAGS": "T"})) for i in range(3)]
    req = RemotingCommand.request(
        RequestCode.SEND_BATCH_MESSAGE, send_header("Batch", {"WAIT": "true"}, batch=True), encode_batch(inner)
    )
    resp = await broker.call(req)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    ids = resp.ext_fields["msgId"].split(",")
    assert len(ids) == 3 and resp.ext_fields["queueOffset"] == "0"
    pulled = await broker.call(pull_request("Batch", 0, 0, sub="*"))
    msgs = decode_records(pulled.body)
    assert [m.body for m in msgs] == [b"m0", b"m1", b"m2"]
    assert [m.msg_id for m in msgs] == ids
    assert [m.properties["UNIQ_KEY"] for m in msgs] == ["K0", "K1", "K2"]
    assert all(m.properties["CLUSTER"] == "DefaultCluster" and m.queue_offset == i for i, m in enumerate(msgs))


@pytest_twisted.ensureDeferred
async def test_binary_header_answered_in_kind(broker: BrokerUnderTest) -> None:
    await create_topic(broker, "Bin", 1)
    req = RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2, send_header("Bin", {}), b"payload", serialize_type=SerializeType.ROCKETMQ
    )
    resp = await broker.call(req)
    assert resp.code == ResponseCode.SUCCESS and resp.serialize_type == SerializeType.ROCKETMQ


@pytest_twisted.ensureDeferred
async def test_pull_statuses_and_tag_filter(broker: BrokerUnderTest) -> None:
    await create_topic(broker, "Pull", 1)
    empty = await broker.call(pull_request("Pull", 0, 0, sub="*"))
    assert empty.code == ResponseCode.PULL_NOT_FOUND and empty.remark == "NO_MESSAGE_IN_QUEUE"
    moved = await broker.call(pull_request("Pull", 0, 5, sub="*"))
    assert moved.code == ResponseCode.PULL_OFFSET_MOVED
    for i, tag in enumerate(["TagA", "TagB", "TagA", "TagC"]):
        resp = await send(broker, "Pull", f"b{i}".encode(), {"TAGS": tag})
        assert resp.code == 0
    got = await broker.call(pull_request("Pull", 0, 0, sub="TagA"))
    assert got.code == ResponseCode.SUCCESS and got.remark == "FOUND"  # the store's status, as Apache
    assert [m.body for m in decode_records(got.body)] == [b"b0", b"b2"]
    assert got.ext_fields["nextBeginOffset"] == "4" and got.ext_fields["maxOffset"] == "4"
    none = await broker.call(pull_request("Pull", 0, 3, sub="TagB"))
    assert none.code == ResponseCode.PULL_RETRY_IMMEDIATELY and none.ext_fields["nextBeginOffset"] == "4"
    at_end = await broker.call(pull_request("Pull", 0, 4, sub="*"))
    assert at_end.code == ResponseCode.PULL_NOT_FOUND and at_end.ext_fields["nextBeginOffset"] == "4"
    beyond = await broker.call(pull_request("Pull", 0, 9, sub="*"))
    assert beyond.code == ResponseCode.PULL_OFFSET_MOVED and beyond.ext_fields["nextBeginOffset"] == "4"
    bad_queue = await broker.call(pull_request("Pull", 3, 0, sub="*"))
    assert bad_queue.code == ResponseCode.SYSTEM_ERROR
    # While the store shuts down (not running), Java's getMessage returns null.
    assert broker.controller is not None
    broker.controller.store.running = False
    try:
        closing = await broker.call(pull_request("Pull", 0, 0, sub="*"))
    finally:
        broker.controller.store.running = True
    assert (closing.code, closing.remark) == (ResponseCode.SYSTEM_ERROR, "store getMessage return null")


@pytest_twisted.ensureDeferred
async def test_long_polling_wakes_on_arrival_and_times_out(broker: BrokerUnderTest) -> None:
    await create_topic(broker, "Long", 1)
    started = reactor.seconds()
    answered: list[RemotingCommand] = []
    held = broker.call(pull_request("Long", 0, 0, suspend=True, sub="*"), timeout=10)
    held.addCallback(lambda r: answered.append(r) or r)
    await sleep(0.3)
    assert not answered  # held, not answered with PULL_NOT_FOUND
    await send(broker, "Long", b"wake", {})
    resp = await held
    assert resp.code == ResponseCode.SUCCESS and decode_records(resp.body)[0].body == b"wake"
    assert reactor.seconds() - started < 5
    # A held pull whose tag does not match is not woken; it answers PULL_NOT_FOUND at its timeout.
    started = reactor.seconds()
    held = broker.call(pull_request("Long", 0, 1, suspend=True, sub="TagZ", timeout_ms=800), timeout=10)
    await sleep(0.2)
    await send(broker, "Long", b"other", {"TAGS": "TagY"})
    resp = await held
    assert resp.code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY)
    assert reactor.seconds() - started >= 0.7


def heartbeat(client_id: str, group: str, topic: str) -> RemotingCommand:
    data = HeartbeatData(
        client_id,
        [ProducerData("pg")],
        [ConsumerData(group, subscription_data_set=[SubscriptionData.build(topic, "*")])],
    )
    return RemotingCommand.request(RequestCode.HEART_BEAT, body=orjson.dumps(data.to_json()))


@pytest_twisted.ensureDeferred
async def test_heartbeats_group_membership_and_notify(broker: BrokerUnderTest) -> None:
    await create_topic(broker, "Members", 2)
    notified: list[RemotingCommand] = []
    broker.client.dispatcher.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, lambda ch, req: notified.append(req))
    resp = await broker.call(heartbeat("c1", "cgm", "Members"))
    assert resp.code == ResponseCode.SUCCESS and resp.version == 409
    assert broker.controller.topics.select("%RETRY%cgm") is not None
    listed = await broker.call(
        RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "cgm"})
    )
    assert orjson.loads(listed.body) == {"consumerIdList": ["c1"]}
    # A second member on another connection: the first is told to rebalance.
    from gateway.remoting.client import RemotingClient

    other = RemotingClient(reactor)
    try:
        await other.invoke(broker.addr, heartbeat("c2", "cgm", "Members"))
        for _ in range(50):
            if notified:
                break
            await sleep(0.02)
        assert notified and notified[0].ext_fields["consumerGroup"] == "cgm" and notified[0].is_oneway
        listed = await broker.call(
            RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "cgm"})
        )
        assert sorted(orjson.loads(listed.body)["consumerIdList"]) == ["c1", "c2"]
    finally:
        await other.close()
    await sleep(0.1)
    listed = await broker.call(
        RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "cgm"})
    )
    assert orjson.loads(listed.body)["consumerIdList"] == ["c1"]
    # Subscriptions come from the heartbeat: a pull without one is served by it.
    resp = await broker.call(pull_request("Members", 0, 0, group="cgm"))
    assert resp.code == ResponseCode.PULL_NOT_FOUND
    resp = await broker.call(pull_request("Members", 0, 0, group="unknown-group"))
    assert resp.code == ResponseCode.SUBSCRIPTION_NOT_EXIST


@pytest_twisted.ensureDeferred
async def test_consumer_offsets(broker: BrokerUnderTest) -> None:
    await create_topic(broker, "Offs", 1)
    query = RemotingCommand.request(
        RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "Offs", "queueId": "0"}
    )
    resp = await broker.call(query)
    assert (resp.code, resp.ext_fields["offset"]) == (ResponseCode.SUCCESS, "0")  # young queue: start at 0
    update = RemotingCommand.request(
        RequestCode.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": "g", "topic": "Offs", "queueId": "0", "commitOffset": "7"},
        oneway=True,
    )
    (await broker.client.get_channel(broker.addr)).invoke_oneway(update)
    await sleep(0.1)
    resp = await broker.call(
        RemotingCommand.request(
            RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "Offs", "queueId": "0"}
        )
    )
    assert resp.ext_fields["offset"] == "7"
    for code in (RequestCode.GET_MAX_OFFSET, RequestCode.GET_MIN_OFFSET):
        resp = await broker.call(RemotingCommand.request(code, {"topic": "Offs", "queueId": "0"}))
        assert resp.ext_fields["offset"] == "0"


@pytest_twisted.ensureDeferred
async def test_broker_config_is_printed_as_java_prints_it(broker: BrokerUnderTest) -> None:
    """GET_BROKER_CONFIG (mqadmin getBrokerConfig): unset settings left out, booleans lower-case."""
    resp = await broker.call(RemotingCommand.request(RequestCode.GET_BROKER_CONFIG))
    lines = resp.body.decode().splitlines()
    config = dict(line.split("=", 1) for line in lines)
    assert config["slaveReadEnable"] == "false" and config["brokerRole"] == "ASYNC_MASTER"
    assert "storePathCommitLog" not in config  # null in Java: not printed
    assert not [line for line in lines if line.endswith(("=None", "=True", "=False"))]


@pytest_twisted.ensureDeferred
async def test_unknown_code_and_admin(broker: BrokerUnderTest) -> None:
    resp = await broker.call(RemotingCommand.request(9999, {}))
    assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and "9999" in resp.remark
    resp = await broker.call(RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO))
    table = orjson.loads(resp.body)["table"]
    assert float(table["putTps"].split()[0]) >= 0 and int(table["commitLogMaxOffset"]) >= 0
    h = CreateTopicRequestHeader(
        topic="SCHEDULE_TOPIC_XXXX",
        default_topic="TBW102",
        read_queue_nums=1,
        write_queue_nums=1,
        perm=6,
        topic_filter_type="SINGLE_TAG",
    )
    resp = await broker.call(RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, h.encode()))
    assert resp.code == ResponseCode.INVALID_PARAMETER and "conflict with system topic" in resp.remark
    await create_topic(broker, "Doomed", 1)
    resp = await broker.call(RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "Doomed"}))
    assert resp.code == ResponseCode.SUCCESS and broker.controller.topics.select("Doomed") is None


@pytest_twisted.ensureDeferred
async def test_restart_keeps_messages_offsets_and_topics(make_broker) -> None:
    b = make_broker()
    b.start()
    await create_topic(b, "Durable", 2)
    for i in range(20):
        assert (await send(b, "Durable", f"m{i}".encode(), {}, queue_id=i % 2)).code == 0
    await b.call(
        RemotingCommand.request(
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": "g", "topic": "Durable", "queueId": "1", "commitOffset": "4"},
        )
    )
    port = b.controller.config.listenPort
    await b.stop()
    await sleep(0.1)  # let the client see its connection close
    b.overrides["listenPort"] = str(port)
    b.start()
    assert b.controller.topics.select("Durable").read_queue_nums == 2
    resp = await b.call(pull_request("Durable", 1, 0, sub="*"))
    assert [m.body for m in decode_records(resp.body)] == [f"m{i}".encode() for i in range(1, 20, 2)]
    resp = await b.call(
        RemotingCommand.request(
            RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "Durable", "queueId": "1"}
        )
    )
    assert resp.ext_fields["offset"] == "4"
    await b.stop()


@pytest_twisted.ensureDeferred
async def test_sync_flush_acknowledges_durable_sends(make_broker) -> None:
    b = make_broker(flushDiskType="SYNC_FLUSH")
    b.start()
    try:
        await create_topic(b, "Sync", 1)
        results = await defer.gatherResults([defer.ensureDeferred(send(b, "Sync", b"x" * 1024, {})) for _ in range(50)])
        assert all(r.code == ResponseCode.SUCCESS for r in results)
        last = max(decode_offset_message_id(r.ext_fields["msgId"])[1] for r in results)
        assert b.controller.store.flushed_where > last
    finally:
        await b.stop()


@pytest_twisted.ensureDeferred
async def test_sync_flush_send_that_creates_its_topic_is_answered_durable(make_broker) -> None:
    """The send waits for its fsync and for the new topic's registration: both answers reach the client once."""
    b = make_broker(flushDiskType="SYNC_FLUSH")
    b.start()
    try:
        resp = await b.call(golden_request("java_code310_req"))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert b.controller.topics.select("TopicTest") is not None
        assert b.controller.store.flushed_where > decode_offset_message_id(resp.ext_fields["msgId"])[1]
        again = await b.call(golden_request("java_code310_req"))  # the topic exists now: no registration wait
        assert again.code == ResponseCode.SUCCESS and int(again.ext_fields["queueOffset"]) >= 0
    finally:
        await b.stop()


@pytest_twisted.ensureDeferred
async def test_sync_flush_group_commit_lasts_until_the_broker_closes_its_connections(make_broker) -> None:
    b = make_broker(flushDiskType="SYNC_FLUSH")
    b.start()
    try:
        flush = b.controller.flush_service
        assert flush is not None and flush.running
        # The broker stops its flush service itself, after closing its connections. A service stopped by the
        # reactor's shutdown too would answer FLUSH_DISK_TIMEOUT to every send served in between.
        assert flush._shutdown_trigger is None
    finally:
        await b.stop()
    assert not flush.running
