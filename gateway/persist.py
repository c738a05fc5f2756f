"""Config and state files written as RocketMQ's ConfigManager does: temp file, fsync, rename, ``.bak``.

Loading falls back to the ``.bak`` copy when the main file is missing or unreadable.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from twisted.logger import Logger

log = Logger()
T = TypeVar("T")


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


def load_with_backup(path: str | Path, parse: Callable[[bytes], T]) -> T | None:
    """Parse ``path``, or its ``.bak`` if the main file is missing or corrupt; None if neither is usable."""
    p = Path(path)
    for candidate in (p, p.with_name(p.name + ".bak")):
        try:
            data = candidate.read_bytes()
        except FileNotFoundError:
            continue
        if not data.strip():
            continue
        try:
            return parse(data)
        except Exception as e:
            log.error("config file {path} is corrupt ({error}); trying its backup", path=str(candidate), error=e)
    return None
