"""The store's second line against path traversal: a name from a client never leads a path out of the store.

The broker validates topic names before they get here; this guard holds even if it did not.
"""

from __future__ import annotations

import os

_SEPARATORS = ("/", "\\", "\0")


class StorePathError(ValueError):
    """A name that would make the store build a path outside its root."""


def is_safe_component(name: str) -> bool:
    """Whether ``name`` is one plain path component: not empty, ``.`` or ``..``, no separator, no NUL."""
    return bool(name) and name not in (".", "..") and not any(c in name for c in _SEPARATORS)


def store_child(root: str, name: str) -> str:
    """``root/name`` if that resolves to a directory entry of ``root``; StorePathError otherwise.

    ``name`` must be one plain component, and an existing entry of that name must not be a symbolic link
    (which could lead anywhere).  The message names the component only: it may reach a client.
    """
    if not is_safe_component(name):
        raise StorePathError(f"{name!r} is not a plain name: the store refuses it as a path component")
    path = os.path.join(root, name)
    if os.path.islink(path):
        raise StorePathError(f"{name!r} is a symbolic link in the store: refused as a path component")
    return path
