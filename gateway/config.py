"""Configuration files with RocketMQ's own keys (broker.conf, namesrv.properties).

Config dataclasses name their attributes exactly as RocketMQ's keys (``brokerName``,
``listenPort``...), so one generic routine spreads a properties file over them. A bad value
raises :class:`ConfigError` naming the key and the file; unknown keys are reported, not fatal,
as Java ignores them too.
"""

from __future__ import annotations

import re
import types
import typing
from dataclasses import fields
from pathlib import Path
from typing import Any

from twisted.logger import Logger

log = Logger()


class ConfigError(Exception):
    """A configuration value that cannot be used; the message names the key and the file."""


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java ``.properties`` text: ``=``, ``:`` or blank separators, comments, continuations."""
    props: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        # An odd number of trailing backslashes continues the line.
        stripped = line.rstrip("\r\n")
        trailing = len(stripped) - len(stripped.rstrip("\\"))
        if trailing % 2 == 1:
            logical += stripped[:-1]
            continue
        logical += stripped
        key, value = _split_entry(logical)
        props[_unescape(key)] = _unescape(value)
        logical = ""
    if logical:
        key, value = _split_entry(logical)
        props[_unescape(key)] = _unescape(value)
    return props


_SEP = re.compile(r"(?<!\\)[=:\s]")


def _split_entry(line: str) -> tuple[str, str]:
    m = _SEP.search(line)
    if not m:
        return line, ""
    key = line[: m.start()]
    rest = line[m.start() :].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest.rstrip()


def _unescape(s: str) -> str:
    if "\\" not in s:
        return s
    out = []
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            n = s[i + 1]
            if n == "u" and i + 5 < len(s) + 1:
                try:
                    out.append(chr(int(s[i + 2 : i + 6], 16)))
                    i += 6
                    continue
                except ValueError:
                    pass
            out.append(_ESCAPES.get(n, n))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def load_properties(path: str | Path) -> dict[str, str]:
    """Read a properties file; a missing file is a ConfigError naming it."""
    p = Path(path)
    try:
        return parse_properties(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"cannot read config file {p}: {e.strerror}") from None


def _field_type(tp: Any) -> type:
    if isinstance(tp, str):
        tp = {"int": int, "bool": bool, "str": str, "float": float}.get(tp.split("|")[0].strip(), str)
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        tp = args[0] if args else str
    return tp if tp in (int, bool, str, float) else str


def convert(value: str, tp: type, key: str, source: str) -> Any:
    """Convert one property value to ``tp`` as Java's setters would, naming key and file on error."""
    v = value.strip()
    try:
        if tp is bool:
            if v.lower() not in ("true", "false"):
                raise ValueError(v)
            return v.lower() == "true"
        if tp is int:
            return int(v)
        if tp is float:
            return float(v)
    except ValueError:
        raise ConfigError(f"{source}: key {key}: {value!r} is not a valid {tp.__name__}") from None
    return value


def apply_properties(targets: list[Any], props: dict[str, str], source: str, ignore: tuple[str, ...] = ()) -> list[str]:
    """Set every known key on the config objects that declare it; return the unknown keys.

    ``ignore`` lists key prefixes that other parts of the program read (e.g. ``tls.``).
    """
    hints = [(t, typing.get_type_hints(type(t))) for t in targets]
    unknown = []
    for key, value in props.items():
        hit = False
        for target, th in hints:
            if key in {f.name for f in fields(target)}:
                setattr(target, key, convert(value, _field_type(th.get(key, str)), key, source))
                hit = True
        if not hit and not key.startswith(ignore):
            unknown.append(key)
    for key in unknown:
        log.warn("{source}: unknown key {key} ignored", source=source, key=key)
    return unknown


# Keys Java takes as -D system properties (TLS, ACL file locations); our config files may carry them.
SYSTEM_PROPERTY_PREFIXES = ("tls.", "rocketmq.")


def system_properties(path: str | Path | None) -> dict[str, str]:
    """The ``tls.*`` and ``rocketmq.*`` keys of a config file (none without a file)."""
    if path is None:
        return {}
    return {k: v for k, v in load_properties(path).items() if k.startswith(SYSTEM_PROPERTY_PREFIXES)}
