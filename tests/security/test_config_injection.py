"""Issue 8 item 1 and its class: UPDATE_NAMESRV_CONFIG (318) and UPDATE_BROKER_CONFIG (25) cannot write a key
into the config file through a value (CVE-2023-37582), nor change a key that names a path, a program, TLS or the
listener. Each attack is replayed over loopback, then the server is restarted from the same file."""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import reactor

from gateway.broker.config import BrokerConfig, load_broker_config
from gateway.broker.controller import BrokerController
from gateway.config import load_properties, system_properties
from gateway.namesrv.config import NamesrvConfig, load_namesrv_config
from gateway.namesrv.service import NamesrvController
from gateway.remoting.client import RemotingClient
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand

BLACK_LIST = "Can not update config in black list."


@pytest_twisted.async_yield_fixture
async def client() -> AsyncIterator[RemotingClient]:
    remoting = RemotingClient(reactor)
    yield remoting
    await remoting.close()


# -- NameServer


def _namesrv_text(tmp_path: Path) -> str:
    return f"listenPort=0\nbindAddress=127.0.0.1\nkvConfigPath={tmp_path / 'kv' / 'kvConfig.json'}\n"


def _namesrv_file(tmp_path: Path) -> Path:
    conf = tmp_path / "namesrv.properties"
    conf.write_text(_namesrv_text(tmp_path))
    return conf


async def _update_namesrv(client: RemotingClient, conf: Path, body: bytes) -> tuple[RemotingCommand, NamesrvConfig]:
    controller = NamesrvController(load_namesrv_config(conf), reactor)
    controller.startService()
    try:
        request = RemotingCommand.request(RequestCode.UPDATE_NAMESRV_CONFIG, body=body)
        response = await client.invoke(f"127.0.0.1:{controller.port}", request)
    finally:
        await controller.stopService()
    return response, controller.config


# Where an injected kvConfigPath would point: the system temp dir, looked at afterwards.
EVIL = os.path.join(tempfile.gettempdir(), "rocketmq-gateway-evil", "kv.json")

NAMESRV_ATTACKS = [
    # (body, expected code, productEnvName afterwards when accepted)
    (rb"productEnvName=x\nkvConfigPath=" + EVIL.encode(), ResponseCode.SUCCESS, f"x\nkvConfigPath={EVIL}"),
    (b"productEnvName=x\\\n   kvConfigPath=" + EVIL.encode(), ResponseCode.SUCCESS, f"xkvConfigPath={EVIL}"),
    (rb"productEnvName=x\r\ntls.server.mode=disabled\ntls.test.mode.enable=true", ResponseCode.SUCCESS, None),
    (rb"productEnvName=a=b:c\=d\:e#f!g\\", ResponseCode.SUCCESS, "a=b:c=d:e#f!g\\"),
    ("productEnvName=x\u2028kvConfigPath=/e\x85\u00e9\U0001f600".encode(), ResponseCode.SUCCESS, None),
    (b"productEnvName=x\nkvConfigPath=" + EVIL.encode(), ResponseCode.NO_PERMISSION, None),
    (b"productEnvName=x\rconfigStorePath=../evil.properties", ResponseCode.NO_PERMISSION, None),
    (b"kvConfigPath=" + EVIL.encode(), ResponseCode.NO_PERMISSION, None),
    (b"configStorePath=../evil.properties", ResponseCode.NO_PERMISSION, None),
    (b"tls.server.mode=disabled", ResponseCode.NO_PERMISSION, None),
    (b"tls.config.file=../evil.properties", ResponseCode.NO_PERMISSION, None),
    (b"rocketmqHome=/tmp", ResponseCode.NO_PERMISSION, None),
    (b"configBlackList=", ResponseCode.NO_PERMISSION, None),
    (b"listenPort=1", ResponseCode.NO_PERMISSION, None),
    (b"kvConfig\\Path=" + EVIL.encode(), ResponseCode.NO_PERMISSION, None),  # the key unescapes to kvConfigPath
    (b"productEnvName=x\nsomethingNew=1", ResponseCode.INVALID_PARAMETER, None),
]


@pytest.mark.parametrize(("body", "code", "env"), NAMESRV_ATTACKS)
@pytest_twisted.ensureDeferred
async def test_namesrv_config_injection_changes_nothing_after_restart(tmp_path, client, body, code, env):
    conf = _namesrv_file(tmp_path)
    response, running = await _update_namesrv(client, conf, body)
    assert response.code == code, response.remark
    if code == ResponseCode.NO_PERMISSION:
        assert response.remark == BLACK_LIST
    if code != ResponseCode.SUCCESS:
        assert conf.read_text() == _namesrv_text(tmp_path)
    elif env is not None:
        assert running.productEnvName == env

    # Restart from the same file: the value came back whole, no key was added, TLS and the KV file are unchanged.
    restarted = load_namesrv_config(conf)
    assert restarted.productEnvName == running.productEnvName
    assert set(load_properties(conf)) <= set(NamesrvConfig().to_properties())
    assert system_properties(conf) == {}
    assert restarted.kvConfigPath == str(tmp_path / "kv" / "kvConfig.json")
    controller = NamesrvController(restarted, reactor)
    controller.startService()
    try:
        put = RemotingCommand.request(RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k", "value": "v"})
        assert (await client.invoke(f"127.0.0.1:{controller.port}", put)).code == ResponseCode.SUCCESS
    finally:
        await controller.stopService()
    assert (tmp_path / "kv" / "kvConfig.json").exists()
    assert not Path(EVIL).exists()


@pytest_twisted.ensureDeferred
async def test_get_namesrv_config_answers_plain_lines_as_apache(tmp_path, client):
    conf = _namesrv_file(tmp_path)
    controller = NamesrvController(load_namesrv_config(conf), reactor)
    controller.startService()
    try:
        addr = f"127.0.0.1:{controller.port}"
        update = RemotingCommand.request(RequestCode.UPDATE_NAMESRV_CONFIG, body=rb"productEnvName=a=b\nc")
        assert (await client.invoke(addr, update)).code == ResponseCode.SUCCESS
        shown = (await client.invoke(addr, RemotingCommand.request(RequestCode.GET_NAMESRV_CONFIG))).body.decode()
    finally:
        await controller.stopService()
    # MixAll.properties2String: unescaped and sorted (an answer for display, never a file).
    assert "productEnvName=a=b\nc\n" in shown
    assert r"productEnvName=a\=b\nc" in conf.read_text()


# -- Broker


def _broker_file(tmp_path: Path) -> Path:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "# the operator's file\n"
        "brokerName=broker-a\nbindAddress=127.0.0.1\nbrokerIP1=127.0.0.1\nlistenPort=0\n"
        f"storePathRootDir={tmp_path / 'store'}\nmappedFileSizeCommitLog=1048576\ntls.server.mode=enforcing\n"
    )
    return conf


@pytest_twisted.async_yield_fixture
async def conf_broker(tmp_path: Path) -> AsyncIterator[BrokerController]:
    conf = _broker_file(tmp_path)
    broker_cfg, store_cfg = load_broker_config(str(conf))
    controller = BrokerController(broker_cfg, store_cfg, reactor)
    controller.startService()
    yield controller
    await controller.stopService()


def _update_broker(client: RemotingClient, broker: BrokerController, body: bytes):
    request = RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG, body=body)
    return client.invoke(broker.config.broker_addr, request)


@pytest_twisted.ensureDeferred
async def test_update_broker_config_persists_escaped_and_adds_no_key(tmp_path, client, conf_broker):
    conf = tmp_path / "broker.conf"
    keys_before = set(load_properties(conf))
    body = rb"regionId=x\nstorePathRootDir=../evil\r\ntls.server.mode=disabled\\" + b"\nfileReservedTime=48"
    response = await _update_broker(client, conf_broker, body)
    assert response.code == ResponseCode.SUCCESS, response.remark
    hostile = "x\nstorePathRootDir=../evil\r\ntls.server.mode=disabled\\"
    assert (conf_broker.config.regionId, conf_broker.store_config.fileReservedTime) == (hostile, 48)

    # The file read back: the value with its newline intact, only the changed keys added, the rest as it was.
    saved = load_properties(conf)
    assert set(saved) == keys_before | {"regionId", "fileReservedTime"}
    assert (saved["regionId"], saved["tls.server.mode"]) == (hostile, "enforcing")
    broker_cfg, store_cfg = load_broker_config(str(conf))
    assert (broker_cfg.regionId, store_cfg.fileReservedTime) == (hostile, 48)
    assert store_cfg.storePathRootDir == str(tmp_path / "store")

    shown = await client.invoke(conf_broker.config.broker_addr, RemotingCommand.request(RequestCode.GET_BROKER_CONFIG))
    assert "fileReservedTime=48" in shown.body.decode()


BROKER_BLACK_LIST = [
    "brokerConfigPath",
    "rocketmqHome",
    "configBlackList",
    "storePathRootDir",
    "storePathCommitLog",
    "listenPort",
    "bindAddress",
    "haListenPort",
    "startWithCorruptStateFiles",
    "remotingMaxBufferedBytes",
    "maxOpenMappedFiles",
    "tls.server.mode",
    "tls.server.keyPath",
    "rocketmq.acl.plain.file",
    "storePathIndex",
    "storePathConsumeQueue",
    "filterServerDir",
    "someLogFile",
]


@pytest.mark.parametrize("key", BROKER_BLACK_LIST)
@pytest_twisted.ensureDeferred
async def test_update_broker_config_refuses_paths_programs_and_listener(tmp_path, client, conf_broker, key):
    conf = tmp_path / "broker.conf"
    before = (conf.read_bytes(), conf_broker.all_config())
    response = await _update_broker(client, conf_broker, f"regionId=r2\n{key}=../evil\n".encode())
    assert (response.code, response.remark) == (ResponseCode.NO_PERMISSION, BLACK_LIST)
    assert (conf.read_bytes(), conf_broker.all_config()) == before


@pytest_twisted.ensureDeferred
async def test_update_broker_config_refuses_unknown_keys_and_bad_values_whole(tmp_path, client, conf_broker):
    conf = tmp_path / "broker.conf"
    before = (conf.read_bytes(), conf_broker.all_config())
    unknown = await _update_broker(client, conf_broker, b"regionId=r2\nfilterServerNums=1\n")
    assert (unknown.code, unknown.remark) == (
        ResponseCode.INVALID_PARAMETER,
        "Can not update unknown config: 'filterServerNums'.",
    )
    bad = await _update_broker(client, conf_broker, b"regionId=r2\ndefaultTopicQueueNums=many\n")
    assert bad.code == ResponseCode.SYSTEM_ERROR
    assert bad.remark == "UPDATE_BROKER_CONFIG: key defaultTopicQueueNums: 'many' is not a valid int"
    malformed = await _update_broker(client, conf_broker, b"regionId=\\u00zz")
    assert (malformed.code, malformed.remark) == (ResponseCode.SYSTEM_ERROR, "string2Properties error")
    assert (conf.read_bytes(), conf_broker.all_config()) == before


@pytest_twisted.ensureDeferred
async def test_configured_black_list_and_broker_permission(tmp_path, client):
    conf = _broker_file(tmp_path)
    with conf.open("a") as f:
        f.write("configBlackList=configBlackList;brokerConfigPath;regionId\n")
    broker_cfg, store_cfg = load_broker_config(str(conf))
    broker = BrokerController(broker_cfg, store_cfg, reactor)
    broker.startService()
    try:
        refused = await _update_broker(client, broker, b"regionId=r2")
        assert (refused.code, refused.remark) == (ResponseCode.NO_PERMISSION, BLACK_LIST)
        version = broker.topics.data_version.counter
        accepted = await _update_broker(client, broker, b"brokerPermission=4")
        assert accepted.code == ResponseCode.SUCCESS
        # Read-only from now on, and the NameServers are told at once (a new topic config version).
        assert (broker.config.brokerPermission, broker.topics.data_version.counter) == (4, version + 1)
    finally:
        await broker.stopService()


@pytest_twisted.ensureDeferred
async def test_broker_without_config_file_updates_in_memory_only(tmp_path, client, broker):
    response = await broker.call(RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG, body=b"regionId=r2"))
    assert response.code == ResponseCode.SUCCESS
    assert broker.controller.config.regionId == "r2"
    assert BrokerConfig().brokerConfigPath == ""
    assert not list(tmp_path.rglob("*.properties")) and not list(tmp_path.rglob("*.conf"))
