"""TLS settings under RocketMQ's keys: Java's defaults, tls.config.file, the certificate command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gateway.config import ConfigError, load_properties, system_properties
from gateway.tls.config import ClientAuth, TlsConfig, TlsMode
from gateway.tls.context import TlsContextError, client_options, server_options


def test_java_defaults() -> None:
    config = TlsConfig.from_properties({})
    assert config.tlsMode is TlsMode.PERMISSIVE
    assert config.tlsEnable is False
    assert config.tlsTestModeEnable is True
    assert config.tlsServerNeedClientAuth is ClientAuth.NONE
    assert config.tlsConfigFile == "/etc/rocketmq/tls.properties"


def test_keys_and_java_parsing() -> None:
    config = TlsConfig.from_properties(
        {
            "tls.server.mode": "enforcing",
            "tls.enable": "true",
            "tls.server.need.client.auth": "REQUIRE",
            "tls.server.keyPath": " /k.pem ",
            "tls.client.authServer": "TRUE",
            "tls.config.file": "",
        }
    )
    assert (config.tlsMode, config.tlsEnable, config.tlsServerNeedClientAuth) == (
        TlsMode.ENFORCING,
        True,
        ClientAuth.REQUIRE,
    )
    assert config.tlsServerKeyPath == "/k.pem"
    assert config.tlsClientAuthServer is True
    # Java's TlsMode.parse and ClientAuth: unknown names fall back.
    assert TlsConfig.from_properties({"tls.server.mode": "Enforcing"}).tlsMode is TlsMode.PERMISSIVE
    assert TlsConfig.from_properties({"tls.server.need.client.auth": "x"}).tlsServerNeedClientAuth is ClientAuth.NONE


def test_bad_boolean_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"tls\.enable"):
        TlsConfig.from_properties({"tls.enable": "yes"}, "broker.conf")


def test_tls_config_file_wins_except_mode_and_enable(tmp_path: Path) -> None:
    file = tmp_path / "tls.properties"
    file.write_text(
        "tls.server.mode=disabled\ntls.enable=true\ntls.test.mode.enable=false\n"
        "tls.server.certPath=/from/file.pem\ntls.client.trustCertPath=/ca.pem\n"
    )
    config = TlsConfig.from_properties(
        {"tls.config.file": str(file), "tls.server.mode": "enforcing", "tls.server.certPath": "/from/conf.pem"}
    )
    assert config.tlsMode is TlsMode.ENFORCING
    assert config.tlsEnable is False
    assert config.tlsTestModeEnable is False
    assert config.tlsServerCertPath == "/from/file.pem"
    assert config.tlsClientTrustCertPath == "/ca.pem"
    assert TlsConfig.from_properties({"tls.config.file": str(tmp_path / "missing")}).tlsTestModeEnable is True


def test_system_properties_of_a_config_file(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=b\ntls.server.mode=enforcing\nrocketmq.acl.plain.file=conf/x.yml\naclEnable=true\n")
    assert system_properties(conf) == {"tls.server.mode": "enforcing", "rocketmq.acl.plain.file": "conf/x.yml"}
    assert system_properties(None) == {}


def test_certs_command_makes_usable_files(tmp_path: Path) -> None:
    out = tmp_path / "pki"
    proc = subprocess.run(
        [sys.executable, "-m", "gateway.tls", "certs", str(out), "--host", "broker.local", "--key-password", "s3cret!"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert str(out / "ca.pem") in proc.stdout
    assert (out / "server.key").stat().st_mode & 0o777 == 0o600
    assert b"ENCRYPTED PRIVATE KEY" in (out / "server.key").read_bytes()
    server = TlsConfig.from_properties(load_properties(out / "tls-server.properties"))
    client = TlsConfig.from_properties(load_properties(out / "tls-client.properties"))
    assert server.tlsServerKeyPassword == client.tlsClientKeyPassword == "s3cret!"
    server_options(server).getContext()
    client_options(client).getContext()
    with pytest.raises(TlsContextError, match=r"server\.key"):
        server_options(
            TlsConfig.from_properties(
                {**load_properties(out / "tls-server.properties"), "tls.server.keyPassword": "wrong"}
            )
        )
