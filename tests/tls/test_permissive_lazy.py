"""TLS in a server process that started without pyOpenSSL (gateway.lean_reactor; tests/test_startup_imports.py
checks what start-up loads): test mode's certificate is made for the first TLS client."""

from __future__ import annotations

import ssl
from pathlib import Path

from compat_tests.servers import GatewayServers, call
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand


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
