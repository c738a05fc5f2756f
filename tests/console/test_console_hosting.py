"""Where the console runs: inside a NameServer (consoleEnable=true), as ``rocketmq-gateway console`` in its own
process, and linked from each broker's own pages (clusterConsoleUrl)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.threads import deferToThread

from gateway.admin.ext import AdminError, AdminExt
from gateway.broker.config import load_broker_config
from gateway.broker.controller import BrokerController
from gateway.config import ConfigError
from gateway.namesrv.config import load_namesrv_config
from gateway.namesrv.service import NamesrvController
from tests.namesrv.conftest import loopback_namesrv_config

from .conftest import Cluster, broker_config, console_process, end_process, http


@pytest_twisted.ensureDeferred
async def test_a_namesrv_with_console_enable_serves_the_console_of_its_cluster(tmp_path: Path) -> None:
    namesrv = NamesrvController(loopback_namesrv_config(tmp_path, consoleEnable="true", consolePort="0"), reactor)
    namesrv.startService()
    assert namesrv.console is not None
    metrics = {"metricsExporterType": "PROM", "metricsPromExporterPort": "0"}
    cfg, store_cfg = broker_config(
        tmp_path, "broker-in", f"127.0.0.1:{namesrv.port}", clusterConsoleUrl=namesrv.console.url, **metrics
    )
    broker = BrokerController(cfg, store_cfg, reactor)
    broker.startService()
    try:
        await broker.when_ready()
        status, page = await deferToThread(http, namesrv.console.url)
        assert status == 200 and "broker-in" in page and cfg.broker_addr in page
        # The broker's own pages link to it.
        status, page = await deferToThread(http, f"http://127.0.0.1:{cfg.metricsPromExporterPort}/console/")
        assert status == 200 and f'<a href="{namesrv.console.url}">Cluster console</a>' in page
        # Not settable remotely: the link is what broker.conf says.
        with AdminExt(f"127.0.0.1:{namesrv.port}") as admin, pytest.raises(AdminError, match="in black list"):
            await deferToThread(admin.update_broker_config, cfg.broker_addr, "clusterConsoleUrl", "javascript:alert(1)")
        assert broker.config.clusterConsoleUrl == namesrv.console.url
        # The console's account never leaves the process in the NameServer's config.
        assert "consoleSecretKey" not in namesrv.config.to_properties()
    finally:
        await broker.stopService()
        await namesrv.stopService()


def test_console_keys_are_checked_where_they_are_read(tmp_path: Path) -> None:
    conf = tmp_path / "namesrv.properties"
    conf.write_text("consoleEnable=true\nconsolePort=70000\n")
    with pytest.raises(ConfigError, match=rf"consolePort in {re.escape(str(conf))}: 70000 is not a port"):
        load_namesrv_config(conf)
    conf.write_text("consoleEnable=true\nconsoleHost=10.1.2.3\n")
    with pytest.raises(ConfigError, match=r"consoleHost in .*not a loopback address"):
        load_namesrv_config(conf)
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "--namesrv-config", str(conf), "--store", str(tmp_path / "store")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1 and len(result.stderr.strip().splitlines()) == 1 and "consoleHost" in result.stderr


@pytest_twisted.ensureDeferred
async def test_rocketmq_gateway_console_in_its_own_process(cluster: Cluster) -> None:
    proc, url = await deferToThread(console_process, cluster.namesrv_addr)
    try:
        status, page = await deferToThread(http, url)
        assert status == 200 and "broker-a" in page and "broker-b" in page
    finally:
        await deferToThread(end_process, proc)


def test_the_broker_console_link_is_an_http_url() -> None:
    cfg, _ = load_broker_config(None, {"clusterConsoleUrl": "http://127.0.0.1:8082/"})
    assert cfg.clusterConsoleUrl == "http://127.0.0.1:8082/"
    with pytest.raises(ConfigError, match="key clusterConsoleUrl: not an http"):
        load_broker_config(None, {"clusterConsoleUrl": "javascript:alert(1)"})
