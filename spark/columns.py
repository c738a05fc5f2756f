"""Pulled records straight into the data source's columns, then an Arrow record batch.

The hot loop of a read: one ``struct`` call takes a record's fixed part (IPv4 hosts, the usual case),
host strings are cached, and properties go into flat key/value lists that become a Map array without a
Python object per entry. Records with IPv6 hosts or a compressed body take the general decoder.
"""

from __future__ import annotations

import struct
from typing import Any

from gateway.remoting.message import (
    MESSAGE_MAGIC_CODE,
    MessageSysFlag,
    RecordError,
    create_offset_message_id,
    decode_record,
    string_to_properties,
    unpack_host,
)

# totalSize, magic, bodyCRC, queueId, flag, queueOffset, physicalOffset, sysFlag, bornTimestamp,
# bornHost(4+4), storeTimestamp, storeHost(4+4), reconsumeTimes, preparedTransactionOffset, bodyLength
_FIXED_V4 = struct.Struct(">iiiiiqqiq8sq8siqi")
_SLOW_FLAGS = MessageSysFlag.BORNHOST_V6_FLAG | MessageSysFlag.STOREHOSTADDRESS_V6_FLAG | MessageSysFlag.COMPRESSED_FLAG
_UNIQ = "UNIQ_KEY"


# The per-row columns, in the order of the tuples RecordColumns keeps.
_COLUMNS = (
    "queueOffset", "commitLogOffset", "msgId", "keys", "tags", "bornTimestamp", "storeTimestamp", "bornHost",
    "storeHost", "reconsumeTimes", "body",
)  # fmt: skip


class RecordColumns:
    """The rows read so far, one tuple each (topic, broker and queueId are constant per queue), and their
    properties as flat key and value lists."""

    def __init__(self) -> None:
        self._hosts: dict[bytes, str] = {}
        self._clear()

    def _clear(self) -> None:
        self.rows: list[tuple[Any, ...]] = []
        self.prop_offsets = [0]
        self.prop_keys: list[str] = []
        self.prop_values: list[str] = []

    def __len__(self) -> int:
        return len(self.rows)

    def add_records(self, buf: bytes, start: int, end: int) -> None:
        """Every record of a pull body whose queue offset is in [start, end)."""
        pos, n = 0, len(buf)
        unpack = _FIXED_V4.unpack_from
        hosts, rows = self._hosts, self.rows
        prop_keys, prop_values, prop_offsets = self.prop_keys, self.prop_values, self.prop_offsets
        while pos < n:
            fixed = unpack(buf, pos)
            total, magic, sys_flag, queue_offset = fixed[0], fixed[1], fixed[7], fixed[5]
            if magic != MESSAGE_MAGIC_CODE or total <= 0 or pos + total > n:
                raise RecordError(f"bad record at {pos}")
            if not start <= queue_offset < end:
                pos += total
                continue
            if sys_flag & _SLOW_FLAGS:
                m = decode_record(buf, pos, decompress=True)
                props = m.properties
                row = (
                    m.queue_offset, m.commitlog_offset, props.get(_UNIQ) or m.msg_id, props.get("KEYS"),
                    props.get("TAGS"), m.born_timestamp, m.store_timestamp, m.born_host, m.store_host,
                    m.reconsume_times, m.body,
                )  # fmt: skip
            else:
                p = pos + _FIXED_V4.size
                body = buf[p : p + fixed[14]]
                p += fixed[14]
                p += 1 + buf[p]  # the topic: the one asked for
                props_len = (buf[p] << 8) | buf[p + 1]
                props = string_to_properties(buf[p + 2 : p + 2 + props_len].decode()) if props_len else {}
                born, store = fixed[9], fixed[11]
                row = (
                    queue_offset, fixed[6], props.get(_UNIQ) or create_offset_message_id(store, fixed[6]),
                    props.get("KEYS"), props.get("TAGS"), fixed[8], fixed[10],
                    hosts.get(born) or hosts.setdefault(born, unpack_host(born)),
                    hosts.get(store) or hosts.setdefault(store, unpack_host(store)), fixed[12], body,
                )  # fmt: skip
            rows.append(row)
            prop_keys.extend(props)
            prop_values.extend(props.values())
            prop_offsets.append(len(prop_keys))
            pos += total

    def to_batch(self, arrow_schema: Any, topic: str, broker: str, queue_id: int) -> Any:
        """The rows so far as an Arrow record batch of ``arrow_schema`` (the source's); then empty."""
        import pyarrow as pa
        import pyarrow.compute as pc

        n = len(self.rows)
        arrays = {}
        for name, values in zip(_COLUMNS, zip(*self.rows, strict=True), strict=True):
            kind = arrow_schema.field(name).type
            if name.endswith("Timestamp"):  # epoch ms to Spark's microseconds
                arrays[name] = pc.multiply(pa.array(values, pa.int64()), 1000).cast(kind)
            else:
                arrays[name] = pa.array(values, kind)
        arrays["topic"] = pa.array([topic] * n, pa.string())
        arrays["broker"] = pa.array([broker] * n, pa.string())
        arrays["queueId"] = pa.array([queue_id] * n, pa.int32())
        arrays["properties"] = pa.MapArray.from_arrays(
            pa.array(self.prop_offsets, pa.int32()),
            pa.array(self.prop_keys, pa.string()),
            pa.array(self.prop_values, pa.string()),
            type=arrow_schema.field("properties").type,
        )
        self._clear()
        return pa.RecordBatch.from_arrays([arrays[f.name] for f in arrow_schema], schema=arrow_schema)
