"""KVConfigManager: namespace → key → value settings kept by the name server (mqadmin updateKvConfig).

Persisted after every change as ``{"configTable":{namespace:{key:value}}}`` in ``kvConfigPath``,
the file a Java name server reads, written atomically with a ``.bak`` of the previous content.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from twisted.logger import Logger

from gateway.persist import load_with_backup, write_atomically
from gateway.remoting import fastjson

log = Logger()

# NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG: topic → ordered-queue layout, sent to brokers and clients.
NAMESPACE_ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


class KVConfigManager:
    """The KV table and its file."""

    def __init__(self, kv_config_path: str | Path) -> None:
        self.path = Path(kv_config_path)
        self.config_table: dict[str, dict[str, str]] = {}

    def load(self) -> None:
        """Read the file (or its ``.bak``) if there is one.

        Raises :class:`~gateway.persist.StateFileError` when it exists but neither copy can be read, unless
        within ``corrupt_state_files(start_empty=True)`` (``startWithCorruptStateFiles``).
        """
        table = load_with_backup(self.path, _parse)
        if table is not None:
            self.config_table.update(table)
            log.info("load KV config table OK from {path}", path=str(self.path))

    def persist(self) -> None:
        """Write the whole table."""
        # Small file, rare admin writes: writing synchronously keeps them in order, as Java does.
        write_atomically(self.path, fastjson.dumps({"configTable": self.config_table}))

    def put_kv_config(self, namespace: str, key: str, value: str) -> None:
        """Set one value and persist."""
        self.config_table.setdefault(namespace, {})[key] = value
        log.info("putKVConfig Namespace: {ns} Key: {key} Value: {value}", ns=namespace, key=key, value=value)
        self.persist()

    def delete_kv_config(self, namespace: str, key: str) -> None:
        """Remove one value (the namespace stays, even empty, as in Java) and persist."""
        table = self.config_table.get(namespace)
        if table is not None and table.pop(key, None) is not None:
            log.info("deleteKVConfig Namespace: {ns} Key: {key}", ns=namespace, key=key)
        self.persist()

    def get_kv_config(self, namespace: str, key: str) -> str | None:
        """One value, or None."""
        return self.config_table.get(namespace, {}).get(key)

    def get_kv_list_by_namespace(self, namespace: str) -> dict[str, str] | None:
        """A copy of one namespace's table; None if the namespace was never created."""
        table = self.config_table.get(namespace)
        return dict(table) if table is not None else None


def _parse(data: bytes) -> dict[str, dict[str, str]]:
    obj: Any = fastjson.loads(data)
    table = obj.get("configTable") if isinstance(obj, dict) else None
    if not isinstance(table, dict):
        raise ValueError("no configTable object")
    return {str(ns): {str(k): str(v) for k, v in (kv or {}).items()} for ns, kv in table.items()}
