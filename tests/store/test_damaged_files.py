"""Damaged files at start-up: consume queues and index files are rebuilt from the commitlog, and a damaged
commitlog record followed by valid ones costs that one record only."""

from __future__ import annotations

import dataclasses
import os
import shutil
import struct
from pathlib import Path

import pytest

from gateway.remoting.message import decode_records, property_value
from gateway.store import DefaultMessageStore, StoreConfig, StoreLoadError

from .conftest import CL_SIZE, CQ_SIZE, crash, make_msg
from .test_recovery import fill, read_all

SEGMENT = 1 << 20
FOREVER = 1 << 62


def uniq_key(properties: str) -> str:
    value = property_value(properties, "UNIQ_KEY\x01")
    assert value is not None
    return value


def queried(store: DefaultMessageStore, key: str) -> list[bytes]:
    found = store.query_message("TopicTest", key, 64, 0, FOREVER)
    return [m.body for m in decode_records(b"".join(found.buffers))]


# Where each kind of damage goes in the record: TOTALSIZE, MAGICCODE, or a byte of the body (its CRC no longer
# matches; the body is the last 1000 bytes before the topic, properties and their lengths).
DAMAGE = {"size": (0, struct.pack(">i", 12345)), "magic": (4, b"\0\0\0\1"), "body": (-1, b"!")}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("abnormal", [False, True], ids=["clean", "crash"])
def test_damaged_record_mid_segment_loses_only_itself(config: StoreConfig, damage: str, abnormal: bool) -> None:
    config = dataclasses.replace(config, mappedFileSizeCommitLog=SEGMENT)
    store = DefaultMessageStore(config)
    store.start()
    msgs = [make_msg(body=b"%04d" % i + os.urandom(996)) for i in range(600)]
    results = [store.put_message(m).append for m in msgs]
    assert all(results) and results[-1].wrote_offset < SEGMENT  # one segment
    (crash if abnormal else DefaultMessageStore.shutdown)(store)
    bad = results[300]
    at, data = DAMAGE[damage]
    if at < 0:
        at = bad.wrote_bytes - 2 - len(msgs[300].properties) - 1 - len("TopicTest") - 1000
    with open(Path(config.commit_log_path) / f"{0:020d}", "r+b") as f:
        f.seek(bad.wrote_offset + at)
        f.write(data)
    for _ in range(2):  # the second start meets the damaged record again: same outcome, nothing more lost
        store = DefaultMessageStore(config)
        report = store.start()
        try:
            assert report.skipped == [(bad.wrote_offset, bad.wrote_offset + bad.wrote_bytes)]
            assert report.bytes_truncated == 0
            assert report.max_phy_offset == results[-1].wrote_offset + results[-1].wrote_bytes
            assert read_all(store) == [m.body for i, m in enumerate(msgs) if i != 300]
            assert store.look_message_by_offset(bad.wrote_offset) is None
            assert queried(store, uniq_key(msgs[300].properties)) == []
            assert queried(store, uniq_key(msgs[301].properties)) == [msgs[301].body]
        finally:
            store.shutdown()
    assert report.cq_units_blanked == 0  # blanked by the first start, and that stuck
    store = DefaultMessageStore(config)
    store.start()
    try:
        r = store.put_message(make_msg())
        assert r.append is not None and r.append.logics_offset == 600
    finally:
        store.shutdown()


def test_damaged_record_with_a_long_run_of_zeros_in_a_full_segment_loses_only_itself(config: StoreConfig) -> None:
    """A damaged record's body of 2 MiB of zeros is no end of data in a segment that is full: the records after
    it in that segment are kept."""
    config = dataclasses.replace(config, mappedFileSizeCommitLog=8 * SEGMENT)
    store = DefaultMessageStore(config)
    store.start()
    msgs = [make_msg(body=bytes(2 * SEGMENT) if i == 10 else b"%05d" % i + os.urandom(995)) for i in range(9000)]
    results = [store.put_message(m).append for m in msgs]
    assert all(results) and results[-1].wrote_offset >= 8 * SEGMENT  # the second segment is written to
    store.shutdown()
    bad = results[10]
    with open(Path(config.commit_log_path) / f"{0:020d}", "r+b") as f:
        f.seek(bad.wrote_offset + 4)
        f.write(b"\0\0\0\1")
    store = DefaultMessageStore(config)
    report = store.start()
    try:
        assert report.skipped == [(bad.wrote_offset, bad.wrote_offset + bad.wrote_bytes)]
        assert read_all(store) == [m.body for i, m in enumerate(msgs) if i != 10]
    finally:
        store.shutdown()


def test_two_damaged_records_lose_two_messages(config: StoreConfig) -> None:
    config = dataclasses.replace(config, mappedFileSizeCommitLog=SEGMENT)
    store = DefaultMessageStore(config)
    store.start()
    msgs = [make_msg(body=b"%04d" % i + os.urandom(996)) for i in range(600)]
    results = [store.put_message(m).append for m in msgs]
    store.shutdown()
    with open(Path(config.commit_log_path) / f"{0:020d}", "r+b") as f:
        for bad in (results[100], results[400]):
            f.seek(bad.wrote_offset + 4)
            f.write(b"\0\0\0\1")
    store = DefaultMessageStore(config)
    report = store.start()
    try:
        assert report.skipped == [
            (r.wrote_offset, r.wrote_offset + r.wrote_bytes) for r in (results[100], results[400])
        ]
        assert report.cq_units_blanked == 2
        assert read_all(store) == [m.body for i, m in enumerate(msgs) if i not in (100, 400)]
    finally:
        store.shutdown()


def test_torn_tail_after_a_crash_is_still_cut(config: StoreConfig) -> None:
    """Only a damaged stretch with a valid record after it is skipped: the torn last record goes."""
    store = DefaultMessageStore(config)
    store.start()
    bodies = fill(store, 10)
    r = store.put_message(make_msg(body=os.urandom(100)))
    assert r.append is not None
    crash(store)
    with open(Path(config.commit_log_path) / f"{0:020d}", "r+b") as f:
        f.seek(r.append.wrote_offset + 4)
        f.write(b"\0\0\0\1")
    store = DefaultMessageStore(config)
    report = store.start()
    try:
        assert (report.skipped, report.max_phy_offset) == ([], r.append.wrote_offset)
        assert read_all(store) == bodies
    finally:
        store.shutdown()


@pytest.mark.parametrize("size", [200, CQ_SIZE * 2])
def test_consume_queue_file_of_the_wrong_length_is_rebuilt(config: StoreConfig, size: int) -> None:
    store = DefaultMessageStore(config)
    store.start()
    a = fill(store, 40, "A", 0)  # three consume-queue files of 16 units
    b = fill(store, 10, "B", 1)
    store.shutdown()
    damaged = Path(config.consume_queue_root) / "A" / "0" / f"{CQ_SIZE:020d}"
    os.truncate(damaged, size)
    store = DefaultMessageStore(config)
    report = store.start()
    try:
        assert report.queues_rebuilt == ["A-0"]
        assert str(damaged) in report.files_dropped
        assert report.records_redispatched == 40
        assert (read_all(store, "A", 0), read_all(store, "B", 1)) == (a, b)
        r = store.put_message(make_msg("A", 0))
        assert r.append is not None and r.append.logics_offset == 40
    finally:
        store.shutdown()
    assert os.path.getsize(damaged) == CQ_SIZE


def test_consume_queues_of_another_file_size_are_a_setting_not_damage(config: StoreConfig) -> None:
    """Every consume-queue file of another length: mappedFileSizeConsumeQueue changed. Refused, as Java refuses,
    rather than every queue deleted and rebuilt (and again when the setting is put back)."""
    store = DefaultMessageStore(config)
    store.start()
    fill(store, 40, "A", 0)
    fill(store, 10, "B", 1)
    store.shutdown()
    with pytest.raises(StoreLoadError, match=r"mappedFileSizeConsumeQueue makes them 640: set it as the store"):
        DefaultMessageStore(dataclasses.replace(config, mappedFileSizeConsumeQueue=2 * CQ_SIZE)).start()
    store = DefaultMessageStore(config)
    report = store.start()
    try:
        assert report.queues_rebuilt == [] and read_all(store, "B", 1) != []
    finally:
        store.shutdown()


def test_index_file_of_the_wrong_length_is_rebuilt(config: StoreConfig) -> None:
    store = DefaultMessageStore(config)
    store.start()
    msgs = [make_msg(body=b"%d" % i) for i in range(70)]  # more than one index file
    for m in msgs:
        assert store.put_message(m).ok
    store.shutdown()
    index_files = sorted((Path(config.storePathRootDir) / "index").iterdir())
    assert len(index_files) > 1
    os.truncate(index_files[0], 1000)
    store = DefaultMessageStore(config)
    report = store.start()
    try:
        assert report.index_records_rebuilt == 70
        assert [str(p) for p in index_files] == sorted(p for p in report.files_dropped if "index" in p)
        assert all(queried(store, uniq_key(m.properties)) == [m.body] for m in msgs)
    finally:
        store.shutdown()


@pytest.mark.parametrize("damage", ["size", "huge size", "magic"])
def test_slave_replicating_a_skipped_record_skips_it_too(config: StoreConfig, tmp_path: Path, damage: str) -> None:
    """A slave copies the master's bytes, damaged ones included; it dispatches what follows them (a damaged
    size a record can have is waited for like a record still arriving, then skipped; a larger one at once)."""
    config = dataclasses.replace(config, mappedFileSizeCommitLog=SEGMENT, maxMessageSize=4096)
    store = DefaultMessageStore(config)
    store.start()
    msgs = [make_msg(body=b"%04d" % i + os.urandom(96)) for i in range(200)]
    results = [store.put_message(m).append for m in msgs]
    store.shutdown()
    segment = Path(config.commit_log_path) / f"{0:020d}"
    with open(segment, "r+b") as f:
        at, damaged = (0, struct.pack(">i", 900_000)) if damage == "huge size" else DAMAGE[damage]
        f.seek(results[100].wrote_offset + at)
        f.write(damaged)
    end = results[-1].wrote_offset + results[-1].wrote_bytes
    data = segment.read_bytes()[:end]
    slave = DefaultMessageStore(
        dataclasses.replace(config, storePathRootDir=str(tmp_path / "slave"), brokerRole="SLAVE")
    )
    slave.start()
    try:
        for at in range(0, end, 1000):  # transfers that end inside records
            assert slave.append_to_commit_log(at, data[at : at + 1000])
            slave.dispatch_appended()
        assert slave.replicated_whole_records_end == end
        assert read_all(slave) == [m.body for i, m in enumerate(msgs) if i != 100]
    finally:
        slave.shutdown()


def test_damaged_record_and_lost_consume_queues(config: StoreConfig) -> None:
    """Rebuilt from the commitlog, the damaged record's queue gets a blank unit where the record was."""
    store = DefaultMessageStore(config)
    store.start()
    msgs = [make_msg(body=b"%04d" % i) for i in range(40)]
    results = [store.put_message(m).append for m in msgs]
    store.shutdown()
    bad = results[20]
    with open(Path(config.commit_log_path) / f"{bad.wrote_offset - bad.wrote_offset % CL_SIZE:020d}", "r+b") as f:
        f.seek(bad.wrote_offset % CL_SIZE + 4)
        f.write(b"\0\0\0\1")
    shutil.rmtree(config.consume_queue_root)
    store = DefaultMessageStore(config)
    report = store.start()
    try:
        assert report.skipped == [(bad.wrote_offset, bad.wrote_offset + bad.wrote_bytes)]
        assert report.records_redispatched == 39
        assert read_all(store) == [m.body for i, m in enumerate(msgs) if i != 20]
        assert store.get_max_offset_in_queue("TopicTest", 0) == 40
        r = store.put_message(make_msg())
        assert r.append is not None and r.append.logics_offset == 40
    finally:
        store.shutdown()
