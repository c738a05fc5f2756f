"""Pulled records straight into the data source's columns, then an Arrow record batch.

The hot loop of a read. In C where spark/_columns.c was built (:class:`NativeColumns`: records into Arrow
column buffers, made into arrays without another copy); else in Python (:class:`RecordColumns`, the
reference, which the tests compare with C): one ``struct`` call takes a record's fixed part (IPv4 hosts,
the usual case), host strings are cached, msgId, keys and tags are found in the encoded properties with
``str.find``, and the properties of a whole batch become a Map array with a few string operations in C.
Both keep a row's well-formed properties as they are and read a malformed property string as Java does
(skipping its malformed segments). Records with IPv6 hosts or a compressed body take the general decoder;
a record that does not add up raises RecordError.
"""

from __future__ import annotations

import re
import struct
import zlib
from typing import Any

from gateway.native import load_extension
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
_c_columns = load_extension("spark._columns")
_WELL_FORMED = re.compile(r"[^\x01\x02]+\x01[^\x01\x02]+(?:\x02[^\x01\x02]+\x01[^\x01\x02]+)*")


def record_columns() -> RecordColumns | NativeColumns:
    """An empty set of columns: in C when it was built (and not refused with ROCKETMQ_GATEWAY_PURE_PYTHON=1)."""
    return NativeColumns() if _c_columns is not None else RecordColumns()


def _general_row(buf: bytes, pos: int) -> tuple[tuple[Any, ...], str]:
    """The row and encoded properties of the record at ``pos`` by the general decoder (IPv6 hosts, compressed
    bodies)."""
    try:
        m = decode_record(buf, pos, decompress=True)
    except zlib.error as e:
        raise RecordError(f"bad compressed body at {pos}: {e}") from None
    row = (
        m.queue_offset, m.commitlog_offset, m.uniq_key or m.msg_id, m.keys, m.tags, m.born_timestamp,
        m.store_timestamp, m.born_host, m.store_host, m.reconsume_times, m.body,
    )  # fmt: skip
    return row, properties_to_string(m.properties)


def _constant_columns(topic: str, broker: str, queue_id: int, n: int) -> dict[str, Any]:
    """The columns that are the same on every row of a queue's batch."""
    import pyarrow as pa

    return {
        "topic": pa.repeat(pa.scalar(topic, pa.string()), n),
        "broker": pa.repeat(pa.scalar(broker, pa.string()), n),
        "queueId": pa.repeat(pa.scalar(queue_id, pa.int32()), n),
    }


class RecordColumns:
    """The rows read so far, one tuple each (topic, broker and queueId are constant per queue), and their
    encoded properties."""

    def __init__(self) -> None:
        self._hosts: dict[bytes, str] = {}
        self._clear()

    def _clear(self) -> None:
        self.rows: list[tuple[Any, ...]] = []
        self.props: list[str] = []
        self.nbytes = 0  # of the bodies

    def __len__(self) -> int:
        return len(self.rows)

    def add_records(self, buf: bytes, start: int, end: int) -> None:
        """Every record of a pull body whose queue offset is in [start, end)."""
        pos, n = 0, len(buf)
        unpack = _FIXED_V4.unpack_from
        hosts, rows, all_props = self._hosts, self.rows, self.props
        fixed_size = _FIXED_V4.size
        while pos < n:
            if n - pos < fixed_size:
                raise RecordError(f"bad record at {pos}")
            fixed = unpack(buf, pos)
            total, magic, sys_flag, queue_offset = fixed[0], fixed[1], fixed[7], fixed[5]
            if magic != MESSAGE_MAGIC_CODE or total < fixed_size or pos + total > n:
                raise RecordError(f"bad record at {pos}")
            if not start <= queue_offset < end:
                pos += total
                continue
            if sys_flag & _SLOW_FLAGS:
                row, props = _general_row(buf, pos)
            else:
                p, record_end, body_len = pos + fixed_size, pos + total, fixed[14]
                if body_len < 0 or p + body_len + 3 > record_end:  # the body, the topic's length, the props'
                    raise RecordError(f"bad record at {pos}")
                body = buf[p : p + body_len]
                p += body_len
                p += 1 + buf[p]  # the topic: the one asked for
                if p + 2 > record_end:
                    raise RecordError(f"bad record at {pos}")
                props_len = (buf[p] << 8) | buf[p + 1]
                if p + 2 + props_len != record_end:
                    raise RecordError(f"bad record at {pos}")
                try:
                    props = buf[p + 2 : record_end].decode() if props_len else ""
                except UnicodeDecodeError:
                    raise RecordError(f"bad record at {pos}") from None
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
            self.nbytes += len(row[-1])
            pos += total

    def _property_lists(self) -> tuple[list[int], list[str], list[str]]:
        """Offsets, keys and values of every row's properties, as string2messageProperties reads them."""
        joined = "\x02".join(s for s in self.props if s)
        if not joined or _WELL_FORMED.fullmatch(joined):  # every segment one name and one value: nothing dropped
            flat = joined.replace("\x01", "\x02").split("\x02") if joined else []
            counts = [s.count("\x02") + 1 if s else 0 for s in self.props]
            keys, values = flat[0::2], flat[1::2]
        else:  # row by row: a well-formed row as it is, a malformed one as Java reads it
            pairs = [_property_pairs(s) for s in self.props]
            counts = [len(p) for p in pairs]
            keys = [k for p in pairs for k, _ in p]
            values = [v for p in pairs for _, v in p]
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
        for name, values in zip(_COLUMNS, list(zip(*self.rows, strict=True)) or [()] * len(_COLUMNS), strict=True):
            kind = arrow_schema.field(name).type
            if name.endswith("Timestamp"):  # epoch ms to Spark's microseconds
                arrays[name] = pc.multiply(pa.array(values, pa.int64()), 1000).cast(kind)
            else:
                arrays[name] = pa.array(values, kind)
        arrays.update(_constant_columns(topic, broker, queue_id, n))
        offsets, keys, values = self._property_lists()
        arrays["properties"] = pa.MapArray.from_arrays(
            pa.array(offsets, pa.int32()),
            pa.array(keys, pa.string()),
            pa.array(values, pa.string()),
            type=arrow_schema.field("properties").type,
        )
        self._clear()
        return pa.RecordBatch.from_arrays([arrays[f.name] for f in arrow_schema], schema=arrow_schema)


def _property_pairs(s: str) -> list[tuple[str, str]]:
    """A row's properties: its segments as they are when each is one name, 0x01, one value (none empty), else
    what Java's string2messageProperties keeps."""
    segments = s.split("\x02") if s else []
    pairs = [tuple(seg.split("\x01")) for seg in segments]
    if all(len(p) == 2 and p[0] and p[1] for p in pairs):
        return pairs  # type: ignore[return-value]
    return list(string_to_properties(s).items())


class NativeColumns:
    """:class:`RecordColumns` in C (spark/_columns.c): the same rows, as Arrow buffers."""

    def __init__(self) -> None:
        self._columns = _c_columns.Columns(_general_row, string_to_properties, RecordError)  # type: ignore[union-attr]

    def __len__(self) -> int:
        return len(self._columns)

    @property
    def nbytes(self) -> int:
        """Bytes of the bodies held."""
        return self._columns.nbytes  # type: ignore[no-any-return]

    def add_records(self, buf: bytes, start: int, end: int) -> None:
        """Every record of a pull body whose queue offset is in [start, end)."""
        self._columns.add_records(buf, start, end)

    def to_batch(self, arrow_schema: Any, topic: str, broker: str, queue_id: int) -> Any:
        """The rows so far as an Arrow record batch of ``arrow_schema`` (the source's); then empty."""
        import pyarrow as pa

        n, fixed, var, map_offsets = self._columns.take()

        def strings(kind: Any, buffers: tuple[bytes | None, bytes, bytes]) -> Any:
            valid, offsets, data = buffers
            count = len(offsets) // 4 - 1
            return pa.Array.from_buffers(
                kind, count, [valid and pa.py_buffer(valid), pa.py_buffer(offsets), pa.py_buffer(data)]
            )

        field = arrow_schema.field
        arrays = {name: pa.Array.from_buffers(field(name).type, n, [None, pa.py_buffer(b)]) for name, b in zip(
            ("queueOffset", "commitLogOffset", "bornTimestamp", "storeTimestamp", "reconsumeTimes"), fixed, strict=True
        )}  # fmt: skip
        names = ("msgId", "keys", "tags", "bornHost", "storeHost", "body")
        arrays.update({name: strings(field(name).type, b) for name, b in zip(names, var[:6], strict=True)})
        arrays.update(_constant_columns(topic, broker, queue_id, n))
        map_type = field("properties").type
        arrays["properties"] = pa.MapArray.from_arrays(
            pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(map_offsets)]),
            strings(map_type.key_type, var[6]),
            strings(map_type.item_type, var[7]),
            type=map_type,
        )
        return pa.RecordBatch.from_arrays([arrays[f.name] for f in arrow_schema], schema=arrow_schema)
