"""The store's C hot path (``_store.c``: commitlog records and index entries written into their mappings), when
it was built and not refused with ``ROCKETMQ_GATEWAY_PURE_PYTHON=1``; else None, and the Python code runs."""

from __future__ import annotations

import os
from types import ModuleType


def _load() -> ModuleType | None:
    if os.environ.get("ROCKETMQ_GATEWAY_PURE_PYTHON"):
        return None
    try:
        from . import _store
    except ImportError:
        return None
    return _store


c_store = _load()
