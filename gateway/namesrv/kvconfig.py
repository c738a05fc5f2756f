"""KVConfigManager: namespace → key → value settings kept by the name server (mqadmin updateKvConfig).

Persisted after every change as ``{"configTable":{namespace:{key:value}}}`` in ``kvConfigPath``,
the file a Java name server reads, written atomically with a ``.bak`` of the previous content. Values that are
not text (null, objects) and ORDER_TOPIC_CONFIG keys that are not legal topic names are set aside
(:class:`~gateway.persist.SetAside`): out of the table, kept in the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from twisted.logger import Logger

from gateway.persist import SetAside, load_with_backup, write_atomically
from gateway.remoting import fastjson
from gateway.remoting.names import topic_problem

log = Logger()

# NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG: topic → ordered-queue layout, sent to brokers and clients.
NAMESPACE_ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


class KVConfigManager:
    """The KV table and its file."""

    def __init__(self, kv_config_path: str | Path) -> None:
        self.path = Path(kv_config_path)
        self.config_table: dict[str, dict[str, str]] = {}
        # (namespace, key) → value as read, for the entries left out of the table.
        self.set_aside = SetAside()

    def load(self) -> None:
        """Read the file (or its ``.bak``) if there is one.

        Raises :class:`~gateway.persist.StateFileError` when it exists but neither copy can be read, unless
        within ``corrupt_state_files(start_empty=True)`` (``startWithCorruptStateFiles``).
        """
        loaded = load_with_backup(self.path, _parse)
        if loaded is not None:
            table, self.set_aside = loaded
            self.set_aside.warn(self.path)
            self.config_table.update(table)
            log.info("load KV config table OK from {path}", path=str(self.path))

    def persist(self) -> None:
        """Write the whole table."""
        # Small file, rare admin writes: writing synchronously keeps them in order, as Java does.
        table = {namespace: dict(kv) for namespace, kv in self.config_table.items()}
        for (namespace, key), value in self.set_aside.entries.items():
            table.setdefault(namespace, {}).setdefault(key, value)
        write_atomically(self.path, fastjson.dumps({"configTable": table}))

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


def _parse(data: bytes) -> tuple[dict[str, dict[str, str]], SetAside]:
    obj: Any = fastjson.loads(data)
    table = obj.get("configTable") if isinstance(obj, dict) else None
    if not isinstance(table, dict):
        raise ValueError("no configTable object")
    if not all(isinstance(kv or {}, dict) for kv in table.values()):
        raise ValueError("a namespace is not an object")
    # Split as one table keyed (namespace, key), then grouped again.
    flat = {(str(namespace), key): value for namespace, kv in table.items() for key, value in (kv or {}).items()}
    kept, aside = SetAside.split(flat, _kv_problem)
    live: dict[str, dict[str, str]] = {str(namespace): {} for namespace in table}
    for (namespace, key), value in kept.items():
        live[namespace][str(key)] = _text(value)
    return live, aside


def _kv_problem(key: tuple[str, Any], value: Any) -> str | None:
    namespace, name = key
    if not isinstance(value, (str, int, float)):
        return f"the value is {'null' if value is None else 'not text'}"
    return topic_problem(str(name)) if namespace == NAMESPACE_ORDER_TOPIC_CONFIG else None


def _text(value: str | int | float) -> str:
    # What fastjson reads into a Java String: a number's or boolean's text.
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
