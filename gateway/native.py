"""Loading the optional C extensions (see setup.py): a module when it was built and not refused with
``ROCKETMQ_GATEWAY_PURE_PYTHON=1``; else None, and the Python code runs."""

from __future__ import annotations

import importlib
import os
from types import ModuleType


def load_extension(name: str) -> ModuleType | None:
    """The extension module ``name`` (e.g. ``gateway.store._store``), or None."""
    if os.environ.get("ROCKETMQ_GATEWAY_PURE_PYTHON"):
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None
