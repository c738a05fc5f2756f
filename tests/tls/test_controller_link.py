"""TLS on the controller link: an enforcing NameServer with its embedded controller; a broker in controller mode
with tlsEnable registers, gets its id and becomes master over TLS."""

from __future__ import annotations

import time
from pathlib import Path

import pytest_twisted
from twisted.internet import reactor
from twisted.internet.task import deferLater

from compat_tests.servers import free_port
from gateway.broker.config import load_broker_config
from gateway.broker.controller import BrokerController
from gateway.controller.config import load_controller_config
from gateway.namesrv.service import NamesrvController
from tests.namesrv.conftest import loopback_namesrv_config

from .conftest import Pki


@pytest_twisted.ensureDeferred
async def test_a_broker_gets_its_role_from_a_tls_only_controller(tmp_path: Path, pki: Pki) -> None:
    ns_cfg = loopback_namesrv_config(tmp_path, enableControllerInNamesrv="true")
    ctl_cfg = load_controller_config(
        None,
        {"controllerDLegerPeers": f"n0-127.0.0.1:{free_port()}", "controllerStorePath": str(tmp_path / "ctl")},
    )
    namesrv = NamesrvController(ns_cfg, reactor, system_properties=pki.server_props(), controller_config=ctl_cfg)
    namesrv.startService()
    addr = f"127.0.0.1:{namesrv.port}"
    cfg, store_cfg = load_broker_config(
        None,
        {
            "bindAddress": "127.0.0.1",
            "brokerIP1": "127.0.0.1",
            "brokerName": "broker-tls-ctl",
            "listenPort": "0",
            "namesrvAddr": addr,
            "storePathRootDir": str(tmp_path / "store"),
            "enableControllerMode": "true",
            "controllerAddr": addr,
            "brokerHeartbeatInterval": "200",
        },
    )
    broker = BrokerController(cfg, store_cfg, reactor, {**pki.server_props(), **pki.client_props()})
    broker.startService()
    try:
        deadline = time.monotonic() + 15
        heartbeats = namesrv.controller.heartbeats
        while not (broker.replicas.role_known and not cfg.is_slave and heartbeats.is_alive("broker-tls-ctl", 1)):
            assert time.monotonic() < deadline, "the broker never got its role over TLS"
            await deferLater(reactor, 0.05, lambda: None)
        assert broker.replicas.broker_id == 1
    finally:
        await broker.stopService()
        await namesrv.stopService()
