"""The name server over real sockets on 127.0.0.1, against Apache 4.9.8's golden frames."""

from __future__ import annotations

import pytest_twisted
from twisted.internet import reactor, task
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol

from gateway.namesrv.service import NamesrvController
from gateway.remoting import fastjson
from gateway.remoting.client import RemotingClient
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand

from .support import (
    CLUSTER,
    RawPeer,
    golden_command,
    golden_frame,
    query_data_version_request,
    register_request,
    route_json,
    route_request,
    wait_until,
)

BROKER = "127.0.0.1:10911"


def request(code: int, ext: dict[str, str] | None = None, body: bytes = b"") -> RemotingCommand:
    return RemotingCommand.request(code, ext, body)


@pytest_twisted.ensureDeferred
async def test_golden_register_then_route_bodies_match_apache(addr, client):
    response = await client.invoke(addr, golden_command("java_code103_req"))
    assert (response.code, response.ext_fields, response.body) == (0, {}, b"")
    for peer in ("java", "cpp"):  # version 409 wants quoted keys, version 63 fastjson's unquoted ones
        response = await client.invoke(addr, golden_command(f"{peer}_code105_req"))
        assert response.code == ResponseCode.SUCCESS
        assert response.body == golden_command(f"{peer}_code105_resp").body


@pytest_twisted.ensureDeferred
async def test_golden_request_frames_get_golden_response_frames(namesrv):
    peer = await connectProtocol(TCP4ClientEndpoint(reactor, "127.0.0.1", namesrv.port), RawPeer())
    try:
        for name in ("java_code103", "java_code105", "cpp_code105"):
            assert await peer.exchange(golden_frame(f"{name}_req")) == golden_frame(f"{name}_resp"), name
    finally:
        peer.transport.loseConnection()
        await peer.closed


@pytest_twisted.ensureDeferred
async def test_standard_json_on_request_of_an_old_client(addr, client):
    await client.invoke(addr, register_request("broker-a", BROKER, {"TopicTest": 4}))
    old = RemotingCommand.request(
        RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicTest", "acceptStandardJsonOnly": "true"}, version=63
    )
    assert b'"brokerAddrs":{"0":"127.0.0.1:10911"}' in (await client.invoke(addr, old)).body


@pytest_twisted.ensureDeferred
async def test_unknown_topic_is_17(addr, client):
    response = await client.invoke(addr, route_request("NoSuchTopic"))
    assert response.code == ResponseCode.TOPIC_NOT_EXIST
    assert response.remark.startswith("No topic route info in name server for the topic: NoSuchTopic")


@pytest_twisted.ensureDeferred
async def test_unknown_code_is_3(addr, client):
    response = await client.invoke(addr, request(9999))
    assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert "9999" in response.remark


@pytest_twisted.ensureDeferred
async def test_missing_required_header_is_system_error(addr, client):
    assert (await client.invoke(addr, request(RequestCode.GET_ROUTEINFO_BY_TOPIC))).code == ResponseCode.SYSTEM_ERROR
    put = request(RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k"})
    assert (await client.invoke(addr, put)).code == ResponseCode.SYSTEM_ERROR


@pytest_twisted.ensureDeferred
async def test_crc_mismatch_is_refused(addr, client):
    register = register_request("broker-a", BROKER, {"TopicTest": 4})
    register.ext_fields["bodyCrc32"] = "12345"
    response = await client.invoke(addr, register)
    assert (response.code, response.remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")
    assert (await client.invoke(addr, route_request("TopicTest"))).code == ResponseCode.TOPIC_NOT_EXIST


@pytest_twisted.ensureDeferred
async def test_undecodable_body_is_refused(addr, client):
    register = register_request("broker-a", BROKER, {"TopicTest": 4})
    register.body = b"{not json"
    register.ext_fields["bodyCrc32"] = "0"  # 0 skips the check
    response = await client.invoke(addr, register)
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert response.remark.startswith("Failed to decode RegisterBrokerBody")


@pytest_twisted.ensureDeferred
async def test_compressed_registration(addr, client):
    response = await client.invoke(addr, register_request("broker-a", BROKER, {"Zipped": 3}, compressed=True))
    assert response.code == ResponseCode.SUCCESS
    route = route_json(await client.invoke(addr, route_request("Zipped")))
    assert route["queueDatas"] == [
        {"brokerName": "broker-a", "perm": 6, "readQueueNums": 3, "topicSysFlag": 0, "writeQueueNums": 3}
    ]


@pytest_twisted.ensureDeferred
async def test_broker_connection_close_removes_its_routes(addr, client, namesrv):
    broker = RemotingClient()
    try:
        await broker.invoke(addr, register_request("broker-a", BROKER, {"TopicTest": 4}))
        assert (await client.invoke(addr, route_request("TopicTest"))).code == ResponseCode.SUCCESS
    finally:
        await broker.close()
    await wait_until(lambda: not namesrv.route_info_manager.broker_live_table)
    assert (await client.invoke(addr, route_request("TopicTest"))).code == ResponseCode.TOPIC_NOT_EXIST
    info = fastjson.loads((await client.invoke(addr, request(RequestCode.GET_BROKER_CLUSTER_INFO))).body)
    assert info == {"brokerAddrTable": {}, "clusterAddrTable": {}}


@pytest_twisted.ensureDeferred
async def test_scan_expires_silent_broker_and_closes_its_connection(namesrv_config):
    clock = task.Clock()
    controller = NamesrvController(namesrv_config, clock=clock)
    controller.startService()
    addr = f"127.0.0.1:{controller.port}"
    broker = RemotingClient()
    try:
        await broker.invoke(addr, register_request("broker-a", BROKER, {"TopicTest": 4}, counter=5))
        channel = await broker.get_channel(addr)
        clock.advance(100)  # scans since 5 s; the broker registered 100 s ago
        assert controller.route_info_manager.pick_up_topic_route_data("TopicTest") is not None
        # QUERY_DATA_VERSION with an unchanged version refreshes the broker, as a registration does.
        response = await broker.invoke(addr, query_data_version_request("broker-a", BROKER, 5))
        assert response.ext_fields == {"changed": "false"}
        assert fastjson.loads(response.body) == {"counter": 5, "timestamp": 1_700_000_000_000}
        clock.advance(100)  # 100 s after the refresh
        assert controller.route_info_manager.pick_up_topic_route_data("TopicTest") is not None
        clock.advance(25)  # 125 s after it
        assert controller.route_info_manager.pick_up_topic_route_data("TopicTest") is None
        await wait_until(lambda: not channel.connected_)
    finally:
        await broker.close()
        await controller.stopService()


@pytest_twisted.ensureDeferred
async def test_query_data_version_reports_change(addr, client):
    await client.invoke(addr, register_request("broker-a", BROKER, {"TopicTest": 4}, counter=5))
    response = await client.invoke(addr, query_data_version_request("broker-a", BROKER, 6))
    assert response.ext_fields == {"changed": "true"}


@pytest_twisted.ensureDeferred
async def test_slave_gets_master_and_adds_no_queue_data(addr, client):
    master = register_request("broker-a", BROKER, {"TopicTest": 4}, ha_server_addr="127.0.0.1:10912")
    assert (await client.invoke(addr, master)).ext_fields == {}
    slave = register_request(
        "broker-a", "127.0.0.1:10921", {"SlaveOnly": 1}, broker_id=1, ha_server_addr="127.0.0.1:10922"
    )
    response = await client.invoke(addr, slave)
    assert response.ext_fields == {"masterAddr": BROKER, "haServerAddr": "127.0.0.1:10912"}
    assert (await client.invoke(addr, route_request("SlaveOnly"))).code == ResponseCode.TOPIC_NOT_EXIST
    route = route_json(await client.invoke(addr, route_request("TopicTest")))
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": BROKER, "1": "127.0.0.1:10921"}


@pytest_twisted.ensureDeferred
async def test_incremental_registration_keeps_topics(addr, client):
    await client.invoke(addr, register_request("broker-a", BROKER, {"A": 4, "B": 4}, counter=1))
    await client.invoke(addr, register_request("broker-a", BROKER, {"C": 1}, counter=2))
    for topic in ("A", "B", "C"):
        assert (await client.invoke(addr, route_request(topic))).code == ResponseCode.SUCCESS
    body = (await client.invoke(addr, request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))).body
    assert sorted(fastjson.loads(body)["topicList"]) == ["A", "B", "C"]


@pytest_twisted.ensureDeferred
async def test_unregister_broker(addr, client):
    await client.invoke(addr, register_request("broker-a", BROKER, {"A": 4}))
    unregister = request(
        RequestCode.UNREGISTER_BROKER,
        {"brokerName": "broker-a", "brokerAddr": BROKER, "clusterName": CLUSTER, "brokerId": "0"},
    )
    assert (await client.invoke(addr, unregister)).code == ResponseCode.SUCCESS
    assert (await client.invoke(addr, route_request("A"))).code == ResponseCode.TOPIC_NOT_EXIST


@pytest_twisted.ensureDeferred
async def test_cluster_info_is_written_as_java_writes_it(addr, client):
    await client.invoke(addr, register_request("broker-a", BROKER, {"A": 4}))
    body = (await client.invoke(addr, request(RequestCode.GET_BROKER_CLUSTER_INFO))).body
    assert body == (
        b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"127.0.0.1:10911"},"brokerName":"broker-a",'
        b'"cluster":"DefaultCluster"}},"clusterAddrTable":{"DefaultCluster":["broker-a"]}}'
    )


@pytest_twisted.ensureDeferred
async def test_wipe_and_add_write_perm_counts(addr, client):
    await client.invoke(addr, register_request("broker-a", BROKER, {"A": 4, "B": 4}))
    wipe = await client.invoke(addr, request(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}))
    assert wipe.ext_fields == {"wipeTopicCount": "2"}
    assert route_json(await client.invoke(addr, route_request("A")))["queueDatas"][0]["perm"] == 4
    add = await client.invoke(addr, request(RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}))
    assert add.ext_fields == {"addTopicCount": "2"}
    assert route_json(await client.invoke(addr, route_request("A")))["queueDatas"][0]["perm"] == 6


@pytest_twisted.ensureDeferred
async def test_delete_topic(addr, client):
    await client.invoke(addr, register_request("broker-a", BROKER, {"A": 4, "B": 4}))
    elsewhere = request(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "A", "clusterName": "OtherCluster"})
    assert (await client.invoke(addr, elsewhere)).code == ResponseCode.SUCCESS
    assert (await client.invoke(addr, route_request("A"))).code == ResponseCode.SUCCESS
    await client.invoke(addr, request(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "A", "clusterName": CLUSTER}))
    assert (await client.invoke(addr, route_request("A"))).code == ResponseCode.TOPIC_NOT_EXIST
    await client.invoke(addr, request(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "B"}))
    assert (await client.invoke(addr, route_request("B"))).code == ResponseCode.TOPIC_NOT_EXIST


@pytest_twisted.ensureDeferred
async def test_topic_lists(addr, client):
    await client.invoke(addr, register_request("broker-a", BROKER, {"A": 4}))
    await client.invoke(addr, register_request("broker-b", "127.0.0.1:10931", {"B": 4}, cluster="Other"))
    by_cluster = await client.invoke(addr, request(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "Other"}))
    assert fastjson.loads(by_cluster.body) == {"topicList": ["B"]}
    system = fastjson.loads((await client.invoke(addr, request(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS))).body)
    assert sorted(system["topicList"]) == sorted([CLUSTER, "broker-a", "Other", "broker-b"])
    assert system["brokerAddr"] in (BROKER, "127.0.0.1:10931")
    for code in (
        RequestCode.GET_UNIT_TOPIC_LIST,
        RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST,
        RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST,
    ):
        assert (await client.invoke(addr, request(code))).body == b'{"topicList":[]}'


@pytest_twisted.ensureDeferred
async def test_kv_config_and_persistence_across_restart(namesrv_config, client):
    first = NamesrvController(namesrv_config)
    first.startService()
    addr = f"127.0.0.1:{first.port}"
    try:
        put = request(RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k1", "value": "v1"})
        assert (await client.invoke(addr, put)).code == ResponseCode.SUCCESS
        await client.invoke(addr, request(RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k2", "value": "v2"}))
        get = await client.invoke(addr, request(RequestCode.GET_KV_CONFIG, {"namespace": "ns", "key": "k1"}))
        assert (get.code, get.ext_fields) == (ResponseCode.SUCCESS, {"value": "v1"})
        delete = request(RequestCode.DELETE_KV_CONFIG, {"namespace": "ns", "key": "k2"})
        assert (await client.invoke(addr, delete)).code == ResponseCode.SUCCESS
        missing = await client.invoke(addr, request(RequestCode.GET_KV_CONFIG, {"namespace": "ns", "key": "k2"}))
        assert (missing.code, missing.remark) == (ResponseCode.QUERY_NOT_FOUND, "No config item, Namespace: ns Key: k2")
        listing = await client.invoke(addr, request(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "ns"}))
        assert listing.body == b'{"table":{"k1":"v1"}}'
        none = await client.invoke(addr, request(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "other"}))
        assert none.code == ResponseCode.QUERY_NOT_FOUND
    finally:
        await client.close()
        await first.stopService()

    second = NamesrvController(namesrv_config)
    second.startService()
    try:
        addr = f"127.0.0.1:{second.port}"
        get = await client.invoke(addr, request(RequestCode.GET_KV_CONFIG, {"namespace": "ns", "key": "k1"}))
        assert get.ext_fields == {"value": "v1"}
    finally:
        await client.close()
        await second.stopService()


@pytest_twisted.ensureDeferred
async def test_order_topic_config_reaches_brokers_and_routes(addr, client, namesrv):
    put = {"namespace": "ORDER_TOPIC_CONFIG", "key": "TopicTest", "value": "broker-a:4"}
    await client.invoke(addr, request(RequestCode.PUT_KV_CONFIG, put))
    response = await client.invoke(addr, register_request("broker-a", BROKER, {"TopicTest": 4}))
    assert response.body == b'{"table":{"TopicTest":"broker-a:4"}}'
    assert "orderTopicConf" not in route_json(await client.invoke(addr, route_request("TopicTest")))
    namesrv.config.orderMessageEnable = True
    assert route_json(await client.invoke(addr, route_request("TopicTest")))["orderTopicConf"] == "broker-a:4"


@pytest_twisted.ensureDeferred
async def test_get_and_update_namesrv_config(addr, client, namesrv, namesrv_config):
    shown = (await client.invoke(addr, request(RequestCode.GET_NAMESRV_CONFIG))).body.decode()
    assert "listenPort=0\n" in shown and "orderMessageEnable=false\n" in shown
    update = request(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=true\n")
    assert (await client.invoke(addr, update)).code == ResponseCode.SUCCESS
    assert namesrv.config.orderMessageEnable is True
    with open(namesrv_config.configStorePath) as saved:
        assert "orderMessageEnable=true\n" in saved.read()
    refused = request(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"kvConfigPath=../elsewhere.json\n")
    response = await client.invoke(addr, refused)
    assert (response.code, response.remark) == (ResponseCode.NO_PERMISSION, "Can not update config in black list.")
    bad = request(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"scanNotActiveBrokerInterval=often\n")
    response = await client.invoke(addr, bad)
    assert response.code == ResponseCode.SYSTEM_ERROR and "scanNotActiveBrokerInterval" in response.remark
