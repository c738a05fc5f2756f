"""The broker's store on a DLedger ledger (DLedgerCommitLog) with real files: puts answered on commit, physical
offsets = entry position + 48, only committed entries dispatched, recovery, truncation, conversion, expiry."""

from __future__ import annotations

import os
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway.dledger.codes import DLedgerResponseCode
from gateway.dledger.commitlog import DLedgerCommitLog
from gateway.dledger.entry import BODY_OFFSET, DLedgerEntry
from gateway.dledger.store import DLedgerFileStore, DLedgerStoreError
from gateway.remoting.message import (
    BLANK_MAGIC_CODE,
    MessageSysFlag,
    decode_offset_message_id,
    decode_record,
    record_size,
)
from gateway.store import DefaultMessageStore, MessageExtBrokerInner, PutMessageStatus
from gateway.store.api import GetMessageStatus
from gateway.store.commit_log import write_record
from gateway.store.mapped_file import StoreLoadError
from gateway.store.message_store import SLAVE
from tests.dledger.conftest import (
    DATA_FILE,
    DLedgerBroker,
    LedgerAppender,
    ledger_config,
    pull,
    result_of,
    start_dledger_store,
)
from tests.store.conftest import crash, make_msg, small_config

Start = Callable[..., DLedgerBroker]


def test_append_hook_runs_on_leader_and_follower_appends(tmp_path: Path) -> None:
    seen = []

    def hook(entry: DLedgerEntry, body: bytearray) -> None:
        seen.append((entry.index, entry.term, entry.pos))
        body[:4] = b"HOOK"

    leader = DLedgerFileStore(ledger_config(str(tmp_path / "a")))
    follower = DLedgerFileStore(ledger_config(str(tmp_path / "b")))
    for ledger in (leader, follower):
        ledger.open()
        ledger.append_hook = hook
    first = leader.append_as_leader(b"....body0", 1)
    second = leader.append_as_leader(b"....body1", 2)
    follower.append_as_follower(DLedgerEntry(index=0, term=1, pos=first.pos, body=b"xxxxbody0"))
    assert seen == [(0, 1, 0), (1, 2, second.pos), (0, 1, 0)]
    assert leader.get(0).body == follower.get(0).body == b"HOOKbody0"
    assert leader.get(1).body == b"HOOKbody1"
    # Only an empty ledger's data can begin elsewhere than 0, at a file start.
    with pytest.raises(DLedgerStoreError):
        leader.start_data_at(DATA_FILE)
    with pytest.raises(DLedgerStoreError):
        DLedgerFileStore(ledger_config(str(tmp_path / "c"))).start_data_at(DATA_FILE + 1)


def test_the_ledger_files_must_be_the_commitlog_files(tmp_path: Path) -> None:
    ledger = DLedgerFileStore(ledger_config(str(tmp_path)))
    config = small_config(str(tmp_path))
    config.mappedFileSizeCommitLog = 2 * DATA_FILE
    with pytest.raises(StoreLoadError, match="mappedFileSizeForEntryData 4096 != mappedFileSizeCommitLog 8192"):
        DLedgerCommitLog(config, lambda *_: None, ledger=ledger, appender=LedgerAppender(ledger))


def put(broker: DLedgerBroker, msg: MessageExtBrokerInner) -> object:
    return result_of(broker.store.async_put_message(msg))


def test_put_answers_on_commit_with_offsets_in_the_ledger(dledger_store: Start) -> None:
    broker = dledger_store()
    results = [put(broker, make_msg(body=f"m{i}".encode() * 40)) for i in range(40)]
    ledger = broker.ledger
    assert ledger.ledger_end_index == 39 and len(ledger.data.files) > 2  # rolled over data files
    for i, result in enumerate(results):
        assert result.status is PutMessageStatus.PUT_OK
        entry = ledger.get(i)
        append = result.append
        assert append.wrote_offset == entry.pos + BODY_OFFSET
        assert append.logics_offset == i
        assert append.wrote_bytes == len(entry.body)
        assert decode_offset_message_id(append.msg_id) == ("127.0.0.1:10911", entry.pos + BODY_OFFSET)
        # The record in the entry says where it is: the append hook wrote pos + 48 into it.
        assert struct.unpack_from(">q", entry.body, 28)[0] == entry.pos + BODY_OFFSET
    msgs = pull(broker.store)
    assert [m.queue_offset for m in msgs] == list(range(40))
    assert [m.body for m in msgs] == [f"m{i}".encode() * 40 for i in range(40)]
    assert [m.commitlog_offset for m in msgs] == [r.append.wrote_offset for r in results]
    record = broker.store.look_message_by_offset(results[7].append.wrote_offset)
    assert record is not None and decode_record(record).body == b"m7" * 40
    assert broker.store.get_max_phy_offset() == ledger.committed_pos == ledger.data.wrote_where
    assert broker.commit_log.confirm_offset == ledger.committed_pos
    broker.store.flush()
    assert broker.store.flushed_where == ledger.data.wrote_where


def test_uncommitted_entries_are_not_dispatched(dledger_store: Start) -> None:
    broker = dledger_store(auto_commit=False)
    store = broker.store
    deferreds = [store.async_put_message(make_msg(body=f"m{i}".encode())) for i in range(3)]
    assert broker.ledger.ledger_end_index == 2
    assert store.get_max_offset_in_queue("TopicTest", 0) == 0  # in the ledger, in no consume queue
    assert store.get_max_phy_offset() == 0
    fired: list = []
    for d in deferreds:
        d.addCallback(fired.append)
    assert fired == []
    broker.appender.commit(1)
    assert [r.status for r in fired] == [PutMessageStatus.PUT_OK] * 2
    assert store.get_max_offset_in_queue("TopicTest", 0) == 2
    assert [m.body for m in pull(store)] == [b"m0", b"m1"]
    assert store.get_max_phy_offset() == broker.ledger.committed_pos < broker.ledger.data.wrote_where
    broker.appender.commit()
    assert len(fired) == 3 and [m.body for m in pull(store)] == [b"m0", b"m1", b"m2"]


def test_commits_behind_the_appends_never_give_a_queue_offset_twice(dledger_store: Start) -> None:
    broker = dledger_store(auto_commit=False)
    deferreds = []
    for i in range(20):
        deferreds.append(broker.store.async_put_message(make_msg(body=f"m{i}".encode())))
        if i % 3 == 2:
            broker.appender.commit(broker.ledger.ledger_end_index - 2)  # the quorum lags two entries behind
    broker.appender.commit()
    assert [result_of(d).append.logics_offset for d in deferreds] == list(range(20))
    assert [m.body for m in pull(broker.store)] == [f"m{i}".encode() for i in range(20)]


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (DLedgerResponseCode.WAIT_QUORUM_ACK_TIMEOUT, PutMessageStatus.OS_PAGECACHE_BUSY),
        (DLedgerResponseCode.LEADER_PENDING_FULL, PutMessageStatus.OS_PAGECACHE_BUSY),
        (DLedgerResponseCode.NOT_LEADER, PutMessageStatus.SERVICE_NOT_AVAILABLE),
        (DLedgerResponseCode.INCONSISTENT_LEADER, PutMessageStatus.SERVICE_NOT_AVAILABLE),
        (DLedgerResponseCode.LEADER_NOT_READY, PutMessageStatus.SERVICE_NOT_AVAILABLE),
        (DLedgerResponseCode.DISK_FULL, PutMessageStatus.SERVICE_NOT_AVAILABLE),
        (DLedgerResponseCode.TERM_CHANGED, PutMessageStatus.UNKNOWN_ERROR),
    ],
)
def test_a_failed_commit_answers_as_apache(
    dledger_store: Start, code: DLedgerResponseCode, status: PutMessageStatus
) -> None:
    broker = dledger_store(auto_commit=False)
    d = broker.store.async_put_message(make_msg())
    broker.appender.fail(code)
    result = result_of(d)
    assert result.status is status
    assert result.append.wrote_offset == BODY_OFFSET  # Apache answers the append result beside the status
    assert broker.store.get_max_offset_in_queue("TopicTest", 0) == 0


@pytest.mark.parametrize(
    "code",
    [
        DLedgerResponseCode.NOT_LEADER,
        DLedgerResponseCode.LEADER_PENDING_FULL,
        DLedgerResponseCode.LEADER_TRANSFERRING,
    ],
)
def test_an_append_refused_at_once_is_os_pagecache_busy(dledger_store: Start, code: DLedgerResponseCode) -> None:
    broker = dledger_store()
    broker.appender.refuse = code
    assert put(broker, make_msg()).status is PutMessageStatus.OS_PAGECACHE_BUSY
    result = result_of(broker.store.async_put_messages([make_msg(), make_msg()]))
    assert result.status is PutMessageStatus.OS_PAGECACHE_BUSY
    broker.appender.refuse = None
    ok = put(broker, make_msg())
    assert ok.status is PutMessageStatus.PUT_OK and ok.append.logics_offset == 0  # no queue offset was spent


def test_a_record_that_cannot_be_encoded_is_message_illegal(dledger_store: Start) -> None:
    broker = dledger_store()
    props = {f"k{i}": "v" * 100 for i in range(400)}  # more than 32767 bytes of properties
    assert put(broker, make_msg(extra=props)).status is PutMessageStatus.MESSAGE_ILLEGAL
    assert put(broker, make_msg(body=bytes(broker.store.config.maxMessageSize + 1))).status is (
        PutMessageStatus.MESSAGE_ILLEGAL
    )
    batch = result_of(broker.store.async_put_messages([make_msg(), make_msg(topic="Other")]))
    assert batch.status is PutMessageStatus.MESSAGE_ILLEGAL
    assert broker.ledger.ledger_end_index == -1


def test_a_prepared_transaction_message_takes_no_queue_offset(dledger_store: Start) -> None:
    broker = dledger_store()
    put(broker, make_msg(body=b"before"))
    half = put(broker, make_msg(body=b"half", sys_flag=MessageSysFlag.TRANSACTION_PREPARED_TYPE))
    assert half.status is PutMessageStatus.PUT_OK and half.append.logics_offset == 0
    assert put(broker, make_msg(body=b"after")).append.logics_offset == 1
    assert [m.body for m in pull(broker.store)] == [b"before", b"after"]
    record = broker.store.look_message_by_offset(half.append.wrote_offset)  # the check reads it by offset
    assert record is not None and decode_record(record).body == b"half"


def test_a_slave_store_refuses_puts(dledger_store: Start) -> None:
    broker = dledger_store()
    broker.store.config.brokerRole = SLAVE  # what the role-change handler sets on a follower
    assert put(broker, make_msg()).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert broker.ledger.ledger_end_index == -1


def test_batch_is_one_entry_per_message(dledger_store: Start) -> None:
    broker = dledger_store(auto_commit=False)
    # Not committed yet: the batch still takes the next queue offsets.
    broker.store.async_put_message(make_msg(body=b"first"))
    d = broker.store.async_put_messages([make_msg(body=f"b{i}".encode()) for i in range(5)])
    broker.appender.commit()
    result = result_of(d)
    assert result.status is PutMessageStatus.PUT_OK
    append = result.append
    assert append.logics_offset == 1 and append.msg_num == 5
    ids = append.msg_id.split(",")
    assert [decode_offset_message_id(i)[1] for i in ids] == [
        broker.ledger.get(i).pos + BODY_OFFSET for i in range(1, 6)
    ]
    assert append.wrote_offset == broker.ledger.get(1).pos + BODY_OFFSET
    assert [m.body for m in pull(broker.store)] == [b"first"] + [f"b{i}".encode() for i in range(5)]


def test_restart_rebuilds_consume_queues_and_index_from_committed_entries(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    broker = start_dledger_store(root, auto_commit=False)
    keys = []
    for i in range(30):
        msg = make_msg(queue_id=i % 2, body=f"m{i}".encode() * 30, extra={"KEYS": f"k{i}"})
        keys.append(f"k{i}")
        broker.store.async_put_message(msg)
    broker.appender.commit(24)  # 25 committed, 5 appended only
    broker.store.shutdown()
    shutil.rmtree(os.path.join(root, "consumequeue"))
    shutil.rmtree(os.path.join(root, "index"))

    broker = start_dledger_store(root, auto_commit=False)
    store = broker.store
    assert broker.ledger.ledger_end_index == 29 and broker.ledger.committed_index == 24
    assert store.get_max_offset_in_queue("TopicTest", 0) == 13
    assert store.get_max_offset_in_queue("TopicTest", 1) == 12
    assert [m.body for m in pull(store, queue_id=1)] == [f"m{i}".encode() * 30 for i in range(1, 25, 2)]
    found = store.query_message("TopicTest", "k23", 32, 0, 2**62)
    assert len(found.buffers) == 1 and decode_record(found.buffers[0]).body == b"m23" * 30
    assert store.query_message("TopicTest", "k27", 32, 0, 2**62).buffers == []  # not committed: not indexed
    broker.appender.commit()
    assert store.get_max_offset_in_queue("TopicTest", 0) == 15
    assert len(store.query_message("TopicTest", "k27", 32, 0, 2**62).buffers) == 1
    # A put after the restart continues the queue offsets taken from the consume queues.
    broker.appender.auto_commit = True
    assert put(broker, make_msg(queue_id=1)).append.logics_offset == 15
    store.shutdown()


def test_crash_recovery_keeps_committed_entries_dispatched(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    broker = start_dledger_store(root)
    for i in range(12):
        put(broker, make_msg(body=f"m{i}".encode()))
    crash(broker.store)
    cq = Path(root) / "consumequeue" / "TopicTest" / "0" / f"{0:020d}"
    with open(cq, "r+b") as f:
        f.seek(6 * 20)
        f.write(bytes(6 * 20))  # units not yet written back when the broker died
    broker = start_dledger_store(root)
    assert [m.body for m in pull(broker.store)] == [f"m{i}".encode() for i in range(12)]
    assert put(broker, make_msg()).append.logics_offset == 12
    broker.store.shutdown()


def test_a_checkpoint_behind_the_consume_queues_dispatches_nothing_twice(tmp_path: Path) -> None:
    """The ledger's checkpoint is written now and then: after a restart its commit index may be behind what the
    consume queues hold.  As Apache, they are kept (cut only past the ledger's end) and not dispatched again."""
    root = str(tmp_path / "store")
    broker = start_dledger_store(root)
    for i in range(10):
        put(broker, make_msg(body=f"m{i}".encode(), extra={"KEYS": "same"}))
    broker.store.shutdown()
    checkpoint = Path(root) / "dledger-n0" / "checkpoint"
    checkpoint.write_text("committedIndex=3\nendIndex=9\n")
    broker = start_dledger_store(root, auto_commit=False)
    store = broker.store
    assert broker.ledger.committed_index == 3
    assert store.get_max_offset_in_queue("TopicTest", 0) == 10
    broker.appender.commit()
    assert store.get_max_offset_in_queue("TopicTest", 0) == 10
    assert [m.body for m in pull(store)] == [f"m{i}".encode() for i in range(10)]
    assert len(store.query_message("TopicTest", "same", 32, 0, 2**62).buffers) == 10
    store.shutdown()


def test_a_truncated_uncommitted_tail_is_never_dispatched(dledger_store: Start) -> None:
    """An old leader's uncommitted entries are replaced by the new leader's: only those reach the queue."""
    broker = dledger_store(auto_commit=False)
    store, ledger = broker.store, broker.ledger
    for i in range(4):
        store.async_put_message(make_msg(body=f"old{i}".encode()))
    broker.appender.commit(1)
    assert store.get_max_offset_in_queue("TopicTest", 0) == 2
    # The new leader's entry 2 (term 2): another message at queue offset 2, where the old entry 2 began.
    old = ledger.get(2)
    msg = make_msg(body=b"new2")
    props = msg.properties.encode()
    size = record_size(len(msg.body), len(msg.topic), len(props))
    record = bytearray(size)
    write_record(record, 0, size, msg, b"TopicTest", props, 0, 2, old.pos + BODY_OFFSET, 1_700_000_000_000)
    new = DLedgerEntry(index=2, term=2, pos=old.pos, body=bytes(record))
    broker.appender.pending.clear()  # the old leader's appends will never be acknowledged
    assert ledger.truncate(new) == 2
    assert ledger.ledger_end_index == 2
    broker.appender.commit(2)
    assert [m.body for m in pull(store)] == [b"old0", b"old1", b"new2"]
    assert store.get_max_offset_in_queue("TopicTest", 0) == 3
    assert store.look_message_by_offset(old.pos + BODY_OFFSET) == bytes(record)


def test_a_follower_dispatches_what_the_leader_committed_and_leads_on(tmp_path: Path) -> None:
    leader = start_dledger_store(str(tmp_path / "a"))
    follower = start_dledger_store(str(tmp_path / "b"), auto_commit=False)
    for i in range(30):
        put(leader, make_msg(queue_id=i % 3, body=f"m{i}".encode() * 20))
    for index in range(leader.ledger.ledger_end_index + 1):
        pushed = leader.ledger.get(index)
        follower.ledger.append_as_follower(
            DLedgerEntry(index=index, term=pushed.term, pos=pushed.pos, body=pushed.body)
        )
        if index % 7 == 6:
            follower.appender.commit(index)  # what the leader's push says is committed
    follower.appender.commit()
    for queue_id in range(3):
        assert pull(follower.store, queue_id=queue_id) == pull(leader.store, queue_id=queue_id)
    leader.store.shutdown()
    follower.store.flush()
    data = [sorted((tmp_path / d / "dledger-n0" / "data").iterdir()) for d in ("a", "b")]
    assert [p.read_bytes() for p in data[0]] == [p.read_bytes() for p in data[1]]
    # Leading now (the role-change handler): the queue offsets go on from its consume queues.
    follower.store.recover_topic_queue_table()
    follower.appender.auto_commit = True
    follower.appender.term = 2
    assert [put(follower, make_msg(queue_id=q)).append.logics_offset for q in range(3)] == [10, 10, 10]
    follower.store.shutdown()


def _master_slave_store(root: str, count: int) -> list[int]:
    """A store written in Master/Slave mode; returns the physical offsets of its messages."""
    store = DefaultMessageStore(small_config(root))
    store.start()
    offsets = [store.put_message(make_msg(body=f"ms{i}".encode() * 20)).append.wrote_offset for i in range(count)]
    store.shutdown()
    return offsets


def test_a_master_slave_store_converts_as_apache(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    old_offsets = _master_slave_store(root, 40)
    old_files = sorted(os.listdir(os.path.join(root, "commitlog")))
    assert len(old_files) > 1
    last_old = int(old_files[-1])
    with open(os.path.join(root, "commitlog", old_files[-1]), "rb") as f:
        raw = f.read()
    end = next(o for o in reversed(old_offsets) if o >= last_old)
    end += struct.unpack_from(">i", raw, end - last_old)[0]

    broker = start_dledger_store(root)
    divided = last_old + DATA_FILE
    assert broker.commit_log.divided_commitlog_offset == divided
    # The old commitlog's last file is closed by a blank record, as Apache's conversion writes it.
    with open(os.path.join(root, "commitlog", old_files[-1]), "rb") as f:
        raw = f.read()
    assert struct.unpack_from(">ii", raw, end - last_old) == (divided - end, BLANK_MAGIC_CODE)
    results = [put(broker, make_msg(body=f"dl{i}".encode() * 20)) for i in range(30)]
    assert results[0].append.wrote_offset == divided + BODY_OFFSET
    assert [r.append.logics_offset for r in results] == list(range(40, 70))
    expected = [f"ms{i}".encode() * 20 for i in range(40)] + [f"dl{i}".encode() * 20 for i in range(30)]
    msgs = pull(broker.store)
    assert [m.body for m in msgs] == expected
    assert [m.commitlog_offset for m in msgs] == old_offsets + [r.append.wrote_offset for r in results]
    for offset in (old_offsets[3], results[3].append.wrote_offset):
        assert broker.store.look_message_by_offset(offset) is not None
    assert broker.store.get_min_phy_offset() == 0
    broker.store.shutdown()

    # Restarts find the divide where the ledger's data files begin, with nothing converted twice.
    for _ in range(2):
        broker = start_dledger_store(root)
        assert broker.commit_log.divided_commitlog_offset == divided
        assert [m.body for m in pull(broker.store)] == expected
        broker.store.shutdown()
    shutil.rmtree(os.path.join(root, "consumequeue"))
    broker = start_dledger_store(root)
    assert [m.body for m in pull(broker.store)] == expected  # rebuilt from both ranges
    broker.store.shutdown()


def test_a_converted_store_restarts_before_its_first_entry(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    _master_slave_store(root, 40)
    broker = start_dledger_store(root)
    divided = broker.commit_log.divided_commitlog_offset
    broker.store.shutdown()
    broker = start_dledger_store(root)
    assert broker.commit_log.divided_commitlog_offset == divided
    assert put(broker, make_msg()).append.wrote_offset == divided + BODY_OFFSET
    assert broker.store.get_max_offset_in_queue("TopicTest", 0) == 41
    broker.store.shutdown()


def test_conversion_cuts_consume_queues_past_a_torn_old_commitlog(tmp_path: Path) -> None:
    """The Master/Slave broker died with its last record torn: the conversion cuts the consume queue at the last
    whole record (Apache's recoverNormally), before the blank closes the old commitlog."""
    root = str(tmp_path / "store")
    offsets = _master_slave_store(root, 10)
    last = Path(root) / "commitlog" / f"{offsets[-1] - offsets[-1] % DATA_FILE:020d}"
    with open(last, "r+b") as f:
        f.seek(offsets[-1] % DATA_FILE + 4)
        f.write(b"\xff" * 4)  # the last record's magic code: no record there
    broker = start_dledger_store(root)
    assert broker.store.get_max_offset_in_queue("TopicTest", 0) == 9
    result = put(broker, make_msg(body=b"first in the ledger"))
    assert result.append.logics_offset == 9
    assert [m.body for m in pull(broker.store)][-2:] == [b"ms8" * 20, b"first in the ledger"]
    broker.store.shutdown()


def test_expiry_deletes_the_old_commitlog_first_then_ledger_files(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    _master_slave_store(root, 40)
    broker = start_dledger_store(root)
    for i in range(60):
        put(broker, make_msg(body=f"dl{i}".encode() * 20))
    cl = broker.commit_log
    old_count = len(cl.queue.files)
    data_count = len(broker.ledger.data.files)
    assert old_count > 1 and data_count > 2
    deleted = []
    while cl.queue.files:
        files, destroy = cl.delete_expired_files(0, 2**62, False, 10)
        assert files and all(f.path.startswith(os.path.join(root, "commitlog")) for f in files)
        destroy(files)
        deleted += files
    assert len(deleted) == old_count  # the last old file too
    assert len(broker.ledger.data.files) == data_count
    assert cl.min_offset == cl.divided_commitlog_offset
    files, destroy = cl.delete_expired_files(0, 2**62, False, 1)
    destroy(files)
    assert len(files) == 1 and len(broker.ledger.data.files) == data_count - 1
    first = broker.ledger.ledger_begin_index
    assert first > 0 and broker.ledger.get(first).pos == broker.ledger.data.min_offset
    assert broker.store.get_min_phy_offset() == broker.ledger.data.min_offset
    # The first queue units point below the ledger's start now: a pull from 0 is told to start later.
    result = broker.store.get_message("g", "TopicTest", 0, 0, 32)
    assert result is not None and result.status is not GetMessageStatus.FOUND
    msgs = pull(broker.store, offset=100 - 10)
    assert [m.body for m in msgs] == [f"dl{i}".encode() * 20 for i in range(50, 60)]
    broker.store.shutdown()
