"""Servers with ACL or TLS for the security compatibility tests, and a TLS caller (stdlib ``ssl``).

Import the fixtures into a test module to use them there.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator

import pytest

from gateway.acl.signer import SessionCredentials
from gateway.remoting.command import RemotingCommand
from gateway.tls import certs

from .servers import GatewayServers, call

ADMIN = SessionCredentials("rocketmq2", "12345678")
APP = SessionCredentials("appUser01", "appSecret01")

PLAIN_ACL_YML = """\
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: rocketmq2
    secretKey: 12345678
    admin: true
  - accessKey: appUser01
    secretKey: appSecret01
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
    topicPerms:
      - DeniedTopic=DENY
    groupPerms:
      - DeniedGroup=DENY
"""


@pytest.fixture(scope="module")
def acl_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServers]:
    root = tmp_path_factory.mktemp("gateway-acl")
    (root / "home" / "conf").mkdir(parents=True)
    (root / "home" / "conf" / "plain_acl.yml").write_text(PLAIN_ACL_YML)
    s = GatewayServers(root, {"aclEnable": "true", "rocketmqHome": str(root / "home")}, sign=ADMIN.sign).start()
    s.create_topic("DeniedTopic")
    yield s
    s.close()


@pytest.fixture(scope="module")
def acl_grpc_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServers]:
    """``acl_servers`` whose gRPC endpoint (the proxy inside) signs its own broker requests as the broker's inner
    client, as the broker checks them too."""
    root = tmp_path_factory.mktemp("gateway-acl-grpc")
    (root / "home" / "conf").mkdir(parents=True)
    (root / "home" / "conf" / "plain_acl.yml").write_text(PLAIN_ACL_YML)
    inner = json.dumps({"accessKey": ADMIN.access_key, "secretKey": ADMIN.secret_key})
    config = {"aclEnable": "true", "rocketmqHome": str(root / "home"), "innerClientAuthenticationCredentials": inner}
    s = GatewayServers(root, config, sign=ADMIN.sign).start()
    s.create_topic("DeniedTopic")
    yield s
    s.close()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> certs.DevPki:
    return certs.write_dev_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_servers(tmp_path_factory: pytest.TempPathFactory, pki: certs.DevPki) -> Iterator[GatewayServers]:
    """Enforcing mutual TLS on both servers; the broker's own links to the NameServer use TLS."""
    server = pki.server_properties()
    s = GatewayServers(
        tmp_path_factory.mktemp("gateway-tls"), {**server, **pki.client_properties()}, namesrv_config=server
    ).start()
    yield s
    s.close()


def tls_call(addr: str, request: RemotingCommand, context: ssl.SSLContext) -> RemotingCommand:
    return call(addr, request, tls=context)


def tls_context(pki: certs.DevPki | None, cert: str | None = "client") -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    if pki is None:
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    ctx.load_verify_locations(pki.path("ca.pem"))
    if cert:
        ctx.load_cert_chain(pki.path(f"{cert}.pem"), pki.path(f"{cert}.key"))
    return ctx
