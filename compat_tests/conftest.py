"""Fixtures for the compatibility suite: our servers in a child process on free loopback ports."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .servers import GatewayServers


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServers]:
    """A NameServer and a Broker shared by one test module."""
    s = GatewayServers(tmp_path_factory.mktemp("gateway")).start()
    yield s
    s.stop()


@pytest.fixture
def fresh_servers(tmp_path: Path) -> Iterator[GatewayServers]:
    """Servers of the test's own, for restart and crash scenarios."""
    s = GatewayServers(tmp_path / "gateway").start()
    yield s
    s.kill()
