"""The columnar decoder on hand-made records: properties as Java reads them (malformed segments skipped,
the row parsed on its own then), offset message ids when there is no UNIQ_KEY, IPv6 hosts; and the C decoder
(spark/_columns.c) giving the same batches and the same errors as the Python one."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.remoting.message import MessageSysFlag, RecordError, create_offset_message_id, encode_record, pack_host
from spark.columns import NativeColumns, RecordColumns, _c_columns

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from pyspark.sql.pandas.types import to_arrow_schema  # noqa: E402

from spark.datasource import SCHEMA  # noqa: E402

ARROW_SCHEMA = to_arrow_schema(SCHEMA, timezone="UTC")
V6 = MessageSysFlag.BORNHOST_V6_FLAG | MessageSysFlag.STOREHOSTADDRESS_V6_FLAG
needs_c = pytest.mark.skipif(_c_columns is None, reason="spark/_columns.c not built")


def record(offset: int, props: str, *, v6: bool = False, body: bytes | None = None, compressed: bool = False) -> bytes:
    host = pack_host("::1", 9) if v6 else pack_host(f"127.0.0.{offset % 250}", 9000 + offset)
    body = b"b%d" % offset if body is None else body
    return encode_record(
        topic=b"T", queue_id=0, flag=0, queue_offset=offset, physical_offset=1000 + offset,
        sys_flag=(V6 if v6 else 0) | (MessageSysFlag.COMPRESSED_FLAG if compressed else 0),
        born_timestamp=5 + offset, born_host=host, store_timestamp=6 + offset, store_host=host,
        reconsume_times=offset % 3, prepared_transaction_offset=0,
        body=zlib.compress(body) if compressed else body, properties=props.encode(),
    )  # fmt: skip


def batch(*records: bytes) -> dict[str, list]:
    columns = RecordColumns()
    columns.add_records(b"".join(records), 0, 100)
    return columns.to_batch(ARROW_SCHEMA, "T", "b", 0).to_pydict()


def both(bodies: list[bytes], start: int = 0, end: int = 1 << 62) -> tuple[object, object]:
    """What the Python and the C decoder make of the same pull bodies: a record batch, or the error."""
    out = []
    for columns in (RecordColumns(), NativeColumns()):
        try:
            for body in bodies:
                columns.add_records(body, start, end)
            out.append(columns.to_batch(ARROW_SCHEMA, "T", "broker-a", 3))
        except RecordError as e:
            out.append(f"RecordError: {e}")
    py, c = out
    if not isinstance(c, str):
        c.validate(full=True)  # offsets, UTF-8 and bitmaps as Arrow requires
    return py, c


def same(bodies: list[bytes], start: int = 0, end: int = 1 << 62) -> object:
    py, c = both(bodies, start, end)
    if isinstance(py, str) or isinstance(c, str):
        assert py == c
    else:
        assert c.schema == py.schema
        assert c.equals(py), [f.name for f in py.schema if not c.column(f.name).equals(py.column(f.name))]
    return py


def test_well_formed_properties_become_the_map_and_the_columns() -> None:
    out = batch(record(0, "UNIQ_KEY\x01ID0\x02KEYS\x01k\x02TAGS\x01t"), record(1, ""), record(2, "a\x01b"))
    assert out["properties"] == [[("UNIQ_KEY", "ID0"), ("KEYS", "k"), ("TAGS", "t")], [], [("a", "b")]]
    assert (out["msgId"][0], out["keys"][0], out["tags"][0]) == ("ID0", "k", "t")
    assert out["msgId"][1] == create_offset_message_id(pack_host("127.0.0.1", 9001), 1001)  # no UNIQ_KEY
    assert out["body"] == [b"b0", b"b1", b"b2"]
    assert out["bornHost"] == ["127.0.0.0:9000", "127.0.0.1:9001", "127.0.0.2:9002"]


def test_a_malformed_property_string_is_read_as_java_reads_it() -> None:
    out = batch(record(0, "a\x01b\x02junk\x02\x01novalue\x02c\x01"), record(1, "x\x01y"))
    assert out["properties"] == [[("a", "b")], [("x", "y")]]


def test_ipv6_hosts_take_the_general_decoder() -> None:
    out = batch(record(0, "UNIQ_KEY\x01ID6", v6=True), record(1, "UNIQ_KEY\x01ID4"))
    assert out["bornHost"] == ["::1:9", "127.0.0.1:9001"] and out["msgId"] == ["ID6", "ID4"]


@needs_c
def test_c_gives_the_rows_python_gives() -> None:
    records = [
        record(0, "UNIQ_KEY\x01ID0\x02KEYS\x01k1 k2\x02TAGS\x01t"),
        record(1, ""),  # no UNIQ_KEY: the offset message id; no keys, no tags
        record(2, "a\x01b", body=b""),  # an empty body
        record(3, "KEYS\x01\x02TAGS\x01x"),  # an empty KEYS is no keys (and a malformed row)
        record(4, "xKEYS\x01no\x02KEYS\x01yes\x02d\x01e\x02d\x01f"),  # a duplicate name kept as sent
        record(5, "a\x01b\x02junk\x02\x01novalue\x02c\x01\x02UNIQ_KEY\x01U5"),  # read as Java reads it
        record(6, "k\x01v\x01w\x02n\x01\u00e9t\u00e9 \u4e2d\U0001f600"),  # 0x01 in a value; non-ASCII
        record(7, "UNIQ_KEY\x01ID7\x02TAGS\x01six", v6=True),
        record(8, "KEYS\x01z\x02a\x01b\x02a\x01c", body=b"x" * 5000, compressed=True),
        record(9, "a\x01b\x02", body=bytes(range(256))),  # a trailing separator
    ]
    out = same([b"".join(records[:4]), b"".join(records[4:])]).to_pydict()
    assert len(out["body"]) == 10 and out["body"][8] == b"x" * 5000 and out["body"][2] == b""
    assert out["keys"][:5] == ["k1 k2", None, None, None, "yes"] and out["tags"][3] == "x"
    assert out["properties"][4] == [("xKEYS", "no"), ("KEYS", "yes"), ("d", "e"), ("d", "f")]
    assert out["properties"][5] == [("a", "b"), ("UNIQ_KEY", "U5")] and out["msgId"][5] == "U5"
    assert out["properties"][8] == [("KEYS", "z"), ("a", "c")]  # the general decoder reads it as Java
    assert out["bornHost"][1] == "127.0.0.1:9001" and out["storeTimestamp"][1].timestamp() == 0.007


@needs_c
def test_c_keeps_the_offset_range_and_starts_afresh_after_each_batch() -> None:
    bodies = [b"".join(record(i, f"KEYS\x01k{i}") for i in range(j, j + 4)) for j in (0, 4, 8)]
    assert same(bodies, 2, 10).column("queueOffset").to_pylist() == list(range(2, 10))
    columns = NativeColumns()
    columns.add_records(bodies[0], 0, 100)
    assert len(columns) == 4 and columns.nbytes == 8
    columns.to_batch(ARROW_SCHEMA, "T", "b", 0)
    columns.add_records(bodies[1], 0, 100)
    again = columns.to_batch(ARROW_SCHEMA, "T", "b", 0).to_pydict()
    assert again["keys"] == ["k4", "k5", "k6", "k7"] and again["properties"][0] == [("KEYS", "k4")]


@needs_c
@pytest.mark.parametrize(
    ("name", "damage"),
    [
        ("truncated", lambda r: r[:-1]),
        ("shorter than a record head", lambda r: r[:40]),
        ("bad magic", lambda r: r[:4] + b"\0\0\0\0" + r[8:]),
        ("total too small", lambda r: struct.pack(">i", 20) + r[4:]),
        ("body longer than the record", lambda r: r[:84] + struct.pack(">i", len(r)) + r[88:]),
        ("negative body length", lambda r: r[:84] + struct.pack(">i", -1) + r[88:]),
        ("properties not UTF-8", lambda r: r[:-1] + b"\xff"),
        ("properties longer than the record", lambda r: r[:-6] + b"\x7f\xff" + r[-4:]),
        ("a byte more than its fields", lambda r: struct.pack(">i", len(r) + 1) + r[4:] + b"\0"),
    ],
)
def test_a_malformed_record_is_the_same_error_in_c(name: str, damage: object) -> None:
    good = record(1, "KEYS\x01abcd")
    bad = damage(good)  # type: ignore[operator]
    assert same([good + bad]) == f"RecordError: bad record at {len(good)}", name


@needs_c
@settings(max_examples=300, deadline=None, database=None)
@given(
    props=st.lists(st.text(alphabet="ab\x01\x02KEYSTAGUNIQ_\u00e9", max_size=30), min_size=1, max_size=4),
    flips=st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=3),
)
def test_c_agrees_with_python_on_any_properties_and_damage(props: list[str], flips: list[tuple[int, int]]) -> None:
    data = bytearray(b"".join(record(i, p) for i, p in enumerate(props)))
    for at, value in flips:
        if at < len(data):
            data[at] = value
    same([bytes(data)])
