"""JSON as Java's fastjson writes and reads it.

fastjson writes Integer/Long map keys unquoted (``{0:"127.0.0.1:10911"}``) and object keys as whole
JSON objects (``{{"brokerName":"b","queueId":0,"topic":"t"}:5}``). ``json``/``orjson`` handle
neither, so :func:`loads` falls back to a small tolerant parser, and :func:`dumps` writes those keys
as Java does. Object keys come back as :class:`FrozenDict` (hashable).
"""

from __future__ import annotations

import re
from typing import Any

import orjson

_INTEGER = re.compile(r"-?[0-9]+").fullmatch
_NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?").fullmatch


class FastJsonError(ValueError):
    """Not JSON, even by fastjson's lenient reading."""


class FrozenDict(dict):
    """A hashable dict: the decoded form of an object used as a map key."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items(), key=lambda kv: kv[0])))


def loads(data: bytes | str) -> Any:
    """Parse standard JSON fast, or fastjson's relaxed form."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    text = bytes(data).decode("utf-8", "replace") if isinstance(data, (bytes, bytearray, memoryview)) else data
    parser = _Parser(text)
    try:
        value = parser.value()
    except RecursionError:
        raise FastJsonError("nested too deeply") from None
    parser.ws()
    if parser.pos != len(text):
        raise FastJsonError(f"trailing data at {parser.pos}")
    return value


class _Parser:
    __slots__ = ("pos", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def ws(self) -> None:
        t, p, n = self.text, self.pos, len(self.text)
        while p < n and t[p] in " \t\r\n":
            p += 1
        self.pos = p

    def value(self) -> Any:
        self.ws()
        if self.pos >= len(self.text):
            raise FastJsonError("unexpected end")
        c = self.text[self.pos]
        if c == "{":
            return self.obj()
        if c == "[":
            return self.arr()
        if c in "\"'":
            return self.string()
        return self.scalar()

    def obj(self) -> dict:
        self.pos += 1
        out: dict = {}
        self.ws()
        if self.text.startswith("}", self.pos):
            self.pos += 1
            return out
        while True:
            self.ws()
            key = self.value()
            if isinstance(key, dict):
                key = FrozenDict(key)
            elif isinstance(key, list):
                key = tuple(key)
            self.ws()
            if not self.text.startswith(":", self.pos):
                raise FastJsonError(f"expected ':' at {self.pos}")
            self.pos += 1
            out[key] = self.value()
            self.ws()
            if self.text.startswith(",", self.pos):
                self.pos += 1
                continue
            if self.text.startswith("}", self.pos):
                self.pos += 1
                return out
            raise FastJsonError(f"expected ',' or '}}' at {self.pos}")

    def arr(self) -> list:
        self.pos += 1
        out: list = []
        self.ws()
        if self.text.startswith("]", self.pos):
            self.pos += 1
            return out
        while True:
            out.append(self.value())
            self.ws()
            if self.text.startswith(",", self.pos):
                self.pos += 1
                continue
            if self.text.startswith("]", self.pos):
                self.pos += 1
                return out
            raise FastJsonError(f"expected ',' or ']' at {self.pos}")

    def string(self) -> str:
        quote = self.text[self.pos]
        start = self.pos
        p = start + 1
        t = self.text
        n = len(t)
        while p < n:
            c = t[p]
            if c == "\\":
                p += 2
                continue
            if c == quote:
                raw = t[start : p + 1]
                if quote == "'":
                    raw = '"' + raw[1:-1].replace('"', '\\"') + '"'
                self.pos = p + 1
                try:
                    return orjson.loads(raw)
                except orjson.JSONDecodeError as e:
                    raise FastJsonError(str(e)) from None
            p += 1
        raise FastJsonError("unterminated string")

    def scalar(self) -> Any:
        t = self.text
        p = self.pos
        n = len(t)
        while p < n and t[p] not in ",:}] \t\r\n":
            p += 1
        token = t[self.pos : p]
        self.pos = p
        if token == "true":
            return True
        if token == "false":
            return False
        if token == "null":
            return None
        # Only JSON's number forms: Python's int()/float() would also take 1_000, nan and Infinity.
        if _NUMBER(token) is None:
            raise FastJsonError(f"bad token {token[:40]!r}")
        if _INTEGER(token) is not None:
            try:
                return int(token)
            except ValueError:  # more digits than int() converts: read as a (huge) float, as orjson does
                pass
        return float(token)


def dumps(obj: Any) -> bytes:
    """Serialize as fastjson does: int keys unquoted, dict/FrozenDict keys as objects.

    Objects with a ``to_json()`` method are written as what it returns.
    """
    out: list[str] = []
    _write(obj, out)
    return "".join(out).encode()


def _write(obj: Any, out: list[str]) -> None:
    if isinstance(obj, dict):
        out.append("{")
        first = True
        for k, v in obj.items():
            if v is None:
                continue
            if not first:
                out.append(",")
            first = False
            if isinstance(k, str):
                out.append(orjson.dumps(k).decode())
            elif isinstance(k, bool) or not isinstance(k, int):
                _write(k, out)
            else:
                out.append(str(k))
            out.append(":")
            _write(v, out)
        out.append("}")
    elif isinstance(obj, (list, tuple, set, frozenset)):
        out.append("[")
        first = True
        for v in obj:
            if not first:
                out.append(",")
            first = False
            _write(v, out)
        out.append("]")
    elif hasattr(obj, "to_json"):
        _write(obj.to_json(), out)
    else:
        out.append(orjson.dumps(obj).decode())


def dumps_standard(obj: Any) -> bytes:
    """Standard JSON with sorted, quoted keys (the form for clients that ask for it)."""
    # PASSTHROUGH_DATACLASS: body dataclasses go through to_json() (Java's names), not orjson's field dump.
    options = orjson.OPT_NON_STR_KEYS | orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS
    return orjson.dumps(obj, default=_default, option=options)


def _default(obj: Any) -> Any:
    if hasattr(obj, "to_json"):
        return obj.to_json()
    if isinstance(obj, (set, frozenset)):
        return list(obj)
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")
