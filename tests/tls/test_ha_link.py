"""TLS on the HA link: an enforcing master replicates to a slave with tlsEnable; a plain slave gets nothing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest_twisted
from twisted.internet import reactor
from twisted.internet.task import deferLater

from gateway.broker.config import load_broker_config
from gateway.broker.controller import BrokerController
from gateway.remoting.client import RemotingClient
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.tls.client import client_endpoint_factory
from gateway.tls.config import TlsConfig
from tests.broker.test_broker_server import send_header

from .conftest import Pki


def _broker(tmp_path: Path, name: str, props: dict[str, str], **overrides: str) -> BrokerController:
    cfg, store_cfg = load_broker_config(
        None,
        {
            "bindAddress": "127.0.0.1",
            "brokerIP1": "127.0.0.1",
            "brokerName": "broker-tls-ha",
            "listenPort": "0",
            "storePathRootDir": str(tmp_path / name),
            "mappedFileSizeCommitLog": str(1 << 20),
            "haSendHeartbeatInterval": "200",
            **overrides,
        },
    )
    return BrokerController(cfg, store_cfg, reactor, props)


async def _until(predicate: Callable[[], bool], seconds: float = 8.0) -> bool:
    for _ in range(int(seconds / 0.05)):
        if predicate():
            return True
        await deferLater(reactor, 0.05, lambda: None)
    return predicate()


@pytest_twisted.ensureDeferred
async def test_replication_over_tls_and_plain_slaves_refused(tmp_path: Path, pki: Pki) -> None:
    master = _broker(tmp_path, "master", {**pki.server_props(), **pki.client_props()})
    master.startService()
    ha_addr = f"127.0.0.1:{master.config.haListenPort}"
    tls_slave = _broker(
        tmp_path,
        "slave",
        {**pki.server_props(), **pki.client_props()},
        brokerRole="SLAVE",
        brokerId="1",
        haMasterAddress=ha_addr,
    )
    plain_slave = _broker(tmp_path, "plain", {}, brokerRole="SLAVE", brokerId="2", haMasterAddress=ha_addr)
    client = RemotingClient(
        reactor, endpoint_factory=client_endpoint_factory(TlsConfig.from_properties(pki.client_props()))
    )
    try:
        tls_slave.startService()
        plain_slave.startService()
        body = b"over tls" * 100
        req = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, send_header("TlsHaTopic", {}), body)
        resp = await client.invoke(master.config.broker_addr, req, 5)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        end = master.store.commit_log.max_offset
        assert await _until(lambda: tls_slave.store.commit_log.max_offset == end)
        assert tls_slave.store.commit_log.get_message(0, end) == master.store.commit_log.get_message(0, end)
        # The plain slave's reports never reach the HA service: it holds nothing.
        assert plain_slave.store.commit_log.max_offset == 0
        assert len(master.ha_service.connections) == 1
    finally:
        await client.close()
        await plain_slave.stopService()
        await tls_slave.stopService()
        await master.stopService()
