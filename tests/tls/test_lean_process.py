"""The servers' processes load pyOpenSSL, YAML and the metrics stack only when configured to use them
(gateway.lean_reactor and the lazy imports behind it), and TLS still works when it is asked for."""

from __future__ import annotations

import ssl
import subprocess
import sys
from pathlib import Path

from compat_tests.servers import GatewayServers, call
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand

ROOT = Path(__file__).resolve().parents[2]
OPTIONAL = ("OpenSSL", "cryptography", "service_identity", "yaml", "prometheus_client", "twisted.web.server")


def test_entry_points_import_the_reactor_without_optional_stacks() -> None:
    # (The controller's Raft library, pysyncobj, imports cryptography itself.)
    code = (
        "import sys\n"
        "import gateway.__main__, gateway.broker.__main__, gateway.namesrv.__main__\n"
        "assert 'twisted.internet.reactor' in sys.modules\n"
        f"print(sorted(m for m in {OPTIONAL!r} if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert out.strip() == "[]"


def test_permissive_test_mode_answers_tls_and_plain_clients(tmp_path: Path) -> None:
    # Test mode's self-signed certificate is made when the first TLS client arrives.
    servers = GatewayServers(tmp_path, namesrv_config={"tls.server.mode": "permissive"}).start()
    try:
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        tls.check_hostname = False
        tls.verify_mode = ssl.CERT_NONE
        for context in (tls, None, tls):
            request = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, language="JAVA")
            assert call(servers.namesrv_addr, request, tls=context).code == ResponseCode.SUCCESS
    finally:
        servers.stop()
