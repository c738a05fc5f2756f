"""DLedger's log entry: the data-file record, the index-file record and the JSON form peers exchange.

Data file record (big-endian, ``DLedgerEntryCoder.encode``)::

    0 magic i32 | 4 size i32 | 8 index i64 | 16 term i64 | 24 pos i64 | 32 channel i32
    36 chainCrc i32 | 40 bodyCrc i32 | 44 bodySize i32 | 48 body

Index file record, 32 bytes at ``index * 32`` (``DLedgerEntryCoder.encodeIndex``)::

    0 magic i32 | 4 pos i64 | 12 size i32 | 16 index i64 | 24 term i64

DLedger 0.3.1.2 reserves ``chainCrc`` and ``bodyCrc`` but never computes nor checks them: its leader writes 0,
followers keep what the leader pushed, recovery skips both. We carry them the same way, so our files and
Apache's stay byte-identical; the checks are the ones Apache's recovery makes (magic, size, body size).
"""

from __future__ import annotations

import base64
import binascii
import struct
from dataclasses import dataclass
from typing import Any, Self

MAGIC_1 = 1
CURRENT_MAGIC = MAGIC_1
# What MmapFileList writes at the end of a data file that the next entry did not fit in.
BLANK_MAGIC_CODE = -1
POS_OFFSET = 4 + 4 + 8 + 8
HEADER_SIZE = POS_OFFSET + 8 + 4 + 4 + 4
BODY_OFFSET = HEADER_SIZE + 4
INDEX_UNIT_SIZE = 32

_HEADER = struct.Struct(">iiqqqiiii")
_INDEX = struct.Struct(">iqiqq")
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


class EntryError(ValueError):
    """Bytes or JSON that are not a DLedger entry (Apache answers DISK_ERROR or refuses the body)."""


def _check_magic(magic: int, where: str) -> None:
    if magic == BLANK_MAGIC_CODE:
        raise EntryError(f"{where}: blank magic {BLANK_MAGIC_CODE} (end of written data), not an entry")
    if not MAGIC_1 <= magic <= CURRENT_MAGIC:
        raise EntryError(f"{where}: unknown magic={magic}")


@dataclass(slots=True, kw_only=True)
class DLedgerEntry:
    """One log entry; ``body`` is a RocketMQ message record when the ledger is a broker's commitlog."""

    index: int
    term: int
    body: bytes
    pos: int = 0
    magic: int = CURRENT_MAGIC
    channel: int = 0
    chain_crc: int = 0
    body_crc: int = 0

    @property
    def size(self) -> int:
        """Bytes of the data-file record (``computeSizeInBytes``)."""
        return BODY_OFFSET + len(self.body)

    def encode(self) -> bytes:
        """The data-file record."""
        header = _HEADER.pack(
            self.magic,
            self.size,
            self.index,
            self.term,
            self.pos,
            self.channel,
            self.chain_crc,
            self.body_crc,
            len(self.body),
        )
        return header + self.body

    @classmethod
    def decode(cls, data: bytes | memoryview, offset: int = 0) -> Self:
        """Read the data-file record at ``offset``; :class:`EntryError` on a bad magic, size or short buffer."""
        where = f"entry at offset {offset}"
        if offset < 0 or len(data) - offset < BODY_OFFSET:
            raise EntryError(f"{where}: {max(len(data) - offset, 0)} bytes, a header needs {BODY_OFFSET}")
        magic, size, index, term, pos, channel, chain_crc, body_crc, body_size = _HEADER.unpack_from(data, offset)
        _check_magic(magic, where)
        if size <= HEADER_SIZE:
            raise EntryError(f"{where}: size {size} should > {HEADER_SIZE}")
        if body_size + BODY_OFFSET != size:
            raise EntryError(f"{where}: size {size} != {body_size} + {BODY_OFFSET}")
        if len(data) - offset < size:
            raise EntryError(f"{where}: truncated, {len(data) - offset} of {size} bytes")
        body = bytes(data[offset + BODY_OFFSET : offset + size])
        return cls(
            index=index,
            term=term,
            body=body,
            pos=pos,
            magic=magic,
            channel=channel,
            chain_crc=chain_crc,
            body_crc=body_crc,
        )

    def index_entry(self) -> IndexEntry:
        """The index-file record that points at this entry."""
        return IndexEntry(magic=self.magic, pos=self.pos, size=self.size, index=self.index, term=self.term)

    def to_json(self) -> dict[str, Any]:
        """fastjson's form of ``DLedgerEntry`` (its getters, sorted; the body as base64)."""
        return {
            "body": base64.b64encode(self.body).decode(),
            "bodyCrc": self.body_crc,
            "chainCrc": self.chain_crc,
            "channel": self.channel,
            "index": self.index,
            "magic": self.magic,
            "pos": self.pos,
            "size": self.size,
            "term": self.term,
        }

    @classmethod
    def from_json(cls, obj: Any) -> Self:
        """Read fastjson's form; :class:`EntryError` on a wrong type or bad base64.

        ``size`` is not read: DLedger recomputes it from the body when it stores the entry.
        """
        if not isinstance(obj, dict):
            raise EntryError("entry: expected an object")
        raw = obj.get("body")
        if not isinstance(raw, str):
            raise EntryError("entry field 'body': expected a base64 string")
        try:
            body = base64.b64decode(raw, validate=True)
        except binascii.Error:
            raise EntryError("entry field 'body': not base64") from None
        return cls(
            index=_json_int(obj, "index", 0, _INT64_MIN, _INT64_MAX),
            term=_json_int(obj, "term", 0, _INT64_MIN, _INT64_MAX),
            body=body,
            pos=_json_int(obj, "pos", 0, _INT64_MIN, _INT64_MAX),
            magic=_json_int(obj, "magic", 0, _INT32_MIN, _INT32_MAX),
            channel=_json_int(obj, "channel", 0, _INT32_MIN, _INT32_MAX),
            chain_crc=_json_int(obj, "chainCrc", 0, _INT32_MIN, _INT32_MAX),
            body_crc=_json_int(obj, "bodyCrc", 0, _INT32_MIN, _INT32_MAX),
        )


def _json_int(obj: dict, key: str, default: int, low: int, high: int) -> int:
    value = obj.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise EntryError(f"entry field '{key}': expected an integer in [{low}, {high}]")
    return value


@dataclass(slots=True, frozen=True, kw_only=True)
class IndexEntry:
    """One index-file record: where entry ``index`` lies in the data files."""

    magic: int
    pos: int
    size: int
    index: int
    term: int

    def encode(self) -> bytes:
        """The 32-byte index-file record."""
        return _INDEX.pack(self.magic, self.pos, self.size, self.index, self.term)

    @classmethod
    def decode(cls, data: bytes | memoryview, offset: int = 0) -> Self:
        """Read the index-file record at ``offset``; :class:`EntryError` on a short buffer or bad magic."""
        where = f"index record at offset {offset}"
        if offset < 0 or len(data) - offset < INDEX_UNIT_SIZE:
            raise EntryError(f"{where}: {max(len(data) - offset, 0)} bytes, a record needs {INDEX_UNIT_SIZE}")
        magic, pos, size, index, term = _INDEX.unpack_from(data, offset)
        _check_magic(magic, where)
        if size <= HEADER_SIZE:
            raise EntryError(f"{where}: size {size} should > {HEADER_SIZE}")
        return cls(magic=magic, pos=pos, size=size, index=index, term=term)
