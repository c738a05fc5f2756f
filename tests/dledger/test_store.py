"""DLedger's file store on real files: appends across data-file rolls, restart recovery, a torn tail, truncation."""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

import pytest

from gateway.config import parse_properties
from gateway.dledger.codes import DLedgerResponseCode
from gateway.dledger.entry import BODY_OFFSET, INDEX_UNIT_SIZE, DLedgerEntry, IndexEntry
from gateway.dledger.store import DLedgerFileStore, DLedgerStoreConfig, DLedgerStoreError
from gateway.store.mapped_file import StoreLoadError

DATA_FILE = 256  # small files so that entries roll over
INDEX_FILE = INDEX_UNIT_SIZE * 4


def open_store(base: Path) -> DLedgerFileStore:
    store = DLedgerFileStore(
        DLedgerStoreConfig(
            store_base_dir=str(base),
            self_id="n0",
            mapped_file_size_for_entry_data=DATA_FILE,
            mapped_file_size_for_entry_index=INDEX_FILE,
        )
    )
    store.open()
    return store


def body(i: int) -> bytes:
    return f"message-{i:03d}".encode() * (1 + i % 3)


def data_dir(base: Path) -> Path:
    return base / "dledger-n0" / "data"


def test_append_and_get_across_file_rolls(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    entries = [store.append_as_leader(body(i), term=1 + i // 6) for i in range(20)]
    assert [e.index for e in entries] == list(range(20))
    assert store.ledger_begin_index == 0 and store.ledger_end_index == 19 and store.ledger_end_term == 4
    for e in entries:
        assert e.pos // DATA_FILE == (e.pos + e.size - 1) // DATA_FILE  # never spans two files
        assert store.get(e.index) == e
    files = sorted(os.listdir(data_dir(tmp_path)))
    assert len(files) > 3 and files[1] == f"{DATA_FILE:020d}"
    # A rolled file ends with a blank record: magic -1 and the length left, then zeros.
    first_next = next(e for e in entries if e.pos >= DATA_FILE)
    last_in_first = max((e for e in entries if e.pos < DATA_FILE), key=lambda e: e.pos)
    tail = last_in_first.pos + last_in_first.size
    raw = (data_dir(tmp_path) / files[0]).read_bytes()
    assert struct.unpack_from(">ii", raw, tail) == (-1, DATA_FILE - tail)
    assert raw[tail + 8 :] == bytes(DATA_FILE - tail - 8)
    assert first_next.pos == DATA_FILE
    # The index file holds one 32-byte record per entry at index * 32.
    index_raw = b"".join(
        (tmp_path / "dledger-n0" / "index" / n).read_bytes()
        for n in sorted(os.listdir(tmp_path / "dledger-n0" / "index"))
    )
    assert IndexEntry.decode(index_raw, 7 * INDEX_UNIT_SIZE) == entries[7].index_entry()
    with pytest.raises(DLedgerStoreError) as out:
        store.get(20)
    assert out.value.code is DLedgerResponseCode.INDEX_OUT_OF_RANGE
    with pytest.raises(DLedgerStoreError) as out:
        store.append_as_leader(b"x" * DATA_FILE, term=4)
    assert out.value.code is DLedgerResponseCode.DISK_ERROR
    assert store.ledger_end_index == 19
    store.close()


def test_restart_recovers_entries_and_committed_index(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    entries = [store.append_as_leader(body(i), term=2) for i in range(12)]
    store.update_committed_index(9)
    store.update_committed_index(5)  # lower: ignored
    assert store.committed_index == 9 and store.committed_pos == entries[9].pos + entries[9].size
    store.close()
    checkpoint = (tmp_path / "dledger-n0" / "checkpoint").read_text()
    assert parse_properties(checkpoint) == {"endIndex": "11", "committedIndex": "9"}

    again = open_store(tmp_path)
    assert (again.ledger_begin_index, again.ledger_end_index, again.ledger_end_term) == (0, 11, 2)
    assert again.committed_index == 9
    assert [again.get(i) for i in range(12)] == entries
    nxt = again.append_as_leader(b"after restart", term=3)
    end = entries[-1].pos + entries[-1].size
    fits = end % DATA_FILE + nxt.size + 8 <= DATA_FILE
    assert (nxt.index, nxt.pos) == (12, end if fits else end - end % DATA_FILE + DATA_FILE)
    assert again.get(12) == nxt
    again.close()


def test_torn_tail_is_cut_with_one_log_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = open_store(tmp_path)
    entries = [store.append_as_leader(body(i), term=1) for i in range(8)]
    store.close()
    last = entries[-1]
    path = data_dir(tmp_path) / f"{last.pos - last.pos % DATA_FILE:020d}"
    # A crash mid-write: the last entry's header landed, half of its body did not.
    with open(path, "r+b") as f:
        f.seek(last.pos % DATA_FILE + BODY_OFFSET + 2)
        f.truncate()
        f.truncate(DATA_FILE)
        f.seek(last.pos % DATA_FILE + 4)
        f.write(struct.pack(">i", last.size + 500))  # and its size no longer fits the body
    with caplog.at_level(logging.WARNING, logger="gateway.dledger.store"):
        again = open_store(tmp_path)
    torn = [r.getMessage() for r in caplog.records if "torn tail" in r.getMessage()]
    assert torn == [f"DLedger recovery: cut {BODY_OFFSET + 2} bytes of torn tail in {path} from offset {last.pos}"]
    assert again.ledger_end_index == 6
    assert [again.get(i) for i in range(7)] == entries[:7]
    assert path.read_bytes()[last.pos % DATA_FILE :] == bytes(DATA_FILE - last.pos % DATA_FILE)
    with pytest.raises(DLedgerStoreError):
        again.get(7)
    # The cut entry's slot is reused by the next append, and it survives another restart.
    redo = again.append_as_leader(b"rewritten", term=1)
    assert (redo.index, redo.pos) == (7, last.pos)
    again.close()
    assert open_store(tmp_path).get(7) == redo


def test_index_rebuilt_from_data(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    entries = [store.append_as_leader(body(i), term=1) for i in range(10)]
    store.close()
    index_dir = tmp_path / "dledger-n0" / "index"
    for name in os.listdir(index_dir):
        (index_dir / name).unlink()
    again = open_store(tmp_path)
    assert [again.get(i) for i in range(10)] == entries


def test_truncate_drops_the_tail_and_follower_continues(tmp_path: Path) -> None:
    leader = open_store(tmp_path / "leader")
    follower = open_store(tmp_path / "follower")
    common = [leader.append_as_leader(body(i), term=1) for i in range(6)]
    for e in common:
        follower.append_as_follower(DLedgerEntry.decode(e.encode()))
    # The follower, an old leader, wrote entries of term 1 nobody else holds.
    stale = [follower.append_as_leader(b"uncommitted " + body(i), term=1) for i in range(6, 14)]
    assert follower.ledger_end_index == 13 and len(os.listdir(data_dir(tmp_path / "follower"))) > 1
    newer = [leader.append_as_leader(body(i), term=2) for i in range(6, 9)]

    assert follower.truncate(newer[0]) == 6
    assert follower.ledger_end_index == 6 and follower.ledger_end_term == 2
    assert follower.get(6) == newer[0]
    for e in newer[1:]:
        follower.append_as_follower(e)
    with pytest.raises(DLedgerStoreError) as out:
        follower.append_as_follower(stale[-1])
    assert out.value.code is DLedgerResponseCode.INCONSISTENT_INDEX
    leader.close()
    follower.close()
    # The files now match the leader's byte for byte, and a restart sees the same log.
    for sub in ("data", "index"):
        a, b = tmp_path / "leader" / "dledger-n0" / sub, tmp_path / "follower" / "dledger-n0" / sub
        assert sorted(os.listdir(a)) == sorted(os.listdir(b))
        for name in os.listdir(a):
            assert (a / name).read_bytes() == (b / name).read_bytes()
    again = open_store(tmp_path / "follower")
    assert again.ledger_end_index == 8
    assert [again.get(i) for i in range(9)] == common + newer


def test_truncate_to_an_entry_we_hold_keeps_it(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    entries = [store.append_as_leader(body(i), term=1) for i in range(5)]
    assert store.truncate(entries[2]) == 2
    assert store.ledger_end_index == 2 and store.get(2) == entries[2]
    assert store.append_as_leader(b"next", term=2).pos == entries[3].pos


def test_follower_append_refuses_a_wrong_position(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    with pytest.raises(DLedgerStoreError) as out:
        store.append_as_follower(DLedgerEntry(index=0, term=1, pos=64, body=b"x"))
    assert out.value.code is DLedgerResponseCode.DISK_ERROR
    assert store.ledger_end_index == -1


def test_truncate_beyond_our_files_restarts_the_log_there(tmp_path: Path) -> None:
    """A follower far behind a leader whose old files are gone takes the leader's first entry as its own first."""
    store = open_store(tmp_path)
    store.append_as_leader(b"old", term=1)
    first = DLedgerEntry(index=10, term=2, pos=3 * DATA_FILE + 40, body=b"leader's first")
    assert store.truncate(first) == 10
    assert (store.ledger_begin_index, store.ledger_end_index, store.ledger_end_term) == (10, 10, 2)
    assert store.get(10) == first
    assert sorted(os.listdir(data_dir(tmp_path))) == [f"{3 * DATA_FILE:020d}"]
    nxt = DLedgerEntry(index=11, term=2, pos=first.pos + first.size, body=b"next")
    store.append_as_follower(nxt)
    assert store.get(11) == nxt
    with pytest.raises(DLedgerStoreError) as out:
        store.get(9)
    assert out.value.code is DLedgerResponseCode.INDEX_LESS_THAN_LOCAL_BEGIN


def test_missing_data_file_in_the_middle_refuses_to_open(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    for i in range(20):
        store.append_as_leader(body(i), term=1)
    store.close()
    (data_dir(tmp_path) / f"{DATA_FILE:020d}").unlink()
    with pytest.raises(StoreLoadError, match="files missing in between"):
        open_store(tmp_path)
