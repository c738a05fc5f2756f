"""TLS and PLAIN ACL with the official Java client 4.9.8 (AclClientRPCHook; TlsSystemConfig's tls.* properties),
and, when ``ROCKETMQ_MQADMIN_CLASSPATH`` names the tools' jars, mqadmin's ACL commands.

Runs only when ``ROCKETMQ_JAVA_CLASSPATH`` is set (see test_java.py); the servers come from secure_servers.py.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from gateway.tls.certs import DevPki

from . import test_java
from .secure_servers import ADMIN, APP, PLAIN_ACL_YML
from .servers import GatewayServers
from .test_java import COUNT, _jdk_tool, _unique, assert_ok, run_java

# test_java.py's fixture: CompatMain compiled once per module.
java_programs = test_java.java_programs

pytestmark = pytest.mark.compat

MODES = "sync,async,oneway,batch"
MQADMIN_CLASSPATH = os.environ.get("ROCKETMQ_MQADMIN_CLASSPATH", "").strip()


def _acl(credentials: tuple[str, str] = (APP.access_key, APP.secret_key)) -> list[str]:
    return ["--access-key", credentials[0], "--secret-key", credentials[1]]


def _tls(pki: DevPki) -> list[str]:
    return [
        "--tls",
        "--tls-trust",
        pki.path("ca.pem"),
        "--tls-cert",
        pki.path("client.pem"),
        "--tls-key",
        pki.path("client.key"),
    ]


def round_trip(java_programs: str, tmp_path: Path, servers: GatewayServers, *security: str) -> None:
    """Produce in all four modes, then consume everything with a push consumer, both with ``security``."""
    topic, run_id = _unique("JavaSec"), _unique("r")
    produced = run_java(
        java_programs,
        tmp_path,
        "produce",
        servers,
        topic,
        _unique("java_pg"),
        "--count",
        COUNT,
        "--modes",
        MODES,
        "--run-id",
        run_id,
        *security,
    )
    assert_ok(produced, "producer")
    consumed = run_java(
        java_programs,
        tmp_path,
        "push",
        servers,
        topic,
        _unique("java_cg"),
        "--count",
        COUNT,
        "--modes",
        MODES,
        "--run-id",
        run_id,
        "--grace",
        2,
        *security,
    )
    assert_ok(consumed, "push consumer")
    assert consumed.value("CONSUMED") == COUNT * 4, consumed.describe()


def test_acl_client_rpc_hook_round_trip(java_programs: str, tmp_path: Path, acl_servers: GatewayServers) -> None:
    round_trip(java_programs, tmp_path, acl_servers, *_acl())


@pytest.mark.parametrize(
    ("topic", "credentials", "reason"),
    [
        ("AnyTopic", (APP.access_key, "wrongSecret"), "Check signature failed for accessKey=appUser01"),
        ("DeniedTopic", (APP.access_key, APP.secret_key), "No default permission for topic:DeniedTopic"),
    ],
    ids=["wrong secret", "denied topic"],
)
def test_acl_refusals(
    java_programs: str,
    tmp_path: Path,
    acl_servers: GatewayServers,
    topic: str,
    credentials: tuple[str, str],
    reason: str,
) -> None:
    run = run_java(
        java_programs,
        tmp_path,
        "produce",
        acl_servers,
        topic,
        _unique("java_pg"),
        "--count",
        1,
        "--modes",
        "sync",
        *_acl(credentials),
        timeout=40,
    )
    assert run.returncode != 0, run.describe()
    assert reason in run.stdout, run.describe()


def test_tls_round_trip_with_client_certificate(
    java_programs: str, tmp_path: Path, tls_servers: GatewayServers, pki: DevPki
) -> None:
    round_trip(java_programs, tmp_path, tls_servers, *_tls(pki))


def test_tls_without_client_certificate_is_refused(
    java_programs: str, tmp_path: Path, tls_servers: GatewayServers, pki: DevPki
) -> None:
    run = run_java(
        java_programs,
        tmp_path,
        "produce",
        tls_servers,
        _unique("JavaSec"),
        _unique("java_pg"),
        "--count",
        1,
        "--modes",
        "sync",
        "--tls",
        "--tls-trust",
        pki.path("ca.pem"),
        timeout=40,
    )
    assert run.returncode != 0 and "SENT sync 1" not in run.stdout, run.describe()


def test_tls_test_mode_against_default_servers(java_programs: str, tmp_path: Path, servers: GatewayServers) -> None:
    """tls.enable alone (test mode: trust any server) against Java's default permissive servers."""
    round_trip(java_programs, tmp_path, servers, "--tls")


@pytest.mark.skipif(not MQADMIN_CLASSPATH, reason="mqadmin not given: set ROCKETMQ_MQADMIN_CLASSPATH to its jars")
def test_mqadmin_acl_commands(acl_servers: GatewayServers, tmp_path: Path) -> None:
    broker_home = Path(acl_servers.extra_config["rocketmqHome"])
    # mqadmin's own home: the credentials it signs with (conf/tools.yml) and its logging setup.
    home = tmp_path / "mqadmin"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "tools.yml").write_text("accessKey: rocketmq2\nsecretKey: 12345678\n")
    (home / "conf" / "logback_tools.xml").write_text('<configuration><root level="OFF"/></configuration>\n')

    def mqadmin(*args: str) -> str:
        proc = subprocess.run(
            [
                _jdk_tool("java"),
                "-Xmx256m",
                f"-Drocketmq.home.dir={home}",
                f"-Duser.home={tmp_path}",
                "-cp",
                MQADMIN_CLASSPATH,
                "org.apache.rocketmq.tools.command.MQAdminStartup",
                *args,
                "-n",
                acl_servers.namesrv_addr,
                "-b",
                acl_servers.broker_addr,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout

    plain = broker_home / "conf" / "plain_acl.yml"
    out = mqadmin(
        "updateAclConfig",
        "-a",
        "mqadminUser",
        "-s",
        "mqadminSecret",
        "-t",
        "topicA=PUB,topicB=SUB",
        "-g",
        "groupA=SUB",
        "-i",
        "DENY",
        "-m",
        "false",
    )
    assert "update plain access config to" in out
    account = next(a for a in yaml.safe_load(plain.read_text())["accounts"] if a["accessKey"] == "mqadminUser")
    assert account["topicPerms"] == ["topicA=PUB", "topicB=SUB"] and account["defaultTopicPerm"] == "DENY"
    out = mqadmin("clusterAclConfigVersion")
    assert "broker-a" in out
    out = mqadmin("updateGlobalWhiteAddr", "-g", "10.10.10.*")
    assert yaml.safe_load(plain.read_text())["globalWhiteRemoteAddresses"] == ["10.10.10.*"]
    out = mqadmin("deleteAclConfig", "-a", "mqadminUser")
    assert "mqadminUser" not in plain.read_text()


@pytest.mark.skipif(not MQADMIN_CLASSPATH, reason="mqadmin not given: set ROCKETMQ_MQADMIN_CLASSPATH to its jars")
def test_mqadmin_against_a_name_server_with_acl(tmp_path: Path) -> None:
    """Apache's mqadmin signs NameServer requests with its tools.yml: reads need no keys, wiping a broker's
    write permission needs an admin account's."""
    home = tmp_path / "home"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "plain_acl.yml").write_text(PLAIN_ACL_YML)
    acl = {"aclEnable": "true", "rocketmqHome": str(home)}
    credentials = json.dumps({"accessKey": ADMIN.access_key, "secretKey": ADMIN.secret_key})
    servers = GatewayServers(
        tmp_path / "servers", {**acl, "innerClientAuthenticationCredentials": credentials}, namesrv_config=acl,
        sign=ADMIN.sign,
    ).start()  # fmt: skip

    def mqadmin(keys: tuple[str, str] | None, *args: str) -> subprocess.CompletedProcess[str]:
        tools = tmp_path / ("admin" if keys else "anonymous")
        (tools / "conf").mkdir(parents=True, exist_ok=True)
        if keys:
            (tools / "conf" / "tools.yml").write_text(f"accessKey: {keys[0]}\nsecretKey: {keys[1]}\n")
        (tools / "conf" / "logback_tools.xml").write_text('<configuration><root level="OFF"/></configuration>\n')
        return subprocess.run(
            [_jdk_tool("java"), "-Xmx256m", f"-Drocketmq.home.dir={tools}", f"-Duser.home={tmp_path}", "-cp",
             MQADMIN_CLASSPATH, "org.apache.rocketmq.tools.command.MQAdminStartup", *args,
             "-n", servers.namesrv_addr],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    try:
        listed = mqadmin(None, "clusterList")
        assert listed.returncode == 0 and "broker-a" in listed.stdout, listed.stdout + listed.stderr
        refused = mqadmin(None, "wipeWritePerm", "-b", "broker-a")
        assert "No accessKey is configured" in refused.stdout + refused.stderr
        refused = mqadmin((APP.access_key, APP.secret_key), "wipeWritePerm", "-b", "broker-a")
        assert "Need admin permission" in refused.stdout + refused.stderr
        wiped = mqadmin((ADMIN.access_key, ADMIN.secret_key), "wipeWritePerm", "-b", "broker-a")
        assert "wipe write perm of broker[broker-a] in name server" in wiped.stdout, wiped.stdout + wiped.stderr
    finally:
        servers.stop()
