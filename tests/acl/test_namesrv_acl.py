"""A NameServer with aclEnable=true on a real port: reads stay open; registering over a broker, wiping its
write permission, deleting a topic, unregistering, KV and config changes need a signed admin account or a
whitelisted address. Brokers sign with innerClientAuthenticationCredentials, the admin CLI with its keys."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import reactor, threads
from twisted.internet.task import deferLater

from compat_tests.servers import free_port
from gateway.acl.signer import SessionCredentials
from gateway.controller.config import load_controller_config
from gateway.namesrv.service import NamesrvController
from gateway.remoting import fastjson
from gateway.remoting.client import RemotingClient
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from tests.broker.conftest import BrokerUnderTest
from tests.namesrv.conftest import loopback_namesrv_config
from tests.namesrv.support import CLUSTER, register_request, route_json, route_request

from .conftest import ADMIN, USER, signed
from .test_broker_acl import assert_denied, blocking_call, client  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
BROKER = "127.0.0.1:10911"


@pytest_twisted.async_yield_fixture
async def namesrv(tmp_path: Path, home: Path) -> AsyncIterator[NamesrvController]:
    controller = NamesrvController(
        loopback_namesrv_config(tmp_path / "namesrv", aclEnable="true", rocketmqHome=str(home))
    )
    controller.startService()
    yield controller
    await controller.stopService()


def addr_of(namesrv: NamesrvController) -> str:
    return f"127.0.0.1:{namesrv.port}"


def request(code: int, ext: dict[str, str] | None = None, body: bytes = b"") -> RemotingCommand:
    return RemotingCommand.request(code, ext or {}, body, language="JAVA")


# What a peer could do to a cluster through a NameServer without ACL.
ATTACKS = {
    "register over the broker": lambda: register_request("broker-a", "127.0.0.1:6666", {"TopicTest": 4}),
    "unregister the broker": lambda: request(
        RequestCode.UNREGISTER_BROKER,
        {"brokerName": "broker-a", "brokerAddr": BROKER, "clusterName": CLUSTER, "brokerId": "0"},
    ),
    "wipe its write permission": lambda: request(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}),
    "delete the topic": lambda: request(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "TopicTest"}),
    "put a KV value": lambda: request(RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k", "value": "v"}),
    "change the config": lambda: request(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=true\n"),
}


async def routes_kv_and_config(client: RemotingClient, addr: str) -> tuple[object, ...]:  # noqa: F811
    """What the attacks would change, read (unsigned) as anyone may."""
    route = await client.invoke(addr, route_request("TopicTest"))
    kv = await client.invoke(addr, request(RequestCode.GET_KV_CONFIG, {"namespace": "ns", "key": "k"}))
    return route.code, route_json(route)["brokerDatas"], route_json(route)["queueDatas"], kv.code


@pytest_twisted.ensureDeferred
async def test_writes_need_a_signed_admin_reads_stay_open(
    namesrv: NamesrvController,
    client: RemotingClient,  # noqa: F811
) -> None:
    addr = addr_of(namesrv)
    registered = await client.invoke(addr, signed(register_request("broker-a", BROKER, {"TopicTest": 4}), ADMIN))
    assert registered.code == ResponseCode.SUCCESS, registered.remark
    before = await routes_kv_and_config(client, addr)
    assert before[0] == ResponseCode.SUCCESS and before[-1] == ResponseCode.QUERY_NOT_FOUND

    for name, build in ATTACKS.items():
        anonymous = await client.invoke(addr, build())
        assert_denied(anonymous, "No accessKey is configured")
        code = build().code
        by_user = await client.invoke(addr, signed(build(), USER))
        assert_denied(by_user, f"Need admin permission for request code={code}, but accessKey=RocketMQ is not")
        forged = await client.invoke(addr, signed(build(), SessionCredentials(ADMIN.access_key, "guessed-secret")))
        assert_denied(forged, "Check signature failed for accessKey=rocketmq2")
        assert await routes_kv_and_config(client, addr) == before, name
    assert namesrv.config.orderMessageEnable is False

    # Reads need nothing, not even a valid signature.
    for read in (
        route_request("TopicTest"),
        request(RequestCode.GET_BROKER_CLUSTER_INFO),
        request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER),
        signed(request(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": CLUSTER}), SessionCredentials("x" * 7, "y" * 7)),
    ):
        response = await client.invoke(addr, read)
        assert response.code == ResponseCode.SUCCESS, (read.code, response.remark)

    # The admin may.
    wiped = await client.invoke(addr, signed(ATTACKS["wipe its write permission"](), ADMIN))
    assert (wiped.code, (wiped.ext_fields or {}).get("wipeTopicCount")) == (ResponseCode.SUCCESS, "1")
    assert (await client.invoke(addr, signed(ATTACKS["put a KV value"](), ADMIN))).code == ResponseCode.SUCCESS
    assert (await client.invoke(addr, signed(ATTACKS["delete the topic"](), ADMIN))).code == ResponseCode.SUCCESS
    assert (await client.invoke(addr, route_request("TopicTest"))).code == ResponseCode.TOPIC_NOT_EXIST


@pytest_twisted.ensureDeferred
async def test_an_account_whitelisted_address_needs_no_signature(namesrv: NamesrvController) -> None:
    # loopback-user (not an admin) is whitelisted for 127.0.0.1: as on the broker, it passes from there only.
    def register_from(source: str) -> RemotingCommand:
        req = register_request("broker-w", "127.0.0.1:7777", {"WhiteTopic": 1})
        req.ext_fields = {**(req.ext_fields or {}), "AccessKey": "loopback-user"}
        return blocking_call(namesrv.port, req, source)

    assert_denied(
        await threads.deferToThread(register_from, "127.0.0.2"), "Check signature failed for accessKey=loopback-user"
    )
    assert "WhiteTopic" not in namesrv.route_info_manager.topic_queue_table
    # (Served; the route goes again with the connection, as a broker's does.)
    assert (await threads.deferToThread(register_from, "127.0.0.1")).code == ResponseCode.SUCCESS


@pytest_twisted.ensureDeferred
async def test_a_broker_signing_with_inner_credentials_registers_an_unsigned_one_does_not(
    tmp_path: Path,
    namesrv: NamesrvController,
    client: RemotingClient,  # noqa: F811
) -> None:
    common = {"namesrvAddr": addr_of(namesrv), "autoCreateTopicEnable": "false"}
    credentials = fastjson.dumps({"accessKey": ADMIN.access_key, "secretKey": ADMIN.secret_key}).decode()
    signing = BrokerUnderTest(
        tmp_path / "signing",
        client,
        brokerName="broker-signing",
        innerClientAuthenticationCredentials=credentials,
        **common,
    )
    unsigned = BrokerUnderTest(tmp_path / "unsigned", client, brokerName="broker-unsigned", **common)
    try:
        await signing.start().when_ready()
        # Never ready (no NameServer accepts it): wait for one registration's answer instead.
        await unsigned.start().registration.register_all()
        info = await client.invoke(addr_of(namesrv), request(RequestCode.GET_BROKER_CLUSTER_INFO))
        assert set(fastjson.loads(info.body)["brokerAddrTable"]) == {"broker-signing"}
        await signing.stop()
        # Its signed UNREGISTER_BROKER on the way out is served too.
        info = await client.invoke(addr_of(namesrv), request(RequestCode.GET_BROKER_CLUSTER_INFO))
        assert fastjson.loads(info.body)["brokerAddrTable"] == {}
    finally:
        await signing.stop()
        await unsigned.stop()


def admin_cli(namesrv_port: int, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCKETMQ_")}
    return subprocess.run(
        [sys.executable, "-m", "gateway.admin", *args, "-n", f"127.0.0.1:{namesrv_port}"],
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest_twisted.ensureDeferred
async def test_the_admin_cli_signs_name_server_requests(
    namesrv: NamesrvController,
    client: RemotingClient,  # noqa: F811
) -> None:
    addr = addr_of(namesrv)
    registered = await client.invoke(addr, signed(register_request("broker-a", BROKER, {"TopicTest": 4}), ADMIN))
    assert registered.code == ResponseCode.SUCCESS
    # A cluster with no brokers: deleteTopic then only asks the name server.
    delete = ("deleteTopic", "-t", "TopicTest", "-c", "NoBrokersHere")
    refused = await threads.deferToThread(admin_cli, namesrv.port, *delete)
    assert refused.returncode == 1
    assert refused.stderr.startswith(
        f"deleteTopic command failed: DELETE_TOPIC_IN_NAMESRV to {addr}: CODE: 1 DESC: "
        "org.apache.rocketmq.acl.common.AclException: No accessKey is configured"
    ), refused.stderr
    assert (await client.invoke(addr, route_request("TopicTest"))).code == ResponseCode.SUCCESS
    keys = ("--accessKey", ADMIN.access_key, "--secretKey", ADMIN.secret_key)
    done = await threads.deferToThread(admin_cli, namesrv.port, *delete, *keys)
    assert done.returncode == 0, done.stderr
    assert (await client.invoke(addr, route_request("TopicTest"))).code == ResponseCode.TOPIC_NOT_EXIST


def run_namesrv(tmp_path: Path, *lines: str) -> subprocess.CompletedProcess[str]:
    conf = tmp_path / "namesrv.properties"
    conf.write_text("\n".join(["listenPort=0", "bindAddress=127.0.0.1", "aclEnable=true", *lines]) + "\n")
    env = {k: v for k, v in os.environ.items() if k != "ROCKETMQ_HOME"}
    return subprocess.run(
        [sys.executable, "-m", "gateway.namesrv", "-c", str(conf)],
        cwd=ROOT,
        env={**env, "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ((), "mqnamesrv: aclEnable=true needs rocketmqHome or ROCKETMQ_HOME to find plain_acl.yml\n"),
        (
            ("rocketmqHome={home}",),
            "mqnamesrv: ACL configuration: {home}/conf/plain_acl.yml: The accessKey=short and secretKey=short cannot",
        ),
    ],
    ids=["no home", "bad account"],
)
def test_unusable_acl_settings_stop_the_name_server_in_one_line(
    tmp_path: Path, lines: tuple[str, ...], message: str
) -> None:
    home = tmp_path / "home"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "plain_acl.yml").write_text("accounts:\n  - accessKey: short\n    secretKey: short\n")
    result = run_namesrv(tmp_path, *(line.format(home=home) for line in lines))
    assert result.returncode == 1
    assert result.stderr.startswith(message.format(home=home)) and result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr


@pytest_twisted.ensureDeferred
async def test_a_signing_broker_gets_its_role_from_the_embedded_controller(tmp_path: Path, home: Path) -> None:
    ns_cfg = loopback_namesrv_config(
        tmp_path / "namesrv", aclEnable="true", rocketmqHome=str(home), enableControllerInNamesrv="true"
    )
    ctl_cfg = load_controller_config(
        None, {"controllerDLegerPeers": f"n0-127.0.0.1:{free_port()}", "controllerStorePath": str(tmp_path / "ctl")}
    )
    namesrv = NamesrvController(ns_cfg, reactor, controller_config=ctl_cfg)
    namesrv.startService()
    addr = addr_of(namesrv)
    remoting = RemotingClient(reactor)
    credentials = fastjson.dumps({"accessKey": ADMIN.access_key, "secretKey": ADMIN.secret_key}).decode()
    broker = BrokerUnderTest(
        tmp_path / "broker",
        remoting,
        brokerName="broker-acl-ctl",
        namesrvAddr=addr,
        enableControllerMode="true",
        controllerAddr=addr,
        brokerHeartbeatInterval="200",
        innerClientAuthenticationCredentials=credentials,
    )
    try:
        controller = broker.start()
        assert namesrv.controller is not None
        heartbeats = namesrv.controller.heartbeats
        deadline = time.monotonic() + 15
        while not (controller.replicas.role_known and heartbeats.is_alive("broker-acl-ctl", 1)):
            assert time.monotonic() < deadline, "the signing broker never got its role"
            await deferLater(reactor, 0.05, lambda: None)
        # Anyone else is refused by the controller as by the NameServer.
        metadata = await remoting.invoke(addr, request(RequestCode.CONTROLLER_GET_METADATA_INFO))
        assert_denied(metadata, "No accessKey is configured")
    finally:
        await broker.stop()
        await remoting.close()
        await namesrv.stopService()
