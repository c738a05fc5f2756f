"""get_message: the status / nextBeginOffset table of wire.md §7.4, batch caps and filtering."""

from __future__ import annotations

import os
from pathlib import Path

from gateway.remoting.message import decode_records, tags_code
from gateway.store import DefaultMessageStore, GetMessageStatus, StoreConfig
from gateway.store.config import SLAVE

from .conftest import CQ_SIZE, crash, make_msg

S = GetMessageStatus


def fill(store: DefaultMessageStore, n: int, topic: str = "TopicTest", qid: int = 0, **kw) -> None:
    for i in range(n):
        assert store.put_message(make_msg(topic, qid, body=b"m%d" % i, **kw)).ok


def test_found_returns_raw_records(store: DefaultMessageStore) -> None:
    fill(store, 5)
    r = store.get_message("g", "TopicTest", 0, 1, 3)
    assert r is not None
    assert (r.status, r.next_begin_offset, r.min_offset, r.max_offset, r.message_count) == (S.FOUND, 4, 0, 5, 3)
    body = b"".join(r.buffers)
    assert r.buffer_total_size == len(body)
    msgs = decode_records(body)
    assert [(m.queue_offset, m.body) for m in msgs] == [(1, b"m1"), (2, b"m2"), (3, b"m3")]
    assert all(type(b) is bytes for b in r.buffers)  # what a Twisted transport accepts
    assert not r.suggest_pull_from_slave


def test_status_table(store: DefaultMessageStore) -> None:
    fill(store, 5)

    def get(topic: str, offset: int) -> tuple[S, int]:
        r = store.get_message("g", topic, 0, offset, 32)
        assert r is not None
        return r.status, r.next_begin_offset

    assert get("Nope", 7) == (S.NO_MESSAGE_IN_QUEUE, 0)
    assert get("TopicTest", 5) == (S.OFFSET_OVERFLOW_ONE, 5)
    assert get("TopicTest", 9) == (S.OFFSET_OVERFLOW_BADLY, 5)
    assert get("TopicTest", 4) == (S.FOUND, 5)


def test_a_queue_reads_at_most_one_consume_queue_file(store: DefaultMessageStore) -> None:
    fill(store, 20)  # 16 units per consume-queue file
    r = store.get_message("g", "TopicTest", 0, 10, 32)
    assert r is not None and (r.message_count, r.next_begin_offset) == (6, 16)
    r = store.get_message("g", "TopicTest", 0, 16, 32)
    assert r is not None and (r.message_count, r.next_begin_offset) == (4, 20)


def test_filter_skips_units_but_advances(store: DefaultMessageStore) -> None:
    for i in range(6):
        store.put_message(make_msg(tags="A" if i in (1, 4) else "B"))
    want = tags_code("A")
    r = store.get_message("g", "TopicTest", 0, 0, 32, lambda code: code == want)
    assert r is not None
    assert (r.status, r.message_count, r.next_begin_offset) == (S.FOUND, 2, 6)
    r = store.get_message("g", "TopicTest", 0, 0, 32, lambda code: False)
    assert r is not None and (r.status, r.message_count, r.next_begin_offset) == (S.NO_MATCHED_MESSAGE, 0, 6)


def test_max_msg_nums_stops_before_the_next_unit(store: DefaultMessageStore) -> None:
    fill(store, 10)
    r = store.get_message("g", "TopicTest", 0, 0, 4)
    assert r is not None and (r.message_count, r.next_begin_offset) == (4, 4)


def test_hot_caps(open_store, config: StoreConfig) -> None:
    config.maxTransferCountOnMessageInMemory = 3
    store = open_store(config)
    fill(store, 10)
    r = store.get_message("g", "TopicTest", 0, 0, 32)
    assert r is not None and (r.message_count, r.next_begin_offset, r.suggest_pull_from_slave) == (3, 3, False)


def test_hot_byte_cap_always_lets_one_message_through(open_store, config: StoreConfig) -> None:
    config.maxTransferBytesOnMessageInMemory = 10
    store = open_store(config)
    fill(store, 3)
    r = store.get_message("g", "TopicTest", 0, 0, 32)
    assert r is not None and (r.message_count, r.next_begin_offset) == (1, 1)


def test_cold_caps_and_slave_suggestion(open_store, config: StoreConfig) -> None:
    config.accessMessageInMemoryMaxRatio = 0  # everything behind the tail counts as "in disk"
    config.maxTransferCountOnMessageInDisk = 2
    store = open_store(config)
    fill(store, 10)
    r = store.get_message("g", "TopicTest", 0, 0, 32)
    assert r is not None and (r.message_count, r.next_begin_offset, r.suggest_pull_from_slave) == (2, 2, True)
    assert store.check_in_disk_by_consume_offset("TopicTest", 0, 0)
    config.accessMessageInMemoryMaxRatio = 40  # changed at run time (updateBrokerConfig): the next pull sees it
    r = store.get_message("g", "TopicTest", 0, 0, 32)
    assert r is not None and not r.suggest_pull_from_slave
    assert not store.check_in_disk_by_consume_offset("TopicTest", 0, 0)


def test_scan_limit(open_store, config: StoreConfig) -> None:
    config.mappedFileSizeConsumeQueue = 20 * 2000
    config.mappedFileSizeCommitLog = 1 << 20
    store = open_store(config)
    fill(store, 1200, tags="B")
    none = lambda code: False  # noqa: E731
    r = store.get_message("g", "TopicTest", 0, 0, 32, none)
    assert r is not None and (r.status, r.next_begin_offset) == (S.NO_MATCHED_MESSAGE, 800)  # 16000 bytes of units
    r = store.get_message("g", "TopicTest", 0, 0, 1000, none)
    assert r is not None and r.next_begin_offset == 1000  # maxMsgNums * 20 bytes


def test_offset_too_small_after_the_first_consume_queue_file_is_gone(open_store, config: StoreConfig) -> None:
    store = open_store()
    fill(store, 20)
    store.shutdown()
    os.unlink(Path(config.consume_queue_root) / "TopicTest" / "0" / f"{0:020d}")
    store = open_store()
    assert (store.get_min_offset_in_queue("TopicTest", 0), store.get_max_offset_in_queue("TopicTest", 0)) == (16, 20)
    r = store.get_message("g", "TopicTest", 0, 3, 32)
    assert r is not None and (r.status, r.next_begin_offset, r.min_offset) == (S.OFFSET_TOO_SMALL, 16, 16)


def test_no_message_in_queue(open_store, config: StoreConfig) -> None:
    store = open_store()
    fill(store, 1)
    crash(store)
    with open(Path(config.commit_log_path) / f"{0:020d}", "r+b") as f:
        f.write(b"\0" * 8)  # the only record is torn
    store = open_store()
    r = store.get_message("g", "TopicTest", 0, 0, 32)
    assert r is not None and (r.status, r.next_begin_offset) == (S.NO_MESSAGE_IN_QUEUE, 0)


def test_message_was_removing(open_store, config: StoreConfig) -> None:
    store = open_store()
    fill(store, 40)  # 16 records fit in the first commitlog segment
    store.shutdown()
    os.unlink(Path(config.commit_log_path) / f"{0:020d}")  # as if cleaned while the queue still points at it
    store = open_store()
    r = store.get_message("g", "TopicTest", 0, 0, 32)
    assert r is not None
    assert r.status is S.MESSAGE_WAS_REMOVING
    assert r.next_begin_offset == 16  # every unit pointing into the removed segment is skipped


def test_offset_found_null(store: DefaultMessageStore) -> None:
    fill(store, 40)
    cq = store.consume_queue_table[("TopicTest", 0)]
    cq.queue.files.pop(1)  # a consume-queue file vanishes under the reader
    r = store.get_message("g", "TopicTest", 0, 20, 32)
    assert r is not None
    assert (r.status, r.next_begin_offset) == (S.OFFSET_FOUND_NULL, 2 * CQ_SIZE // 20)


def test_slave_keeps_the_requested_offset(open_store, config: StoreConfig) -> None:
    store = open_store()
    fill(store, 3)
    store.shutdown()
    config.brokerRole = SLAVE
    slave = open_store(config)
    r = slave.get_message("g", "TopicTest", 0, 9, 32)
    assert r is not None and (r.status, r.next_begin_offset) == (S.OFFSET_OVERFLOW_BADLY, 9)
    config.offsetCheckInSlave = True
    r = slave.get_message("g", "TopicTest", 0, 9, 32)
    assert r is not None and r.next_begin_offset == 3


def test_not_running_returns_none(config: StoreConfig) -> None:
    assert DefaultMessageStore(config).get_message("g", "T", 0, 0, 1) is None
