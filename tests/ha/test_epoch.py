"""Epoch history (epochFileCheckpoint), the consistent point of two histories, and truncating a store there."""

from __future__ import annotations

import zlib
from pathlib import Path

from gateway.remoting.controller_protocol import EpochEntry
from gateway.store.config import StoreConfig
from gateway.store.ha.codec import HAProtocolError, ReportDecoder, encode_identity, encode_report
from gateway.store.ha.epoch import EpochFileCache, find_consistent_point
from gateway.store.message_store import DefaultMessageStore
from tests.store.conftest import make_msg

MAX = (1 << 63) - 1


def test_file_is_apaches_checkpoint_format_and_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "epochFileCheckpoint"
    cache = EpochFileCache(path)
    cache.append(1, 0)
    cache.append(2, 4096)
    cache.append(2, 9999)  # not newer: ignored
    body = "1-0\n2-4096\n"
    assert path.read_text() == f"2\n{zlib.crc32(body.encode()) & 0x7FFFFFFF}\n{body}"
    again = EpochFileCache(path)
    again.load()
    assert again.last_epoch == 2
    assert again.entries(5000) == [EpochEntry(1, 0, 4096), EpochEntry(2, 4096, 5000)]
    assert again.entries(100) == [EpochEntry(1, 0, 100)]  # a shorter commitlog holds only the first epoch
    path.write_text("2\n12345\n1-0\n2-4096\n")  # checksum broken
    broken = EpochFileCache(path)
    broken.load()
    assert broken.last_epoch == -1


def test_consistent_point_is_the_end_of_the_newest_shared_epoch() -> None:
    # The old master wrote epoch 2 up to 9000; the new master (epoch 3) had only 7000 of it.
    old_master = [EpochEntry(1, 0, 5000), EpochEntry(2, 5000, 9000)]
    new_master = [EpochEntry(1, 0, 5000), EpochEntry(2, 5000, 7000), EpochEntry(3, 7000, 12000)]
    assert find_consistent_point(old_master, new_master) == 7000
    assert find_consistent_point(new_master, new_master) == 12000
    # An epoch with the same number but another start is not shared.
    assert find_consistent_point([EpochEntry(2, 100, 900)], new_master) == -1
    assert find_consistent_point([], new_master) == -1


def _put(store: DefaultMessageStore, topic: str, n: int) -> list[int]:
    ends = []
    for i in range(n):
        result = store.put_message(make_msg(topic, i % 2, b"m%d" % i * 100, extra={"KEYS": f"k{i}"}))
        assert result.ok and result.append is not None
        ends.append(result.append.wrote_offset + result.append.wrote_bytes)
    return ends


def test_truncate_files_cuts_commitlog_queues_and_index(tmp_path: Path) -> None:
    store = DefaultMessageStore(StoreConfig(storePathRootDir=str(tmp_path), mappedFileSizeCommitLog=64 * 1024))
    store.start()
    try:
        ends = _put(store, "T", 400)  # several 64 KiB segments
        assert len(store.commit_log.queue.files) > 2
        cut_at = ends[149]
        assert store.truncate_files(cut_at) > 0
        assert store.get_max_phy_offset() == cut_at
        assert store.get_max_offset_in_queue("T", 0) == 75 and store.get_max_offset_in_queue("T", 1) == 75
        assert store.commit_log.topic_queue_table[("T", 0)] == 75
        # The index forgets the cut keys and keeps the others.
        assert store.query_message("T", "k149", 10, 0, 2**62).buffers
        assert not store.query_message("T", "k150", 10, 0, 2**62).buffers
        # Appending continues at the cut, and queue offsets follow on.
        more = _put(store, "T", 2)
        assert more[0] > cut_at and store.get_max_offset_in_queue("T", 0) == 76
        assert store.truncate_files(store.get_max_phy_offset() + 10) == 0  # past the end: nothing to cut
    finally:
        store.shutdown()


def test_a_slave_names_itself_before_its_first_report_only() -> None:
    d = ReportDecoder()
    assert d.feed(encode_identity(7) + encode_report(100)) == 100
    assert d.slave_broker_id == 7
    try:
        d.feed(encode_identity(8))
    except HAProtocolError:
        pass
    else:
        raise AssertionError("an identity after a report must break the link")
    plain = ReportDecoder()  # a 4.x slave never names itself
    assert plain.feed(encode_report(5) + encode_report(9)) == 9 and plain.slave_broker_id is None
