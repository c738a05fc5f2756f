"""Properties files, config errors that name key and file, atomic config files with .bak fallback."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from gateway.config import ConfigError, apply_properties, load_properties, parse_properties
from gateway.persist import load_with_backup, write_atomically


def test_properties_syntax() -> None:
    text = "# comment\n! also\na=1\nb : 2\nc   3\nd=x\\\n    y\ne=\\u0041\\t\nf=\n  g = spaced value  \n"
    assert parse_properties(text) == {"a": "1", "b": "2", "c": "3", "d": "xy", "e": "A\t", "f": "", "g": "spaced value"}


@dataclass
class _Cfg:
    listenPort: int = 1
    autoCreateTopicEnable: bool = True
    brokerName: str = "b"


def test_apply_converts_and_reports_unknown() -> None:
    cfg = _Cfg()
    unknown = apply_properties([cfg], {"listenPort": "10911", "autoCreateTopicEnable": "FALSE", "x": "1"}, "f.conf")
    assert (cfg.listenPort, cfg.autoCreateTopicEnable, unknown) == (10911, False, ["x"])


def test_bad_value_names_key_and_file() -> None:
    with pytest.raises(ConfigError) as e:
        apply_properties([_Cfg()], {"listenPort": "ten"}, "/etc/broker.conf")
    assert "listenPort" in str(e.value) and "/etc/broker.conf" in str(e.value)


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.conf"):
        load_properties(tmp_path / "nope.conf")


def test_atomic_write_keeps_backup_and_falls_back(tmp_path: Path) -> None:
    p = tmp_path / "config" / "topics.json"
    write_atomically(p, b'{"v":1}')
    write_atomically(p, b'{"v":2}')
    assert p.read_bytes() == b'{"v":2}'
    assert (tmp_path / "config" / "topics.json.bak").read_bytes() == b'{"v":1}'
    p.write_bytes(b'{"v":')  # torn main file
    import orjson

    assert load_with_backup(p, orjson.loads) == {"v": 1}
    assert load_with_backup(tmp_path / "absent.json", orjson.loads) is None
