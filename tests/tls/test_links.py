"""TLS on every link we own: client -> NameServer, client -> broker (both ports), broker -> NameServer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest_twisted
from twisted.internet import reactor
from twisted.internet.task import deferLater

from compat_tests.servers import free_port
from gateway.__main__ import GatewayService
from gateway.broker.config import load_broker_config
from gateway.broker.controller import BrokerController
from gateway.namesrv.service import NamesrvController
from gateway.remoting.client import RemotingClient
from gateway.remoting.codes import RequestCode
from gateway.remoting.command import RemotingCommand
from gateway.tls.client import client_endpoint_factory
from gateway.tls.config import TlsConfig
from tests.namesrv.conftest import loopback_namesrv_config

from .conftest import Pki, call_in_thread, client_context


@dataclass
class TlsGateway:
    service: GatewayService
    namesrv_addr: str
    broker_addr: str
    broker: BrokerController


@pytest_twisted.async_yield_fixture
async def gateway(tmp_path: Path, pki: Pki) -> AsyncIterator[TlsGateway]:
    """NameServer and broker in enforcing mutual TLS; the broker's own links use TLS too."""
    namesrv_cfg = loopback_namesrv_config(tmp_path)
    broker_cfg, store_cfg = load_broker_config(
        None,
        {
            "bindAddress": "127.0.0.1",
            "brokerIP1": "127.0.0.1",
            "brokerName": "broker-tls",
            # Its VIP channel listens on listenPort - 2: free_port keeps it free.
            "listenPort": str(free_port()),
            "storePathRootDir": str(tmp_path / "store"),
        },
    )
    server = pki.server_props()
    broker = BrokerController(broker_cfg, store_cfg, reactor, {**server, **pki.client_props()})
    service = GatewayService(NamesrvController(namesrv_cfg, reactor, system_properties=server), broker)
    service.startService()
    await broker.when_ready()
    yield TlsGateway(service, broker_cfg.namesrvAddr, broker_cfg.broker_addr, broker)
    await service.stopService()


@pytest_twisted.ensureDeferred
async def test_every_link_speaks_tls(gateway: TlsGateway, pki: Pki) -> None:
    client = RemotingClient(
        reactor, endpoint_factory=client_endpoint_factory(TlsConfig.from_properties(pki.client_props()))
    )
    try:
        # The broker registered over TLS: the NameServer (TLS only) knows it.
        for _ in range(100):
            info = await client.invoke(
                gateway.namesrv_addr, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)
            )
            if b"broker-tls" in info.body:
                break
            await deferLater(reactor, 0.05, lambda: None)
        assert b"broker-tls" in info.body
        runtime = RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)
        assert (await client.invoke(gateway.broker_addr, runtime)).code == 0
        vip = f"127.0.0.1:{gateway.broker.config.listenPort - 2}"
        assert (await client.invoke(vip, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO))).code == 0
    finally:
        await client.close()


@pytest_twisted.ensureDeferred
async def test_plain_clients_are_refused_everywhere(gateway: TlsGateway) -> None:
    for addr in (gateway.namesrv_addr, gateway.broker_addr):
        port = int(addr.rpartition(":")[2])
        try:
            await call_in_thread(port, None, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO))
        except (OSError, ConnectionError):
            continue
        raise AssertionError(f"{addr} served a plain connection in enforcing mode")


@pytest_twisted.ensureDeferred
async def test_client_without_certificate_is_refused(gateway: TlsGateway, pki: Pki) -> None:
    port = int(gateway.broker_addr.rpartition(":")[2])
    try:
        await call_in_thread(port, client_context(ca=pki.path("ca.pem")), RemotingCommand.request(28))
    except (OSError, ConnectionError):
        return
    raise AssertionError("a client without a certificate was served")
