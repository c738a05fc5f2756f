"""Pulled records straight into the data source's columns, then an Arrow record batch.

The hot loop of a read: one ``struct`` call takes a record's fixed part (IPv4 hosts, the usual case),
host strings are cached, msgId, keys and tags are found in the encoded properties with ``str.find``,
and the properties of a whole batch become a Map array with a few string operations in C (rows with a
malformed property string are parsed one by one, as Java does). Records with IPv6 hosts or a compressed
body take the general decoder.
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
    properties_to_string,
    property_value,
    string_to_properties,
    unpack_host,
)

# totalSize, magic, bodyCRC, queueId, flag, queueOffset, physicalOffset, sysFlag, bornTimestamp,
# bornHost(4+4), storeTimestamp, storeHost(4+4), reconsumeTimes, preparedTransactionOffset, bodyLength
_FIXED_V4 = struct.Struct(">iiiiiqqiq8sq8siqi")
_SLOW_FLAGS = MessageSysFlag.BORNHOST_V6_FLAG | MessageSysFlag.STOREHOSTADDRESS_V6_FLAG | MessageSysFlag.COMPRESSED_FLAG


# The per-row columns, in the order of the tuples RecordColumns keeps.
_COLUMNS = (
    "queueOffset", "commitLogOffset", "msgId", "keys", "tags", "bornTimestamp", "storeTimestamp", "bornHost",
    "storeHost", "reconsumeTimes", "body",
)  # fmt: skip


class RecordColumns:
    """The rows read so far, one tuple each (topic, broker and queueId are constant per queue), and their
    encoded properties."""

    def __init__(self) -> None:
        self._hosts: dict[bytes, str] = {}
        self._clear()

    def _clear(self) -> None:
        self.rows: list[tuple[Any, ...]] = []
        self.props: list[str] = []

    def __len__(self) -> int:
        return len(self.rows)

    def add_records(self, buf: bytes, start: int, end: int) -> None:
        """Every record of a pull body whose queue offset is in [start, end)."""
        pos, n = 0, len(buf)
        unpack = _FIXED_V4.unpack_from
        hosts, rows, all_props = self._hosts, self.rows, self.props
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
                props = properties_to_string(m.properties)
                row = (
                    m.queue_offset, m.commitlog_offset, m.uniq_key or m.msg_id, m.keys, m.tags, m.born_timestamp,
                    m.store_timestamp, m.born_host, m.store_host, m.reconsume_times, m.body,
                )  # fmt: skip
            else:
                p = pos + _FIXED_V4.size
                body = buf[p : p + fixed[14]]
                p += fixed[14]
                p += 1 + buf[p]  # the topic: the one asked for
                props_len = (buf[p] << 8) | buf[p + 1]
                props = buf[p + 2 : p + 2 + props_len].decode() if props_len else ""
                born, store = fixed[9], fixed[11]
                row = (
                    queue_offset, fixed[6],
                    property_value(props, "UNIQ_KEY\x01") or create_offset_message_id(store, fixed[6]),
                    property_value(props, "KEYS\x01"), property_value(props, "TAGS\x01"), fixed[8], fixed[10],
                    hosts.get(born) or hosts.setdefault(born, unpack_host(born)),
                    hosts.get(store) or hosts.setdefault(store, unpack_host(store)), fixed[12], body,
                )  # fmt: skip
            rows.append(row)
            all_props.append(props)
            pos += total

    def _property_lists(self) -> tuple[list[int], list[str], list[str]]:
        """Offsets, keys and values of every row's properties, as string2messageProperties reads them."""
        present = [s for s in self.props if s]
        joined = "\x02".join(present)
        segments = joined.count("\x02") + 1 if present else 0
        flat = joined.replace("\x01", "\x02").split("\x02") if present else []
        if len(flat) == 2 * segments and "" not in flat:  # one separator a segment, nothing empty: no dropping
            counts = [s.count("\x02") + 1 if s else 0 for s in self.props]
            keys, values = flat[0::2], flat[1::2]
        else:
            parsed = [string_to_properties(s) for s in self.props]
            counts = [len(d) for d in parsed]
            keys = [k for d in parsed for k in d]
            values = [v for d in parsed for v in d.values()]
        offsets = [0]
        for c in counts:
            offsets.append(offsets[-1] + c)
        return offsets, keys, values

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
        offsets, keys, values = self._property_lists()
        arrays["properties"] = pa.MapArray.from_arrays(
            pa.array(offsets, pa.int32()),
            pa.array(keys, pa.string()),
            pa.array(values, pa.string()),
            type=arrow_schema.field("properties").type,
        )
        self._clear()
        return pa.RecordBatch.from_arrays([arrays[f.name] for f in arrow_schema], schema=arrow_schema)
