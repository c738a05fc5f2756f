"""Messages on the wire: tag hash, properties, offset message ids, store records, batch bodies."""

from __future__ import annotations

import ipaddress
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.remoting import message
from gateway.remoting.codec import FrameDecoder
from gateway.remoting.headers import SendMessageRequestHeader
from gateway.remoting.message import (
    MESSAGE_MAGIC_CODE,
    MessageSysFlag,
    RecordError,
    body_crc,
    create_offset_message_id,
    decode_batch,
    decode_offset_message_id,
    decode_record,
    decode_records,
    encode_batch,
    encode_record,
    java_string_hash,
    pack_host,
    properties_to_string,
    property_value,
    record_size,
    send_properties,
    store_properties,
    string_to_properties,
    tags_code,
    unpack_host,
    wait_store_msg_ok,
)

from .golden import frame

SETTINGS = settings(max_examples=200, deadline=None, database=None)

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)

# ---------------------------------------------------------------------------- java_string_hash


def reference_hash(s: str) -> int:
    """String.hashCode from its definition: s[0]*31^(n-1) + ... + s[n-1] over UTF-16 units, as an int32."""
    units = struct.unpack(f">{len(s.encode('utf-16-be')) // 2}H", s.encode("utf-16-be"))
    n = len(units)
    total = sum(u * pow(31, n - 1 - i, 2**32) for i, u in enumerate(units)) % 2**32
    return total - 2**32 if total >= 2**31 else total


@pytest.mark.parametrize(
    ("s", "h"),
    [
        ("", 0),
        ("a", 97),
        ("TagA", 2598919),
        ("hello", 99162322),
        ("Hello World", -862545276),
        ("Aa", 2112),
        ("BB", 2112),
        ("polygenelubricants", -(2**31)),  # overflows to Integer.MIN_VALUE
        ("é", 0xE9),
        # U+1F600 is the surrogate pair D83D DE00: 0xD83D * 31 + 0xDE00.
        ("😀", 0xD83D * 31 + 0xDE00),
        ("a😀", (97 * 31 + 0xD83D) * 31 + 0xDE00),
        ("日本", 0x65E5 * 31 + 0x672C),
    ],
)
def test_java_string_hash_known_values(s: str, h: int) -> None:
    assert java_string_hash(s) == h


@SETTINGS
@given(st.text(max_size=40))
def test_java_string_hash_matches_definition(s: str) -> None:
    h = java_string_hash(s)
    assert -(2**31) <= h < 2**31
    assert h == reference_hash(s)


def test_tags_code() -> None:
    assert tags_code("TagA") == 2598919
    assert tags_code(None) == 0
    assert tags_code("") == 0


# ---------------------------------------------------------------------------- properties

KEY = st.text(min_size=1, max_size=12).filter(lambda k: "\x01" not in k and "\x02" not in k)
VALUE = st.text(min_size=1, max_size=20).filter(lambda v: "\x02" not in v)


@SETTINGS
@given(st.dictionaries(KEY, VALUE, max_size=8))
def test_properties_round_trip(props: dict[str, str]) -> None:
    s = properties_to_string(props)
    assert not s.endswith("\x02")
    assert string_to_properties(s) == props


def test_properties_format() -> None:
    assert properties_to_string({"KEYS": "k1", "TAGS": "TagA"}) == "KEYS\x01k1\x02TAGS\x01TagA"
    assert properties_to_string({}) == ""
    assert properties_to_string(None) == ""
    assert properties_to_string({"a": None, "b": "c"}) == "b\x01c"  # type: ignore[dict-item]


@pytest.mark.parametrize(
    ("s", "props"),
    [
        ("", {}),
        (None, {}),
        ("a\x01b\x02", {"a": "b"}),  # trailing separator (the C++ client sends one)
        ("\x02\x02a\x01b\x02\x02", {"a": "b"}),  # empty segments
        ("ab\x02a\x01b", {"a": "b"}),  # segment shorter than 3 chars
        ("a\x01", {}),  # too short
        ("ab\x01\x02c\x01d", {"c": "d"}),  # empty value
        ("\x01ab\x02c\x01d", {"c": "d"}),  # empty key
        ("abc\x02c\x01d", {"c": "d"}),  # no name/value separator
        ("a\x01b\x01c", {"a": "b\x01c"}),  # split at the first 0x01 only
        ("a\x01x\x02a\x01y", {"a": "y"}),  # later duplicate wins (HashMap.put)
        ("日本\x01東京", {"日本": "東京"}),
    ],
)
def test_properties_java_skipping_rules(s: str | None, props: dict[str, str]) -> None:
    assert string_to_properties(s) == props


@SETTINGS
@given(st.text(alphabet="ab\x01\x02"))
def test_properties_fast_path_skips_what_java_skips(s: str) -> None:
    """Any mix of separators parses as Java's segment-by-segment loop does."""
    expected = {}
    for seg in s.split("\x02"):
        k, sep, v = seg.partition("\x01")
        if len(seg) >= 3 and sep and k and v:
            expected[k] = v
    assert string_to_properties(s) == expected


# ---------------------------------------------------------------------------- hosts and offset message ids


def test_golden_offset_message_ids() -> None:
    """msgId values the 4.9.8 broker returned in the golden SEND responses."""
    store = pack_host("127.0.0.1", 10911)
    assert store == bytes([127, 0, 0, 1]) + struct.pack(">i", 10911)
    assert create_offset_message_id(store, 0x34B52) == "7F00000100002A9F0000000000034B52"
    assert decode_offset_message_id("7F00000100002A9F0000000000034B52") == ("127.0.0.1:10911", 0x34B52)
    assert decode_offset_message_id("7F00000100002A9F00000001D598B90A") == ("127.0.0.1:10911", 0x1D598B90A)
    assert decode_offset_message_id("7f00000100002a9f0000000000034b52") == ("127.0.0.1:10911", 0x34B52)


def test_ipv6_offset_message_id() -> None:
    store = pack_host("::1", 10911)
    assert len(store) == 20
    msg_id = create_offset_message_id(store, 12345)
    assert len(msg_id) == 56
    assert msg_id == msg_id.upper()
    assert decode_offset_message_id(msg_id) == ("::1:10911", 12345)


@pytest.mark.parametrize("bad", ["", "7F00", "XYZ" * 10 + "AB", "7F00000100002A9F0000000000034B5", "00" * 20])
def test_bad_offset_message_ids(bad: str) -> None:
    with pytest.raises(ValueError):
        decode_offset_message_id(bad)


HOSTS = st.ip_addresses(v=4) | st.ip_addresses(v=6)
PORTS = st.integers(0, 65535)


IP = ipaddress.IPv4Address | ipaddress.IPv6Address


def same_addr(addr: str, ip: IP, port: int) -> bool:
    host, _, p = addr.rpartition(":")
    return ipaddress.ip_address(host) == ip and int(p) == port


@SETTINGS
@given(HOSTS, PORTS, INT64)
def test_offset_message_id_round_trip(ip: IP, port: int, offset: int) -> None:
    packed = pack_host(str(ip), port)
    assert len(packed) == (8 if ip.version == 4 else 20)
    assert same_addr(unpack_host(packed), ip, port)
    msg_id = create_offset_message_id(packed, offset)
    assert len(msg_id) == (32 if ip.version == 4 else 56)
    assert msg_id == msg_id.upper()
    addr, got_offset = decode_offset_message_id(msg_id)
    assert got_offset == offset
    assert same_addr(addr, ip, port)


# ---------------------------------------------------------------------------- store records


@st.composite
def records(draw: st.DrawFn) -> dict:
    born_ip = draw(HOSTS)
    store_ip = draw(HOSTS)
    sys_flag = draw(INT32) & ~(
        MessageSysFlag.BORNHOST_V6_FLAG | MessageSysFlag.STOREHOSTADDRESS_V6_FLAG | MessageSysFlag.COMPRESSED_FLAG
    )
    if born_ip.version == 6:
        sys_flag |= MessageSysFlag.BORNHOST_V6_FLAG
    if store_ip.version == 6:
        sys_flag |= MessageSysFlag.STOREHOSTADDRESS_V6_FLAG
    topic = draw(st.text(min_size=1, max_size=40).filter(lambda t: len(t.encode()) <= 127))
    props = draw(st.dictionaries(KEY, VALUE, max_size=5))
    return {
        "topic": topic,
        "queue_id": draw(INT32),
        "flag": draw(INT32),
        "queue_offset": draw(INT64),
        "physical_offset": draw(INT64),
        "sys_flag": sys_flag,
        "born_timestamp": draw(INT64),
        "born_ip": born_ip,
        "born_port": draw(PORTS),
        "store_timestamp": draw(INT64),
        "store_ip": store_ip,
        "store_port": draw(PORTS),
        "reconsume_times": draw(INT32),
        "prepared_transaction_offset": draw(INT64),
        "body": draw(st.binary(max_size=200)),
        "properties": props,
    }


def encode_spec(r: dict) -> bytes:
    return encode_record(
        topic=r["topic"].encode(),
        queue_id=r["queue_id"],
        flag=r["flag"],
        queue_offset=r["queue_offset"],
        physical_offset=r["physical_offset"],
        sys_flag=r["sys_flag"],
        born_timestamp=r["born_timestamp"],
        born_host=pack_host(str(r["born_ip"]), r["born_port"]),
        store_timestamp=r["store_timestamp"],
        store_host=pack_host(str(r["store_ip"]), r["store_port"]),
        reconsume_times=r["reconsume_times"],
        prepared_transaction_offset=r["prepared_transaction_offset"],
        body=r["body"],
        properties=properties_to_string(r["properties"]).encode(),
    )


@SETTINGS
@given(records())
def test_record_round_trip(r: dict) -> None:
    data = encode_spec(r)
    props = properties_to_string(r["properties"]).encode()
    born_len = 8 if r["born_ip"].version == 4 else 20
    store_len = 8 if r["store_ip"].version == 4 else 20
    assert len(data) == record_size(len(r["body"]), len(r["topic"].encode()), len(props), born_len, store_len)
    total, magic, crc = struct.unpack_from(">iii", data)
    assert total == len(data)
    assert magic == MESSAGE_MAGIC_CODE
    assert crc == zlib.crc32(r["body"]) & 0x7FFFFFFF

    m = decode_record(data)
    assert m.topic == r["topic"]
    assert m.body == r["body"]
    assert m.flag == r["flag"]
    assert m.properties == r["properties"]
    assert m.queue_id == r["queue_id"]
    assert m.queue_offset == r["queue_offset"]
    assert m.commitlog_offset == r["physical_offset"]
    assert m.sys_flag == r["sys_flag"]
    assert m.born_timestamp == r["born_timestamp"]
    assert same_addr(m.born_host, r["born_ip"], r["born_port"])
    assert m.store_timestamp == r["store_timestamp"]
    assert same_addr(m.store_host, r["store_ip"], r["store_port"])
    assert m.reconsume_times == r["reconsume_times"]
    assert m.prepared_transaction_offset == r["prepared_transaction_offset"]
    assert m.body_crc == crc
    assert m.store_size == len(data)
    store = pack_host(str(r["store_ip"]), r["store_port"])
    assert m.msg_id == create_offset_message_id(store, r["physical_offset"])


@settings(SETTINGS, max_examples=60)
@given(st.lists(records(), min_size=1, max_size=4))
def test_decode_records_reads_consecutive_records(rs: list[dict]) -> None:
    data = b"".join(encode_spec(r) for r in rs)
    got = decode_records(data)
    assert [m.body for m in got] == [r["body"] for r in rs]
    assert [m.topic for m in got] == [r["topic"] for r in rs]
    assert sum(m.store_size for m in got) == len(data)
    # Offsets into a larger buffer work too.
    second = decode_record(memoryview(data), got[0].store_size) if len(rs) > 1 else None
    if second is not None:
        assert second.body == rs[1]["body"]


def _ipv4_record(**overrides: object) -> bytes:
    args: dict = {
        "topic": b"TopicTest",
        "queue_id": 3,
        "flag": 7,
        "queue_offset": 41,
        "physical_offset": 0xB2C,
        "sys_flag": 0,
        "born_timestamp": 1700000000000,
        "born_host": pack_host("10.0.0.1", 50000),
        "store_timestamp": 1700000000005,
        "store_host": pack_host("127.0.0.1", 10911),
        "reconsume_times": 0,
        "prepared_transaction_offset": 0,
        "body": b"Hello world",
        "properties": b"TAGS\x01TagA",
    }
    args.update(overrides)
    return encode_record(**args)


def test_record_field_offsets_match_message_decoder() -> None:
    # §5.7: MAGIC at 4, FLAG at 16, QUEUEOFFSET at 20, PHYSICALOFFSET at 28, SYSFLAG at 36,
    # BORNTIMESTAMP at 40, STORETIMESTAMP at 56 (IPv4 born host); fixed part 84 bytes.
    data = _ipv4_record()
    assert struct.unpack_from(">i", data, 4)[0] == MESSAGE_MAGIC_CODE == -626843481
    assert struct.unpack_from(">i", data, 12)[0] == 3
    assert struct.unpack_from(">i", data, 16)[0] == 7
    assert struct.unpack_from(">q", data, 20)[0] == 41
    assert struct.unpack_from(">q", data, 28)[0] == 0xB2C
    assert struct.unpack_from(">i", data, 36)[0] == 0
    assert struct.unpack_from(">q", data, 40)[0] == 1700000000000
    assert data[48:56] == bytes([10, 0, 0, 1]) + struct.pack(">i", 50000)
    assert struct.unpack_from(">q", data, 56)[0] == 1700000000005
    assert data[64:72] == bytes([127, 0, 0, 1]) + struct.pack(">i", 10911)
    assert struct.unpack_from(">i", data, 84)[0] == len(b"Hello world")
    assert data[88:99] == b"Hello world"
    assert data[99] == len(b"TopicTest")
    assert record_size(0, 0, 0) == 84 + 4 + 1 + 2
    assert record_size(0, 0, 0, 20, 20) == 84 + 24 + 4 + 1 + 2
    assert len(data) == record_size(11, 9, len(b"TAGS\x01TagA"))
    assert decode_record(data).msg_id == "7F00000100002A9F0000000000000B2C"


def test_compressed_record_body() -> None:
    body = b"a" * 5000
    data = _ipv4_record(body=zlib.compress(body, 5), sys_flag=MessageSysFlag.COMPRESSED_FLAG | 0x300)
    assert decode_record(data).body == zlib.compress(body, 5)  # stored bytes by default
    assert decode_record(data, decompress=True).body == body
    assert decode_records(data)[0].body == body  # clients inflate
    assert decode_record(data).body_crc == body_crc(zlib.compress(body, 5))


@pytest.mark.parametrize(
    "mangle",
    [
        lambda d: d[:-1],  # truncated
        lambda d: d[:50],
        lambda d: d[:3],
        lambda d: d[:4] + struct.pack(">i", 0x12345678) + d[8:],  # bad magic
        lambda d: struct.pack(">i", len(d) + 1) + d[4:],  # size beyond the buffer
        lambda d: struct.pack(">i", len(d) - 1) + d[4:-1],  # size not matching the fields
        lambda d: struct.pack(">i", 10) + d[4:],  # size smaller than the fixed part
        lambda d: d[:84] + struct.pack(">i", 10**6) + d[88:],  # body length beyond the record
    ],
)
def test_bad_records_raise_record_error(mangle) -> None:
    data = mangle(_ipv4_record())
    with pytest.raises(RecordError):
        decode_record(data)
    with pytest.raises(RecordError):
        decode_records(data)


# ---------------------------------------------------------------------------- batch bodies

BATCH = st.lists(
    st.tuples(INT32, st.binary(max_size=100), st.text(max_size=30).filter(lambda p: len(p.encode()) < 32768)),
    max_size=6,
)


@SETTINGS
@given(BATCH)
def test_batch_round_trip(messages: list[tuple[int, bytes, str]]) -> None:
    body = encode_batch(messages)
    assert decode_batch(body) == messages
    assert len(body) == sum(20 + len(b) + 2 + len(p.encode()) for _, b, p in messages)


def test_batch_layout_by_hand() -> None:
    # §5.5: TOTALSIZE, MAGICCODE 0, BODYCRC 0, FLAG, BODY length, BODY, PROPERTIES length (short), PROPERTIES.
    props = "KEYS\x01k\x02UNIQ_KEY\x01AB"
    pb = props.encode()
    entry = struct.pack(">iiiii", 20 + 3 + 2 + len(pb), 0, 0, 5, 3) + b"abc" + struct.pack(">h", len(pb)) + pb
    assert encode_batch([(5, b"abc", props), (5, b"abc", props)]) == entry + entry
    assert decode_batch(entry + entry) == [(5, b"abc", props)] * 2


@pytest.mark.parametrize(
    "mangle",
    [
        lambda d: d[:-1],
        lambda d: d[:10],
        lambda d: struct.pack(">i", 999) + d[4:],  # total size disagrees
        lambda d: d[:16] + struct.pack(">i", 10**6) + d[20:],  # body length too long
        lambda d: d[:16] + struct.pack(">i", -1) + d[20:],
        lambda d: d[:23] + b"\xff\xff" + d[25:],  # negative properties length
        lambda d: d[:25] + b"\xff" + d[26:],  # bad UTF-8 in properties
    ],
)
def test_bad_batch_raises_record_error(mangle) -> None:
    data = mangle(encode_batch([(0, b"abc", "a\x01b")]))
    with pytest.raises(RecordError):
        decode_batch(data)


# ---------------------------------------------------------------------------- golden SEND_MESSAGE_V2


def _golden_request(name: str):
    [cmd] = FrameDecoder().feed(frame(name))
    return cmd


def test_golden_send_message_v2_header_and_properties() -> None:
    cmd = _golden_request("java_code310_req")
    assert cmd.code == 310
    header = SendMessageRequestHeader.decode_v2(cmd.ext_fields)
    assert header.producer_group == "ProducerGroupName"
    assert header.topic == "TopicTest"
    assert header.default_topic == "TBW102"
    assert header.default_topic_queue_nums == 4
    assert header.queue_id == 1
    assert header.sys_flag == 0
    assert header.born_timestamp == 1795305551721
    assert header.flag == 0
    assert header.reconsume_times == 0
    assert header.unit_mode is False
    assert header.max_reconsume_times is None
    assert header.batch is False
    assert header.bname == "broker-a"
    props = string_to_properties(header.properties)
    assert props == {
        "KEYS": "OrderID188",
        "UNIQ_KEY": "FD000000000000000000000000000002531E5FFD2B276C24CF680000",
        "WAIT": "true",
        "TAGS": "TagA",
    }
    assert properties_to_string(props) == header.properties  # same order, same separators
    assert tags_code(props["TAGS"]) == 2598919
    assert cmd.body == b"Hello world"
    # Re-encoding gives the client's one-letter map exactly.
    assert header.encode_v2() == cmd.ext_fields


def test_golden_cpp_send_message_header_and_properties() -> None:
    cmd = _golden_request("cpp_code10_req")
    header = SendMessageRequestHeader.decode(cmd.ext_fields)
    assert header.producer_group == "py_bench_pg"
    assert header.default_topic_queue_nums == 4  # sent as a bare JSON number
    assert header.queue_id == 0
    assert header.unit_mode is False  # "0" is not "true"
    assert header.batch is False
    assert header.born_timestamp == 1795305969985
    props = string_to_properties(header.properties)
    assert props == {"UNIQ_KEY": "0100007F000091080000C17B88710100", "WAIT": "true"}  # trailing 0x02 skipped


_PROPERTY_NAMES = st.sampled_from(["WAIT", "CLUSTER", "TAGS", "KEYS", "XWAIT", ""]) | st.text("AWIT\x01", max_size=6)


@given(st.dictionaries(_PROPERTY_NAMES, st.text("vw\x01\x02", max_size=4), max_size=5))
def test_store_properties_equals_javas_map_round_trip(props: dict[str, str]) -> None:
    """The string shortcut of the send path stores what Java's parse / remove WAIT / put CLUSTER gives."""
    raw = properties_to_string(props)
    expected = string_to_properties(raw)
    expected.pop("WAIT", None)
    expected["CLUSTER"] = "DefaultCluster"
    assert string_to_properties(store_properties(raw, "DefaultCluster")) == expected


_PROPERTY_PIECES = st.sampled_from(
    ["WAIT\x01", "TAGS\x01", "CLUSTER\x01", "\x01", "\x02", "true", "TrUe", "false", "T", "é", "TagA"]
)


@pytest.mark.skipif(message._c_send_properties is None, reason="the C codec was not built")
@given(st.lists(_PROPERTY_PIECES, max_size=10).map("".join), st.sampled_from(["DefaultCluster", "", "集群"]))
def test_send_properties_in_c_is_the_python_shortcut_exactly(raw: str, cluster: str) -> None:
    """The same string (not only the same map), tags code and WAIT flag as store_properties, tags_code and
    wait_store_msg_ok, or Python's turn."""
    expected = (store_properties(raw, cluster), tags_code(property_value(raw, "TAGS\x01")), wait_store_msg_ok(raw))
    done = message._c_send_properties(raw, cluster)
    if done is NotImplemented:  # left to Python: text that is not ASCII, a CLUSTER the client sent
        assert not (raw + cluster).isascii() or "CLUSTER\x01" in raw
    else:
        assert done == expected
    assert send_properties(raw, cluster) == expected
