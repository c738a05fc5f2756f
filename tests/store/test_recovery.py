"""Restart and recovery: clean shutdown, kill -9, torn tails, lost consume queues, bad files."""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway.remoting.message import MessageSysFlag, decode_records, send_properties, tags_code
from gateway.store import DefaultMessageStore, GetMessageStatus, MessageExtBrokerInner, StoreConfig, StoreLoadError
from gateway.store.checkpoint import StoreCheckpoint

from .conftest import CL_SIZE, crash, make_msg

Opener = Callable[..., DefaultMessageStore]


def read_all(store: DefaultMessageStore, topic: str = "TopicTest", qid: int = 0) -> list[bytes]:
    """Bodies of every message in a queue, pulled the way a consumer does."""
    out: list[bytes] = []
    offset = store.get_min_offset_in_queue(topic, qid)
    while True:
        r = store.get_message("g", topic, qid, offset, 32)
        assert r is not None
        if r.status is not GetMessageStatus.FOUND:
            return out
        out += [m.body for m in decode_records(b"".join(r.buffers))]
        offset = r.next_begin_offset


def fill(store: DefaultMessageStore, n: int, topic: str = "TopicTest", qid: int = 0, size: int = 100) -> list[bytes]:
    bodies = [os.urandom(size) for _ in range(n)]
    for body in bodies:
        assert store.put_message(make_msg(topic, qid, body=body)).ok
    return bodies


def segment(config: StoreConfig, offset: int) -> Path:
    return Path(config.commit_log_path) / f"{offset - offset % CL_SIZE:020d}"


def test_clean_restart_keeps_everything(open_store: Opener, config: StoreConfig) -> None:
    store = open_store()
    assert os.path.exists(os.path.join(config.storePathRootDir, "abort"))
    a = fill(store, 30, "A", 0)
    b = fill(store, 25, "B", 3, size=300)
    end = store.max_phy_offset
    store.shutdown()
    assert not os.path.exists(os.path.join(config.storePathRootDir, "abort"))
    store = open_store()
    assert (read_all(store, "A", 0), read_all(store, "B", 3)) == (a, b)
    assert store.max_phy_offset == store.flushed_where == end
    r = store.put_message(make_msg("A", 0))
    assert r.append is not None and r.append.logics_offset == 30 and r.append.wrote_offset >= end


def test_clean_restart_report(config: StoreConfig) -> None:
    store = DefaultMessageStore(config)
    store.start()
    fill(store, 100)
    end = store.max_phy_offset
    store.shutdown()
    store = DefaultMessageStore(config)
    report = store.start()
    try:
        assert not report.abnormal
        assert report.max_phy_offset == end
        assert (report.records_redispatched, report.bytes_truncated, report.cq_units_truncated) == (0, 0, 0)
        assert report.files_dropped == []
        assert report.scan_from == (end // CL_SIZE - 2) * CL_SIZE  # the last three segments
        assert 0 < report.records_kept < 100
    finally:
        store.shutdown()


def test_checkpoint_written_on_shutdown(open_store: Opener, config: StoreConfig) -> None:
    store = open_store()
    fill(store, 3)
    last = store.get_message_store_timestamp("TopicTest", 0, 2)
    store.shutdown()
    cp = StoreCheckpoint(os.path.join(config.storePathRootDir, "checkpoint"))
    assert (cp.physic_msg_timestamp, cp.logics_msg_timestamp) == (last, last)
    assert os.path.getsize(cp.path) == 4096
    cp.close()


def test_store_is_locked_while_running(open_store: Opener, config: StoreConfig) -> None:
    store = open_store()
    with pytest.raises(StoreLoadError):
        DefaultMessageStore(config).start()
    store.shutdown()
    open_store()  # the lock went with the shutdown


@pytest.mark.parametrize("where", ["store", "store/sub"])
def test_a_file_where_the_store_directory_goes_is_named(tmp_path: Path, where: str) -> None:
    (tmp_path / "store").write_bytes(b"")
    root = tmp_path / where
    with pytest.raises(StoreLoadError, match=f"^{root}: .*: the store needs a directory there$"):
        DefaultMessageStore(StoreConfig(storePathRootDir=str(root))).start()


def test_crash_keeps_everything_written(config: StoreConfig) -> None:
    store = DefaultMessageStore(config)
    store.start()
    bodies = fill(store, 60)
    end = store.max_phy_offset
    crash(store)
    store = DefaultMessageStore(config)
    report = store.start()
    try:
        assert report.abnormal
        assert report.max_phy_offset == end and report.bytes_truncated == 0
        assert report.scan_from == 0  # nothing was ever checkpointed: scan from the start
        assert read_all(store) == bodies
        r = store.put_message(make_msg())
        assert r.append is not None and r.append.logics_offset == 60
    finally:
        store.shutdown()


@pytest.mark.chaos
def test_kill_9(config: StoreConfig) -> None:
    root = Path(__file__).resolve().parents[2]
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(root)!r})
        from gateway.remoting.message import pack_host
        from gateway.store import DefaultMessageStore, MessageExtBrokerInner
        from tests.store.conftest import small_config
        store = DefaultMessageStore(small_config({config.storePathRootDir!r}))
        store.start()
        host = pack_host("127.0.0.1", 10911)
        for i in range(200):
            props = "UNIQ_KEY\x01U%d" % i
            store.put_message(MessageExtBrokerInner("TopicTest", 0, 0, b"%d" % i, props, 0, 0, 0, host, host))
            if i == 99:
                store.flush()
                store.flush_consume_queues(0)
        print("ready", flush=True)
        sys.stdin.read()
        """
    )
    with subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE) as child:
        try:
            assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
    assert child.returncode == -signal.SIGKILL
    store = DefaultMessageStore(config)
    report = store.start()
    try:
        assert report.abnormal and report.records_kept == 200
        assert read_all(store) == [b"%d" % i for i in range(200)]  # the page cache survived the process
        assert report.index_records_rebuilt == report.index_entries_truncated == 0  # so did the index
        for i in (0, 99, 100, 199):
            found = decode_records(b"".join(store.query_message("TopicTest", f"U{i}", 32, 0, 1 << 62).buffers))
            assert [m.body for m in found] == [b"%d" % i]
    finally:
        store.shutdown()


def test_torn_tail_is_cut(config: StoreConfig) -> None:
    store = DefaultMessageStore(config)
    store.start()
    bodies = fill(store, 30, size=150)
    r = store.put_message(make_msg(body=b"t" * 150))
    assert r.append is not None
    phy, size = r.append.wrote_offset, r.append.wrote_bytes
    crash(store)
    with open(segment(config, phy), "r+b") as f:  # only the first 100 bytes of the last record hit the disk
        f.seek(phy % CL_SIZE + 100)
        f.write(b"\0" * (size - 100))
    store = DefaultMessageStore(config)
    report = store.start()
    try:
        assert report.max_phy_offset == phy
        assert report.bytes_truncated == 100
        assert report.cq_units_truncated == 1
        assert store.get_max_offset_in_queue("TopicTest", 0) == 30
        assert read_all(store) == bodies
        with open(segment(config, phy), "rb") as f:
            f.seek(phy % CL_SIZE)
            assert f.read(CL_SIZE - phy % CL_SIZE) == b"\0" * (CL_SIZE - phy % CL_SIZE)  # the tail is zeroed
        again = store.put_message(make_msg())
        assert again.append is not None and (again.append.wrote_offset, again.append.logics_offset) == (phy, 30)
    finally:
        store.shutdown()


def test_garbage_after_the_last_record_is_cut(config: StoreConfig) -> None:
    store = DefaultMessageStore(config)
    store.start()
    bodies = fill(store, 5)
    end = store.max_phy_offset
    crash(store)
    with open(segment(config, end), "r+b") as f:
        f.seek(end + 50)
        f.write(b"\xff" * 70)
    store = DefaultMessageStore(config)
    report = store.start()
    try:
        assert (report.max_phy_offset, report.bytes_truncated, report.cq_units_truncated) == (end, 120, 0)
        assert read_all(store) == bodies
    finally:
        store.shutdown()


@pytest.mark.parametrize("check_crc", [True, False])
def test_crc_mismatch(config: StoreConfig, check_crc: bool) -> None:
    config.checkCRCOnRecover = check_crc
    store = DefaultMessageStore(config)
    store.start()
    fill(store, 3)
    r = store.put_message(make_msg(body=b"abcdef"))
    assert r.append is not None
    phy, size = r.append.wrote_offset, r.append.wrote_bytes
    crash(store)
    with open(segment(config, phy), "r+b") as f:
        data = bytearray(f.read())
        data[data.index(b"abcdef", phy % CL_SIZE)] = ord("X")
        f.seek(0)
        f.write(data)
    store = DefaultMessageStore(config)
    report = store.start()
    try:
        assert store.get_max_offset_in_queue("TopicTest", 0) == (3 if check_crc else 4)
        assert report.bytes_truncated == (size if check_crc else 0)
    finally:
        store.shutdown()


def test_torn_record_in_an_older_segment_loses_only_itself(config: StoreConfig) -> None:
    store = DefaultMessageStore(config)
    store.start()
    bodies = [os.urandom(200) for _ in range(60)]
    results = [store.put_message(make_msg(body=body)) for body in bodies]
    first_in_second = next(r.append for r in results if r.append and r.append.wrote_offset >= CL_SIZE)
    assert first_in_second.wrote_offset == CL_SIZE
    crash(store)
    with open(segment(config, CL_SIZE), "r+b") as f:
        f.write(b"\0" * 8)  # the first record of the second segment is gone
    store = DefaultMessageStore(config)
    report = store.start()
    try:
        lost = first_in_second.logics_offset
        assert report.skipped == [(CL_SIZE, CL_SIZE + first_in_second.wrote_bytes)]
        assert (report.records_kept, report.bytes_truncated, report.cq_units_blanked) == (59, 0, 1)
        assert report.max_phy_offset == results[-1].append.wrote_offset + results[-1].append.wrote_bytes
        assert read_all(store) == bodies[:lost] + bodies[lost + 1 :]
        assert store.get_message_store_timestamp("TopicTest", 0, lost) == -1
        r = store.put_message(make_msg())
        assert r.append is not None and r.append.logics_offset == 60
    finally:
        store.shutdown()


def test_consume_queues_rebuilt_when_deleted(open_store: Opener, config: StoreConfig) -> None:
    store = open_store()
    a = fill(store, 40, "A", 0)
    b = fill(store, 10, "B", 1)
    store.shutdown()
    shutil.rmtree(config.consume_queue_root)
    store = DefaultMessageStore(config)
    report = store.start()
    try:
        assert report.records_redispatched == 50
        assert (read_all(store, "A", 0), read_all(store, "B", 1)) == (a, b)
        r = store.put_message(make_msg("A", 0))
        assert r.append is not None and r.append.logics_offset == 40
    finally:
        store.shutdown()


def test_lost_consume_queue_file_rebuilt(open_store: Opener, config: StoreConfig) -> None:
    store = open_store()
    bodies = fill(store, 40)
    store.shutdown()
    os.unlink(Path(config.consume_queue_root) / "TopicTest" / "0" / f"{320:020d}")
    store = DefaultMessageStore(config)
    report = store.start()
    try:
        assert report.records_redispatched == 24  # units 16..39 indexed again
        assert read_all(store) == bodies
    finally:
        store.shutdown()


def test_consume_queue_ahead_of_the_commitlog_is_truncated(open_store: Opener, config: StoreConfig) -> None:
    store = open_store()
    fill(store, 3, "A", 0)
    store.shutdown()
    os.unlink(segment(config, 0))  # the commitlog is gone entirely
    store = DefaultMessageStore(config)
    report = store.start()
    try:
        assert ("A", 0) not in store.consume_queue_table
        assert any("consumequeue" in p for p in report.files_dropped)
        r = store.put_message(make_msg("A", 0))
        assert r.append is not None and (r.append.wrote_offset, r.append.logics_offset) == (0, 0)
    finally:
        store.shutdown()


def test_abnormal_recovery_starts_from_the_checkpoint(config: StoreConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [10_000]
    monkeypatch.setattr("gateway.store.commit_log.now_ms", lambda: now[0])
    store = DefaultMessageStore(config)
    store.start()
    bodies = []
    for i in range(80):
        now[0] += 1000  # one second per message
        bodies += fill(store, 1)
        if i == 59:
            store.flush()
            store.flush_consume_queues(0)
    crash(store)
    store = DefaultMessageStore(config)
    report = store.start()
    try:
        cp = store.checkpoint
        assert cp is not None and cp.physic_msg_timestamp == 10_000 + 60 * 1000
        assert report.scan_from > 0
        first = store.commit_log.pickup_store_timestamp(report.scan_from, 200)
        assert 0 < first <= cp.min_timestamp
        assert read_all(store) == bodies
    finally:
        store.shutdown()


def test_prepared_messages_survive_recovery_outside_queues(config: StoreConfig) -> None:
    store = DefaultMessageStore(config)
    store.start()
    store.put_message(make_msg())
    prepared = store.put_message(make_msg(sys_flag=MessageSysFlag.TRANSACTION_PREPARED_TYPE))
    store.put_message(make_msg())
    crash(store)
    shutil.rmtree(config.consume_queue_root)
    store = DefaultMessageStore(config)
    report = store.start()
    try:
        assert report.records_redispatched == 2
        assert store.get_max_offset_in_queue("TopicTest", 0) == 2
        assert prepared.append is not None and store.look_message_by_offset(prepared.append.wrote_offset)
    finally:
        store.shutdown()


def _unit_rebuilt(config: StoreConfig, msg: MessageExtBrokerInner) -> tuple[tuple[int, int, int], int]:
    """Store ``msg``, delete the consume queues, restart: its unit as recovery rebuilt it from the commitlog, and
    its store timestamp."""
    store = DefaultMessageStore(config)
    store.start()
    r = store.put_message(msg)
    assert r.append is not None
    store.shutdown()
    shutil.rmtree(config.consume_queue_root)
    store = DefaultMessageStore(config)
    store.start()
    try:
        unit = store.consume_queue_table[(msg.topic, msg.queue_id)].get_unit(0)
        assert unit is not None
        return unit, r.append.store_timestamp
    finally:
        store.shutdown()


def test_schedule_topic_units_carry_the_delivery_time(config: StoreConfig) -> None:
    unit, stored_at = _unit_rebuilt(config, make_msg("SCHEDULE_TOPIC_XXXX", 2, extra={"DELAY": "3"}))
    assert unit[2] == stored_at + 10_000  # level 3 = 10s


def test_rebuilt_units_take_the_tags_code_the_send_path_took(config: StoreConfig) -> None:
    """A record whose properties name TAGS twice: the send path hashes the first, and so does recovery (and a
    slave's dispatch), so a consume queue rebuilt from the commitlog filters as the master's did."""
    msg = make_msg(tags=None)
    msg.properties += "\x02TAGS\x01first\x02TAGS\x01second"
    msg.tags_code = send_properties(msg.properties, "DefaultCluster")[1]
    assert msg.tags_code == tags_code("first")
    unit, _ = _unit_rebuilt(config, msg)
    assert unit[2] == tags_code("first")


def test_empty_segment_left_by_a_crash_is_removed(open_store: Opener, config: StoreConfig) -> None:
    store = open_store()
    bodies = fill(store, 5)
    store.shutdown()
    empty = segment(config, CL_SIZE)
    empty.touch()
    store = DefaultMessageStore(config)
    report = store.start()
    try:
        assert report.files_dropped == [str(empty)]
        assert read_all(store) == bodies
    finally:
        store.shutdown()


def test_wrong_segment_size_refuses_to_start(open_store: Opener, config: StoreConfig) -> None:
    store = open_store()
    fill(store, 5)
    store.shutdown()
    os.truncate(segment(config, 0), CL_SIZE * 2)
    with pytest.raises(StoreLoadError):
        DefaultMessageStore(config).start()
    open_store(dataclasses.replace(config, mappedFileSizeCommitLog=CL_SIZE * 2))
