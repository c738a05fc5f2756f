"""A broker with aclEnable=true on a real port: every attack refused as Apache refuses it, admin requests, reload.

Attacks tried (each must come back as code 1, SYSTEM_ERROR, with Apache's reason): wrong secret, a field
changed after signing, a changed body, no signature, unknown access key, no access key, a signed request
replayed with another topic, a denied topic, a denied group, an admin request by a normal account, a
connection from outside the whitelists.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_twisted
import yaml
from twisted.internet import reactor, threads
from twisted.internet.task import deferLater

from gateway.acl.signer import SessionCredentials
from gateway.broker.config import load_broker_config
from gateway.broker.controller import BrokerController
from gateway.remoting.client import RemotingClient
from gateway.remoting.codec import FrameDecoder, encode
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import CreateTopicRequestHeader

from .conftest import ADMIN, USER, pull_request, send_request, signed

ACL_EXCEPTION = "org.apache.rocketmq.acl.common.AclException: "


async def start_broker(root: Path, **overrides: str) -> BrokerController:
    cfg, store_cfg = load_broker_config(
        None,
        {
            "bindAddress": "127.0.0.1",
            "brokerIP1": "127.0.0.1",
            "brokerName": "broker-acl",
            "listenPort": "0",
            "storePathRootDir": str(root / "store"),
            "mappedFileSizeCommitLog": str(1 << 20),
            **overrides,
        },
    )
    broker = BrokerController(cfg, store_cfg, reactor)
    broker.startService()
    return broker


@pytest_twisted.async_yield_fixture
async def client() -> AsyncIterator[RemotingClient]:
    c = RemotingClient(reactor)
    yield c
    await c.close()


@pytest_twisted.async_yield_fixture
async def broker(tmp_path: Path, home: Path, client: RemotingClient) -> AsyncIterator[BrokerController]:
    b = await start_broker(tmp_path, aclEnable="true", rocketmqHome=str(home))
    for topic in ("topicA", "topicB", "topicC"):
        header = CreateTopicRequestHeader(
            topic=topic,
            default_topic="TBW102",
            read_queue_nums=1,
            write_queue_nums=1,
            perm=6,
            topic_filter_type="SINGLE_TAG",
            topic_sys_flag=0,
            order=False,
        )
        request = signed(RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header.encode()), ADMIN)
        assert (await client.invoke(b.config.broker_addr, request)).code == 0
    yield b
    await b.stopService()


def blocking_call(port: int, request: RemotingCommand, source: str) -> RemotingCommand:
    request.opaque = 7
    with socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0)) as sock:
        sock.sendall(encode(request))
        decoder = FrameDecoder()
        while True:
            data = sock.recv(65536)
            if not data:
                raise ConnectionError("closed")
            for cmd in decoder.feed(data):
                return cmd


async def call_from(broker: BrokerController, request: RemotingCommand, source: str) -> RemotingCommand:
    """One request from the local address ``source`` (127.0.0.x), off the reactor thread."""
    return await threads.deferToThread(blocking_call, broker.config.listenPort, request, source)


def assert_denied(response: RemotingCommand, reason: str) -> None:
    assert response.code == ResponseCode.SYSTEM_ERROR, (response.code, response.remark)
    assert response.remark is not None and response.remark.startswith(ACL_EXCEPTION + reason), response.remark


def _tamper(request: RemotingCommand, **ext: str) -> RemotingCommand:
    assert request.ext_fields is not None
    request.ext_fields.update(ext)
    return request


def _tamper_body(request: RemotingCommand) -> RemotingCommand:
    request.body = b"evil"
    return request


def _unsigned(request: RemotingCommand) -> RemotingCommand:
    request.ext_fields = {**(request.ext_fields or {}), "AccessKey": "RocketMQ"}
    return request


ATTACKS = {
    "wrong secret": (
        lambda: signed(send_request("topicB"), SessionCredentials("RocketMQ", "not-the-secret")),
        "Check signature failed for accessKey=RocketMQ",
    ),
    "field changed after signing": (lambda: _tamper(signed(send_request("topicB")), e="1"), "Check signature failed"),
    "body changed after signing": (lambda: _tamper_body(signed(send_request("topicB"))), "Check signature failed"),
    "no signature": (lambda: _unsigned(send_request("topicB")), "Check signature failed for accessKey=RocketMQ"),
    "unknown access key": (
        lambda: signed(send_request("topicB"), SessionCredentials("stranger", "12345678")),
        "No acl config for stranger",
    ),
    "no access key": (lambda: send_request("topicB"), "No accessKey is configured"),
    "denied topic": (lambda: signed(send_request("topicA")), "No default permission for topic:topicA"),
    "topic outside the account's perms": (
        lambda: signed(send_request("topicZ")),
        "No default permission for topic:topicZ",
    ),
    "denied group": (lambda: signed(pull_request("topicC", "groupA")), "No default permission for group:groupA"),
    "admin request by a normal account": (
        lambda: signed(RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "mine"})),
        "Need admin permission for request code=17, but accessKey=RocketMQ is not",
    ),
    "store cleaning by a normal account": (
        lambda: signed(RemotingCommand.request(RequestCode.CLEAN_UNUSED_TOPIC, {})),
        "Need admin permission for request code=316, but accessKey=RocketMQ is not",
    ),
    "ACL change by a normal account": (
        lambda: signed(
            RemotingCommand.request(
                RequestCode.UPDATE_AND_CREATE_ACL_CONFIG,
                {"accessKey": "RocketMQ", "secretKey": "12345678", "admin": "true"},
            )
        ),
        "Need admin permission for request code=50",
    ),
}


@pytest.mark.parametrize("attack", list(ATTACKS), ids=list(ATTACKS))
@pytest_twisted.ensureDeferred
async def test_attack_is_refused(broker: BrokerController, client: RemotingClient, attack: str) -> None:
    build, reason = ATTACKS[attack]
    assert_denied(await client.invoke(broker.config.broker_addr, build()), reason)


@pytest_twisted.ensureDeferred
async def test_signed_requests_pass_and_a_replay_with_another_topic_does_not(
    broker: BrokerController, client: RemotingClient
) -> None:
    addr = broker.config.broker_addr
    sent = signed(send_request("topicB"))
    ok = await client.invoke(addr, sent)
    assert ok.code == 0, ok.remark
    # Past the ACL the broker answers for itself (no subscription sent: 24, SUBSCRIPTION_NOT_EXIST).
    pulled = await client.invoke(addr, signed(pull_request("topicB", "groupB")))
    assert pulled.code == ResponseCode.SUBSCRIPTION_NOT_EXIST, pulled.remark
    # The same signed request again is served (no replay protection in RocketMQ); with another topic it is not.
    assert (await client.invoke(addr, sent)).code == 0
    assert sent.ext_fields is not None
    replay = RemotingCommand.request(sent.code, {**sent.ext_fields, "b": "topicC"}, sent.body, language="JAVA")
    assert_denied(await client.invoke(addr, replay), "Check signature failed for accessKey=RocketMQ")


@pytest_twisted.ensureDeferred
async def test_whitelists(broker: BrokerController, client: RemotingClient) -> None:
    # loopback-user's whiteRemoteAddress is 127.0.0.1: no signature needed from there, needed from 127.0.0.2.
    unsigned = {"AccessKey": "loopback-user"}
    inside = await call_from(
        broker, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO, dict(unsigned)), "127.0.0.1"
    )
    assert inside.code == 0
    outside = await call_from(
        broker, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO, dict(unsigned)), "127.0.0.2"
    )
    assert_denied(outside, "Check signature failed for accessKey=loopback-user")
    # A global white address lets anonymous requests in, from there only.
    update = RemotingCommand.request(RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, {"globalWhiteAddrs": "127.0.0.1"})
    assert (await client.invoke(broker.config.broker_addr, signed(update, ADMIN))).code == 0
    anonymous = RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)
    assert (await call_from(broker, anonymous, "127.0.0.1")).code == 0
    assert_denied(await call_from(broker, RemotingCommand.request(28), "127.0.0.2"), "No accessKey is configured")


@pytest_twisted.ensureDeferred
async def test_denied_oneway_gets_no_answer(broker: BrokerController, client: RemotingClient) -> None:
    channel = await client.get_channel(broker.config.broker_addr)
    channel.invoke_oneway(send_request("topicB"))
    before = broker.put_total
    assert (await channel.invoke(signed(send_request("topicB")), 3)).code == 0
    assert broker.put_total == before + 1


@pytest_twisted.ensureDeferred
async def test_acl_admin_requests(broker: BrokerController, client: RemotingClient, home: Path) -> None:
    addr = broker.config.broker_addr
    newcomer = SessionCredentials("newcomer", "newcomer-secret")
    assert_denied(await client.invoke(addr, signed(send_request("topicB"), newcomer)), "No acl config for newcomer")
    create = RemotingCommand.request(
        RequestCode.UPDATE_AND_CREATE_ACL_CONFIG,
        {
            "accessKey": "newcomer",
            "secretKey": "newcomer-secret",
            "admin": "false",
            "defaultTopicPerm": "DENY",
            "topicPerms": "topicB=PUB,topicC=SUB",
            "groupPerms": "groupB=SUB",
        },
    )
    assert (await client.invoke(addr, signed(create, ADMIN))).code == 0
    assert (await client.invoke(addr, signed(send_request("topicB"), newcomer))).code == 0
    assert_denied(await client.invoke(addr, signed(send_request("topicC"), newcomer)), "No default permission")
    saved = yaml.safe_load((home / "conf" / "plain_acl.yml").read_text())
    assert saved["accounts"][-1]["topicPerms"] == ["topicB=PUB", "topicC=SUB"]

    version = await client.invoke(addr, signed(RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_ACL_INFO), ADMIN))
    assert version.code == 0 and version.ext_fields is not None
    assert version.ext_fields["brokerName"] == "broker-acl"
    assert version.ext_fields["brokerAddr"] == addr
    assert version.ext_fields["clusterName"] == "DefaultCluster"
    plain = str(home / "conf" / "plain_acl.yml")
    assert f'"{plain}":{{"counter":1,' in version.ext_fields["allAclFileVersion"]
    config = await client.invoke(
        addr, signed(RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG), ADMIN)
    )
    assert (
        b'"accessKey":"newcomer"' in config.body and b'"globalWhiteAddrs":["10.10.103.*","192.168.0.*"]' in config.body
    )

    delete = RemotingCommand.request(RequestCode.DELETE_ACL_CONFIG, {"accessKey": "newcomer"})
    assert (await client.invoke(addr, signed(delete, ADMIN))).code == 0
    assert_denied(await client.invoke(addr, signed(send_request("topicB"), newcomer)), "No acl config for newcomer")
    again = await client.invoke(
        addr, signed(RemotingCommand.request(RequestCode.DELETE_ACL_CONFIG, {"accessKey": "newcomer"}), ADMIN)
    )
    assert (again.code, again.remark) == (
        ResponseCode.DELETE_ACL_CONFIG_FAILED,
        "The accesskey[newcomer] corresponding to accessConfig has been deleted failed.",
    )
    short = RemotingCommand.request(
        RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, {"accessKey": "newuser2", "secretKey": "short"}
    )
    refused = await client.invoke(addr, signed(short, ADMIN))
    assert (refused.code, refused.remark) == (
        ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED,
        "The accessKey=newuser2 and secretKey=short cannot be null and length should longer than 6",
    )
    elsewhere = RemotingCommand.request(
        RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, {"globalWhiteAddrs": "*", "aclFileFullPath": "/etc/passwd"}
    )
    assert (
        await client.invoke(addr, signed(elsewhere, ADMIN))
    ).code == ResponseCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED


@pytest_twisted.ensureDeferred
async def test_file_changes_are_picked_up(broker: BrokerController, client: RemotingClient, home: Path) -> None:
    path = home / "conf" / "plain_acl.yml"
    data = yaml.safe_load(path.read_text())
    data["accounts"].append({"accessKey": "hot-user", "secretKey": "hot-secret", "defaultTopicPerm": "PUB"})
    path.write_text(yaml.safe_dump(data))
    hot = SessionCredentials("hot-user", "hot-secret")
    for _ in range(60):
        response = await client.invoke(broker.config.broker_addr, signed(send_request("topicB"), hot))
        if response.code == 0:
            break
        await deferLater(reactor, 0.1, lambda: None)
    assert response.code == 0, response.remark
    # A broken file is reported and changes nothing.
    path.write_text("accounts:\n  - accessKey: [")
    await deferLater(reactor, 2.5, lambda: None)
    assert (await client.invoke(broker.config.broker_addr, signed(send_request("topicB"), hot))).code == 0


@pytest_twisted.ensureDeferred
async def test_acl_off_serves_signed_requests(tmp_path: Path, client: RemotingClient) -> None:
    broker = await start_broker(tmp_path)
    try:
        assert broker.acl is None and broker.dispatcher.hooks == []
        response = await client.invoke(broker.config.broker_addr, signed(send_request("SignedTopic"), USER))
        assert response.code == 0, response.remark
        response = await client.invoke(broker.config.broker_addr, send_request("SignedTopic"))
        assert response.code == 0
    finally:
        await broker.stopService()
