"""Queue offsets, offsets by time, store times, lookups by commitlog offset, topic deletion."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gateway.remoting.message import decode_record
from gateway.store import DefaultMessageStore, GetMessageStatus, StoreConfig

from .conftest import CL_SIZE, make_msg


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[int], None]]:
    """Set the store time the next appends get."""
    now = [1_000]
    monkeypatch.setattr("gateway.store.commit_log.now_ms", lambda: now[0])

    def set_time(ms: int) -> None:
        now[0] = ms

    yield set_time


def put_at(store: DefaultMessageStore, clock: Callable[[int], None], times: list[int]) -> None:
    for t in times:
        clock(t)
        assert store.put_message(make_msg()).ok


def test_offset_by_time(store: DefaultMessageStore, clock: Callable[[int], None]) -> None:
    put_at(store, clock, [1000, 2000, 2000, 3000, 5000, 9000])

    def by_time(ts: int) -> int:
        return store.get_offset_in_queue_by_time("TopicTest", 0, ts)

    assert by_time(2000) == 1  # exact match: the first one
    assert by_time(5000) == 4
    assert by_time(3900) == 3  # nearer to 3000 than to 5000
    assert by_time(4100) == 4
    assert by_time(4000) == 3  # a tie goes to the earlier one, as Java
    assert by_time(10) == 0  # before everything: the first
    assert by_time(99999) == 5  # after everything: the last message, as Java 4.9
    assert store.get_offset_in_queue_by_time("Nope", 0, 1000) == 0


def test_store_times(store: DefaultMessageStore, clock: Callable[[int], None]) -> None:
    put_at(store, clock, [1500, 2500])
    assert store.get_message_store_timestamp("TopicTest", 0, 1) == 2500
    assert store.get_message_store_timestamp("TopicTest", 0, 2) == -1
    assert store.get_message_store_timestamp("Nope", 0, 0) == -1
    assert store.get_earliest_message_time("TopicTest", 0) == 1500
    assert store.get_earliest_message_time("Nope", 0) == -1


def test_min_max_offsets(store: DefaultMessageStore) -> None:
    assert (store.get_min_offset_in_queue("T", 0), store.get_max_offset_in_queue("T", 0)) == (0, 0)
    for _ in range(3):
        store.put_message(make_msg("T", 0))
    assert (store.get_min_offset_in_queue("T", 0), store.get_max_offset_in_queue("T", 0)) == (0, 3)
    assert store.get_min_phy_offset() == 0


def test_in_disk_check(store: DefaultMessageStore) -> None:
    store.put_message(make_msg())
    assert not store.check_in_disk_by_consume_offset("TopicTest", 0, 0)
    assert not store.check_in_disk_by_consume_offset("TopicTest", 0, 5)
    assert not store.check_in_disk_by_consume_offset("Nope", 0, 0)


def test_lookups_by_commitlog_offset(store: DefaultMessageStore) -> None:
    offsets = []
    for i in range(20):
        r = store.put_message(make_msg(body=b"%d" % i * 60))
        assert r.append is not None
        offsets.append((r.append.wrote_offset, r.append.wrote_bytes))
    for i, (phy, size) in enumerate(offsets):
        data = store.look_message_by_offset(phy)
        assert data is not None and decode_record(data).body == b"%d" % i * 60
        view = store.select_one_message_by_offset(phy, size)
        assert view is not None and bytes(view) == data
    blank = max(phy + size for phy, size in offsets if phy < CL_SIZE)
    assert blank < CL_SIZE
    assert store.look_message_by_offset(blank) is None  # the blank at the end of the first segment
    assert store.look_message_by_offset(offsets[0][0] + 3) is None  # not a record start
    assert store.look_message_by_offset(store.max_phy_offset) is None
    assert store.select_one_message_by_offset(store.max_phy_offset - 4, 8) is None
    assert store.select_one_message_by_offset(-1, 8) is None


def test_delete_topics(store: DefaultMessageStore, config: StoreConfig) -> None:
    for qid in range(3):
        store.put_message(make_msg("Gone", qid))
    store.put_message(make_msg("Kept", 0))
    assert store.delete_topics(["Gone", "Never"]) == 3
    assert not (Path(config.consume_queue_root) / "Gone").exists()
    r = store.get_message("g", "Gone", 1, 0, 32)
    assert r is not None and r.status is GetMessageStatus.NO_MESSAGE_IN_QUEUE
    assert store.get_max_offset_in_queue("Kept", 0) == 1
    r2 = store.put_message(make_msg("Gone", 1))
    assert r2.append is not None and r2.append.logics_offset == 0  # a recreated topic starts over
    assert store.destroy_consume_queue("Gone") == 1
    assert os.listdir(config.consume_queue_root) == ["Kept"]


def test_deleted_topic_stays_deleted_after_restart(open_store) -> None:
    store = open_store()
    store.put_message(make_msg("Gone", 0))
    store.put_message(make_msg("Kept", 0))
    store.delete_topics(["Gone"])
    store.shutdown()
    store = open_store()
    assert ("Gone", 0) not in store.consume_queue_table
    assert store.get_max_offset_in_queue("Kept", 0) == 1
