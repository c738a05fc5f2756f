"""The C codec (``gateway/remoting/_codec.c``) against the Python reference: same commands, bytes and errors for
any input, nothing leaked, and the whole remoting suite green on the Python codec too."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import struct
import subprocess
import sys
import sysconfig
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.remoting import codec, sender
from gateway.remoting.codes import SerializeType
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import CommandHeader, SendMessageRequestHeader
from gateway.store import native

from .test_codec import COMMANDS, TEXT, rocketmq_commands

C = codec._c_codec
PURE = bool(os.environ.get("ROCKETMQ_GATEWAY_PURE_PYTHON"))
needs_c = pytest.mark.skipif(C is None, reason="the C codec was not built (no C compiler at install time)")
FUZZ = settings(max_examples=400, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

# Values as headers hold them before encoding: mostly str, sometimes what _ext_value turns into Java's strings.
VALUES = TEXT | st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False)


def outcome(fn: Callable[..., Any], *args: Any) -> tuple[str, Any]:
    """("ok", result) or ("raised", exception type), to compare two implementations."""
    try:
        return "ok", fn(*args)
    except Exception as e:
        return "raised", type(e)


@st.composite
def commands(draw: st.DrawFn) -> RemotingCommand:
    """ROCKETMQ commands, some with a language of no code, None keys and values of other types than str."""
    cmd = draw(rocketmq_commands())
    if draw(st.booleans()):
        cmd.language = draw(TEXT)
        cmd.ext_fields = draw(st.none() | st.dictionaries(TEXT | st.none(), VALUES, max_size=8))
    return cmd


def _length_fields(header: bytes) -> list[tuple[int, int]]:
    """(offset, size) of every length field of a valid ROCKETMQ header: remark, map, each key and value."""
    (remark_len,) = struct.unpack_from(">i", header, 13)
    pos = 17 + remark_len
    fields = [(13, 4), (pos, 4)]
    pos += 4
    while pos < len(header):
        (klen,) = struct.unpack_from(">h", header, pos)
        fields.append((pos, 2))
        pos += 2 + klen
        (vlen,) = struct.unpack_from(">i", header, pos)
        fields.append((pos, 4))
        pos += 4 + vlen
    return fields


@st.composite
def rocketmq_headers(draw: st.DrawFn) -> bytes:
    """ROCKETMQ headers: valid ones, and valid ones with a length off by a little, cut short, grown or with a
    byte changed (the off-by-one cases are where a bounds check is wrong)."""
    data = bytearray(codec._encode_rocketmq_header_py(draw(commands())))
    lengths = _length_fields(bytes(data))
    for _ in range(draw(st.integers(0, 3))):
        how = draw(st.sampled_from(["nudge", "nudge", "cut", "flip", "grow"]))
        offset, size = draw(st.sampled_from(lengths))
        if how == "nudge" and offset + size <= len(data):
            fmt = ">h" if size == 2 else ">i"
            (value,) = struct.unpack_from(fmt, data, offset)
            limit = 1 << (8 * size - 1)
            struct.pack_into(fmt, data, offset, max(-limit, min(limit - 1, value + draw(st.integers(-2, 2)))))
        elif how == "cut":
            del data[draw(st.integers(0, len(data))) :]
        elif how == "flip" and data:
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        else:
            data += draw(st.binary(max_size=8))
    return bytes(data)


@needs_c
@FUZZ
@given(rocketmq_headers() | st.binary(max_size=64))
def test_decode_rocketmq_header_agrees_with_python(header: bytes) -> None:
    assert outcome(C.decode_rocketmq_header, header) == outcome(codec._decode_rocketmq_header_py, header)


@needs_c
def test_every_length_off_by_a_little_and_every_truncation_agree_with_python() -> None:
    samples = [
        RemotingCommand(code=10, serialize_type=SerializeType.ROCKETMQ),
        RemotingCommand(code=10, remark="r", serialize_type=SerializeType.ROCKETMQ),
        RemotingCommand(code=10, remark="ü", ext_fields={"a": "bc", "": "", "日本": "😀x"}, language="CPP"),
        RemotingCommand(code=10, ext_fields={"topic": "T", "queueId": "1", "k": ""}, language="PYTHON"),
    ]
    for cmd in samples:
        header = codec._encode_rocketmq_header_py(cmd)
        variants = [header[:cut] for cut in range(len(header) + 1)]
        for offset, size in _length_fields(header):
            fmt = ">h" if size == 2 else ">i"
            (value,) = struct.unpack_from(fmt, header, offset)
            for delta in range(-3, 4):
                changed = bytearray(header)
                struct.pack_into(fmt, changed, offset, value + delta)
                variants += [bytes(changed), bytes(changed) + b"\x00\x01\x41"]
        for data in variants:
            want = outcome(codec._decode_rocketmq_header_py, data)
            assert outcome(C.decode_rocketmq_header, data) == want, data
            frame = struct.pack(">ii", 4 + len(data), (1 << 24) | len(data)) + data
            assert _feed_all(C.feed, [frame]) == _feed_all(codec._split_frames_py, [frame]), frame


@needs_c
def test_frame_and_header_lengths_off_by_a_little_agree_with_python() -> None:
    following = codec.encode(RemotingCommand(code=7, ext_fields={"k": "v"}))
    for stype in (SerializeType.JSON, SerializeType.ROCKETMQ):
        for body in (b"", b"xy"):
            cmd = RemotingCommand(code=10, ext_fields={"a": "bc"}, body=body, serialize_type=stype)
            frame = codec.encode(cmd)
            length, info = struct.unpack_from(">ii", frame)
            for delta in range(-3, 4):
                for changed in ((length + delta, info), (length, info + delta)):
                    data = struct.pack(">ii", *changed) + frame[8:]
                    for reads in ([data], [data + following], [data, following], [data[:9], data[9:] + following]):
                        assert _feed_all(C.feed, reads) == _feed_all(codec._split_frames_py, reads), reads


@needs_c
@FUZZ
@given(commands())
def test_encode_rocketmq_header_agrees_with_python(cmd: RemotingCommand) -> None:
    assert outcome(C.encode_rocketmq_header, cmd) == outcome(codec._encode_rocketmq_header_py, cmd)


@needs_c
@FUZZ
@given(commands())
def test_encode_json_header_agrees_with_python(cmd: RemotingCommand) -> None:
    assert outcome(C.encode_json_header, cmd) == outcome(codec._encode_json_header_py, cmd)


_JSON_KEYS = st.sampled_from(["code", "opaque", "flag", "version", "language", "remark", "extFields", "other"])
_JSON_VALUES = VALUES | st.lists(st.integers(), max_size=2) | st.dictionaries(TEXT, VALUES, max_size=4)


@st.composite
def json_headers(draw: st.DrawFn) -> bytes:
    """JSON headers as peers might send them: mostly well-formed, with fields of every type, or not JSON at all."""
    choice = draw(st.integers(0, 9))
    if choice == 0:
        return draw(st.binary(max_size=16))
    if choice == 1:
        return json.dumps(draw(_JSON_VALUES)).encode()
    obj = draw(st.dictionaries(_JSON_KEYS, _JSON_VALUES, max_size=8))
    if draw(st.booleans()):  # the usual header: int fields, str language and remark, extFields of strs
        obj.update(code=draw(st.integers(-(2**31), 2**31)), language=draw(TEXT))
        obj["extFields"] = draw(st.none() | st.dictionaries(TEXT, TEXT, max_size=6))
    return json.dumps(obj).encode()


@needs_c
@FUZZ
@given(json_headers(), st.binary(max_size=4))
def test_json_headers_decode_as_the_python_decoder_does(header: bytes, body: bytes) -> None:
    frame = struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body
    assert _feed_all(C.feed, [frame]) == _feed_all(codec._split_frames_py, [frame])


@needs_c
@pytest.mark.parametrize(
    "change",
    [
        {"code": 2**15},
        {"code": -(2**15) - 1},
        {"opaque": 2**31},
        {"flag": -(2**31) - 1},
        {"version": "1"},
        {"code": 1.0},
        {"remark": 0},
        {"remark": b"bytes"},
        {"ext_fields": {1: "v"}},
        {"ext_fields": {b"k": "v"}},
        {"ext_fields": [("k", "v")]},
        {"ext_fields": {"k" * 40000: "v"}},
        {"ext_fields": {"k": "\ud800"}},
        {"ext_fields": {"k": ["a", 1]}},
    ],
)
def test_encode_of_unusual_commands_agrees_with_python(change: dict[str, Any]) -> None:
    cmd = RemotingCommand(code=1, ext_fields={"a": "b"}, serialize_type=SerializeType.ROCKETMQ)
    for name, value in change.items():
        setattr(cmd, name, value)
    assert outcome(C.encode_rocketmq_header, cmd) == outcome(codec._encode_rocketmq_header_py, cmd)


@st.composite
def streams(draw: st.DrawFn) -> list[bytes]:
    """A connection's bytes in arbitrary reads: frames of both encodings, sometimes damaged or foreign."""
    frames = [codec.encode(cmd) for cmd in draw(st.lists(COMMANDS, max_size=4))]
    frames.append(draw(st.binary(max_size=24)))
    data = bytearray(b"".join(frames))
    if data and draw(st.booleans()):
        data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=6)))
    return [bytes(data[a:b]) for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


def _feed_all(split: Callable[[bytearray, int], list[RemotingCommand]], reads: list[bytes]) -> list[Any]:
    buf = bytearray()
    seen: list[Any] = []
    for data in reads:
        buf += data
        seen.append(outcome(split, buf, 1 << 16))
        seen.append(bytes(buf))
        if seen[-2][0] == "raised":
            break
    return seen


@needs_c
@FUZZ
@given(streams())
def test_frame_splitting_agrees_with_python(reads: list[bytes]) -> None:
    assert _feed_all(C.feed, reads) == _feed_all(codec._split_frames_py, reads)


@needs_c
def test_nothing_is_leaked() -> None:
    good = codec._encode_rocketmq_header_py(
        RemotingCommand(code=10, remark="r", ext_fields={"a": "1", "b": "ü"}, serialize_type=SerializeType.ROCKETMQ)
    )
    frame = struct.pack(">ii", 4 + len(good) + 3, (1 << 24) | len(good)) + good + b"xyz"
    json_frame = codec.encode(RemotingCommand(code=11, ext_fields={"k": "v"}, body=b"b"))
    unusual = b'{"code":"7","extFields":{"n":5}}'  # a str code, an int ext value: Python's turn
    unusual_json = struct.pack(">ii", 4 + len(unusual), len(unusual)) + unusual
    bad_json = struct.pack(">ii", 4 + 5, 5) + b'{"cod'  # orjson refuses it: ProtocolError
    cmd = RemotingCommand(code=10, remark="r", ext_fields={"a": "1", "n": 5, "x": None}, language="PYTHON")
    cases: list[Callable[[], Any]] = [
        lambda: C.decode_rocketmq_header(good),
        lambda: C.decode_rocketmq_header(good[:-1]),  # truncated value
        lambda: C.decode_rocketmq_header(good[:20] + b"\xff" + good[21:]),  # bad remark UTF-8
        lambda: C.feed(bytearray(frame * 3 + json_frame), 1 << 16),
        lambda: C.feed(bytearray(frame + b"\x00\x00\x00\x02xx"), 1 << 16),  # bad frame length after a good one
        lambda: C.encode_rocketmq_header(cmd),
        lambda: C.encode_rocketmq_header(RemotingCommand(code=1 << 20)),
        lambda: C.encode_json_header(cmd),  # a non-str ext value: Python's turn
        lambda: C.encode_json_header(RemotingCommand(code=11, remark="r", ext_fields={"k": "v"})),
        lambda: C.feed(bytearray(json_frame + unusual_json + bad_json), 1 << 16),
    ]

    def run_all() -> None:
        for case in cases:
            outcome(case)

    for _ in range(1000):  # caches, free lists and interned strings settle
        run_all()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(20000):
            run_all()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 64 * 1024, f"{grown} bytes more after 20,000 rounds"


def test_the_c_code_is_built_where_a_compiler_is() -> None:
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        pytest.skip(f"no C compiler ({compiler}): the Python codec is the one in use")
    assert C is not None, "pip install -e . should have built gateway/remoting/_codec.c"
    importlib.import_module("gateway.store._store")  # and gateway/store/_store.c
    importlib.import_module("gateway.remoting._sender")  # and gateway/remoting/_sender.c
    in_use = codec._decode_rocketmq_header_py if PURE else C.decode_rocketmq_header
    assert codec.decode_rocketmq_header is in_use
    assert (native.c_store is None) == PURE
    assert (sender._c_sender is None) == PURE


def test_pure_python_is_kept_when_asked() -> None:
    probe = "from gateway.remoting import codec; print(codec.decode_rocketmq_header.__module__)"
    env = {**os.environ, "ROCKETMQ_GATEWAY_PURE_PYTHON": "1"}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "gateway.remoting.codec"


def _header_classes() -> list[type[CommandHeader]]:
    found, todo = [], list(CommandHeader.__subclasses__())
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo += cls.__subclasses__()
    return sorted(found, key=lambda c: c.__name__)


SEND_V2_SPEC = SendMessageRequestHeader._fields_spec(SendMessageRequestHeader.V2_NAMES)
HEADER_SPECS = [(cls, cls._fields_spec()) for cls in _header_classes()] + [(SendMessageRequestHeader, SEND_V2_SPEC)]
# Values where the parsers' rules bite: digit runs around 18/19 digits, signs, case, blanks, illegal names.
EDGE_VALUES = [
    "",
    "0",
    "7",
    "-1",
    "+5",
    " 1",
    "1.0",
    "١٢",
    "9" * 18,
    "9" * 19,
    "-" + "9" * 18,
    "9223372036854775808",
    "true",
    "TRUE",
    "tRuE",
    "false",
    "yes",
    "İ",
    "TopicA",
    "%RETRY%g",
    "a b",
    "x" * 128,
    "x" * 256,
    "g|h",
    5,
    None,
]
WIRE_VALUES = st.sampled_from(EDGE_VALUES) | TEXT | st.integers() | st.none()  # fmt: skip


@st.composite
def header_inputs(draw: st.DrawFn) -> tuple[type[CommandHeader], Any, Any]:
    cls, spec = draw(st.sampled_from(HEADER_SPECS))
    keys = [key for _, key, *_ in spec]
    ext = draw(st.none() | st.dictionaries(st.sampled_from(keys) | TEXT, WIRE_VALUES, max_size=len(keys) + 2))
    return cls, spec, ext


def _outcome_with_message(fn: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", fn()
    except Exception as e:
        return "raised", (type(e), str(e))


def _decoded_both_ways(cls: type[CommandHeader], spec: Any, ext: Any) -> tuple[Any, Any]:
    """(outcome through the C decode_fields, outcome of the generated Python decoder)."""
    python = cls._python_decoder(spec)

    def with_c() -> Any:
        values = C.decode_fields(ext, cls._c_spec(spec))
        return python(ext) if values is NotImplemented else cls(*values)

    return _outcome_with_message(with_c), _outcome_with_message(lambda: python(ext))


@needs_c
@FUZZ
@given(header_inputs())
def test_header_fields_decode_as_the_python_decoder_does(case: tuple[Any, Any, Any]) -> None:
    with_c, with_python = _decoded_both_ways(*case)
    assert with_c == with_python


@needs_c
def test_every_field_of_every_header_with_each_edge_value_decodes_as_the_python_decoder_does() -> None:
    plain = {0: "s", 1: "1", 2: "true", 3: "TopicA", 4: "GroupA"}
    for cls, spec in HEADER_SPECS:
        base = {key: plain[kind] for key, kind, *_ in cls._c_spec(spec)}
        for key in base:
            for value in EDGE_VALUES:
                with_c, with_python = _decoded_both_ways(cls, spec, {**base, key: value})
                assert with_c == with_python, (cls, key, value)


@needs_c
def test_a_send_header_is_decoded_by_c_without_the_python_decoder() -> None:
    ext = {"a": "pg", "b": "TopicA", "c": "TBW102", "d": "4", "e": "3", "f": "0", "g": "1700000000000", "h": "0",
           "i": "TAGS\x01a\x02WAIT\x01true", "j": "0", "k": "false", "m": "false", "n": "broker-a"}  # fmt: skip
    values = C.decode_fields(ext, SendMessageRequestHeader._c_spec(SEND_V2_SPEC))
    assert values is not NotImplemented
    assert SendMessageRequestHeader(*values) == SendMessageRequestHeader.decode_v2(ext)
    assert values[:5] == ("pg", "TopicA", "TBW102", 4, 3)
