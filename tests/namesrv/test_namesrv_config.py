"""namesrv.properties: RocketMQ's keys, errors that name key and file, run-time updates."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError
from gateway.namesrv.__main__ import main
from gateway.namesrv.config import (
    NamesrvConfig,
    format_properties,
    load_namesrv_config,
    update_namesrv_config,
)


def test_defaults_are_rocketmqs(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    config = NamesrvConfig()
    assert config.listenPort == 9876
    assert config.orderMessageEnable is False
    assert config.scanNotActiveBrokerInterval == 10000
    assert config.brokerChannelExpiredTime == 120000
    assert config.kvConfigPath == str(tmp_path / "namesrv" / "kvConfig.json")
    assert config.configStorePath == str(tmp_path / "namesrv" / "namesrv.properties")


def test_file_then_overrides(tmp_path):
    path = tmp_path / "namesrv.properties"
    path.write_text("listenPort=19876\norderMessageEnable=true\ntls.server.mode=enforcing\nkvConfigPath=/x/kv.json\n")
    config = load_namesrv_config(path, {"listenPort": "0"})
    assert config.listenPort == 0
    assert config.orderMessageEnable is True
    assert config.kvConfigPath == "/x/kv.json"
    # As with mqnamesrv -c, run-time updates go back to the file given.
    assert config.configStorePath == str(path)


def test_error_names_key_and_file(tmp_path):
    path = tmp_path / "bad.properties"
    path.write_text("listenPort=nine\n")
    with pytest.raises(ConfigError, match=r"bad\.properties.*listenPort"):
        load_namesrv_config(path)
    with pytest.raises(ConfigError, match=r"missing\.properties"):
        load_namesrv_config(tmp_path / "missing.properties")


def test_main_reports_config_error_and_exits_1(tmp_path, capsys):
    path = tmp_path / "bad.properties"
    path.write_text("orderMessageEnable=maybe\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["-c", str(path)])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert "orderMessageEnable" in err and str(path) in err


def test_main_prints_config_items(tmp_path, capsys):
    path = tmp_path / "namesrv.properties"
    path.write_text("listenPort=12345\n")
    main(["-c", str(path), "-p"])
    out = capsys.readouterr().out
    assert "listenPort=12345\n" in out and "orderMessageEnable=false\n" in out


def test_update_validates_first_and_persists_keeping_unknown_keys(tmp_path):
    path = tmp_path / "namesrv.properties"
    path.write_text("tls.server.mode=enforcing\nlistenPort=9999\n")
    config = load_namesrv_config(path)
    with pytest.raises(ConfigError, match="scanNotActiveBrokerInterval"):
        update_namesrv_config(config, {"orderMessageEnable": "true", "scanNotActiveBrokerInterval": "soon"})
    assert config.orderMessageEnable is False
    update_namesrv_config(config, {"orderMessageEnable": "true"})
    assert config.orderMessageEnable is True
    saved = path.read_text()
    assert "orderMessageEnable=true\n" in saved and "tls.server.mode=enforcing\n" in saved
    assert "listenPort=9999\n" in saved


def test_format_properties_is_sorted_lines():
    assert format_properties({"b": "2", "a": "1"}) == "a=1\nb=2\n"
