"""DLedger's data-file and index-file records (DLedgerEntryCoder of dledger 0.3.1.2), golden bytes by hand."""

from __future__ import annotations

import struct

import pytest

from gateway.dledger.entry import BODY_OFFSET, INDEX_UNIT_SIZE, DLedgerEntry, EntryError, IndexEntry

BODY = b"hello"
# The data-file record of DLedgerEntry(magic=1, index=5, term=2, pos=480, channel=7, body="hello"), big-endian.
GOLDEN_ENTRY = (
    bytes.fromhex("00000001")  # 0  magic (MAGIC_1)
    + bytes.fromhex("00000035")  # 4  size = BODY_OFFSET 48 + 5 body bytes = 53
    + bytes.fromhex("0000000000000005")  # 8  index
    + bytes.fromhex("0000000000000002")  # 16 term
    + bytes.fromhex("00000000000001e0")  # 24 pos (POS_OFFSET) = 480
    + bytes.fromhex("00000007")  # 32 channel
    + bytes.fromhex("00000000")  # 36 chainCrc: reserved, 0.3.1.2 never computes it
    + bytes.fromhex("00000000")  # 40 bodyCrc: likewise
    + bytes.fromhex("00000005")  # 44 body size
    + BODY  # 48 body
)
# Its index-file record, 32 bytes at index * 32.
GOLDEN_INDEX = (
    bytes.fromhex("00000001")  # 0  magic
    + bytes.fromhex("00000000000001e0")  # 4  pos
    + bytes.fromhex("00000035")  # 12 size
    + bytes.fromhex("0000000000000005")  # 16 index
    + bytes.fromhex("0000000000000002")  # 24 term
)


def entry() -> DLedgerEntry:
    return DLedgerEntry(index=5, term=2, pos=480, channel=7, body=BODY)


def test_entry_golden_bytes_and_round_trip() -> None:
    e = entry()
    assert e.size == 53 == len(GOLDEN_ENTRY)
    assert e.encode() == GOLDEN_ENTRY
    assert DLedgerEntry.decode(GOLDEN_ENTRY) == e


def test_entry_decoded_at_an_offset_among_others() -> None:
    second = DLedgerEntry(index=6, term=3, pos=480 + 53, body=b"")
    data = b"\xff" * 7 + GOLDEN_ENTRY + second.encode() + b"\x00" * 10
    assert DLedgerEntry.decode(data, 7) == entry()
    assert DLedgerEntry.decode(memoryview(data), 7 + 53) == second


def test_crcs_are_carried_as_given() -> None:
    e = DLedgerEntry(index=0, term=0, body=b"x", chain_crc=-2, body_crc=0x7FFFFFFF)
    assert DLedgerEntry.decode(e.encode()) == e


def test_index_golden_bytes_and_round_trip() -> None:
    record = entry().index_entry()
    assert record == IndexEntry(magic=1, pos=480, size=53, index=5, term=2)
    assert record.encode() == GOLDEN_INDEX
    assert len(GOLDEN_INDEX) == INDEX_UNIT_SIZE
    assert IndexEntry.decode(b"\x00" * 32 + GOLDEN_INDEX, 32) == record


def _patched(offset: int, fmt: str, value: int) -> bytes:
    data = bytearray(GOLDEN_ENTRY)
    struct.pack_into(fmt, data, offset, value)
    return bytes(data)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (_patched(0, ">i", -1), "entry at offset 0: blank magic -1 (end of written data), not an entry"),
        (_patched(0, ">i", 2), "entry at offset 0: unknown magic=2"),
        (_patched(0, ">i", 0), "entry at offset 0: unknown magic=0"),
        (_patched(4, ">i", 44), "entry at offset 0: size 44 should > 44"),
        (_patched(4, ">i", 54), "entry at offset 0: size 54 != 5 + 48"),
        (_patched(44, ">i", 6), "entry at offset 0: size 53 != 6 + 48"),
        (GOLDEN_ENTRY[:-1], "entry at offset 0: truncated, 52 of 53 bytes"),
        (GOLDEN_ENTRY[: BODY_OFFSET - 1], "entry at offset 0: 47 bytes, a header needs 48"),
        (b"", "entry at offset 0: 0 bytes, a header needs 48"),
    ],
)
def test_bad_entry_refused(data: bytes, message: str) -> None:
    with pytest.raises(EntryError) as e:
        DLedgerEntry.decode(data)
    assert str(e.value) == message


def test_bad_index_record_refused() -> None:
    with pytest.raises(EntryError, match="index record at offset 0: 31 bytes, a record needs 32"):
        IndexEntry.decode(GOLDEN_INDEX[:-1])
    with pytest.raises(EntryError, match="index record at offset 0: blank magic -1"):
        IndexEntry.decode(b"\xff\xff\xff\xff" + GOLDEN_INDEX[4:])
    with pytest.raises(EntryError, match="index record at offset 0: size 0 should > 44"):
        IndexEntry.decode(GOLDEN_INDEX[:12] + b"\x00" * 4 + GOLDEN_INDEX[16:])


def test_json_form_as_fastjson_writes_it() -> None:
    e = entry()
    # fastjson: every getter sorted by name, byte[] as base64.
    assert e.to_json() == {
        "body": "aGVsbG8=",
        "bodyCrc": 0,
        "chainCrc": 0,
        "channel": 7,
        "index": 5,
        "magic": 1,
        "pos": 480,
        "size": 53,
        "term": 2,
    }
    assert list(e.to_json()) == sorted(e.to_json())
    assert DLedgerEntry.from_json(e.to_json()) == e


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ([], "entry: expected an object"),
        ({"index": 1}, "entry field 'body': expected a base64 string"),
        ({"body": "a*=="}, "entry field 'body': not base64"),
        ({"body": "", "index": "1"}, "entry field 'index': expected an integer"),
        ({"body": "", "term": True}, "entry field 'term': expected an integer"),
        ({"body": "", "magic": 1 << 31}, "entry field 'magic': expected an integer"),
        ({"body": "", "pos": 1 << 63}, "entry field 'pos': expected an integer"),
    ],
)
def test_bad_json_entry_refused(obj: object, message: str) -> None:
    with pytest.raises(EntryError, match=message):
        DLedgerEntry.from_json(obj)
