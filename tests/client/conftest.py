"""A NameServer and a Broker in this process (port 0, temporary store) for the Twisted client tests."""

from __future__ import annotations

import itertools
import shutil
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.task import deferLater

from gateway.__main__ import GatewayService
from gateway.broker.config import load_broker_config
from gateway.broker.controller import BrokerController
from gateway.client import Admin
from gateway.namesrv.service import NamesrvController
from tests.namesrv.conftest import loopback_namesrv_config

_names = itertools.count()


@dataclass
class Servers:
    namesrv_addr: str
    broker_addr: str
    admin: Admin
    broker: BrokerController

    async def topic(self, queues: int = 4) -> str:
        """A new topic with ``queues`` queues, routed by the name server."""
        name = f"ClientTopic{next(_names)}"
        await self.admin.create_topic(name, queues)
        return name


@pytest_twisted.async_yield_fixture(scope="module")
async def servers(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Servers]:
    root: Path = tmp_path_factory.mktemp("gateway")
    namesrv_cfg = loopback_namesrv_config(root)
    broker_cfg, store_cfg = load_broker_config(
        None,
        {
            "bindAddress": "127.0.0.1",
            "brokerIP1": "127.0.0.1",
            "brokerName": "broker-a",
            "listenPort": "0",
            "storePathRootDir": str(root / "store"),
            "enablePropertyFilter": "true",  # SQL92 subscriptions
            "traceTopicEnable": "true",  # RMQ_SYS_TRACE_TOPIC, for the message trace tests
            # Retries (delay level 3 and up) and transaction check-backs within a test's patience.
            "messageDelayLevel": " ".join(["1s"] * 18),
            "transactionCheckInterval": "300",
            "transactionTimeOut": "1000",
        },
    )
    broker = BrokerController(broker_cfg, store_cfg, reactor)
    service = GatewayService(NamesrvController(namesrv_cfg, reactor), broker)
    service.startService()
    admin = Admin(broker_cfg.namesrvAddr)
    # The broker registers asynchronously; topics are created through TBW102's route.
    for _ in range(250):
        if await admin.client.api.get_topic_route("TBW102") is not None:
            break
        await sleep(0.02)
    yield Servers(broker_cfg.namesrvAddr, broker_cfg.broker_addr, admin, broker)
    await admin.shutdown()
    await service.stopService()
    shutil.rmtree(root / "store")  # its commitlog reserves 1 GB of disk until the run ends


def group_name(prefix: str) -> str:
    """A group name no other test uses."""
    return f"{prefix}{next(_names)}"


async def wait_until(condition: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Poll ``condition`` every 20 ms; fail the test after ``timeout`` seconds."""
    deadline = reactor.seconds() + timeout
    while not condition():
        if reactor.seconds() > deadline:
            pytest.fail(f"{what} not met within {timeout}s")
        await sleep(0.02)


async def sleep(seconds: float) -> None:
    await deferLater(reactor, seconds, lambda: None)
