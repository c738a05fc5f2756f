"""A broker in this process on 127.0.0.1 port 0 with a temporary store, and a remoting client."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater

from gateway.broker.config import load_broker_config
from gateway.broker.controller import BrokerController
from gateway.remoting.client import RemotingClient
from gateway.remoting.command import RemotingCommand


class BrokerUnderTest:
    """Start/stop a broker over one store directory; ``call`` sends one request to it."""

    def __init__(self, root: Path, client: RemotingClient, **overrides: str) -> None:
        self.root = root
        self.client = client
        self.overrides = overrides
        self.controller: BrokerController | None = None

    def start(self) -> BrokerController:
        props = {
            "bindAddress": "127.0.0.1",
            "brokerIP1": "127.0.0.1",
            "brokerName": "broker-a",
            "listenPort": "0",
            "storePathRootDir": str(self.root / "store"),
            "mappedFileSizeCommitLog": str(1 << 20),
            **self.overrides,
        }
        cfg, store_cfg = load_broker_config(None, props)
        self.controller = BrokerController(cfg, store_cfg, reactor)
        self.controller.startService()
        return self.controller

    async def stop(self) -> None:
        if self.controller is not None:
            await self.controller.stopService()
            self.controller = None

    @property
    def addr(self) -> str:
        assert self.controller is not None
        return self.controller.config.broker_addr

    def call(self, request: RemotingCommand, timeout: float = 5.0) -> Deferred[RemotingCommand]:
        return self.client.invoke(self.addr, request, timeout)


@pytest_twisted.async_yield_fixture
async def remoting() -> AsyncIterator[RemotingClient]:
    client = RemotingClient(reactor)
    yield client
    await client.close()


@pytest_twisted.async_yield_fixture
async def broker(tmp_path: Path, remoting: RemotingClient) -> AsyncIterator[BrokerUnderTest]:
    b = BrokerUnderTest(tmp_path, remoting)
    b.start()
    yield b
    await b.stop()


@pytest.fixture
def make_broker(tmp_path: Path, remoting: RemotingClient) -> Callable[..., BrokerUnderTest]:
    return lambda **overrides: BrokerUnderTest(tmp_path, remoting, **overrides)


async def sleep(seconds: float) -> Any:
    return await deferLater(reactor, seconds, lambda: None)
