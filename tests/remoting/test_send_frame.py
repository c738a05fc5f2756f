"""The C send-frame parser (``gateway/remoting/send_frame.h``) against the Python decoders: whenever it reads a
frame it reads it as codec.py's frame splitting and headers.py's SendMessageRequestHeader decoders do, it reads the
frames real clients send, and no input crashes it."""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import random
import struct
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.remoting import codec
from gateway.remoting.codes import MAX_FRAME_LENGTH, LanguageCode, RequestCode, SerializeType
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import HeaderError, SendMessageRequestHeader
from gateway.remoting.names import InvalidNameError

from .golden import frame, session_headers, split_frame

C = codec._c_codec
pytestmark = pytest.mark.skipif(C is None, reason="the C codec was not built (no C compiler at install time)")
FUZZ = settings(max_examples=400, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
SEND, SEND_V2 = int(RequestCode.SEND_MESSAGE), int(RequestCode.SEND_MESSAGE_V2)
SEND_BATCH = int(RequestCode.SEND_BATCH_MESSAGE)
# The Python reference decoders, not the C decode_fields the accelerated ones go through; a batch's header is V2's.
DECODE = {
    SEND: SendMessageRequestHeader._python_decoder(SendMessageRequestHeader._fields_spec()),
    SEND_V2: SendMessageRequestHeader._python_decoder(
        SendMessageRequestHeader._fields_spec(SendMessageRequestHeader.V2_NAMES)
    ),
}
DECODE[SEND_BATCH] = DECODE[SEND_V2]
FULL_NAMES = {attr: key for attr, key, *_ in SendMessageRequestHeader._fields_spec()}


def python_view(data: bytes) -> dict[str, Any] | None:
    """What the Python decoders make of one whole frame, in parse_send_frame's terms; None where they raise, it
    is not one whole frame, or not a send."""
    buf = bytearray(data)
    try:
        commands = codec._split_frames_py(buf, MAX_FRAME_LENGTH)
    except codec.ProtocolError:
        return None
    if len(commands) != 1 or buf or commands[0].code not in DECODE:
        return None
    cmd = commands[0]
    try:
        h = DECODE[cmd.code](cmd.ext_fields)
    except (HeaderError, InvalidNameError):
        return None
    return {
        "code": cmd.code,
        "version": cmd.version,
        "opaque": cmd.opaque,
        "flag": cmd.flag,
        "language": LanguageCode[cmd.language].value if cmd.language in LanguageCode.__members__ else None,
        "serialize": int(cmd.serialize_type),
        "producer_group": h.producer_group,
        "topic": h.topic,
        "default_topic": h.default_topic,
        "properties": h.properties,
        "bname": h.bname,
        "born_timestamp": h.born_timestamp,
        "default_topic_queue_nums": h.default_topic_queue_nums,
        "queue_id": h.queue_id,
        "sys_flag": h.sys_flag,
        "msg_flag": h.flag,
        "reconsume_times": h.reconsume_times,
        "max_reconsume_times": h.max_reconsume_times,
        "unit_mode": h.unit_mode,
        "batch": h.batch,
        "body": bytes(cmd.body),
    }


def agrees(data: bytes) -> dict[str, Any] | None:
    """C's reading of ``data``, asserted equal to Python's whenever C reads it."""
    got = C.parse_send_frame(data)
    if got is not None:
        assert got == python_view(data), data
    return got


def with_header(stype: int, header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">ii", 4 + len(header) + len(body), stype << 24 | len(header)) + header + body


def send_header(**change: Any) -> SendMessageRequestHeader:
    """A send header as our client builds one (gateway/client/producer.py)."""
    fields: dict[str, Any] = {
        "producer_group": "please_rename_unique_group_name",
        "topic": "TopicTest",
        "default_topic": "TBW102",
        "default_topic_queue_nums": 4,
        "queue_id": 3,
        "sys_flag": 0,
        "born_timestamp": 1795305551721,
        "flag": 0,
        "properties": "KEYS\x01k1\x02UNIQ_KEY\x017F0000010000\x02WAIT\x01true\x02TAGS\x01TagA",
        "reconsume_times": 0,
        "max_reconsume_times": None,
        "batch": False,
        "bname": "broker-a",
    }
    return SendMessageRequestHeader(**(fields | change))


def encoded(header: SendMessageRequestHeader, body: bytes = b"hello", *, v2: bool = True, stype: int = 0) -> bytes:
    """The frame our codec writes for the request (gateway/client/api.py's send_message)."""
    ext = header.encode_v2() if v2 else header.encode()
    cmd = RemotingCommand.request(SEND_V2 if v2 else SEND, ext, body)
    cmd.serialize_type = SerializeType(stype)
    return codec.encode(cmd)


# ---------------------------------------------------------------------------------------------- real clients


def test_the_java_and_cpp_clients_golden_sends_are_read_as_python_reads_them() -> None:
    java = agrees(frame("java_code310_req"))
    cpp = agrees(frame("cpp_code10_req"))  # bare numbers, AccessKey/Signature/OnsChannel, remark "", a newline
    assert java is not None and cpp is not None
    assert [java[k] for k in ("code", "language", "topic", "queue_id", "bname")] == [310, 0, "TopicTest", 1, "broker-a"]
    assert java["properties"].endswith("WAIT\x01true\x02TAGS\x01TagA") and java["body"] == b"Hello world"
    assert C.parse_send_frame(frame("java_code310_req"), 3) == java  # benchmarks/send_frame.py repeats it
    assert [cpp[k] for k in ("code", "language", "producer_group", "default_topic_queue_nums")] == [
        10,
        1,
        "py_bench_pg",
        4,
    ]


def test_every_send_of_the_java_session_is_read() -> None:
    sends = [(h, n) for d, code, _, _, h, n in session_headers() if d == "REQ" and code == SEND_V2]
    assert len(sends) > 100
    for header, body_len in sends:
        assert agrees(with_header(0, header, b"b" * body_len)) is not None, header


def test_the_golden_sends_in_rocketmq_serialize_are_read() -> None:
    """The Java client's -Drocketmq.serialize.type=ROCKETMQ form of the same commands (RocketMQSerializable)."""
    for name in ("java_code310_req", "cpp_code10_req"):
        data = frame(name)
        (cmd,) = codec._split_frames_py(bytearray(data), MAX_FRAME_LENGTH)
        cmd.serialize_type = SerializeType.ROCKETMQ
        got = agrees(codec.encode(cmd))
        assert got is not None and got["serialize"] == 1
        assert {k: v for k, v in got.items() if k != "serialize"} == {
            k: v for k, v in C.parse_send_frame(data).items() if k != "serialize"
        }


@pytest.mark.parametrize("stype", [0, 1])
@pytest.mark.parametrize("v2", [True, False])
def test_our_clients_sends_are_read(stype: int, v2: bool) -> None:
    for header in (
        send_header(),
        send_header(properties=None, bname=None, reconsume_times=None),
        send_header(properties="", bname="", max_reconsume_times=16, reconsume_times=3, batch=True),
        send_header(properties='k\x01ünïcødé 日本 😀\x02q\x01"\\/\x00\x7f', topic="%RETRY%" + "g" * 200),
        send_header(queue_id=2147483647, flag=2147483647, born_timestamp=999999999999999999),
    ):
        got = agrees(encoded(header, v2=v2, stype=stype))
        assert got is not None, header
        assert (got["topic"], got["properties"], got["batch"]) == (header.topic, header.properties, header.batch)


def test_every_language_name_and_byte_is_read_as_its_code() -> None:
    for lang in LanguageCode:
        cmd = RemotingCommand.request(SEND_V2, send_header().encode_v2(), language=lang.name)
        for stype in SerializeType:
            cmd.serialize_type = stype
            assert agrees(codec.encode(cmd))["language"] == lang.value  # type: ignore[index]
    header = bytearray(codec._encode_rocketmq_header_py(cmd))
    for byte in (14, 99, 255):
        header[2] = byte
        assert agrees(with_header(1, bytes(header)))["language"] == LanguageCode.OTHER  # type: ignore[index]


# ---------------------------------------------------------------------------------------------- edge values

# (field, wire value, whether C reads it): values the Python decoder takes plainly are read; the rest are left to it.
EDGES = [
    ("queue_id", "007", True),
    ("queue_id", "2147483647", True),
    ("queue_id", "2147483648", False),
    ("queue_id", "-1", False),
    ("queue_id", "+1", False),
    ("queue_id", " 1", False),
    ("queue_id", "1_0", False),
    ("queue_id", "\u0661", False),  # an Arabic-Indic 1
    ("queue_id", "", False),
    ("born_timestamp", "999999999999999999", True),
    ("born_timestamp", "1000000000000000000", False),
    ("reconsume_times", "x", False),
    ("reconsume_times", "12", True),
    ("unit_mode", "TRUE", True),
    ("unit_mode", "tRuE", True),
    ("unit_mode", "1", True),
    ("unit_mode", "", True),
    ("unit_mode", "tru\u0435", False),  # a Cyrillic e
    ("topic", "a" * 127, True),
    ("topic", "a" * 128, False),
    ("topic", "%RETRY%" + "a" * 248, True),
    ("topic", "%DLQ%" + "a" * 251, False),
    ("topic", "bad topic", False),
    ("topic", "", False),
    ("default_topic", "a|b%c_d-e", True),
    ("producer_group", "g" * 120, True),
    ("producer_group", "g" * 121, False),
    ("producer_group", "%RETRY%g", True),
    ("bname", "ü", True),
]


@pytest.mark.parametrize(("field", "value", "read"), EDGES)
@pytest.mark.parametrize("stype", [0, 1])
def test_edge_values_are_read_exactly_when_plain(field: str, value: str, read: bool, stype: int) -> None:
    ext = send_header().encode_v2() | {SendMessageRequestHeader.V2_NAMES[field]: value}
    cmd = RemotingCommand.request(SEND_V2, ext, b"x")
    cmd.serialize_type = SerializeType(stype)
    assert (agrees(codec.encode(cmd)) is not None) == read


def json_frame(text: str, body: bytes = b"") -> bytes:
    return with_header(0, text.encode(), body)


GOLDEN_JSON = frame("java_code310_req")[8:].split(b"Hello world")[0].decode()


@pytest.mark.parametrize(
    ("change", "read"),
    [
        ((',"h":"0"', ',"h":0'), True),  # bare numbers, as the C++ client sends
        ((',"k":"false"', ',"k":false'), True),
        ((',"k":"false"', ',"k":true'), True),
        ((',"k":"false"', ',"k":null'), False),
        ((',"h":"0"', ',"h":-1'), False),
        ((',"h":"0"', ',"h":0.0'), False),
        ((',"h":"0"', ',"h":1e2'), False),
        ((',"h":"0"', ',"h":00'), False),
        ((',"h":"0"', ',"h":"0","h":"0"'), False),  # duplicate key
        ((',"h":"0"', ',"h":"0","zz":[1]'), False),
        ((',"h":"0"', ',"h":"0","zz":"\\u00e9\\n\\/","yy":12,"ww":false'), True),  # ignored extras
        ((',"h":"0"', ',"h":"0","xx":null'), False),  # null: the codec drops it, after reading all as strings
        (('"b":"TopicTest"', '"b":"Topic\\u0054est"'), False),  # an escaped name: left to Python
        (('"n":"broker-a"', '"n":"br\\u00f6ker-\\ud83d\\ude00\\t"'), True),
        (('"n":"broker-a"', '"n":"\\ud83d"'), False),  # a lone surrogate: orjson refuses it
        (('"n":"broker-a"', '"n":"\\ud83d\\u0041"'), False),
        (('"n":"broker-a"', '"n":"\\udc00\\ud83d"'), False),
        (('"n":"broker-a"', '"n":"\\udc00x"'), False),
        (('"n":"broker-a"', '"n":"\\x41"'), False),
        (('"n":"broker-a"', '"n":"\\u00G0"'), False),
        (('"n":"broker-a"', '"n":"a\tb"'), False),  # a raw control character
        (('{"code":310,', ' \r\n{ "code" : 310 ,'), True),
        (('{"code":310,', '{"code":310,"remark":"r\\u00e9","remark2":null,'), True),
        (('{"code":310,', '{"code":310,"remark":{},'), False),
        (('{"code":310,', '{"code":310,"code":310,'), False),
        (('{"code":310,', '{"code":"310",'), False),
        (('{"code":310,', '{"code":311,'), False),
        (('{"code":310,', "{"), False),  # code after extFields: left to Python
        (('"language":"JAVA"', '"language":"COBOL"'), False),
        (('"language":"JAVA"', '"language":1'), False),
        (('"language":"JAVA",', ""), True),  # absent: JAVA
        (('"opaque":3', '"opaque":-2147483648'), True),
        (('"opaque":3', '"opaque":2147483648'), False),
        (('"version":409}', '"version":409} x'), False),
        (('"version":409}', '"version":409'), False),
        (('"b":"TopicTest",', ""), False),  # a required field missing
        (('"j":"0",', ""), True),  # an optional one missing
    ],
)
def test_json_forms_are_read_exactly_when_python_reads_them_the_same(change: tuple[str, str], read: bool) -> None:
    old, new = change
    assert old in GOLDEN_JSON
    text = GOLDEN_JSON.replace(old, new, 1)
    if old.startswith('{"code"') and new == "{":
        text = text[:-1] + ',"code":310}'
    assert (agrees(json_frame(text, b"Hello world")) is not None) == read, text


# Strict UTF-8 as Python's decode and orjson read it: surrogates, overlong forms, past U+10FFFF, cut short.
BAD_UTF8 = [
    b"\xed\xa0\x80",
    b"\xc0\xaf",
    b"\xe0\x80\xaf",
    b"\xf0\x80\x80\xaf",
    b"\xf4\x90\x80\x80",
    b"\xc3",
    b"\xe6\x97",
]
BAD_UTF8 += [b"\x80"]
GOOD_UTF8 = [b"\xc3\xa9", b"\xed\x9f\xbf", b"\xee\x80\x80", b"\xf0\x9f\x98\x80", b"\xf4\x8f\xbf\xbf", b"\x7f"]


@pytest.mark.parametrize("raw", BAD_UTF8 + GOOD_UTF8)
@pytest.mark.parametrize("stype", [0, 1])
@pytest.mark.parametrize("where", ["value", "key", "remark"])
def test_strings_are_read_exactly_when_strict_utf8(raw: bytes, stype: int, where: str) -> None:
    ext = send_header().encode_v2()
    marker = "\U000e0001"  # 4 bytes put in by the encoder, then replaced by the raw bytes and padding
    if where == "value":
        ext["n"] = marker
    elif where == "key":
        ext[marker] = "v"
    cmd = RemotingCommand.request(SEND_V2, ext, b"x")
    cmd.remark = marker if where == "remark" else None
    cmd.serialize_type = SerializeType(stype)
    header = codec.encode(cmd)[8:-1]
    changed = header.replace(marker.encode(), raw + b"z" * (4 - len(raw)))
    assert len(changed) == len(header)
    assert (agrees(with_header(stype, changed, b"x")) is not None) == (raw in GOOD_UTF8)


# ---------------------------------------------------------------------------------------------- fuzz

NAMES = st.sampled_from(["TopicTest", "TBW102", "g", "%RETRY%g", "a|b", "", "bad name", "ü", "a" * 128]) | st.text(
    'abAB09%|_- .\\"\x01é', max_size=8
)
INTS = (
    st.sampled_from(["0", "007", "2147483647", "2147483648", "-1", "+3", " 1", "1_0", "", "x", "9" * 18, "9" * 19])
    | st.integers(-5, 2**40).map(str)
    | st.integers(-5, 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
)
BOOLS = st.sampled_from(["true", "TRUE", "false", "0", "", "tru\u0435"]) | st.booleans() | st.integers(0, 1)
STRINGS = st.text(max_size=16) | st.sampled_from(["k\x01v\x02", '"\\/', "😀", "a\x00b"])
KINDS = {"producer_group": NAMES, "topic": NAMES, "default_topic": NAMES, "properties": STRINGS, "bname": STRINGS}
KINDS |= {f: BOOLS for f in ("unit_mode", "batch")}
KINDS |= {f: INTS for f in FULL_NAMES if f not in KINDS}


@st.composite
def ext_fields(draw: st.DrawFn, v2: bool) -> dict[str, Any]:
    """A send's extFields, mostly plain, some values odd, some fields missing, some unknown ones."""
    plain = send_header().encode_v2() if v2 else send_header().encode()
    keys = SendMessageRequestHeader.V2_NAMES if v2 else FULL_NAMES
    ext: dict[str, Any] = dict(plain)
    for attr in draw(st.lists(st.sampled_from(sorted(keys)), max_size=3)):
        if draw(st.integers(0, 4)) == 0:
            ext.pop(keys[attr], None)
        else:
            ext[keys[attr]] = draw(KINDS[attr])
    ext.update(draw(st.dictionaries(st.sampled_from(["zz", "a", "topic", "AccessKey", "é"]), STRINGS, max_size=2)))
    return ext


def json_text(draw: st.DrawFn, top: dict[str, Any]) -> bytes:
    """The header as orjson writes it, or as the standard json module writes it with every escape spelled out
    (\\uXXXX, surrogate pairs, \\/) and spaces."""
    if draw(st.booleans()):
        return orjson.dumps(top)
    text = json.dumps(top, ensure_ascii=True, separators=draw(st.sampled_from([(",", ":"), (" , ", " : ")])))
    return text.replace("/", "\\/").encode()


@st.composite
def send_frames(draw: st.DrawFn) -> bytes:
    """Send frames as clients write them (JSON or ROCKETMQ, V2 or not) with odd values, then maybe mutated."""
    v2 = draw(st.booleans())
    ext = draw(ext_fields(v2))
    code = draw(st.sampled_from([SEND_V2 if v2 else SEND] * 4 + [SEND if v2 else SEND_V2, SEND_BATCH, 11]))
    language = draw(st.sampled_from(["JAVA", "CPP", "GO", "COBOL", 3, None]))
    body = draw(st.binary(max_size=8))
    if draw(st.booleans()):
        top: dict[str, Any] = {"code": code, "extFields": ext, "flag": draw(st.sampled_from([0, 1, -1, 2**31]))}
        if language is not None:
            top["language"] = language
        top |= {"opaque": draw(st.integers(-(2**32), 2**32)), "serializeTypeCurrentRPC": "JSON", "version": 409}
        if draw(st.booleans()):
            top["remark"] = draw(st.none() | STRINGS | st.integers(-(2**63), 2**63 - 1))
        data = with_header(0, json_text(draw, top), body)
    else:
        strs = {k: v if isinstance(v, str) else codec._ext_value(v) for k, v in ext.items()}
        cmd = RemotingCommand.request(code, strs, body, language=language if isinstance(language, str) else "JAVA")
        cmd.serialize_type = SerializeType.ROCKETMQ
        cmd.opaque = draw(st.integers(-(2**31), 2**31 - 1))
        data = codec.encode(cmd)
    return mutated(draw(st.randoms(use_true_random=False)), data, draw(st.integers(0, 3)))


def mutated(rng: random.Random, data: bytes, times: int) -> bytes:
    """``data`` with bytes changed, cut, grown or a length field nudged, ``times`` times."""
    out = bytearray(data)
    for _ in range(times):
        how = rng.randrange(6)
        if how == 0 and out:
            out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
        elif how == 1:
            del out[rng.randrange(len(out) + 1) :]
        elif how == 2:
            at = rng.randrange(len(out) + 1)
            out[at:at] = rng.choice([b'"', b"\\", b"\\u", b",", b"}", b"{", b"\x00", b"\xff", b"9", b" ", b"\xc3"])
        elif how == 3 and out:
            at = rng.randrange(len(out))
            del out[at : at + rng.randrange(1, 4)]
        elif how == 4 and len(out) >= 8:  # a length field: the frame's, the header's, or one inside the header
            at = rng.choice([0, 4, rng.randrange(len(out) - 3)])
            (value,) = struct.unpack_from(">i", out, at)
            value = rng.choice([value + rng.randrange(-3, 4), 0x7FFFFFFF, -(2**31), 0x00FFFFFF])
            struct.pack_into(">i", out, at, max(-(2**31), min(2**31 - 1, value)))
        elif out:
            out[rng.randrange(len(out))] = rng.randrange(256)
    if times and len(out) >= 4 and rng.randrange(2):  # mostly keep the frame length right, to reach the header
        struct.pack_into(">i", out, 0, len(out) - 4)
    return bytes(out)


@FUZZ
@given(send_frames())
def test_any_send_frame_is_read_as_python_reads_it_or_left_to_python(data: bytes) -> None:
    agrees(data)


@FUZZ
@given(st.booleans(), st.booleans(), st.randoms(use_true_random=False))
def test_plain_sends_are_always_read(v2: bool, rocketmq: bool, rng: random.Random) -> None:
    """Names, numbers and strings of any plain kind: C reads them all (the lane's common case)."""
    legal = "abcXYZ019%|_-"
    header = send_header(
        producer_group="".join(rng.choice(legal) for _ in range(rng.randint(1, 120))),
        topic="".join(rng.choice(legal) for _ in range(rng.randint(1, 127))),
        queue_id=rng.randrange(2**31),
        born_timestamp=rng.randrange(10**18),
        properties="".join(
            chr(rng.choice([1, 2, 34, 92, 65, 0xE9, 0x65E5, 0x1F600])) for _ in range(rng.randrange(30))
        ),
        reconsume_times=rng.choice([None, 0, 5]),
        batch=rng.choice([True, False]),
    )
    assert agrees(encoded(header, bytes(rng.randrange(256) for _ in range(9)), v2=v2, stype=int(rocketmq)))


class Fenced:
    """A page between two that cannot be read (a read there kills the process): a frame put against either fence
    shows any read outside it."""

    def __init__(self) -> None:
        page = mmap.PAGESIZE
        self.map = mmap.mmap(-1, 3 * page)
        self.view = memoryview(self.map)
        base = ctypes.addressof(ctypes.c_char.from_buffer(self.map))
        mprotect = ctypes.CDLL(None, use_errno=True).mprotect
        mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        for fence in (base, base + 2 * page):
            if mprotect(fence, page, 0) != 0:  # PROT_NONE
                pytest.skip(f"mprotect: {os.strerror(ctypes.get_errno())}")

    def placed(self, data: bytes) -> list[memoryview]:
        """``data`` right after the first fence, and right before the second."""
        page = mmap.PAGESIZE
        out = []
        for start in (page, 2 * page - len(data)):
            self.view[start : start + len(data)] = data
            out.append(self.view[start : start + len(data)])
        return out


def test_thousands_of_mutations_of_real_frames_never_crash_never_read_outside_and_agree() -> None:
    rng = random.Random(29)
    fenced = Fenced()
    seeds = [frame("java_code310_req"), frame("cpp_code10_req")]
    seeds += [encoded(send_header(), stype=s, v2=v2) for s in (0, 1) for v2 in (True, False)]
    read = 0
    for i in range(6000):
        data = mutated(rng, seeds[i % len(seeds)], 1 + i % 4)
        got = agrees(data)
        read += got is not None
        for view in fenced.placed(data):
            assert C.parse_send_frame(view) == got
    assert read > 300  # the mutations that leave a frame valid are still read


def test_every_cut_of_a_header_is_read_within_it() -> None:
    """Each header cut short at every byte, as a whole frame with no body, against the fences: every number,
    literal, escape and length field ends at the frame's end once."""
    fenced = Fenced()
    extras = '"k":false,"yy":true,"xx":-12,"ww":"\\u00e9\\ud83d\\ude00\\n","vv":"\u00e9"'
    java = GOLDEN_JSON.replace('"k":"false"', extras).replace('"flag"', '"zz":null,"remark":-1,"flag"').encode()
    (cmd,) = codec._split_frames_py(bytearray(frame("java_code310_req")), MAX_FRAME_LENGTH)
    cmd.remark = "r\u00e9"
    headers = [(0, java), (0, split_frame(frame("cpp_code10_req"))[1]), (1, codec._encode_rocketmq_header_py(cmd))]
    for stype, header in headers:
        assert agrees(with_header(stype, header)) is not None
        for cut in range(len(header)):
            data = with_header(stype, header[:cut])
            got = agrees(data)
            assert got is None or cut == len(header.rstrip())  # the C++ client's newline is not needed
            for view in fenced.placed(data):
                assert C.parse_send_frame(view) == got


def test_every_cut_of_a_rocketmq_map_is_read_within_it() -> None:
    """The extFields map cut short at every byte, its length saying so, ending the frame, against the fences."""
    fenced = Fenced()
    header = codec._encode_rocketmq_header_py(RemotingCommand.request(SEND_V2, send_header().encode_v2()))
    (remark_len,) = struct.unpack_from(">i", header, 13)
    start = 17 + remark_len + 4
    for cut in range(start, len(header)):
        data = with_header(1, header[: start - 4] + struct.pack(">i", cut - start) + header[start:cut])
        got = agrees(data)  # whole entries with every required field are a send still
        for view in fenced.placed(data):
            assert C.parse_send_frame(view) == got


def test_frames_of_every_length_and_huge_length_fields_are_refused() -> None:
    data = frame("java_code310_req")
    for cut in range(len(data)):
        assert C.parse_send_frame(data[:cut]) is None
    for total, info in ((0x7FFFFFFF, 0x00FFFFFF), (-1, -1), (4, 0), (len(data) - 4, 0x02000010)):
        assert C.parse_send_frame(struct.pack(">ii", total, info) + data[8:]) is None
    header = bytearray(codec._encode_rocketmq_header_py(codec._split_frames_py(bytearray(data), MAX_FRAME_LENGTH)[0]))
    for at, size in ((13, 4), (17, 4), (21, 2), (24, 4)):
        for value in (-1, 0x7FFF if size == 2 else 0x7FFFFFFF):
            changed = bytearray(header)
            changed[at : at + size] = value.to_bytes(size, "big", signed=True)
            assert agrees(with_header(1, bytes(changed))) is None
