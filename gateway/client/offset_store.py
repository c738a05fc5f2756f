"""Consumer offsets: on the broker for CLUSTERING (RemoteBrokerOffsetStore), in a local file for
BROADCASTING (LocalFileOffsetStore). Both keep the latest offsets in memory and persist them in bulk."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol

from twisted.internet.defer import Deferred, DeferredList, succeed
from twisted.logger import Logger

from gateway.remoting import fastjson
from gateway.remoting.bodies import MessageQueue
from gateway.remoting.codes import ResponseCode
from gateway.remoting.headers import QueryConsumerOffsetRequestHeader, UpdateConsumerOffsetRequestHeader

from .errors import MQBrokerError
from .instance import ClientInstance

log = Logger()

# read_offset_from_store results besides an offset (Java's -1 and -2).
OFFSET_NOT_FOUND = -1
OFFSET_UNAVAILABLE = -2


class OffsetStore(Protocol):
    """Where a consumer group's progress is kept."""

    offset_table: dict[MessageQueue, int]

    def load(self) -> None: ...

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None:
        """Set the in-memory offset; with ``increase_only`` never move it back."""

    def read_offset(self, mq: MessageQueue) -> int:
        """The in-memory offset, or OFFSET_NOT_FOUND."""

    async def read_offset_from_store(self, mq: MessageQueue) -> int:
        """The persisted offset (cached in memory), OFFSET_NOT_FOUND, or OFFSET_UNAVAILABLE on errors."""

    def persist_all(self, mqs: set[MessageQueue]) -> Deferred[Any]:
        """Persist the offsets of ``mqs``; forget the others. Fires once written (oneway: not acknowledged)."""

    def persist(self, mq: MessageQueue) -> Deferred[None]: ...

    def remove_offset(self, mq: MessageQueue) -> None: ...


class _MemoryTable:
    """The in-memory half both stores share."""

    def __init__(self) -> None:
        self.offset_table: dict[MessageQueue, int] = {}

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None:
        old = self.offset_table.get(mq)
        if old is None or not increase_only or offset > old:
            self.offset_table[mq] = offset

    def read_offset(self, mq: MessageQueue) -> int:
        return self.offset_table.get(mq, OFFSET_NOT_FOUND)

    def remove_offset(self, mq: MessageQueue) -> None:
        self.offset_table.pop(mq, None)


class RemoteBrokerOffsetStore(_MemoryTable):
    """Offsets committed to the queue's broker: QUERY_CONSUMER_OFFSET, oneway UPDATE_CONSUMER_OFFSET."""

    def __init__(self, client: ClientInstance, group: str) -> None:
        super().__init__()
        self.client = client
        self.group = group

    def load(self) -> None:
        pass

    async def read_offset_from_store(self, mq: MessageQueue) -> int:
        header = QueryConsumerOffsetRequestHeader(self.group, mq.topic, mq.queue_id)
        try:
            addr = await self.client.find_broker_addr(mq)
            offset = await self.client.api.query_consumer_offset(addr, header)
        except Exception as e:
            if isinstance(e, MQBrokerError) and e.code == ResponseCode.QUERY_NOT_FOUND:
                return OFFSET_NOT_FOUND
            log.warn("offset of {mq} not fetched: {error}", mq=mq, error=e)
            return OFFSET_UNAVAILABLE
        self.update_offset(mq, offset, False)
        return offset

    def persist_all(self, mqs: set[MessageQueue]) -> Deferred[Any]:
        calls = []
        for mq in list(self.offset_table):
            if mq in mqs:
                calls.append(self.persist(mq))
            else:
                del self.offset_table[mq]
        return DeferredList(calls)

    def persist(self, mq: MessageQueue) -> Deferred[None]:
        offset = self.offset_table.get(mq)
        if offset is None:
            return succeed(None)
        d = Deferred.fromCoroutine(self._update_consume_offset_to_broker(mq, offset))
        d.addErrback(
            lambda f: log.warn("offset {offset} of {mq} not persisted: {error}", offset=offset, mq=mq, error=f.value)
        )
        return d

    async def _update_consume_offset_to_broker(self, mq: MessageQueue, offset: int) -> None:
        # With the broker known this writes at once, so an UNREGISTER_CLIENT sent next arrives after it.
        addr = await self.client.find_broker_addr(mq)
        header = UpdateConsumerOffsetRequestHeader(self.group, mq.topic, mq.queue_id, offset)
        await self.client.api.update_consumer_offset_oneway(addr, header)


class LocalFileOffsetStore(_MemoryTable):
    """Offsets in ``<dir>/<clientId>/<group>/offsets.json`` as Java's OffsetSerializeWrapper (fastjson form).

    Like Java, the path contains the client id, so a restarted BROADCASTING consumer finds its offsets
    only when it keeps its instance name.
    """

    def __init__(self, directory: str | os.PathLike[str], client_id: str, group: str) -> None:
        super().__init__()
        self.path = Path(directory) / client_id / group / "offsets.json"

    def _read_file(self) -> dict[MessageQueue, int]:
        for path in (self.path, self.path.with_name(self.path.name + ".bak")):
            try:
                data = fastjson.loads(path.read_bytes())
            except (OSError, ValueError):
                continue
            return {MessageQueue.from_json(k): int(v) for k, v in (data.get("offsetTable") or {}).items()}
        return {}

    def load(self) -> None:
        self.offset_table.update(self._read_file())

    async def read_offset_from_store(self, mq: MessageQueue) -> int:
        offset = self._read_file().get(mq)
        if offset is None:
            return OFFSET_NOT_FOUND
        self.update_offset(mq, offset, False)
        return offset

    def persist_all(self, mqs: set[MessageQueue]) -> Deferred[Any]:
        table = {mq: off for mq, off in self.offset_table.items() if mq in mqs}
        if not table:
            return succeed(None)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_bytes(fastjson.dumps({"offsetTable": table}))
        if self.path.exists():
            os.replace(self.path, self.path.with_name(self.path.name + ".bak"))
        os.replace(tmp, self.path)
        return succeed(None)

    def persist(self, mq: MessageQueue) -> Deferred[None]:
        # Java persists a local store only in bulk.
        return succeed(None)
