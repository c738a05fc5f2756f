"""Config and state files written as RocketMQ's ConfigManager does: temp file, fsync, rename, ``.bak``.

Loading falls back to the ``.bak`` copy when the main file is missing, empty or unreadable. When the
file exists but neither copy is usable, loading raises :class:`StateFileError` (Apache's broker
refuses to start then too), unless the server was started with ``startWithCorruptStateFiles=true``
(:func:`corrupt_state_files`): then both copies are kept aside as ``<name>.corrupt-<time>`` and the
table starts empty.

Entries a file holds under names RocketMQ 4.9.8 wrote but this server refuses (blank, too long, characters
5.x forbids) do not stop the load: :class:`SetAside` keeps them out of the live table, as read, and puts them
back into every later write of the file, so the store still opens in Apache.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import orjson
from twisted.logger import Logger

from gateway.config import ConfigError, format_properties, load_properties

log = Logger()
T = TypeVar("T")

# The setting an operator finds in broker.conf and namesrv.properties.
START_EMPTY_KEY = "startWithCorruptStateFiles"


class StateFileError(ConfigError):
    """A config/state file exists but neither it nor its ``.bak`` can be read; the message names both."""


_start_empty: ContextVar[bool] = ContextVar("start_empty_on_corrupt_state_files", default=False)


@contextmanager
def corrupt_state_files(start_empty: bool) -> Iterator[None]:
    """Within the block, :func:`load_with_backup` keeps unusable files aside and starts empty if ``start_empty``,
    else raises :class:`StateFileError` (the default outside any block)."""
    token = _start_empty.set(start_empty)
    try:
        yield
    finally:
        _start_empty.reset(token)


def write_atomically(path: str | Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so a crash leaves either the old or the new content."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    if p.exists():
        bak = p.with_name(p.name + ".bak")
        os.replace(p, bak)
    os.replace(tmp, p)
    dir_fd = os.open(p.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def rewrite_properties(path: str | Path, settings: Mapping[str, str], *, sort: bool = False) -> None:
    """Rewrite a properties file with ``settings`` over the keys it holds (the others kept, unknown ones too),
    escaped as Java's ``Properties.store`` escapes (a value can never add a key), atomically; ``sort`` orders
    the keys."""
    p = Path(path)
    props = load_properties(p) if p.exists() else {}
    props.update(settings)
    write_atomically(p, format_properties(dict(sorted(props.items())) if sort else props).encode())


def load_with_backup(path: str | Path, parse: Callable[[bytes], T]) -> T | None:
    """Parse ``path``, or its ``.bak`` if the main file is missing, empty or corrupt.

    None when neither exists (a fresh start). When one exists but neither parses, raises
    :class:`StateFileError`, or inside ``corrupt_state_files(start_empty=True)`` keeps them aside and
    returns None.
    """
    p = Path(path)
    problems: list[tuple[Path, str]] = []
    for candidate in (p, p.with_name(p.name + ".bak")):
        try:
            data = candidate.read_bytes()
        except FileNotFoundError:
            continue
        except OSError as e:
            problems.append((candidate, f"unreadable ({e.strerror})"))
            continue
        if not data.strip():
            problems.append((candidate, "empty"))
            continue
        try:
            return parse(data)
        except Exception as e:
            # One short printable line: the message ends up in a start-up error.
            reason = "".join(c if c.isprintable() else "?" for c in " ".join(f"{type(e).__name__}: {e}".split())[:200])
            problems.append((candidate, f"corrupt ({reason})"))
            log.error("state file {path} is corrupt ({error})", path=str(candidate), error=reason)
    if not problems:
        return None
    found = "; ".join(f"{candidate} is {problem}" for candidate, problem in problems)
    if not _start_empty.get():
        raise StateFileError(
            f"cannot load {p.name}: {found}. Restore the file, or set {START_EMPTY_KEY}=true to start with "
            "an empty table (the broken files are then kept aside as *.corrupt-<time>)"
        )
    stamp = datetime.now().strftime("%Y%m%d%H%M%S%f")[:-3]
    kept = []
    for candidate, _problem in problems:
        aside = candidate.with_name(f"{candidate.name}.corrupt-{stamp}")
        os.replace(candidate, aside)
        kept.append(str(aside))
    log.critical(
        "cannot load {name}: {found}. Starting with an EMPTY table because {key}=true; kept aside: {kept}",
        name=p.name,
        found=found,
        key=START_EMPTY_KEY,
        kept=", ".join(kept),
    )
    return None


@dataclass
class SetAside:
    """A state file's entries left out of the live table, each with why; kept as read, never used (no request,
    path or peer sees them), and written back by :meth:`merged` with every later write of the file."""

    entries: dict[Any, Any] = field(default_factory=dict)
    reasons: dict[Any, str] = field(default_factory=dict)

    @classmethod
    def split_named(cls, table: Any, name_key: str, problem: Callable[[str], str | None]) -> tuple[Any, SetAside]:
        """:meth:`split` of a table of named entries (topics.json's, say): set aside those whose key, or whose
        own ``name_key`` where it differs, ``problem`` refuses."""

        def entry_problem(key: Any, value: Any) -> str | None:
            name = value.get(name_key) if isinstance(value, dict) else None
            return problem(str(key)) or (problem(name) if isinstance(name, str) and name != key else None)

        return cls.split(table, entry_problem)

    @classmethod
    def split(cls, table: Any, problem: Callable[[Any, Any], str | None]) -> tuple[Any, SetAside]:
        """``table``'s entries for which ``problem(key, value)`` is None, and the others set aside.

        A ``table`` that is not a JSON object comes back whole, for its parser to report."""
        aside = cls()
        if not isinstance(table, dict):
            return table, aside
        live = {}
        for key, value in table.items():
            reason = problem(key, value)
            if reason is None:
                live[key] = value
            else:
                aside.entries[key] = value
                aside.reasons[key] = reason
        return live, aside

    def update(self, other: SetAside) -> None:
        """Take ``other``'s entries over these (a slave merging its master's table, as Java's putAll)."""
        self.entries.update(other.entries)
        self.reasons.update(other.reasons)

    def merged(self, live: Mapping[Any, Any]) -> dict[Any, Any]:
        """``live`` with the set-aside entries after it (a live entry wins over one of the same key)."""
        return {**live, **{k: v for k, v in self.entries.items() if k not in live}}

    def warn(self, path: Path | str) -> None:
        """One warning naming the file (``path``, with where its entries came from) and every entry set aside,
        if any."""
        if self.reasons:
            log.warn(
                "{path}: left out {count} {what} (kept in the file, never used): {entries}",
                path=str(path),
                count=len(self.reasons),
                what="entry" if len(self.reasons) == 1 else "entries",
                entries=self.described(),
            )

    def described(self) -> str:
        """Every entry set aside with why, on one line."""
        return "; ".join(f"{_shown_key(k)}: {why}" for k, why in self.reasons.items())


class SetAsideMemo:
    """The names last set aside per source (a state file, a broker), to warn only when they change: peers send
    them every few seconds. Keeps a hash per source, for at most ``limit`` sources (the oldest forgotten first)."""

    def __init__(self, limit: int = 1024) -> None:
        self.limit = limit
        self._names: dict[Any, int] = {}

    def changed(self, source: Any, set_aside: SetAside) -> bool:
        """Whether ``source`` sets aside other names than last time (an empty set is never news)."""
        last = self._names.pop(source, None)
        if not set_aside.reasons:
            return False
        names = hash(frozenset(set_aside.reasons))
        if len(self._names) >= self.limit:
            del self._names[next(iter(self._names))]
        self._names[source] = names
        return names != last


def _shown_key(key: Any) -> str:
    # One short printable line whatever the key holds: JSON-quoted (escapes control characters), cut at 100.
    text = "/".join(map(str, key)) if isinstance(key, tuple) else str(key)
    return orjson.dumps(text if len(text) <= 100 else text[:100] + "...").decode()
