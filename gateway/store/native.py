"""The store's C hot path (``_store.c``: commitlog records and index entries written into their mappings, a
pull's records read out), when it was built and not refused with ``ROCKETMQ_GATEWAY_PURE_PYTHON=1``; else None,
and the Python code runs."""

from __future__ import annotations

from gateway.native import load_extension

c_store = load_extension("gateway.store._store")
