"""The sans-IO frame codec: both header encodings, the incremental decoder, and the golden frames."""

from __future__ import annotations

import json
import struct

import orjson
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gateway.remoting import codec
from gateway.remoting.codec import (
    FrameDecoder,
    ProtocolError,
    decode_json_header,
    encode,
    encode_json_header,
    encode_parts,
)
from gateway.remoting.codes import MAX_FRAME_LENGTH, RPC_TYPE_RESPONSE, LanguageCode, SerializeType
from gateway.remoting.command import RemotingCommand

from .golden import FRAME_NAMES, frame, session_headers, split_frame

SETTINGS = settings(max_examples=200, deadline=None, database=None)
FUZZ = settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

INT16 = st.integers(-(2**15), 2**15 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
LANGUAGES = st.sampled_from([c.name for c in LanguageCode])
# Text with the property separators, NUL, non-ASCII and astral characters mixed in.
TEXT = st.text(max_size=24) | st.sampled_from(["", "\x01", "\x02", "k\x01v\x02", "ünïcødé", "日本語", "😀", "a\x00b"])
EXT = st.none() | st.dictionaries(TEXT, TEXT, max_size=8)


def raw_frame(header: bytes, body: bytes = b"", stype: int = 0) -> bytes:
    """A frame built by hand from the documented layout (§1.1), not by the encoder under test."""
    return struct.pack(">iI", 4 + len(header) + len(body), (stype << 24) | len(header)) + header + body


@st.composite
def json_commands(draw: st.DrawFn) -> RemotingCommand:
    return RemotingCommand(
        code=draw(INT32),
        opaque=draw(INT32),
        flag=draw(INT32),
        language=draw(LANGUAGES),
        version=draw(INT32),
        remark=draw(st.none() | TEXT),
        ext_fields=draw(EXT),
        body=draw(st.binary(max_size=64)),
        serialize_type=SerializeType.JSON,
    )


@st.composite
def rocketmq_commands(draw: st.DrawFn) -> RemotingCommand:
    return RemotingCommand(
        code=draw(INT16),
        opaque=draw(INT32),
        flag=draw(INT32),
        language=draw(LANGUAGES),
        version=draw(INT16),
        remark=draw(st.none() | TEXT),
        ext_fields=draw(EXT),
        body=draw(st.binary(max_size=64)),
        serialize_type=SerializeType.ROCKETMQ,
    )


COMMANDS = json_commands() | rocketmq_commands()


def rocketmq_expected(cmd: RemotingCommand) -> RemotingCommand:
    """What Java decodes: a zero-length remark or map is null (RocketMQSerializable)."""
    return RemotingCommand(
        code=cmd.code,
        opaque=cmd.opaque,
        flag=cmd.flag,
        language=cmd.language,
        version=cmd.version,
        remark=cmd.remark or None,
        ext_fields=cmd.ext_fields or None,
        body=cmd.body,
        serialize_type=SerializeType.ROCKETMQ,
    )


def decode_one(data: bytes) -> RemotingCommand:
    decoder = FrameDecoder()
    cmds = decoder.feed(data)
    assert len(cmds) == 1
    assert decoder.buffered == 0
    return cmds[0]


# ---------------------------------------------------------------------------- round trips


@SETTINGS
@given(json_commands())
def test_json_round_trip(cmd: RemotingCommand) -> None:
    data = encode(cmd)
    assert data[4] == SerializeType.JSON  # high byte of the header-length word
    assert decode_one(data) == cmd


@SETTINGS
@given(rocketmq_commands())
def test_rocketmq_round_trip(cmd: RemotingCommand) -> None:
    data = encode(cmd)
    assert data[4] == SerializeType.ROCKETMQ
    assert decode_one(data) == rocketmq_expected(cmd)


@SETTINGS
@given(COMMANDS)
def test_frame_length_fields_match_the_layout(cmd: RemotingCommand) -> None:
    data = encode(cmd)
    stype, header, body = split_frame(data)
    assert stype == cmd.serialize_type
    assert body == cmd.body
    if stype == SerializeType.JSON:
        assert decode_json_header(header) == RemotingCommand(**{**_fields(cmd), "body": b""})
    else:
        expected = RemotingCommand(**{**_fields(rocketmq_expected(cmd)), "body": b""})
        assert codec.decode_rocketmq_header(header) == expected


def _fields(cmd: RemotingCommand) -> dict:
    return {name: getattr(cmd, name) for name in RemotingCommand.__dataclass_fields__}


def test_rocketmq_header_layout_by_hand() -> None:
    # §1.3: code int16, language byte, version int16, opaque int32, flag int32, remark, ext map.
    key, value = b"topic", "TöpicTest".encode()
    ext = struct.pack(">h", len(key)) + key + struct.pack(">i", len(value)) + value
    remark = b"oops"
    header = (
        struct.pack(">hBhii", 310, LanguageCode.CPP, 409, 7, RPC_TYPE_RESPONSE)
        + struct.pack(">i", len(remark))
        + remark
        + struct.pack(">i", len(ext))
        + ext
    )
    data = raw_frame(header, b"body", stype=1)
    cmd = decode_one(data)
    assert cmd == RemotingCommand(
        code=310,
        opaque=7,
        flag=RPC_TYPE_RESPONSE,
        language="CPP",
        version=409,
        remark="oops",
        ext_fields={"topic": "TöpicTest"},
        body=b"body",
        serialize_type=SerializeType.ROCKETMQ,
    )
    assert encode(cmd) == data


def test_rocketmq_unknown_language_byte_is_other() -> None:
    header = struct.pack(">hBhii", 10, 200, 1, 2, 0) + struct.pack(">ii", 0, 0)
    cmd = codec.decode_rocketmq_header(header)
    assert cmd.language == "OTHER"
    assert cmd.remark is None
    assert cmd.ext_fields is None


def test_rocketmq_writer_skips_none_values() -> None:
    cmd = RemotingCommand(code=1, ext_fields={"a": "1", "b": None}, serialize_type=SerializeType.ROCKETMQ)  # type: ignore[dict-item]
    assert decode_one(encode(cmd)).ext_fields == {"a": "1"}


def test_json_header_is_fastjson_shaped() -> None:
    cmd = RemotingCommand(code=0, opaque=7, flag=1, language="JAVA", version=409, ext_fields={"queueId": "2"})
    assert encode_json_header(cmd) == (
        b'{"code":0,"extFields":{"queueId":"2"},"flag":1,"language":"JAVA","opaque":7,'
        b'"serializeTypeCurrentRPC":"JSON","version":409}'
    )
    # Nulls omitted: no remark, no extFields.
    assert b"remark" not in encode_json_header(RemotingCommand(code=1))
    assert b"extFields" not in encode_json_header(RemotingCommand(code=1))


def test_json_header_control_characters_are_escaped() -> None:
    cmd = RemotingCommand(code=310, ext_fields={"i": "KEYS\x01k1\x02TAGS\x01TagA"})
    header = encode_json_header(cmd)
    assert b'"KEYS\\u0001k1\\u0002TAGS\\u0001TagA"' in header
    assert b"\x01" not in header
    assert b"\x02" not in header


def test_json_header_tolerance() -> None:
    # language as an ordinal, missing fields, unknown keys, null ext values, non-string remark.
    cmd = decode_json_header(b'{"code":34,"language":1,"whatever":[1,2],"extFields":{"a":null,"b":"x"},"remark":5}')
    assert cmd.language == "CPP"
    assert cmd.opaque == 0
    assert cmd.flag == 0
    assert cmd.ext_fields == {"b": "x"}
    assert cmd.remark == "5"
    assert decode_json_header(b'{"code":1,"language":99}').language == "OTHER"
    assert decode_json_header(b'{"code":"12","opaque":"3"}').code == 12


@pytest.mark.parametrize(
    ("value", "expected"),
    [("0", "0"), ("4", "4"), ("-1", "-1"), ("true", "true"), ("false", "false"), ("1.5", "1.5"), ('"s"', "s")],
)
def test_json_ext_values_coerced_to_strings(value: str, expected: str) -> None:
    cmd = decode_json_header(b'{"code":10,"extFields":{"k":' + value.encode() + b"}}")
    assert cmd.ext_fields == {"k": expected}


@pytest.mark.parametrize(
    "header",
    [
        b"",
        b"{",
        b"[1,2]",
        b'"code"',
        b"null",
        b'{"code":1.5}',
        b'{"code":true}',
        b'{"code":null}',
        b'{"code":"x"}',
        b'{"code":1,"opaque":[]}',
        b'{"code":1,"extFields":[]}',
        b'{"code":1,"extFields":"a"}',
        b'{"code":1e400}',
        b'{"code":1,"remark":"\\ud800"}',
        b'{"code":1,"remark":"\xff"}',
    ],
)
def test_bad_json_headers_raise_protocol_error(header: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_json_header(header)
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(raw_frame(header))


@pytest.mark.parametrize(
    "header",
    [
        b"",
        b"\x00" * 12,  # fixed part cut short
        struct.pack(">hBhii", 1, 0, 0, 0, 0),  # no remark length
        struct.pack(">hBhiii", 1, 0, 0, 0, 0, 10) + b"abc",  # remark longer than the header
        struct.pack(">hBhiii", 1, 0, 0, 0, 0, -1),
        struct.pack(">hBhiii", 1, 0, 0, 0, 0, 2) + b"\xff\xfe" + struct.pack(">i", 0),  # bad UTF-8 remark
        struct.pack(">hBhiiii", 1, 0, 0, 0, 0, 0, 50),  # map longer than the header
        struct.pack(">hBhiiii", 1, 0, 0, 0, 0, 0, 3) + b"\x00\x05a",  # key longer than the map
        struct.pack(">hBhiiii", 1, 0, 0, 0, 0, 0, 7) + b"\x00\x01a" + b"\x00\x00\x00\x09",  # value too long
        struct.pack(">hBhiiii", 1, 0, 0, 0, 0, 0, 4) + b"\xff\xff\x00\x00",  # negative key length
        struct.pack(">hBhiiii", 1, 0, 0, 0, 0, 0, 3) + b"\x00\x01a",  # value length cut
        struct.pack(">hBhiiii", 1, 0, 0, 0, 0, 0, 8) + b"\x00\x01a\x00\x00\x00\x01\xff",  # bad UTF-8 value
    ],
)
def test_bad_rocketmq_headers_raise_protocol_error(header: bytes) -> None:
    with pytest.raises(ProtocolError):
        codec.decode_rocketmq_header(header)
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(raw_frame(header, stype=1))


# ---------------------------------------------------------------------------- body tail


@SETTINGS
@given(COMMANDS, st.lists(st.binary(max_size=32), max_size=4))
def test_body_tail_equals_appended_body(cmd: RemotingCommand, tail: list[bytes]) -> None:
    joined = RemotingCommand(**{**_fields(cmd), "body": cmd.body + b"".join(tail), "body_tail": None})
    with_tail = RemotingCommand(**{**_fields(cmd), "body_tail": tail})
    assert encode(with_tail) == encode(joined)
    assert b"".join(encode_parts(with_tail)) == encode(joined)
    assert decode_one(encode(with_tail)).body == joined.body


def test_body_tail_parts_are_not_copied() -> None:
    big = b"x" * 1000
    parts = encode_parts(RemotingCommand(code=0, body=b"head", body_tail=[big]))
    assert any(p is big for p in parts)


# ---------------------------------------------------------------------------- JSON ext values are strings


ANY_EXT_VALUE = TEXT | st.integers(-(2**63), 2**63 - 1) | st.booleans()


@SETTINGS
@given(st.dictionaries(TEXT, ANY_EXT_VALUE, max_size=8))
def test_json_response_ext_values_are_always_strings(ext: dict) -> None:
    """The C++ client reads response ext fields only if they are JSON strings (§1.2)."""
    response = RemotingCommand(code=0, flag=RPC_TYPE_RESPONSE, ext_fields=ext)
    header = json.loads(encode_json_header(response))
    assert all(type(v) is str for v in header.get("extFields", {}).values())
    assert set(header.get("extFields", {})) == set(ext)
    binary = RemotingCommand(code=0, flag=RPC_TYPE_RESPONSE, ext_fields=ext, serialize_type=SerializeType.ROCKETMQ)
    decoded = decode_one(encode(binary)).ext_fields or {}
    assert all(type(v) is str for v in decoded.values())
    assert set(decoded) == set(ext)


def test_reencoded_cpp_request_has_string_ext_values() -> None:
    cmd = decode_one(frame("cpp_code10_req"))
    header = json.loads(encode_json_header(cmd))
    assert header["extFields"]["queueId"] == "0"
    assert header["extFields"]["defaultTopicQueueNums"] == "4"
    assert all(type(v) is str for v in header["extFields"].values())


# ---------------------------------------------------------------------------- incremental decoding


@st.composite
def streams(draw: st.DrawFn) -> tuple[list[RemotingCommand], bytes, bytes]:
    """(commands, their frames concatenated, a strict prefix of one more frame)."""
    cmds = draw(st.lists(COMMANDS, min_size=1, max_size=4))
    data = b"".join(encode(c) for c in cmds)
    extra = encode(draw(COMMANDS))
    cut = draw(st.integers(0, len(extra) - 1))
    return cmds, data, extra[:cut]


def expected(cmd: RemotingCommand) -> RemotingCommand:
    return rocketmq_expected(cmd) if cmd.serialize_type == SerializeType.ROCKETMQ else cmd


@SETTINGS
@given(streams(), st.data())
def test_whole_bytewise_and_chunked_feeds_agree(stream: tuple, data: st.DataObject) -> None:
    cmds, frames, trailing = stream
    want = [expected(c) for c in cmds]
    stream_bytes = frames + trailing

    whole = FrameDecoder()
    assert whole.feed(stream_bytes) == want
    assert whole.buffered == len(trailing)

    bytewise = FrameDecoder()
    got: list[RemotingCommand] = []
    for i in range(len(stream_bytes)):
        got += bytewise.feed(stream_bytes[i : i + 1])
    assert got == want
    assert bytewise.buffered == len(trailing)

    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream_bytes)), max_size=8)))
    chunked = FrameDecoder()
    got = []
    prev = 0
    for c in [*cuts, len(stream_bytes)]:
        got += chunked.feed(stream_bytes[prev:c])
        prev = c
    assert got == want
    assert chunked.buffered == len(trailing)


@SETTINGS
@given(COMMANDS, st.data())
def test_partial_frame_stays_buffered_then_completes(cmd: RemotingCommand, data: st.DataObject) -> None:
    frame_bytes = encode(cmd)
    cut = data.draw(st.integers(0, len(frame_bytes) - 1))
    decoder = FrameDecoder()
    assert decoder.feed(frame_bytes[:cut]) == []
    assert decoder.buffered == cut
    assert decoder.feed(frame_bytes[cut:]) == [expected(cmd)]
    assert decoder.buffered == 0


def test_empty_feed() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(b"") == []
    assert decoder.buffered == 0


# ---------------------------------------------------------------------------- limits and malformed frames


def test_oversize_length_raises_as_soon_as_prefix_arrives() -> None:
    prefix = struct.pack(">i", MAX_FRAME_LENGTH - 3)  # whole frame = length + 4 > 16 MiB
    decoder = FrameDecoder()
    for b in prefix[:3]:
        assert decoder.feed(bytes([b])) == []
    with pytest.raises(ProtocolError):
        decoder.feed(prefix[3:])
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(prefix)
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(struct.pack(">i", 2**31 - 1))


def test_largest_allowed_length_is_buffered_not_refused() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(struct.pack(">i", MAX_FRAME_LENGTH - 4)) == []
    assert decoder.buffered == 4


def test_custom_frame_limit() -> None:
    small = raw_frame(b'{"code":1}', b"x" * 10)
    assert len(FrameDecoder(max_frame_length=len(small)).feed(small)) == 1
    with pytest.raises(ProtocolError):
        FrameDecoder(max_frame_length=len(small) - 1).feed(small[:4])


def test_oversize_prefix_after_a_valid_frame_raises() -> None:
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(raw_frame(b'{"code":1}') + struct.pack(">i", MAX_FRAME_LENGTH))


@pytest.mark.parametrize("length", [-(2**31), -1, 0, 1, 2, 3])
def test_length_too_small_raises(length: int) -> None:
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(struct.pack(">i", length))


@pytest.mark.parametrize("hlen", [3, 4, 100, 0xFFFFFF])
def test_header_length_over_frame_length_raises(hlen: int) -> None:
    data = struct.pack(">ii", 4 + 2, hlen) + b"{}"
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(data)


def test_header_filling_the_whole_frame_is_fine() -> None:
    cmd = decode_one(raw_frame(b'{"code":7}'))
    assert cmd.code == 7
    assert cmd.body == b""


@pytest.mark.parametrize("stype", [2, 7, 0x80, 0xFF])
def test_unknown_serialize_type_raises(stype: int) -> None:
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(raw_frame(b'{"code":1}', stype=stype))


def _feed_all(data: bytes) -> list[RemotingCommand] | None:
    """Feed ``data``; the only acceptable failure is ProtocolError (returned as None)."""
    try:
        return FrameDecoder().feed(data)
    except ProtocolError:
        return None


@FUZZ
@given(st.binary(max_size=512))
def test_arbitrary_bytes_decode_or_raise_protocol_error(data: bytes) -> None:
    _feed_all(data)


@FUZZ
@given(st.integers(4, 600), st.integers(0, 0xFF), st.binary(max_size=600))
def test_arbitrary_frames_decode_or_raise_protocol_error(length: int, stype: int, rest: bytes) -> None:
    # A plausible length and a small header length, so the header decoders see arbitrary input.
    hlen = min(len(rest), length - 4)
    data = struct.pack(">ii", length, ((stype % 3) << 24) | hlen) + rest
    _feed_all(data)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**64), 2**64) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)
HEADER_KEYS = st.sampled_from(["code", "opaque", "flag", "language", "version", "remark", "extFields", "x"])


@settings(FUZZ, max_examples=120)
@given(st.dictionaries(HEADER_KEYS, JSON_VALUES | st.dictionaries(TEXT, JSON_VALUES, max_size=4), max_size=8))
def test_json_headers_of_any_shape(obj: dict) -> None:
    """Any JSON object either fails with ProtocolError or gives a well-typed command that re-encodes."""
    try:
        header = orjson.dumps(obj)
    except orjson.JSONEncodeError:
        assume(False)
    cmds = _feed_all(raw_frame(header))
    if cmds is None:
        return
    [cmd] = cmds
    for name in ("code", "opaque", "flag", "version"):
        assert type(getattr(cmd, name)) is int
    assert type(cmd.language) is str
    assert cmd.remark is None or type(cmd.remark) is str
    assert cmd.ext_fields is None or all(type(k) is str and type(v) is str for k, v in cmd.ext_fields.items())
    assume(all(-(2**63) <= getattr(cmd, n) < 2**64 for n in ("code", "opaque", "flag", "version")))
    assert decode_one(encode(cmd)) == cmd


@st.composite
def mutated_frames(draw: st.DrawFn) -> bytes:
    base = draw(st.sampled_from(FRAME_NAMES).map(frame) | COMMANDS.map(encode))
    data = bytearray(base)
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate"]))
        if not data:
            break
        i = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set":
            data[i] = draw(st.integers(0, 255))
        elif kind == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del data[i : i + draw(st.integers(1, 8))]
        else:
            del data[i:]
    return bytes(data)


@FUZZ
@given(mutated_frames(), st.binary(max_size=16))
def test_mutated_valid_frames_decode_or_raise_protocol_error(data: bytes, trailing: bytes) -> None:
    _feed_all(data + trailing)
    # Byte by byte must agree with one feed: same commands, or a ProtocolError.
    decoder = FrameDecoder()
    got: list[RemotingCommand] | None = []
    try:
        for i in range(len(data)):
            got += decoder.feed(data[i : i + 1])
    except ProtocolError:
        got = None
    assert _feed_all(data) == got


# ---------------------------------------------------------------------------- golden frames


def test_golden_samples_present() -> None:
    assert len(FRAME_NAMES) == 14
    assert {n.split("_")[1] for n in FRAME_NAMES} == {"code10", "code34", "code35", "code103", "code105", "code310"}


@pytest.mark.parametrize("name", FRAME_NAMES)
def test_golden_frame_decodes_and_reencodes(name: str) -> None:
    data = frame(name)
    cmd = decode_one(data)
    stype, header, body = split_frame(data)
    assert cmd.body == body
    assert cmd.serialize_type == stype == SerializeType.JSON
    obj = json.loads(header)
    assert cmd.code == obj["code"]
    assert cmd.opaque == obj["opaque"]
    assert cmd.flag == obj["flag"]
    assert cmd.language == obj["language"]
    assert cmd.version == obj["version"]
    assert cmd.is_response == name.endswith("_resp")
    again = decode_one(encode(cmd))
    assert again == cmd


@pytest.mark.parametrize("name", [n for n in FRAME_NAMES if n.startswith("java_") or n.endswith("_resp")])
def test_java_written_frames_reencode_byte_identically(name: str) -> None:
    """Frames written by the Java 4.9.8 client, broker or namesrv: our encoder writes the same bytes."""
    data = frame(name)
    assert encode(decode_one(data)) == data


@pytest.mark.parametrize("name", [n for n in FRAME_NAMES if n.startswith("cpp_") and n.endswith("_req")])
def test_cpp_frames(name: str) -> None:
    data = frame(name)
    _, header, _ = split_frame(data)
    assert header.endswith(b"}\n")  # the C++ client ends its JSON header with a newline
    cmd = decode_one(data)
    assert cmd.language == "CPP"
    assert cmd.version == 63
    assert cmd.remark == ""
    assert cmd.ext_fields is not None
    assert {"AccessKey", "Signature", "OnsChannel"} <= set(cmd.ext_fields)
    assert all(type(v) is str for v in cmd.ext_fields.values())


def test_cpp_send_message_numbers_become_strings() -> None:
    cmd = decode_one(frame("cpp_code10_req"))
    ext = cmd.ext_fields
    assert ext is not None
    assert ext["defaultTopicQueueNums"] == "4"
    assert ext["queueId"] == "0"
    assert ext["sysFlag"] == "0"
    assert ext["flag"] == "0"
    assert ext["bornTimestamp"] == "1795305969985"
    assert ext["properties"].startswith("UNIQ_KEY\x010100007F")
    assert ext["properties"].endswith("WAIT\x01true\x02")
    assert cmd.code == 10
    assert cmd.opaque == 1
    assert cmd.body == b"x" * 64


def test_cpp_heartbeat_body_kept_verbatim() -> None:
    cmd = decode_one(frame("cpp_code34_req"))
    assert cmd.body == b'{"clientID":"26844-127.0.0.1@DEFAULT","producerDataSet":[{"groupName":"py_bench_pg"}]}\n'


def test_golden_frames_back_to_back_in_any_chunking() -> None:
    stream = b"".join(frame(n) for n in FRAME_NAMES)
    want = [decode_one(frame(n)) for n in FRAME_NAMES]
    for size in (1, 3, 7, 64, 1000, len(stream)):
        decoder = FrameDecoder()
        got: list[RemotingCommand] = []
        for i in range(0, len(stream), size):
            got += decoder.feed(stream[i : i + size])
        assert got == want
        assert decoder.buffered == 0


def test_session_headers_decode_and_reencode_byte_identically() -> None:
    """Every header of the recorded 4.9.8 session (Java on both sides) comes back byte for byte."""
    rows = session_headers()
    assert len(rows) > 250
    for direction, code, opaque, length, header, body_len in rows:
        assert length == 4 + len(header) + body_len
        cmd = decode_json_header(header)
        assert cmd.code == code
        assert cmd.opaque == opaque
        assert cmd.is_response == (direction == "RESP")
        assert encode_json_header(cmd) == header


def _ext_region(ext: dict[str, str]) -> bytes:
    cmd = RemotingCommand(code=1, ext_fields=ext, serialize_type=SerializeType.ROCKETMQ)
    header = codec.encode_rocketmq_header(cmd)
    return header[21:]  # fixed part, empty remark, map length


@given(st.dictionaries(TEXT, TEXT, min_size=1, max_size=8), st.dictionaries(TEXT, TEXT, min_size=1, max_size=8))
def test_ext_fields_decode_the_same_with_a_learned_layout(first: dict[str, str], second: dict[str, str]) -> None:
    # The second decode of a length learns its layout, the third uses it; a map of another shape and the same
    # length must not be read through it.
    for ext in (first, second, first, second, first):
        assert codec._decode_ext_fields(_ext_region(ext)) == ext


def test_a_learned_layout_is_used_only_by_maps_of_its_shape() -> None:
    a, b = {"topic": "TopicA", "queueId": "1"}, {"topicX": "TopicA", "queueI": "1"}  # same length, other names
    c = {"topic": "TopicA", "queueId": "ü"}  # not ASCII
    assert len(_ext_region(a)) == len(_ext_region(b))
    for ext in (a, a, a):
        assert codec._decode_ext_fields(_ext_region(ext)) == ext
    assert len(_ext_region(a)) in codec._EXT_LAYOUTS
    assert codec._decode_ext_fields(_ext_region(b)) == b
    assert codec._decode_ext_fields(_ext_region(c)) == c
    assert codec._decode_ext_fields(_ext_region(a)) == a


def test_ext_layouts_stay_bounded() -> None:
    for n in range(2 * codec._EXT_LAYOUTS_MAX + 10):
        region = _ext_region({"k": "v" * n})
        codec._decode_ext_fields(region)
        codec._decode_ext_fields(region)
        assert len(codec._EXT_LAYOUTS) <= codec._EXT_LAYOUTS_MAX
        assert len(codec._EXT_LENGTHS_SEEN) <= codec._EXT_LAYOUTS_MAX
    big = _ext_region({"k": "v" * codec._EXT_LAYOUT_BYTES_MAX})
    for _ in range(3):
        codec._decode_ext_fields(big)
    assert len(big) not in codec._EXT_LAYOUTS
