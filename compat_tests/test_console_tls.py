"""The cluster console reaching a cluster that enforces mutual TLS (mqadmin's --tls options), and refusing a
certificate file it cannot use in one line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gateway.tls import certs
from tests.console.conftest import console_process, end_process, http

from .secure_servers import pki, tls_servers  # noqa: F401
from .servers import GatewayServers

pytestmark = pytest.mark.compat


def test_console_over_mutual_tls(tls_servers: GatewayServers, pki: certs.DevPki) -> None:  # noqa: F811
    options = ["--tls", "--tlsTrustCertPath", pki.path("ca.pem"), "--tlsCertPath", pki.path("client.pem")]
    proc, url = console_process(tls_servers.namesrv_addr, *options, "--tlsKeyPath", pki.path("client.key"))
    try:
        status, page = http(url + "/")
        assert status == 200 and "broker-a" in page and tls_servers.broker_addr in page, page
        status, page = http(url + "/topics?kind=system")
        assert status == 200 and "TBW102" in page
    finally:
        end_process(proc)


def test_a_certificate_file_it_cannot_use_is_one_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    missing = tmp_path / "nope.pem"
    cmd = [
        sys.executable,
        "-m",
        "gateway",
        "console",
        "-n",
        "127.0.0.1:9876",
        "--tls",
        "--tlsTrustCertPath",
        str(missing),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert f"--tlsTrustCertPath {missing}" in result.stderr and "Traceback" not in result.stderr
