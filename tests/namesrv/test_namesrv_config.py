"""namesrv.properties: RocketMQ's keys, errors that name key and file, run-time updates."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError, UpdateRefused, load_properties, properties_to_string
from gateway.namesrv.__main__ import main
from gateway.namesrv.config import (
    NamesrvConfig,
    load_namesrv_config,
    update_namesrv_config,
)
from gateway.remoting.codes import ResponseCode


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
        update_namesrv_config(config, b"orderMessageEnable=true\nscanNotActiveBrokerInterval=soon\n")
    assert config.orderMessageEnable is False
    update_namesrv_config(config, b"orderMessageEnable=true")
    assert config.orderMessageEnable is True
    saved = path.read_text()
    assert "orderMessageEnable=true\n" in saved and "tls.server.mode=enforcing\n" in saved
    assert "listenPort=9999\n" in saved


BLACK_LISTED = [
    "configBlackList",
    "configStorePath",
    "kvConfigPath",
    "rocketmqHome",
    "listenPort",
    "bindAddress",
    "startWithCorruptStateFiles",
    "aclEnable",
    "tls.server.mode",
    "tls.test.mode.enable",
    "tls.config.file",
    "rocketmq.acl.plain.file",
    "someFuturePath",
    "logDir",
]


@pytest.mark.parametrize("key", BLACK_LISTED)
def test_update_refuses_black_listed_keys_and_changes_nothing(tmp_path, key):
    path = tmp_path / "namesrv.properties"
    path.write_text("listenPort=9999\n")
    config = load_namesrv_config(path)
    before = (config.to_properties(), path.read_bytes())
    with pytest.raises(UpdateRefused) as refused:
        update_namesrv_config(config, f"orderMessageEnable=true\n{key}=../x\n".encode())
    assert (refused.value.code, refused.value.remark) == (
        ResponseCode.NO_PERMISSION,
        "Can not update config in black list.",
    )
    assert (config.to_properties(), path.read_bytes()) == before


def test_configured_black_list_adds_keys(tmp_path):
    config = NamesrvConfig(configStorePath=str(tmp_path / "n.properties"), configBlackList="orderMessageEnable")
    with pytest.raises(UpdateRefused, match="black list"):
        update_namesrv_config(config, b"orderMessageEnable=true")
    # The fixed keys stay refused even when configBlackList leaves them out.
    with pytest.raises(UpdateRefused, match="black list"):
        update_namesrv_config(config, b"kvConfigPath=../kv.json")


def test_update_refuses_unknown_keys_naming_them(tmp_path):
    config = NamesrvConfig(configStorePath=str(tmp_path / "n.properties"))
    with pytest.raises(UpdateRefused) as refused:
        update_namesrv_config(config, b"orderMessageEnable=true\nnoSuchKey=1\n")
    assert refused.value.code == ResponseCode.INVALID_PARAMETER
    assert refused.value.remark == "Can not update unknown config: 'noSuchKey'."
    assert config.orderMessageEnable is False and not (tmp_path / "n.properties").exists()


def test_update_refuses_malformed_and_oversized_bodies(tmp_path):
    config = NamesrvConfig(configStorePath=str(tmp_path / "n.properties"))
    with pytest.raises(UpdateRefused, match="string2Properties error") as refused:
        update_namesrv_config(config, b"productEnvName=\\u00zz")
    assert refused.value.code == ResponseCode.SYSTEM_ERROR
    with pytest.raises(UpdateRefused, match="over 16384 bytes"):
        update_namesrv_config(config, b"productEnvName=" + b"x" * 16384)
    assert config.productEnvName == "center"


def test_persisted_values_keep_newlines_and_separators(tmp_path):
    path = tmp_path / "namesrv.properties"
    path.write_text("listenPort=9999\n")
    config = load_namesrv_config(path)
    update_namesrv_config(config, rb"productEnvName=x\nkvConfigPath=../p/kv.json\r\ntls.server.mode=disabled\\")
    hostile = "x\nkvConfigPath=../p/kv.json\r\ntls.server.mode=disabled\\"
    assert config.productEnvName == hostile
    assert load_properties(path).keys() == config.to_properties().keys()  # no key was added
    again = load_namesrv_config(path)
    assert (again.productEnvName, again.kvConfigPath) == (hostile, config.kvConfigPath)


def test_properties_to_string_is_sorted_plain_lines():
    # MixAll.properties2String: GET_NAMESRV_CONFIG's body, never a file.
    assert properties_to_string({"b": "2", "a": "1=x"}) == "a=1=x\nb=2\n"
