"""The RocketMQ 5.x Node.js SDK (rocketmq-client-nodejs 1.0.8) producing through our gRPC endpoint: sync and
async sends read by our 4.x client, transactions (commit, rollback, an orphan resolved by the SDK's checker
through Telemetry), TLS and plaintext on one port, ACL accounts allowed and refused (producer and consumer)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.client.security import ClientSecurity
from gateway.tls import certs

from . import sdk5_node
from .conftest import FAST_CONFIG
from .secure_servers import ADMIN, APP, acl_grpc_servers  # noqa: F401
from .servers import GatewayServers
from .test_sdk5_python import flat, pull_all, topic_on

sdk5_node.require_sdk()

pytestmark = pytest.mark.compat

# apache.rocketmq.v2.Code.UNAUTHORIZED as the SDK's exception prints it: Apache's Proxy (ResponseBuilder) answers
# it to a refused signature and to a refused permission alike.
UNAUTHORIZED = "response-code=40100"


@pytest.fixture(scope="module")
def tx_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServers]:
    """``python -m gateway`` with its gRPC endpoint and quick transaction check-backs."""
    s = GatewayServers(tmp_path_factory.mktemp("sdk5-node-tx"), FAST_CONFIG).start()
    assert s.grpc_addr, "the ready line names no gRPC endpoint"
    yield s
    s.close()


@pytest.mark.parametrize("concurrent", [False, True], ids=["sync", "async"])
def test_send_read_by_4x_client(tx_servers: GatewayServers, tmp_path: Path, concurrent: bool) -> None:
    topic = topic_on(tx_servers, "Sdk5NodeSend")
    specs = [
        {"i": i, "body": f"hello {i} \u00e9", "tag": "TagA", "keys": [f"key{i}", "other"], "props": {"n": str(i)}}
        for i in range(6)
    ]
    result = sdk5_node.produce(tmp_path, tx_servers.grpc_addr, topic, specs, concurrent=concurrent)
    ids = {e["i"]: e["messageId"] for e in result.of("sent")}
    got = sorted(flat(pull_all(tx_servers, topic, len(specs))), key=lambda m: int(m.properties["n"]))
    assert [m.body.decode() for m in got] == [s["body"] for s in specs]
    for i, m in enumerate(got):
        assert (m.tags, sorted(m.keys.split(" ")), m.properties["n"]) == ("TagA", sorted([f"key{i}", "other"]), str(i))
        assert m.uniq_key == ids[i], "the SDK's message id is the UNIQ_KEY a 4.x consumer sees"


@pytest.mark.parametrize("action", ["commit", "rollback"])
def test_transaction_commit_and_rollback(tx_servers: GatewayServers, tmp_path: Path, action: str) -> None:
    topic = topic_on(tx_servers, "Sdk5NodeTx")
    # The producer stays past the check-back time (FAST_CONFIG: 2 s, checked every second): a resolved
    # transaction is never checked back.
    result = sdk5_node.produce(
        tmp_path, tx_servers.grpc_addr, topic, [{"i": 0, "body": action}], transaction=action, check="COMMIT", wait=4
    )
    (sent,) = result.of("sent")
    assert sent["transactionId"] and result.of("checked") == [], result.describe()
    got = flat(pull_all(tx_servers, topic, 1, timeout=5.0 if action == "commit" else 1.0))
    assert [m.uniq_key for m in got] == ([sent["messageId"]] if action == "commit" else [])


@pytest.mark.parametrize("resolution", ["COMMIT", "ROLLBACK"])
def test_orphaned_transaction_checked_back_through_telemetry(
    tx_servers: GatewayServers, tmp_path: Path, resolution: str
) -> None:
    topic = topic_on(tx_servers, "Sdk5NodeTxCheck")
    result = sdk5_node.produce(
        tmp_path,
        tx_servers.grpc_addr,
        topic,
        [{"i": 0, "body": "orphan"}],
        timeout=30,
        transaction="orphan",
        check=resolution,
        wait=15,
    )
    (sent,) = result.of("sent")
    checked = result.of("checked")
    # The server's RecoverOrphanedTransactionCommand carries the half message to the SDK's checker.
    assert checked and checked[0] == {"event": "checked", "messageId": sent["messageId"], "body": "orphan"}, (
        result.describe()
    )
    got = flat(pull_all(tx_servers, topic, 1, timeout=5.0 if resolution == "COMMIT" else 3.0))
    assert [m.uniq_key for m in got] == ([sent["messageId"]] if resolution == "COMMIT" else [])


def test_tls_and_plaintext_on_one_port(tmp_path: Path, pki: certs.DevPki) -> None:
    tls = {**pki.server_properties(), "tls.server.mode": "permissive", "tls.server.need.client.auth": "none"}
    servers = GatewayServers(tmp_path / "gateway", tls).start()
    try:
        topic = topic_on(servers, "Sdk5NodeTls")
        # grpc-js verifies the server certificate (SAN IP 127.0.0.1) against the roots it is given: our dev CA.
        trusted = {"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": pki.path("ca.pem")}
        sdk5_node.produce(tmp_path, servers.grpc_addr, topic, [{"i": 0, "body": "secret"}], tls=True, env=trusted)
        # The Node SDK's default (no sslEnabled) is plaintext.
        sdk5_node.produce(tmp_path, servers.grpc_addr, topic, [{"i": 0, "body": "plain"}])
        assert sorted(m.body for m in flat(pull_all(servers, topic, 2))) == [b"plain", b"secret"]
        # Without our CA among its roots the SDK refuses the server.
        untrusted = sdk5_node.run(
            "producer",
            servers.grpc_addr,
            topic,
            timeout=30,
            messages=sdk5_node.spec_file(tmp_path, [{"i": 0, "body": "never"}]),
            tls=True,
        )
        (error,) = untrusted.of("error")
        assert "unable to verify the first certificate" in error["error"], untrusted.describe()
        assert untrusted.returncode != 0 and not untrusted.of("sent")
    finally:
        servers.stop()


def test_acl_account_allowed_and_refused(acl_grpc_servers: GatewayServers, tmp_path: Path) -> None:  # noqa: F811
    servers = acl_grpc_servers
    topic = topic_on(servers, "Sdk5NodeAcl")
    app = {"access_key": APP.access_key, "secret_key": APP.secret_key}
    consumer = sdk5_node.start("simple_consumer", servers.grpc_addr, topic, group="AppGroup", acks=1, **app)
    time.sleep(1)  # its first receive places the group
    sdk5_node.produce(tmp_path, servers.grpc_addr, topic, [{"i": 0, "body": "signed"}], **app)
    consumed = consumer.finish()
    assert consumed.returncode == 0 and [m["body"] for m in consumed.of("msg")] == ["signed"], consumed.describe()
    specs = sdk5_node.spec_file(tmp_path, [{"i": 0, "body": "refused"}])
    denied = sdk5_node.run("producer", servers.grpc_addr, "DeniedTopic", timeout=30, messages=specs, **app)
    # Refused from its first call (QueryRoute needs PUB or SUB on the topic).
    (error,) = denied.of("error")
    assert UNAUTHORIZED in error["error"] and "DeniedTopic" in error["error"], denied.describe()
    wrong = {**app, "secret_key": "not-the-secret"}
    refused = sdk5_node.run("producer", servers.grpc_addr, topic, timeout=30, messages=specs, **wrong)
    (error,) = refused.of("error")
    assert UNAUTHORIZED in error["error"] and "Check signature failed" in error["error"], refused.describe()
    # A consumer group the account may not use: refused by the Telemetry settings check at startup.
    group = sdk5_node.run("simple_consumer", servers.grpc_addr, topic, timeout=30, group="DeniedGroup", **app)
    (error,) = group.of("error")
    assert UNAUTHORIZED in error["error"] and "DeniedGroup" in error["error"], group.describe()
    got = flat(pull_all(servers, topic, 1, security=ClientSecurity(ADMIN)))
    assert [m.body for m in got] == [b"signed"]
