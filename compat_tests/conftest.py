"""Fixtures for the compatibility suite: our servers in a child process on free loopback ports."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .secure_servers import acl_servers, pki, tls_servers  # noqa: F401 - fixtures of the TLS/ACL tests
from .servers import GatewayServers

# Delay levels of 1-2 s (the first retry, level 3, waits 2 s) and quick transaction check-backs, so retry,
# delay and transaction scenarios finish in seconds; RocketMQ's defaults are kept for the tests marked slow.
FAST_CONFIG = {
    "messageDelayLevel": "1s 1s 2s 2s 2s 2s 2s 2s 2s 2s 2s 2s 2s 2s 2s 2s 2s 2s",
    "transactionCheckInterval": "1000",
    "transactionTimeOut": "2000",
    # Every check counts, even while the producer is not registered yet (clients heartbeat every 30 s, and
    # after a restart the broker knows no producer until then): allow a minute of checks, not 15 s.
    "transactionCheckMax": "60",
}


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServers]:
    """A NameServer and a Broker shared by one test module."""
    s = GatewayServers(tmp_path_factory.mktemp("gateway")).start()
    yield s
    s.close()


@pytest.fixture
def fresh_servers(tmp_path: Path) -> Iterator[GatewayServers]:
    """Servers of the test's own, for restart and crash scenarios."""
    s = GatewayServers(tmp_path / "gateway").start()
    yield s
    s.kill()


@pytest.fixture(scope="module")
def fast_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServers]:
    """Servers with FAST_CONFIG, shared by one test module."""
    s = GatewayServers(tmp_path_factory.mktemp("gateway-fast"), FAST_CONFIG).start()
    yield s
    s.close()


@pytest.fixture
def fresh_fast_servers(tmp_path: Path) -> Iterator[GatewayServers]:
    """FAST_CONFIG servers of the test's own, for restarts in the middle of a flow."""
    s = GatewayServers(tmp_path / "gateway-fast", FAST_CONFIG).start()
    yield s
    s.kill()
