"""``rocketmq-gateway admin``: mqadmin's subcommands against a real NameServer and Broker, with real
producers and consumers (the command runs in a thread while this reactor serves it)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from typing import Any
from unittest import mock

import pytest_twisted
from twisted.internet import reactor
from twisted.internet.threads import deferToThread

from gateway.admin.cli import main
from gateway.broker.config import load_broker_config
from gateway.broker.controller import BrokerController
from gateway.client import Producer, build_message
from gateway.tls import certs
from tests.acl.conftest import PLAIN_ACL_YML
from tests.acl.test_broker_acl import start_broker
from tests.client.conftest import Servers, group_name, servers, sleep, wait_until  # noqa: F401
from tests.client.test_push_consumer import Recorder, push_consumer


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    # Tables fit the terminal: pin a width wide enough for whole headers (pytest-xdist's workers say 80).
    columns = mock.patch.dict(os.environ, {"COLUMNS": "200"})
    with columns, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


async def admin(servers: Servers, *argv: str, ok: bool = True) -> tuple[int, str, str]:  # noqa: F811
    command, *rest = argv
    code, out, err = await deferToThread(_run, [command, "-n", servers.namesrv_addr, *rest])
    if ok:
        assert code == 0, err
    return code, out, err


async def admin_json(servers: Servers, *argv: str) -> Any:  # noqa: F811
    _, out, _ = await admin(servers, *argv, "--json")
    return json.loads(out)


@pytest_twisted.ensureDeferred
async def test_topics_messages_and_broker_tools(servers: Servers) -> None:  # noqa: F811
    (row,) = await admin_json(servers, "clusterList")
    assert (row["cluster"], row["brokerName"], row["bid"], row["activated"]) == ("DefaultCluster", "broker-a", 0, True)
    assert isinstance(row["inTPS"], float) and isinstance(row["outTPS"], float)
    _, out, _ = await admin(servers, "clusterList")
    assert out.splitlines()[0].split()[:3] == ["cluster", "brokerName", "bid"]

    topic = f"AdmTopic{group_name('')}"
    _, out, _ = await admin(servers, "updateTopic", "-c", "DefaultCluster", "-t", topic, "-r", "4", "-w", "4")
    assert f"create topic to {servers.broker_addr} success." in out
    await wait_until(lambda: servers.broker.topics.select(topic) is not None)
    # The broker registers the new topic with the name server on its own, a moment later.
    for _ in range(100):
        if topic in await admin_json(servers, "topicList"):
            break
        await sleep(0.05)
    assert topic in await admin_json(servers, "topicList")
    route = await admin_json(servers, "topicRoute", "-t", topic)
    assert route["queueDatas"][0]["writeQueueNums"] == 4

    (sent,) = await admin_json(servers, "sendMessage", "-t", topic, "-p", "hello", "-k", "k1", "-c", "TagA")
    assert sent["sendStatus"] == "SEND_OK" and isinstance(sent["queueId"], int)
    (msg,) = await admin_json(servers, "queryMsgById", "-i", sent["offsetMsgId"])
    assert (msg["body"], msg["keys"], msg["tags"]) == ("hello", "k1", "TagA")
    (found,) = await admin_json(servers, "queryMsgByKey", "-t", topic, "-k", "k1")
    assert found["msgId"] == sent["msgId"]
    (found,) = await admin_json(servers, "queryMsgByUniqueKey", "-t", topic, "-i", sent["msgId"])
    assert found["offsetMsgId"] == sent["offsetMsgId"]
    rows = await admin_json(servers, "topicStatus", "-t", topic)
    assert len(rows) == 4 and sum(r["maxOffset"] for r in rows) == 1
    _, out, err = await admin(servers, "printMsg", "-t", topic, "--json")
    assert [m["body"] for m in json.loads(out)] == ["hello"] and "queue 4/4 read" in err
    assert [m["msgId"] for m in await admin_json(servers, "consumeMessage", "-t", topic, "-c", "5")] == [sent["msgId"]]

    status = await admin_json(servers, "brokerStatus", "-b", servers.broker_addr)
    assert int(status[servers.broker_addr]["msgPutTotalTodayNow"]) >= 1
    config = await admin_json(servers, "getBrokerConfig", "-c", "DefaultCluster")
    assert config[servers.broker_addr]["brokerName"] == "broker-a"
    await admin(servers, "updateBrokerConfig", "-b", servers.broker_addr, "-k", "maxMessageSize", "-v", "2097152")
    config = await admin_json(servers, "getBrokerConfig", "-b", servers.broker_addr)
    assert config[servers.broker_addr]["maxMessageSize"] == "2097152"
    code, _, err = await admin(
        servers, "updateBrokerConfig", "-b", servers.broker_addr, "-k", "storePathRootDir", "-v", "/tmp/x", ok=False
    )
    assert code == 1 and "CODE: 16 DESC: Can not update config in black list." in err

    group = group_name("admgroup")
    await admin(servers, "updateSubGroup", "-c", "DefaultCluster", "-g", group, "-r", "3")
    await wait_until(lambda: servers.broker.groups.find(group) is not None)
    assert servers.broker.groups.find(group).retry_max_times == 3
    policy = '{"type":"CUSTOMIZED","customizedRetryPolicy":{"next":[1000,2000]}}'
    await admin(servers, "updateSubGroup", "-b", servers.broker_addr, "-g", group, "-o", "true", "-p", policy)
    await wait_until(lambda: servers.broker.groups.find(group).consume_message_orderly)
    assert servers.broker.groups.find(group).group_retry_policy.customized_retry_policy.next == (1000, 2000)
    code, _, err = await admin(servers, "updateSubGroup", "-b", servers.broker_addr, "-g", group, "-p", "{", ok=False)
    assert code == 1 and "--groupRetryPolicy: Expecting property name enclosed in double quotes" in err
    await admin(servers, "deleteSubGroup", "-b", servers.broker_addr, "-g", group)
    await wait_until(lambda: group not in servers.broker.groups.table)

    await admin(servers, "deleteTopic", "-t", topic, "-c", "DefaultCluster")
    assert topic not in await admin_json(servers, "topicList")
    assert servers.broker.topics.select(topic) is None


@pytest_twisted.ensureDeferred
async def test_consumer_tools_and_trace(servers: Servers) -> None:  # noqa: F811
    topic = await servers.topic(2)
    group = group_name("admcg")
    producer_group = group_name("admpg")
    producer = Producer(producer_group, servers.namesrv_addr, enable_msg_trace=True)
    await producer.start()
    recorder = Recorder()
    consumer = await push_consumer(servers, group, topic, recorder)
    try:
        results = [await producer.send(build_message(topic, b"m%d" % i)) for i in range(6)]
        await wait_until(lambda: len(recorder.counts) == 6, what="6 consumed")
        await consumer.persist_consumer_offset()
        await wait_until(lambda: sum(servers.broker.offsets.query_offset(group, topic, q) for q in (0, 1)) == 6)

        progress = await admin_json(servers, "consumerProgress", "-g", group, "-t", topic)
        rows = progress["offsetTable"]
        assert sum(r["brokerOffset"] for r in rows) == 6 and sum(r["diff"] for r in rows) == 0 == progress["diffTotal"]
        _, out, _ = await admin(servers, "consumerProgress", "-g", group)
        assert "Diff Total: 0" in out
        held = await admin_json(servers, "consumerProgress", "-g", group, "-t", topic, "-s")
        assert [r["clientIP"] for r in held["offsetTable"]] == [consumer.client.client_id.split("@")[0]] * 2
        connection = await admin_json(servers, "consumerConnection", "-g", group)
        (conn,) = connection["connectionSet"]
        assert conn["clientId"] == consumer.client.client_id and conn["language"] == "PYTHON"
        assert (connection["consumeType"], connection["messageModel"]) == ("CONSUME_PASSIVELY", "CLUSTERING")
        await producer.client.send_heartbeat_to_all_brokers()  # the 30 s heartbeat, now that it knows the broker
        (conn,) = await admin_json(servers, "producerConnection", "-g", producer_group, "-t", topic)
        assert conn["clientId"] == producer.client.client_id

        # Back to the start: every message is consumed again.
        _, out, err = await admin(servers, "resetOffsetByTime", "-g", group, "-t", topic, "-s", "0", "--json")
        assert sorted(r["offset"] for r in json.loads(out)) == [0, 0] and "2 queue(s) reset" in err
        await wait_until(lambda: set(recorder.counts.values()) == {2}, what="every message consumed twice")

        msg_id = results[0].msg_id
        await wait_until(lambda: servers.broker.topics.select("RMQ_SYS_TRACE_TOPIC") is not None)
        for _ in range(100):
            _, out, _ = await admin(servers, "queryMsgTraceById", "-i", msg_id)
            if "Pub" in out:
                break
            await sleep(0.05)
        assert "#ProducerGroup" in out and producer_group in out
    finally:
        await consumer.shutdown()
        await producer.shutdown()


def test_entry_points_print_usage() -> None:
    for argv in ([sys.executable, "-m", "gateway.admin", "--help"], [sys.executable, "-m", "gateway", "admin", "-h"]):
        result = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
        assert "resetOffsetByTime" in result.stdout and "queryMsgTraceById" in result.stdout


@pytest_twisted.ensureDeferred
async def test_acl_options_sign_the_requests(tmp_path) -> None:
    """Against a broker with ACL on: an admin account's signature lets updateTopic through; none is refused."""
    conf = tmp_path / "home" / "conf"
    conf.mkdir(parents=True)
    (conf / "plain_acl.yml").write_text(PLAIN_ACL_YML)
    broker = await start_broker(tmp_path, aclEnable="true", rocketmqHome=str(tmp_path / "home"))
    try:
        addr = broker.config.broker_addr
        argv = ["updateTopic", "-n", "127.0.0.1:1", "-b", addr, "-t", "SignedTopic"]
        code, _, err = await deferToThread(_run, argv)
        assert code == 1 and "No accessKey is configured" in err
        code, _, err = await deferToThread(_run, [*argv, "--accessKey", "RocketMQ", "--secretKey", "12345678"])
        assert code == 1 and "Need admin permission" in err
        code, out, err = await deferToThread(_run, [*argv, "--accessKey", "rocketmq2", "--secretKey", "12345678"])
        assert code == 0 and f"create topic to {addr} success." in out, err
        assert broker.topics.select("SignedTopic") is not None
    finally:
        await broker.stopService()


@pytest_twisted.ensureDeferred
async def test_tls_options(tmp_path) -> None:
    """Against a broker that requires mutual TLS: --tls with the CA and a client certificate gets through."""
    dev = certs.write_dev_pki(tmp_path / "pki")
    cfg, store_cfg = load_broker_config(
        None,
        {"bindAddress": "127.0.0.1", "brokerIP1": "127.0.0.1", "listenPort": "0",
         "storePathRootDir": str(tmp_path / "store")},
    )  # fmt: skip
    broker = BrokerController(cfg, store_cfg, reactor, dev.server_properties())
    broker.startService()
    try:
        argv = ["brokerStatus", "-n", "127.0.0.1:1", "-b", cfg.broker_addr, "--json"]
        code, _, err = await deferToThread(_run, argv)
        assert code == 1, "a plain connection must not get through"
        code, _, err = await deferToThread(_run, [*argv, "--tls", "--tlsTrustCertPath", str(tmp_path / "none.pem")])
        (error,) = json.loads(err)["errors"]
        assert code == 1 and error["error"] == f"--tlsTrustCertPath {tmp_path / 'none.pem'}: " + (
            "[Errno 2] No such file or directory"
        )
        tls = ["--tls", "--tlsTrustCertPath", dev.path("ca.pem"), "--tlsCertPath", dev.path("client.pem"),
               "--tlsKeyPath", dev.path("client.key")]  # fmt: skip
        code, out, err = await deferToThread(_run, [*argv, *tls])
        assert code == 0, err
        assert json.loads(out)[cfg.broker_addr]["brokerActive"] is True
    finally:
        await broker.stopService()
