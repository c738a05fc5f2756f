"""Properties files, config errors that name key and file, atomic config files with .bak fallback.

The escaping round trip with hostile keys and values is property-tested in tests/test_properties.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from gateway.config import ConfigError, apply_properties, format_properties, load_properties, parse_properties
from gateway.persist import load_with_backup, write_atomically


def test_properties_syntax() -> None:
    text = "# comment\n! also\na=1\nb : 2\nc   3\nd=x\\\n    y\ne=\\u0041\\t\nf=\n  g = spaced value  \n"
    # As Java's Properties.load: the value keeps its trailing blanks (String settings are trimmed when applied).
    assert parse_properties(text) == {
        "a": "1",
        "b": "2",
        "c": "3",
        "d": "xy",
        "e": "A\t",
        "f": "",
        "g": "spaced value  ",
    }


def test_properties_syntax_corners_match_java() -> None:
    # Outputs checked against java.util.Properties.load (OpenJDK 17).
    assert parse_properties("a\\\\=b\\\\\\=c") == {"a\\": "b\\=c"}  # an escaped backslash does not escape '='
    assert parse_properties("a=1\rb=2\r\nc=3\u2028d=4\x0be") == {"a": "1", "b": "2", "c": "3\u2028d=4\x0be"}
    assert parse_properties("a=x\\\r\n  # not a comment\n# comment \\\nb=2") == {"a": "x# not a comment", "b": "2"}
    assert parse_properties("k=\\uD83D\\uDE00") == {"k": "\U0001f600"}
    assert parse_properties("\\\n#c\n\\") == {"": ""}
    for malformed in ("k=\\u12", "k=\\u12G4", "k=\\uD83D"):
        with pytest.raises(ConfigError, match="Malformed"):
            parse_properties(malformed)


def test_format_properties_escapes_as_java_store() -> None:
    # Properties.store(OutputStream) output for the same entries (OpenJDK 17, date comment left out).
    props = {"a b": " x=y:z#!\\\t\n\r\f \u00e9\U0001f600\x7f ", "#k": "v", "": ""}
    assert format_properties(props) == (
        "a\\ b=\\ x\\=y\\:z\\#\\!\\\\\\t\\n\\r\\f \\u00E9\\uD83D\\uDE00\\u007F \n\\#k=v\n=\n"
    )
    assert parse_properties(format_properties(props)) == props


def test_load_properties_reads_latin1_as_java_does(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_bytes(b"# caf\xe9\nbrokerName=b\xe9\n")
    assert load_properties(conf) == {"brokerName": "b\u00e9"}
    conf.write_bytes(b"k=\\u00\n")
    with pytest.raises(ConfigError, match=r"broker\.conf: Malformed"):
        load_properties(conf)


@dataclass
class _Cfg:
    listenPort: int = 1
    autoCreateTopicEnable: bool = True
    brokerName: str = "b"


def test_apply_converts_and_reports_unknown() -> None:
    cfg = _Cfg()
    props = {"listenPort": "10911", "autoCreateTopicEnable": "FALSE", "x": "1", "brokerName": " b-1 \t"}
    unknown = apply_properties([cfg], props, "f.conf")
    assert (cfg.listenPort, cfg.autoCreateTopicEnable, unknown) == (10911, False, ["x"])
    assert cfg.brokerName == "b-1"  # trimmed as Java's String setters are


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
