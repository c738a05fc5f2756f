"""TLS and PLAIN ACL with real clients: the C++ client and ali-ons sign with their own code, servers in a child process.

ACL servers run with ``aclEnable=true`` and a plain_acl.yml under ``rocketmqHome``; TLS servers with
``tls.server.mode=enforcing`` and required client certificates on both the NameServer and the broker,
the broker registering over TLS. The Java client's runs are in test_tls_acl_java.py.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from gateway.acl.signer import SessionCredentials
from gateway.client import ConsumeStatus, MQClientError, blocking, build_message
from gateway.client.security import ClientSecurity
from gateway.remoting.codes import RequestCode
from gateway.remoting.command import RemotingCommand
from gateway.tls import certs
from gateway.tls.config import TlsConfig

from .secure_servers import ADMIN, APP, tls_call, tls_context
from .servers import GatewayServers, call

pytestmark = pytest.mark.compat


def _unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


# ------------------------------------------------------------------ C++ client (rocketmq==0.4.4)


def _cpp() -> Any:
    return pytest.importorskip("compat_tests.test_cpp_client", reason="the C++ client (PyPI rocketmq) is needed")


def _cpp_credentials(credentials: SessionCredentials) -> list[str]:
    return ["--access-key", credentials.access_key, "--secret-key", credentials.secret_key]


def _cpp_log(run: Any) -> str:
    """The C++ client's own log, where it writes the broker's refusal (its exceptions only say "No route")."""
    return "".join(p.read_text(errors="replace") for p in (run.home / "logs" / "rocketmq-cpp").glob("*"))


def test_cpp_client_signs_with_session_credentials(acl_servers: GatewayServers, tmp_path: Path) -> None:
    cpp = _cpp()
    topic = _unique("CppAcl")
    acl_servers.create_topic(topic)
    run_id = _unique("r")
    run = cpp.run_cpp(
        tmp_path / "p",
        "produce",
        acl_servers,
        topic,
        _unique("cpp_pg"),
        "--run",
        run_id,
        "--count",
        30,
        *_cpp_credentials(APP),
    )
    assert run.returncode == 0 and run.of("done")[-1]["sent"] == 30, run.describe()
    consumed = cpp.consume(tmp_path, acl_servers, topic, _unique("cpp_cg"), 30, *_cpp_credentials(APP))
    cpp.check_messages(consumed.messages, run_id, range(30), topic, "C++ consumer with credentials")


@pytest.mark.parametrize(
    ("credentials", "reason"),
    [
        (SessionCredentials("appUser01", "wrongSecret"), "Check signature failed for accessKey=appUser01"),
        (SessionCredentials("strangerX", "appSecret01"), "No acl config for strangerX"),
        (None, "No acl config for"),  # the C++ client always sends AccessKey, empty when unset
    ],
    ids=["wrong secret", "unknown access key", "no credentials"],
)
def test_cpp_client_refused(
    acl_servers: GatewayServers, tmp_path: Path, credentials: SessionCredentials | None, reason: str
) -> None:
    cpp = _cpp()
    extra = _cpp_credentials(credentials) if credentials else []
    run = cpp.run_cpp(
        tmp_path / "p",
        "produce",
        acl_servers,
        "DeniedTopic",
        _unique("cpp_pg"),
        "--run",
        "x",
        "--count",
        1,
        "--retries",
        0,
        *extra,
        timeout=30,
    )
    assert run.returncode != 0 and not run.of("sent"), run.describe()
    assert reason in _cpp_log(run), run.describe()


def test_cpp_client_denied_topic(acl_servers: GatewayServers, tmp_path: Path) -> None:
    cpp = _cpp()
    run = cpp.run_cpp(
        tmp_path / "p",
        "produce",
        acl_servers,
        "DeniedTopic",
        _unique("cpp_pg"),
        "--run",
        "x",
        "--count",
        1,
        "--retries",
        0,
        *_cpp_credentials(APP),
        timeout=30,
    )
    assert run.returncode != 0 and not run.of("sent"), run.describe()
    assert "No default permission for topic:DeniedTopic" in _cpp_log(run), run.describe()


# ------------------------------------------------------------------ ali-ons


def _ons() -> Any:
    return pytest.importorskip("compat_tests.test_ali_ons", reason="node and ali-ons are needed")


def _ons_produce(
    ons: Any, tmp_path: Path, servers: GatewayServers, topic: str, run_id: str, count: int, *extra: str
) -> Any:
    spec = tmp_path / f"{run_id}.jsonl"
    spec.write_text(
        "".join(json.dumps({"i": i, **ons.expected(run_id, i)}, ensure_ascii=False) + "\n" for i in range(count)),
        encoding="utf-8",
    )
    return ons.run_node(
        "produce", servers, topic, _unique("ons_pg"), "--messages", spec, "--retries", 0, *extra, timeout=40
    )


def test_ali_ons_signs_with_access_key(acl_servers: GatewayServers, tmp_path: Path) -> None:
    ons = _ons()
    keys = ["--access-key", APP.access_key, "--secret-key", APP.secret_key]
    topic = _unique("OnsAcl")
    acl_servers.create_topic(topic)
    run_id = _unique("r")
    run = _ons_produce(ons, tmp_path, acl_servers, topic, run_id, 20, *keys)
    assert run.returncode == 0 and run.of("done")[-1]["sent"] == 20, run.describe()
    consumed = ons.run_node(
        "consume",
        acl_servers,
        topic,
        _unique("ons_cg"),
        "--expect",
        20,
        "--linger",
        2,
        "--props",
        ",".join(ons.PROPS),
        *keys,
        timeout=60,
    )
    assert consumed.returncode == 0, consumed.describe()
    ons.check_messages(consumed.of("msg"), run_id, range(20), topic, "ali-ons consumer with credentials")


def test_ali_ons_wrong_secret_is_refused(acl_servers: GatewayServers, tmp_path: Path) -> None:
    ons = _ons()
    topic = _unique("OnsAcl")
    acl_servers.create_topic(topic)
    run = _ons_produce(
        ons,
        tmp_path,
        acl_servers,
        topic,
        _unique("r"),
        1,
        "--access-key",
        APP.access_key,
        "--secret-key",
        "wrongSecret",
    )
    assert run.returncode != 0 and not run.of("sent"), run.describe()
    assert "Check signature failed for accessKey=appUser01" in run.stdout + run.stderr, run.describe()


# ------------------------------------------------------------------ the servers, seen from the wire


def test_namesrv_is_not_acl_checked(acl_servers: GatewayServers) -> None:
    route = call(
        acl_servers.namesrv_addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "DeniedTopic"})
    )
    assert route.code == 0


def test_anonymous_unregister_client_is_refused(acl_servers: GatewayServers) -> None:
    response = call(
        acl_servers.broker_addr,
        RemotingCommand.request(RequestCode.UNREGISTER_CLIENT, {"clientID": "c1", "producerGroup": "pg"}),
    )
    assert response.code == 1
    assert response.remark is not None and "No accessKey is configured" in response.remark


def test_enforcing_servers_refuse_plain_connections(tls_servers: GatewayServers) -> None:
    for addr in (tls_servers.namesrv_addr, tls_servers.broker_addr):
        with pytest.raises(OSError):
            call(addr, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO))


def test_enforcing_servers_need_a_trusted_client_certificate(tls_servers: GatewayServers, pki: certs.DevPki) -> None:
    info = tls_call(
        tls_servers.namesrv_addr, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), tls_context(pki)
    )
    # The broker registered over TLS.
    assert info.code == 0 and b"broker-a" in info.body
    runtime = tls_call(
        tls_servers.broker_addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), tls_context(pki)
    )
    assert runtime.code == 0
    with pytest.raises(OSError):
        tls_call(
            tls_servers.broker_addr,
            RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO),
            tls_context(pki, cert=None),
        )


def test_default_servers_also_speak_tls(servers: GatewayServers) -> None:
    """Java's defaults (permissive, test mode): plain clients as usual, and TLS on the same ports."""
    for addr in (servers.namesrv_addr, servers.broker_addr):
        assert tls_call(addr, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), tls_context(None)).code in (
            0,
            3,
        )


# ------------------------------------------------------------------ our Python client


def _python_round_trip(servers: GatewayServers, security: ClientSecurity, n: int = 20) -> None:
    """Send ``n`` messages and push-consume them all, every request signed / over TLS per ``security``."""
    topic = _unique("PySec")
    with blocking.Admin(servers.namesrv_addr, security=security) as admin:
        admin.create_topic(topic, 4)
    with blocking.Producer(_unique("py_pg"), servers.namesrv_addr, security=security) as producer:
        sent = {producer.send(build_message(topic, f"secure {i}".encode())).msg_id for i in range(n)}
    got: set[str] = set()
    lock = threading.Lock()

    def listener(msgs: list[Any]) -> ConsumeStatus:
        with lock:
            got.update(m.uniq_key for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = blocking.PushConsumer(_unique("py_cg"), servers.namesrv_addr, security=security)
    consumer.subscribe(topic, "*")
    consumer.register_message_listener(listener)
    consumer.start()
    try:
        deadline = time.monotonic() + 40
        while got != sent and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        consumer.shutdown()
    assert got == sent


def test_python_client_signs_requests(acl_servers: GatewayServers) -> None:
    _python_round_trip(acl_servers, ClientSecurity(credentials=ADMIN))


def test_python_client_refused_with_wrong_secret(acl_servers: GatewayServers) -> None:
    security = ClientSecurity(credentials=SessionCredentials(APP.access_key, "wrongSecret"))
    with (
        blocking.Producer(_unique("py_pg"), acl_servers.namesrv_addr, security=security) as producer,
        pytest.raises(MQClientError, match="Check signature failed for accessKey=appUser01"),
    ):
        producer.send(build_message("DeniedTopic", b"x"))


def test_python_client_over_mutual_tls(tls_servers: GatewayServers, pki: certs.DevPki) -> None:
    _python_round_trip(tls_servers, ClientSecurity(tls=TlsConfig.from_properties(pki.client_properties())))
