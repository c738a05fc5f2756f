"""Fixtures: a name server on 127.0.0.1 port 0 with its files under tmp_path, and a remoting client."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytest_twisted

from gateway.namesrv.config import NamesrvConfig, load_namesrv_config
from gateway.namesrv.service import NamesrvController
from gateway.remoting.client import RemotingClient


def loopback_namesrv_config(root: Path, **settings: str) -> NamesrvConfig:
    """A NameServer on 127.0.0.1 port 0 with its files under ``root``, and ``settings`` (namesrv.properties keys)."""
    return load_namesrv_config(
        None,
        {
            "listenPort": "0",
            "bindAddress": "127.0.0.1",
            "kvConfigPath": str(root / "kvConfig.json"),
            "configStorePath": str(root / "namesrv.properties"),
            **settings,
        },
    )


@pytest.fixture
def namesrv_config(tmp_path) -> NamesrvConfig:
    return NamesrvConfig(
        listenPort=0,
        bindAddress="127.0.0.1",
        kvConfigPath=str(tmp_path / "namesrv" / "kvConfig.json"),
        configStorePath=str(tmp_path / "namesrv" / "namesrv.properties"),
    )


@pytest_twisted.async_yield_fixture
async def namesrv(namesrv_config):
    controller = NamesrvController(namesrv_config)
    controller.startService()
    yield controller
    await controller.stopService()


@pytest.fixture
def addr(namesrv) -> str:
    return f"127.0.0.1:{namesrv.port}"


@pytest_twisted.async_yield_fixture
async def client():
    remoting = RemotingClient()
    yield remoting
    await remoting.close()
