"""Every request code Apache 4.9.8's broker and NameServer register is answered (none is "not supported"),
and the admin requests mqadmin, rocketmq-exporter and the Dashboard read answer as Apache's do."""

from __future__ import annotations

import os

import orjson
import pytest_twisted

from gateway.broker.inner import look_message
from gateway.namesrv.service import NamesrvController
from gateway.remoting import fastjson
from gateway.remoting.client import RemotingClient
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import UpdateConsumerOffsetRequestHeader
from gateway.remoting.names import SYSTEM_TOPICS, TRANS_HALF_TOPIC
from tests.namesrv.conftest import loopback_namesrv_config

from .conftest import BrokerUnderTest
from .test_broker_server import create_topic, heartbeat, send

# BrokerController.registerProcessor and AdminBrokerProcessor's switch in rocketmq-all-4.9.8.
APACHE_498_BROKER_CODES = (
    # send, pull, query, client management, consumer management, end transaction
    10, 310, 320, 36, 11, 324, 325, 12, 33, 34, 35, 46, 38, 15, 14, 37,
    # AdminBrokerProcessor
    17, 215, 21, 25, 26, 29, 30, 31, 32, 28, 41, 42, 200, 201, 207, 202, 203, 204, 328, 208, 43, 45, 222, 223,
    300, 303, 305, 306, 329, 316, 307, 308, 309, 314, 315, 317, 321, 50, 51, 52, 53, 323,
)  # fmt: skip
# DefaultRequestProcessor (NameServer) in rocketmq-all-4.9.8.
APACHE_498_NAMESRV_CODES = (
    100, 101, 102, 322, 103, 104, 105, 106, 205, 327, 206, 216, 219, 224, 304, 311, 312, 313, 318, 319,
)  # fmt: skip


async def commit(broker: BrokerUnderTest, group: str, topic: str, queue_id: int, offset: int) -> None:
    header = UpdateConsumerOffsetRequestHeader(group, topic, queue_id, offset).encode()
    resp = await broker.call(RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, header))
    assert resp.code == ResponseCode.SUCCESS


async def call(broker: BrokerUnderTest, code: int, ext: dict[str, str] | None = None) -> RemotingCommand:
    return await broker.call(RemotingCommand.request(code, ext or {}))


@pytest_twisted.ensureDeferred
async def test_every_apache_broker_code_is_answered(broker: BrokerUnderTest) -> None:
    """Sent with no header at all, each code gets an answer (mostly a header error), never "not supported"."""
    unsupported = []
    for code in APACHE_498_BROKER_CODES:
        resp = await call(broker, code)
        if resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            unsupported.append(code)
    assert unsupported == []
    resp = await call(broker, 9999)
    assert (resp.code, resp.remark) == (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, " request type 9999 not supported")


@pytest_twisted.ensureDeferred
async def test_every_apache_namesrv_code_is_answered(tmp_path, remoting: RemotingClient) -> None:
    namesrv = NamesrvController(loopback_namesrv_config(tmp_path))
    namesrv.startService()
    try:
        addr = f"127.0.0.1:{namesrv.port}"
        unsupported = []
        for code in APACHE_498_NAMESRV_CODES:
            resp = await remoting.invoke(addr, RemotingCommand.request(code, {}), 5.0)
            if resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                unsupported.append(code)
        assert unsupported == []
    finally:
        await namesrv.stopService()


@pytest_twisted.ensureDeferred
async def test_stats_data_and_broker_consume_stats(broker: BrokerUnderTest) -> None:
    await create_topic(broker, "Counted", 2)
    for i in range(7):
        assert (await send(broker, "Counted", b"x" * 100, {}, queue_id=i % 2)).code == ResponseCode.SUCCESS
    resp = await call(
        broker, RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": "TOPIC_PUT_NUMS", "statsKey": "Counted"}
    )
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    data = orjson.loads(resp.body)
    assert set(data) == {"statsMinute", "statsHour", "statsDay"}
    assert data["statsMinute"]["sum"] == 7 and data["statsDay"]["sum"] == 7 and data["statsMinute"]["avgpt"] == 1.0
    resp = await call(
        broker, RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": "TOPIC_PUT_SIZE", "statsKey": "Counted"}
    )
    assert orjson.loads(resp.body)["statsMinute"]["sum"] > 700  # whole records, not just bodies
    resp = await call(
        broker, RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": "BROKER_PUT_NUMS", "statsKey": "DefaultCluster"}
    )
    assert orjson.loads(resp.body)["statsMinute"]["sum"] == 7
    resp = await call(broker, RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": "TOPIC_PUT_NUMS", "statsKey": "Nope"})
    assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR, "The stats <TOPIC_PUT_NUMS> <Nope> not exist")

    # A subscription group with offsets on the topic: 7 stored, 1 + 2 consumed.
    resp = await broker.call(heartbeat("c1", "statcg", "Counted"))
    assert resp.code == ResponseCode.SUCCESS
    await commit(broker, "statcg", "Counted", 0, 1)
    await commit(broker, "statcg", "Counted", 1, 2)
    resp = await call(broker, RequestCode.GET_BROKER_CONSUME_STATS, {"isOrder": "false"})
    body = fastjson.loads(resp.body)
    assert body["brokerAddr"] == broker.addr and body["totalDiff"] == 4
    (entry,) = [e for e in body["consumeStatsList"] if "statcg" in e]
    (stats,) = entry["statcg"]
    rows = sorted((k["queueId"], v["brokerOffset"], v["consumerOffset"]) for k, v in stats["offsetTable"].items())
    assert rows == [(0, 4, 1), (1, 3, 2)]
    resp = await call(broker, RequestCode.GET_BROKER_CONSUME_STATS, {"isOrder": "true"})
    assert fastjson.loads(resp.body)["totalDiff"] == 0  # "Counted" is not an ordered topic

    resp = await call(broker, RequestCode.QUERY_CONSUME_TIME_SPAN, {"topic": "Counted", "group": "statcg"})
    spans = orjson.loads(resp.body)["consumeTimeSpanSet"]
    assert [s["messageQueue"]["queueId"] for s in spans] == [0, 1]
    assert all(s["minTimeStamp"] <= s["consumeTimeStamp"] <= s["maxTimeStamp"] for s in spans)
    assert all(s["delayTime"] >= 0 for s in spans)
    resp = await call(broker, RequestCode.QUERY_CONSUME_TIME_SPAN, {"topic": "Nope", "group": "statcg"})
    assert (resp.code, resp.remark) == (ResponseCode.TOPIC_NOT_EXIST, "topic[Nope] not exist")


@pytest_twisted.ensureDeferred
async def test_get_topic_config(broker: BrokerUnderTest) -> None:
    """GET_TOPIC_CONFIG (351), which 5.x mqadmin consumerProgress sends for every topic of the group."""
    await create_topic(broker, "Configured", 3)
    resp = await call(broker, RequestCode.GET_TOPIC_CONFIG, {"topic": "Configured", "lo": "true"})
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    body = fastjson.loads(resp.body)
    assert (body["topicName"], body["readQueueNums"], body["writeQueueNums"], body["perm"]) == ("Configured", 3, 3, 6)
    assert "mappingDetail" not in body
    resp = await call(broker, RequestCode.GET_TOPIC_CONFIG, {"topic": "Nope"})
    assert (resp.code, resp.remark) == (ResponseCode.TOPIC_NOT_EXIST, "No topic in this broker. topic: Nope")


@pytest_twisted.ensureDeferred
async def test_query_consume_queue(broker: BrokerUnderTest) -> None:
    await create_topic(broker, "Cq", 1)
    offsets = []
    for _ in range(5):
        resp = await send(broker, "Cq", b"y" * 10, {"TAGS": "TagA"})
        offsets.append(resp)
    ext = {"topic": "Cq", "queueId": "0", "index": "1", "count": "3", "consumerGroup": "nobody"}
    resp = await call(broker, RequestCode.QUERY_CONSUME_QUEUE, ext)
    body = orjson.loads(resp.body)
    assert (body["minQueueIndex"], body["maxQueueIndex"]) == (0, 5)
    assert body["filterData"] == "nobody@Cq is not online!"
    units = body["queueData"]
    assert len(units) == 3 and all(u["physicSize"] > 0 for u in units)
    assert units[0]["physicOffset"] < units[1]["physicOffset"] < units[2]["physicOffset"]
    assert len({u["tagsCode"] for u in units}) == 1  # the hash of "TagA" for each
    resp = await call(broker, RequestCode.QUERY_CONSUME_QUEUE, {**ext, "index": "9"})
    assert (resp.code, resp.remark) == (ResponseCode.SUCCESS, "Index 9 of 0@Cq is not exist!")
    resp = await call(broker, RequestCode.QUERY_CONSUME_QUEUE, {**ext, "queueId": "3"})
    assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR, "3@Cq is not exist!")


@pytest_twisted.ensureDeferred
async def test_correction_and_clone_offsets(broker: BrokerUnderTest) -> None:
    await create_topic(broker, "Offs", 2)
    for i in range(10):
        await send(broker, "Offs", b"z", {}, queue_id=i % 2)
    await commit(broker, "g1", "Offs", 0, 4)
    await commit(broker, "g1", "Offs", 1, 5)
    await commit(broker, "g2", "Offs", 0, 2)
    await commit(broker, "g2", "Offs", 1, 5)
    await commit(broker, "g3", "Offs", 0, 1)
    ext = {"topic": "Offs", "compareGroup": "g3", "filterGroups": "g3"}
    resp = await call(broker, RequestCode.QUERY_CORRECTION_OFFSET, ext)
    # Min over g1 and g2 (g3 left out): q0 2, q1 5. g3 is behind that on q0 (Long.MAX_VALUE), absent on q1.
    assert fastjson.loads(resp.body)["correctionOffsets"] == {0: (1 << 63) - 1, 1: 5}
    resp = await call(broker, RequestCode.QUERY_CORRECTION_OFFSET, {**ext, "compareGroup": "g1"})
    assert fastjson.loads(resp.body)["correctionOffsets"] == {0: 2, 1: 5}

    ext = {"srcGroup": "g1", "destGroup": "g9", "topic": "Offs", "offline": "true"}
    assert (await call(broker, RequestCode.CLONE_GROUP_OFFSET, ext)).code == ResponseCode.SUCCESS
    offsets = broker.controller.offsets
    assert [offsets.query_offset("g9", "Offs", q) for q in (0, 1)] == [4, 5]


@pytest_twisted.ensureDeferred
async def test_producer_info_runtime_info_and_system_topics(broker: BrokerUnderTest) -> None:
    await create_topic(broker, "Prod", 1)
    assert (await broker.call(heartbeat("prod-client", "cgp", "Prod"))).code == ResponseCode.SUCCESS
    resp = await call(broker, RequestCode.GET_ALL_PRODUCER_INFO)
    (info,) = orjson.loads(resp.body)["data"]["pg"]
    assert info["clientId"] == "prod-client" and info["remoteIP"].startswith("/127.0.0.1:")

    resp = await call(broker, RequestCode.GET_BROKER_RUNTIME_INFO)
    table = orjson.loads(resp.body)["table"]
    # What mqadmin brokerStatus prints from a 4.9.8 broker with no transient store pool.
    apache_keys = {
        "EndTransactionQueueSize", "EndTransactionThreadPoolQueueCapacity", "bootTimestamp", "brokerVersion",
        "brokerVersionDesc", "commitLogDirCapacity", "commitLogDiskRatio", "commitLogMaxOffset",
        "commitLogMinOffset", "consumeQueueDiskRatio", "dispatchBehindBytes", "dispatchMaxBuffer",
        "earliestMessageTimeStamp", "getFoundTps", "getMessageEntireTimeMax", "getMissTps", "getTotalTps",
        "getTransferedTps", "msgGetTotalTodayMorning", "msgGetTotalTodayNow", "msgGetTotalYesterdayMorning",
        "msgPutTotalTodayMorning", "msgPutTotalTodayNow", "msgPutTotalYesterdayMorning", "pageCacheLockTimeMills",
        "pullThreadPoolQueueCapacity", "pullThreadPoolQueueHeadWaitTimeMills", "pullThreadPoolQueueSize",
        "putLatency99", "putLatency999", "putMessageAverageSize", "putMessageDistributeTime",
        "putMessageEntireTimeMax", "putMessageFailedTimes", "putMessageSizeTotal", "putMessageTimesTotal",
        "putTps", "queryThreadPoolQueueCapacity", "queryThreadPoolQueueHeadWaitTimeMills",
        "queryThreadPoolQueueSize", "remainHowManyDataToFlush", "remainTransientStoreBufferNumbs", "runtime",
        "sendThreadPoolQueueCapacity", "sendThreadPoolQueueHeadWaitTimeMills", "sendThreadPoolQueueSize",
        "startAcceptSendRequestTimeStamp",
    }  # fmt: skip
    assert apache_keys <= set(table)
    assert any(k.startswith("commitLogDiskRatio_") for k in table)
    assert table["commitLogDirCapacity"].startswith("Total : ") and "iB, Free : " in table["commitLogDirCapacity"]

    resp = await call(broker, RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER)
    assert set(orjson.loads(resp.body)["topicList"]) == SYSTEM_TOPICS


@pytest_twisted.ensureDeferred
async def test_store_maintenance_requests(broker: BrokerUnderTest) -> None:
    controller = broker.controller
    store = controller.store
    await create_topic(broker, "Unused", 1)
    await create_topic(broker, "Expired", 1)
    await send(broker, "Unused", b"u", {})
    await send(broker, "Expired", b"e", {})
    # The topic is gone from the table (as after a failed delete) but its queue is still on disk.
    controller.topics.table.pop("Unused")
    unused_dir = os.path.join(store.config.consume_queue_root, "Unused")
    assert os.path.isdir(unused_dir)
    assert (await call(broker, RequestCode.CLEAN_UNUSED_TOPIC)).code == ResponseCode.SUCCESS
    assert not os.path.exists(unused_dir) and ("Unused", 0) not in store.consume_queue_table
    assert ("Expired", 0) in store.consume_queue_table

    # A queue whose last record ends below the commitlog's start goes (Java's strict "<": ending right at
    # the start, it stays).
    end = store.consume_queue_table[("Expired", 0)].max_physic_offset
    real_min = store.get_min_phy_offset
    try:
        store.get_min_phy_offset = lambda: end
        assert (await call(broker, RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE)).code == ResponseCode.SUCCESS
        assert ("Expired", 0) in store.consume_queue_table
        store.get_min_phy_offset = lambda: end + 1
        assert (await call(broker, RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE)).code == ResponseCode.SUCCESS
    finally:
        store.get_min_phy_offset = real_min
    assert ("Expired", 0) not in store.consume_queue_table

    assert (await call(broker, RequestCode.DELETE_EXPIRED_COMMITLOG)).code == ResponseCode.SUCCESS
    assert controller.clean_service.commit_log.manual_delete_rounds == 19  # one round ran at once


@pytest_twisted.ensureDeferred
async def test_resume_check_half_message(broker: BrokerUnderTest) -> None:
    await create_topic(broker, "Trans", 1)
    resp = await send(broker, "Trans", b"half", {"TRAN_MSG": "true", "PGROUP": "tpg"})
    assert resp.code == ResponseCode.SUCCESS
    store = broker.controller.store
    before = store.get_max_offset_in_queue(TRANS_HALF_TOPIC, 0)
    half_id = resp.ext_fields["msgId"]
    resp = await call(broker, RequestCode.RESUME_CHECK_HALF_MESSAGE, {"msgId": half_id})
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert store.get_max_offset_in_queue(TRANS_HALF_TOPIC, 0) == before + 1
    unit = store.consume_queue_table[(TRANS_HALF_TOPIC, 0)].get_unit(before)
    copy = look_message(store, unit[0])
    assert copy.body == b"half" and copy.properties["TRANSACTION_CHECK_TIMES"] == "0"
    assert copy.properties["REAL_TOPIC"] == "Trans"
    resp = await call(broker, RequestCode.RESUME_CHECK_HALF_MESSAGE, {"msgId": "00"})
    assert resp.code == ResponseCode.SYSTEM_ERROR
