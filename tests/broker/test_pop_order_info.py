"""ConsumerOrderInfoManager (Apache 5.3.3's offset.ConsumerOrderInfoManager): blocking, in-order commits,
consumed counts, lock release wake-ups, and consumerOrderInfo.json in Apache's JSON."""

from __future__ import annotations

from pathlib import Path

import pytest
from twisted.internet.task import Clock

from gateway.broker.pop.order_info import ILLEGAL, NO_NEED_COMMIT, ConsumerOrderInfoManager, OrderInfo
from gateway.persist import StateFileError


def manager(tmp_path: Path, clock: Clock, **kw) -> ConsumerOrderInfoManager:
    return ConsumerOrderInfoManager(tmp_path, clock, topic_read_queue_nums=lambda t: 4, **kw)


def test_a_batch_blocks_its_queue_until_acked_in_order(tmp_path: Path) -> None:
    clock = Clock()
    clock.advance(1000)
    m = manager(tmp_path, clock)
    assert not m.check_block(None, "T", "g", 0, 30000)
    counts = m.update(None, "T", "g", 0, 1_000_000, 30000, [5, 6, 7])
    assert counts == ({}, 0)
    assert m.check_block(None, "T", "g", 0, 30000)
    assert not m.check_block(None, "T", "g", 1, 30000)  # other queues are free
    # Acks out of order: the commit offset stays at the first unacked one.
    assert m.commit_and_next("T", "g", 0, 6, 1_000_000) == 5
    assert m.commit_and_next("T", "g", 0, 9, 1_000_000) == ILLEGAL
    assert m.commit_and_next("T", "g", 0, 5, 999) == NO_NEED_COMMIT  # an older batch's ack
    assert m.commit_and_next("T", "g", 0, 5, 1_000_000) == 7
    assert m.check_block(None, "T", "g", 0, 30000)
    assert m.commit_and_next("T", "g", 0, 7, 1_000_000) == 8
    assert not m.check_block(None, "T", "g", 0, 30000)
    # An ack for a queue with no order info commits past the offset.
    assert m.commit_and_next("T", "g", 3, 41, 1) == 42


def test_invisible_time_frees_the_queue_and_counts_consumptions(tmp_path: Path) -> None:
    clock = Clock()
    m = manager(tmp_path, clock)
    m.update("att-1", "T", "g", 0, 0, 3000, [5, 6])
    assert m.check_block(None, "T", "g", 0, 3000)
    assert not m.check_block("att-1", "T", "g", 0, 3000)  # the same attempt retried is let through
    clock.advance(3)
    assert not m.check_block(None, "T", "g", 0, 3000)
    # The same offsets popped again: each consumed once before; a new offset counts 0, so the least is 0.
    assert m.update("att-2", "T", "g", 0, 3000, 3000, [5, 6]) == ({5: 1, 6: 1}, 1)
    assert m.update("att-3", "T", "g", 0, 6000, 3000, [6, 7]) == ({6: 2}, 0)
    # A retried attempt keeps the counts it had.
    assert m.update("att-3", "T", "g", 0, 6001, 3000, [6, 7]) == ({6: 2}, 0)
    # CHANGE_INVISIBLETIME of one offset moves its next visible time only.
    m.update_next_visible_time("T", "g", 0, 6, 6001, 60000)
    clock.advance(10)
    assert m.check_block(None, "T", "g", 0, 3000)
    m.commit_and_next("T", "g", 0, 6, 6001)
    assert not m.check_block(None, "T", "g", 0, 3000)


def test_lock_release_wakes_the_queue(tmp_path: Path) -> None:
    clock = Clock()
    m = manager(tmp_path, clock)
    woken: list[tuple[str, str, int]] = []
    m.on_lock_free = lambda *key: woken.append(key)
    m.update(None, "T", "g", 2, 0, 5000, [1])
    clock.advance(4.9)
    assert woken == []
    clock.advance(0.1)
    assert woken == [("T", "g", 2)]
    m.update(None, "T", "g", 2, 5000, 5000, [1])
    m.commit_and_next("T", "g", 2, 1, 5000)  # acked: free at once
    clock.advance(0)
    assert woken == [("T", "g", 2)] * 2
    clock.advance(10)
    assert woken == [("T", "g", 2)] * 2  # the earlier wake-up was replaced, not added
    off = manager(tmp_path, clock, notify_lock_free=lambda: False)
    off.on_lock_free = lambda *key: woken.append(key)
    off.update(None, "T", "g", 2, 0, 5000, [1])
    clock.advance(10)
    assert len(woken) == 2 and not clock.getDelayedCalls()


def test_file_is_apaches_json_and_survives_a_restart(tmp_path: Path) -> None:
    clock = Clock()
    clock.advance(100)
    m = manager(tmp_path, clock)
    m.update("a1", "T", "g", 0, 100_000, 30000, [5, 7])
    m.update("a2", "T", "g", 0, 100_001, 30000, [5, 7])
    m.commit_and_next("T", "g", 0, 5, 100_001)
    m.update_next_visible_time("T", "g", 0, 7, 100_001, 200_000)
    m.persist()
    assert (tmp_path / "consumerOrderInfo.json").read_bytes() == (
        b'{"table":{"T@g":{0:{"a":"a2","cm":1,"i":30000,"l":100000,"o":[5,2],"oc":{5:1,7:1},'
        b'"ot":{7:200000},"popTime":100001}}}}'
    )
    again = manager(tmp_path, clock)
    woken: list[tuple[str, str, int]] = []
    again.on_lock_free = lambda *key: woken.append(key)
    again.load()
    assert again.table == m.table
    assert again.check_block(None, "T", "g", 0, 30000)
    assert again.commit_and_next("T", "g", 0, 7, 100_001) == 8
    # recover(): the loaded lock's release is scheduled again.
    m2 = manager(tmp_path, clock)
    m2.on_lock_free = lambda *key: woken.append(key)
    m2.load()
    clock.advance(200)
    assert ("T", "g", 0) in woken


def test_clean_and_corrupt_files(tmp_path: Path) -> None:
    clock = Clock()
    m = ConsumerOrderInfoManager(
        tmp_path,
        clock,
        topic_read_queue_nums=lambda t: {"T": 2}.get(t),
        group_exists=lambda g: g != "gone",
    )
    for topic, group, qid in (("T", "g", 0), ("T", "g", 3), ("Deleted", "g", 0), ("T", "gone", 0), ("T", "old", 1)):
        m.update(None, topic, group, qid, 0, 1000, [1])
    m.table["T@old"][1].last_consume_timestamp = -(25 * 3600 * 1000)
    m.persist()
    # As Java: a topic@group left empty goes at the next clean.
    assert m.table.keys() == {"T@g", "T@old"} and set(m.table["T@g"]) == {0} and m.table["T@old"] == {}
    m.persist()
    assert m.table.keys() == {"T@g"}
    (tmp_path / "consumerOrderInfo.json").write_bytes(b'{"table":{"T@g":{0:{"o":"x"}}}}')
    (tmp_path / "consumerOrderInfo.json.bak").unlink()
    with pytest.raises(StateFileError, match=r"consumerOrderInfo\.json"):
        manager(tmp_path, clock).load()


def test_offset_list_is_relative_to_the_first() -> None:
    info = OrderInfo(0, 1000, OrderInfo.build_offset_list([10, 12, 15]), 0)
    assert info.offset_list == [10, 2, 5]
    assert info.queue_offsets() == [10, 12, 15]
    assert info.next_offset() == 10
