"""Sans-IO frame codec: bytes in, RemotingCommands out, and back.

Frame: int32 length (of what follows), int32 header info (high byte = serialize type, low 24 bits =
header length), header (JSON or ROCKETMQ binary), body. Everything the peer could get wrong raises
:class:`ProtocolError`, after which the connection must be closed.

The frame splitting, the ROCKETMQ header and the usual JSON header (orjson parses and writes it; C builds the
command and the dict) have a C twin (``_codec.c``, built by ``pip install`` where a C compiler is found), used
when it is there: the Python here is the reference and the fallback, and the tests run
both (:func:`use_accelerator`). ``ROCKETMQ_GATEWAY_PURE_PYTHON=1`` keeps to Python.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Callable
from types import ModuleType

import orjson

from .codes import MAX_FRAME_LENGTH, LanguageCode, SerializeType
from .command import RemotingCommand


class ProtocolError(Exception):
    """The peer sent bytes that are not a valid remoting frame; close the connection."""


_INT = struct.Struct(">i")
_FRAME_PREFIX = struct.Struct(">ii")
# ROCKETMQ header: code int16, language byte, version int16, opaque int32, flag int32.
_RMQ_FIXED = struct.Struct(">hBhii")
_SHORT = struct.Struct(">h")

_LANGUAGE_NAMES = {c.value: c.name for c in LanguageCode}
_LANGUAGE_VALUES = {c.name: c.value for c in LanguageCode}
_ROCKETMQ = SerializeType.ROCKETMQ  # a module global: an enum member's class attribute is slower to read
_SERIALIZE_NAMES = {SerializeType.JSON: "JSON", SerializeType.ROCKETMQ: "ROCKETMQ"}


_STR_ONLY = frozenset({str})


def _ext_value(v: object) -> str:
    # The C++ client sends some values as bare numbers; Java reads them all as strings.
    if isinstance(v, str):
        return v
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, (int, float)):
        return str(v)
    return orjson.dumps(v).decode()


def _as_int(v: object, name: str) -> int:
    if type(v) is int:
        return v
    if isinstance(v, str):
        try:
            return int(v)
        except ValueError:
            pass
    raise ProtocolError(f"bad header field {name}: {v!r}")


def decode_json_header(data: bytes) -> RemotingCommand:
    """Parse a JSON header (fastjson's RemotingCommand form)."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise ProtocolError(f"bad JSON header: {e}") from None
    return _json_command(obj)


def _json_command(obj: object) -> RemotingCommand:
    """The command of a parsed JSON header; the C codec takes the usual ones itself and leaves the rest here."""
    if type(obj) is not dict:
        raise ProtocolError("JSON header is not an object")
    ext = obj.get("extFields")
    if ext is not None:
        if type(ext) is not dict:
            raise ProtocolError("extFields is not an object")
        # Java peers send strings only (checked in C); the C++ client sends some numbers.
        if set(map(type, ext.values())) - _STR_ONLY:
            ext = _ext_strings(ext)
    language = obj.get("language", "JAVA")
    if type(language) is not str:
        language = _LANGUAGE_NAMES.get(language, "OTHER") if type(language) is int else "OTHER"
    remark = obj.get("remark")
    if remark is not None and type(remark) is not str:
        remark = _ext_value(remark)
    code = obj.get("code", 0)
    opaque = obj.get("opaque", 0)
    flag = obj.get("flag", 0)
    version = obj.get("version", 0)
    if not (type(code) is int and type(opaque) is int and type(flag) is int and type(version) is int):
        code, opaque, flag, version = (
            _as_int(code, "code"),
            _as_int(opaque, "opaque"),
            _as_int(flag, "flag"),
            _as_int(version, "version"),
        )
    return RemotingCommand(code, opaque, flag, language, version, remark, ext)


def _encode_json_header_py(cmd: RemotingCommand) -> bytes:
    """fastjson's form: alphabetical keys, nulls omitted, every ext value a string."""
    obj: dict[str, object] = {"code": cmd.code}
    ext = cmd.ext_fields
    if ext is not None:
        # Usually all strings already (every send answer): then the dict goes out as it is.
        obj["extFields"] = ext if not set(map(type, ext.values())) - _STR_ONLY else _ext_strings(ext)
    obj["flag"] = cmd.flag
    obj["language"] = cmd.language
    obj["opaque"] = cmd.opaque
    if cmd.remark is not None:
        obj["remark"] = cmd.remark
    obj["serializeTypeCurrentRPC"] = "JSON"
    obj["version"] = cmd.version
    return orjson.dumps(obj)


def _ext_strings(ext: dict[str, object]) -> dict[str, str]:
    return {k: _ext_value(v) for k, v in ext.items() if v is not None}


def _decode_rocketmq_header_py(data: bytes) -> RemotingCommand:
    """Parse the binary ROCKETMQ header (RocketMQSerializable)."""
    n = len(data)
    try:
        code, lang, version, opaque, flag = _RMQ_FIXED.unpack_from(data, 0)
        pos = _RMQ_FIXED.size
        (remark_len,) = _INT.unpack_from(data, pos)
        pos += 4
        if remark_len < 0 or remark_len > n - pos:
            raise ProtocolError("bad remark length")
        remark = data[pos : pos + remark_len].decode() if remark_len else None
        pos += remark_len
        (ext_len,) = _INT.unpack_from(data, pos)
        pos += 4
        if ext_len < 0 or ext_len > n - pos:
            raise ProtocolError("bad extFields length")
        ext = _decode_ext_fields(data[pos : pos + ext_len]) if ext_len else None
    except struct.error as e:
        raise ProtocolError(f"truncated ROCKETMQ header: {e}") from None
    except UnicodeDecodeError as e:
        raise ProtocolError(f"bad UTF-8 in ROCKETMQ header: {e}") from None
    return RemotingCommand(
        code=code,
        opaque=opaque,
        flag=flag,
        language=_LANGUAGE_NAMES.get(lang, "OTHER"),
        version=version,
        remark=remark,
        ext_fields=ext,
        serialize_type=SerializeType.ROCKETMQ,
    )


def _decode_ext_fields(region: bytes) -> dict[str, str]:
    """The extFields map: (short key length, key, int value length, value)..., UTF-8."""
    # An all-ASCII map (nearly every one) is decoded once: its byte and character offsets then agree.
    text = region.decode("ascii") if region.isascii() else None
    if text is not None:
        layout = _EXT_LAYOUTS.get(len(region))
        if layout is not None:
            match = layout[0](text)
            if match is not None:
                return dict(zip(layout[1], match.groups(), strict=True))
    ext = {}
    learn = text is not None and _learns(len(region))
    pattern: list[str] = []
    keys: list[str] = []
    unpack_short, unpack_int = _SHORT.unpack_from, _INT.unpack_from
    pos, end = 0, len(region)
    while pos < end:
        (klen,) = unpack_short(region, pos)
        kpos = pos + 2
        kend = kpos + klen
        if klen < 0 or kend > end:
            raise ProtocolError("bad extFields key length")
        (vlen,) = unpack_int(region, kend)
        vpos = kend + 4
        vend = vpos + vlen
        if vlen < 0 or vend > end:
            raise ProtocolError("bad extFields value length")
        if text is not None:
            key = text[kpos:kend]
            ext[key] = text[vpos:vend]
            if learn:  # this field's length/name/length bytes literally, then any vlen characters
                pattern.append(f"{re.escape(text[pos:vpos])}(.{{{vlen}}})")
                keys.append(key)
        else:
            ext[region[kpos:kend].decode()] = region[vpos:vend].decode()
        pos = vend
    if learn and len(pattern) <= _EXT_LAYOUT_FIELDS_MAX:
        if len(_EXT_LAYOUTS) >= _EXT_LAYOUTS_MAX:
            _EXT_LAYOUTS.clear()
        _EXT_LAYOUTS[len(region)] = (re.compile("".join(pattern), re.DOTALL).fullmatch, tuple(keys))
    return ext


def _learns(length: int) -> bool:
    """Whether a map of ``length`` bytes should leave its layout: the second time that length is seen (a one-off
    request costs no regex compilation), never past 4 KiB (a send's map is a few hundred bytes)."""
    if length > _EXT_LAYOUT_BYTES_MAX or length in _EXT_LAYOUTS:
        return False
    if length in _EXT_LENGTHS_SEEN:
        return True
    if len(_EXT_LENGTHS_SEEN) >= _EXT_LAYOUTS_MAX:
        _EXT_LENGTHS_SEEN.clear()
    _EXT_LENGTHS_SEEN.add(length)
    return False


# extFields layouts by the map's length. Clients send the same names with values of the same lengths again and
# again (a producer's every send); a map that fully matches a layout's pattern (each field's length, name and
# length bytes, then exactly its value's length of characters) has those fields at those offsets, so one
# regex match in C takes the place of the loop. A map of another shape with the same length fails the match
# and takes the loop. Bounded: at most 256 layouts of at most 32 fields and 4 KiB.
_EXT_LAYOUTS: dict[int, tuple[Callable[[str], re.Match[str] | None], tuple[str, ...]]] = {}
_EXT_LAYOUTS_MAX = 256
_EXT_LAYOUT_FIELDS_MAX = 32
_EXT_LAYOUT_BYTES_MAX = 4096
_EXT_LENGTHS_SEEN: set[int] = set()


def _encode_rocketmq_header_py(cmd: RemotingCommand) -> bytes:
    """The binary ROCKETMQ header; codes must fit in an int16."""
    fixed = _RMQ_FIXED.pack(
        cmd.code, _LANGUAGE_VALUES.get(cmd.language, LanguageCode.OTHER), cmd.version, cmd.opaque, cmd.flag
    )
    remark = cmd.remark.encode() if cmd.remark else b""
    ext_parts = []
    if cmd.ext_fields:
        for k, v in cmd.ext_fields.items():
            if k is None or v is None:
                continue
            prefix = _KEY_PREFIXES.get(k)
            if prefix is None:
                kb = k.encode()
                prefix = _SHORT.pack(len(kb)) + kb
                if len(_KEY_PREFIXES) < _KEY_PREFIXES_MAX:
                    _KEY_PREFIXES[k] = prefix
            vb = (v if type(v) is str else _ext_value(v)).encode()
            ext_parts.append(prefix)
            ext_parts.append(_INT.pack(len(vb)))
            ext_parts.append(vb)
    ext = b"".join(ext_parts)
    return b"".join((fixed, _INT.pack(len(remark)), remark, _INT.pack(len(ext)), ext))


# Encoded (length, name) of the extFields names seen, which repeat from response to response.
_KEY_PREFIXES: dict[str, bytes] = {}
_KEY_PREFIXES_MAX = 4096


def encode(cmd: RemotingCommand) -> bytes:
    """One whole frame, length prefix included (body tail included)."""
    return b"".join(encode_parts(cmd))


def encode_parts(cmd: RemotingCommand) -> list[bytes]:
    """The frame as a list of byte strings, so large bodies are never copied into a joined buffer."""
    stype = cmd.serialize_type
    header = encode_rocketmq_header(cmd) if stype == _ROCKETMQ else encode_json_header(cmd)
    body = cmd.body
    tail = cmd.body_tail
    body_len = len(body) + sum(map(len, tail)) if tail else len(body)
    prefix = _FRAME_PREFIX.pack(4 + len(header) + body_len, (stype << 24) | len(header))
    parts = [prefix, header, body] if body else [prefix, header]
    if tail:
        parts += tail
    return parts


class FrameDecoder:
    """Incremental decoder: ``feed(bytes)`` returns the complete commands received so far.

    The declared length is checked as soon as the 4-byte prefix arrives, so an oversize frame is
    refused before its body is buffered. A partial frame stays in the buffer.
    """

    __slots__ = ("_buf", "max_frame_length")

    def __init__(self, max_frame_length: int = MAX_FRAME_LENGTH) -> None:
        self._buf = bytearray()
        self.max_frame_length = max_frame_length

    @property
    def buffered(self) -> int:
        """Bytes held for a frame not yet complete."""
        return len(self._buf)

    def clear(self) -> None:
        """Drop a partial frame and free its memory now (the connection is being closed)."""
        self._buf = bytearray()

    def feed(self, data: bytes, serve: Callable[[bytearray], object] | None = None) -> list[RemotingCommand]:
        """The commands completed by ``data``; :class:`ProtocolError` for a frame that cannot be valid. ``serve``,
        if given, first takes from the buffer the whole frames it serves in place (the broker's send lane)."""
        buf = self._buf
        buf += data
        if serve is not None:
            serve(buf)
        return _split_frames(buf, self.max_frame_length)


def _split_frames_py(buf: bytearray, max_frame_length: int) -> list[RemotingCommand]:
    """The complete frames at the start of ``buf``, decoded and removed from it (a partial frame stays)."""
    out: list[RemotingCommand] = []
    pos = 0
    end = len(buf)
    try:
        while end - pos >= 4:
            (length,) = _INT.unpack_from(buf, pos)
            if length < 4 or length + 4 > max_frame_length:
                raise ProtocolError(f"bad frame length {length}")
            if end - pos - 4 < length:
                break
            (info,) = _INT.unpack_from(buf, pos + 4)
            stype = (info >> 24) & 0xFF
            hlen = info & 0xFFFFFF
            if hlen > length - 4:
                raise ProtocolError("bad header length")
            hstart = pos + 8
            bstart = hstart + hlen
            fend = pos + 4 + length
            # A copy, so no view of the buffer outlives this call (it must stay resizable).
            header = bytes(buf[hstart:bstart])
            if stype == SerializeType.JSON:
                cmd = decode_json_header(header)
            elif stype == SerializeType.ROCKETMQ:
                cmd = _decode_rocketmq_header_py(header)
            else:
                raise ProtocolError(f"unknown serialize type {stype}")
            if fend > bstart:
                cmd.body = bytes(buf[bstart:fend])
            out.append(cmd)
            pos = fend
    finally:
        if pos:
            del buf[:pos]
    return out


def use_accelerator(enabled: bool = True) -> bool:
    """Use the C codec (when it was built) or the Python one; whether C is now in use. Header decoders keep the
    choice in force when each was first used."""
    global decode_rocketmq_header, encode_rocketmq_header, encode_json_header, _split_frames, _c_in_use
    c = _c_in_use = _c_codec if enabled else None
    decode_rocketmq_header = c.decode_rocketmq_header if c else _decode_rocketmq_header_py
    encode_rocketmq_header = c.encode_rocketmq_header if c else _encode_rocketmq_header_py
    encode_json_header = c.encode_json_header if c else _encode_json_header_py
    _split_frames = c.feed if c else _split_frames_py
    return c is not None


def accelerator(loaded: bool = False) -> ModuleType | None:
    """The C codec module if it is in use (or, with ``loaded``, if it was built), else None."""
    return _c_codec if loaded else _c_in_use


def _load_accelerator() -> ModuleType | None:
    try:
        from . import _codec
    except ImportError:
        return None
    _codec.setup(
        command=RemotingCommand,
        protocol_error=ProtocolError,
        struct_error=struct.error,
        language_names=tuple(_LANGUAGE_NAMES.get(i, "OTHER") for i in range(256)),
        language_values=_LANGUAGE_VALUES,
        language_other=int(LanguageCode.OTHER),
        serialize_rocketmq=SerializeType.ROCKETMQ,
        decode_json_header=decode_json_header,
        ext_value=_ext_value,
        encode_rocketmq_header=_encode_rocketmq_header_py,
        json_loads=orjson.loads,
        json_dumps=orjson.dumps,
        json_command=_json_command,
        encode_json_header=_encode_json_header_py,
    )
    return _codec


_c_codec = _load_accelerator()
_c_in_use: ModuleType | None = None
decode_rocketmq_header: Callable[[bytes], RemotingCommand]
encode_rocketmq_header: Callable[[RemotingCommand], bytes]
encode_json_header: Callable[[RemotingCommand], bytes]
_split_frames: Callable[[bytearray, int], list[RemotingCommand]]
use_accelerator(not os.environ.get("ROCKETMQ_GATEWAY_PURE_PYTHON"))
