"""The columnar decoder on hand-made records: properties as Java reads them (malformed segments skipped,
the batch parsed row by row then), offset message ids when there is no UNIQ_KEY, IPv6 hosts."""

from __future__ import annotations

import pytest

from gateway.remoting.message import MessageSysFlag, create_offset_message_id, encode_record, pack_host
from spark.columns import RecordColumns

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from pyspark.sql.pandas.types import to_arrow_schema  # noqa: E402

from spark.datasource import SCHEMA  # noqa: E402


def record(offset: int, props: str, *, v6: bool = False) -> bytes:
    host = pack_host("::1", 9) if v6 else pack_host("127.0.0.1", 9)
    return encode_record(
        topic=b"T", queue_id=0, flag=0, queue_offset=offset, physical_offset=1000 + offset,
        sys_flag=MessageSysFlag.BORNHOST_V6_FLAG | MessageSysFlag.STOREHOSTADDRESS_V6_FLAG if v6 else 0,
        born_timestamp=5, born_host=host, store_timestamp=6, store_host=host, reconsume_times=0,
        prepared_transaction_offset=0, body=b"b%d" % offset, properties=props.encode(),
    )  # fmt: skip


def batch(*records: bytes) -> dict[str, list]:
    columns = RecordColumns()
    columns.add_records(b"".join(records), 0, 100)
    return columns.to_batch(to_arrow_schema(SCHEMA, timezone="UTC"), "T", "b", 0).to_pydict()


def test_well_formed_properties_become_the_map_and_the_columns() -> None:
    out = batch(record(0, "UNIQ_KEY\x01ID0\x02KEYS\x01k\x02TAGS\x01t"), record(1, ""), record(2, "a\x01b"))
    assert out["properties"] == [[("UNIQ_KEY", "ID0"), ("KEYS", "k"), ("TAGS", "t")], [], [("a", "b")]]
    assert (out["msgId"][0], out["keys"][0], out["tags"][0]) == ("ID0", "k", "t")
    assert out["msgId"][1] == create_offset_message_id(pack_host("127.0.0.1", 9), 1001)  # no UNIQ_KEY
    assert out["body"] == [b"b0", b"b1", b"b2"] and out["bornHost"] == ["127.0.0.1:9"] * 3


def test_a_malformed_property_string_is_read_as_java_reads_it() -> None:
    out = batch(record(0, "a\x01b\x02junk\x02\x01novalue\x02c\x01"), record(1, "x\x01y"))
    assert out["properties"] == [[("a", "b")], [("x", "y")]]


def test_ipv6_hosts_take_the_general_decoder() -> None:
    out = batch(record(0, "UNIQ_KEY\x01ID6", v6=True), record(1, "UNIQ_KEY\x01ID4"))
    assert out["bornHost"] == ["::1:9", "127.0.0.1:9"] and out["msgId"] == ["ID6", "ID4"]
