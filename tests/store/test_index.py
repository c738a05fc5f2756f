"""Index files: RocketMQ's layout, lookups by key and unique key within a time range, rollover, recovery, rebuild."""

from __future__ import annotations

import dataclasses
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway.remoting.message import MessageSysFlag, decode_records, java_string_hash
from gateway.store import DefaultMessageStore, MessageExtBrokerInner, StoreConfig
from gateway.store.index_file import INDEX_HEADER_SIZE, index_file_size, index_key_hash
from gateway.store.index_service import property_value

from .conftest import HASH_SLOTS, INDEX_NUM, crash, lose_commit_log_from, make_msg

Opener = Callable[..., DefaultMessageStore]
FOREVER = 1 << 62


def keyed(topic: str = "TopicTest", keys: str | None = None, body: bytes = b"b", **kw: object) -> MessageExtBrokerInner:
    return make_msg(topic, body=body, extra={"KEYS": keys} if keys else None, **kw)  # type: ignore[arg-type]


def uniq(msg: MessageExtBrokerInner) -> str:
    value = property_value(msg.properties, "UNIQ_KEY\x01")
    assert value is not None
    return value


def bodies(store: DefaultMessageStore, topic: str, key: str, max_num: int = 64, begin: int = 0, end: int = FOREVER):
    return [m.body for m in decode_records(b"".join(store.query_message(topic, key, max_num, begin, end).buffers))]


def index_dir(config: StoreConfig) -> Path:
    return Path(config.storePathRootDir) / "index"


def test_key_hash_is_java_abs_hash_code() -> None:
    for key in ["", "a", "TopicTest#7F0000010F2A18B4AAC2741B6C5A0001", "T#order-1", "T#日本", "x" * 300]:
        assert index_key_hash(key) == abs(java_string_hash(key))
    assert java_string_hash("polygenelubricants") == -(1 << 31)  # Integer.MIN_VALUE: Java's abs keeps it negative
    assert index_key_hash("polygenelubricants") == 0


def test_property_value_matches_whole_names_only() -> None:
    props = "XKEYS\x01no\x02KEYS\x01a b\x02UNIQ_KEY\x01U1"
    assert property_value(props, "KEYS\x01") == "a b"
    assert property_value(props, "UNIQ_KEY\x01") == "U1"
    assert property_value("KEYS\x01\x02TAGS\x01t", "KEYS\x01") is None  # empty value: not set
    assert property_value("TAGS\x01t", "KEYS\x01") is None


def test_lookup_by_each_key_and_by_unique_key(store: DefaultMessageStore) -> None:
    a = keyed(keys="order-1 user-7", body=b"a")
    b = keyed(keys="order-2  user-7", body=b"b")  # two spaces: the empty key between them is skipped
    c = keyed("Other", keys="order-1", body=b"c")
    for m in (a, b, c):
        assert store.put_message(m).ok
    assert bodies(store, "TopicTest", "order-1") == [b"a"]  # topic is part of the indexed key
    assert bodies(store, "Other", "order-1") == [b"c"]
    assert bodies(store, "TopicTest", "user-7") == [b"a", b"b"]  # oldest first
    assert bodies(store, "TopicTest", "user-7", max_num=1) == [b"b"]  # the newest is found first
    assert bodies(store, "TopicTest", uniq(b)) == [b"b"]
    assert bodies(store, "Other", uniq(b)) == []
    assert bodies(store, "TopicTest", "") == []


def test_time_range_and_header(store: DefaultMessageStore) -> None:
    r = store.put_message(keyed(keys="k"))
    assert r.append is not None
    t = r.append.store_timestamp
    assert bodies(store, "TopicTest", "k", begin=t - 5000, end=t + 5000) == [b"b"]
    assert bodies(store, "TopicTest", "k", begin=t + 5000, end=t + 9000) == []
    assert bodies(store, "TopicTest", "k", begin=0, end=t - 5000) == []
    result = store.query_message("TopicTest", "k", 32, 0, FOREVER)
    assert result.index_last_update_timestamp == t
    assert result.index_last_update_phyoffset == r.append.wrote_offset
    assert store.query_message("TopicTest", "nothing", 32, 0, FOREVER).index_last_update_timestamp == 0


def test_results_are_capped_by_max_msgs_num_batch(open_store: Opener, config: StoreConfig) -> None:
    store = open_store(dataclasses.replace(config, maxMsgsNumBatch=5, maxIndexNum=400))
    for i in range(8):
        store.put_message(keyed(keys="same", body=b"%d" % i))
    assert bodies(store, "TopicTest", "same", max_num=32) == [b"%d" % i for i in range(3, 8)]


def test_layout_is_rocketmq_s(store: DefaultMessageStore, config: StoreConfig) -> None:
    msg = keyed(keys="k1")
    r = store.put_message(msg)
    assert r.append is not None
    (path,) = index_dir(config).iterdir()
    assert len(path.name) == 17 and path.name.isdigit()  # yyyyMMddHHmmssSSS
    data = path.read_bytes()
    assert len(data) == index_file_size(HASH_SLOTS, INDEX_NUM) == 40 + HASH_SLOTS * 4 + INDEX_NUM * 20
    t, phy = r.append.store_timestamp, r.append.wrote_offset
    slots_used = len({abs(java_string_hash(k)) % HASH_SLOTS for k in (f"TopicTest#{uniq(msg)}", "TopicTest#k1")})
    assert struct.unpack_from(">qqqqii", data) == (t, t, phy, phy, slots_used, 3)  # count starts at 1
    for n, key in ((1, f"TopicTest#{uniq(msg)}"), (2, "TopicTest#k1")):
        h = abs(java_string_hash(key))
        entry = INDEX_HEADER_SIZE + HASH_SLOTS * 4 + n * 20
        prev = 1 if n == 2 and slots_used == 1 else 0
        assert struct.unpack_from(">iqii", data, entry) == (h, phy, 0, prev)
    key_slot = INDEX_HEADER_SIZE + abs(java_string_hash("TopicTest#k1")) % HASH_SLOTS * 4
    assert struct.unpack_from(">i", data, key_slot) == (2,)


def test_files_roll_over_and_lookups_span_them(store: DefaultMessageStore, config: StoreConfig) -> None:
    msgs = [keyed(keys=f"k{i % 3}", body=b"%d" % i) for i in range(60)]  # 120 entries, 47 per file
    for m in msgs:
        assert store.put_message(m).ok
    assert len(list(index_dir(config).iterdir())) == 3
    assert bodies(store, "TopicTest", "k1") == [b"%d" % i for i in range(1, 60, 3)]
    for m in msgs[::7]:
        assert bodies(store, "TopicTest", uniq(m)) == [m.body]


def test_rollback_is_not_indexed_prepared_is(store: DefaultMessageStore) -> None:
    store.put_message(keyed(keys="tx", body=b"rollback", sys_flag=MessageSysFlag.TRANSACTION_ROLLBACK_TYPE))
    store.put_message(keyed(keys="tx", body=b"prepared", sys_flag=MessageSysFlag.TRANSACTION_PREPARED_TYPE))
    assert bodies(store, "TopicTest", "tx") == [b"prepared"]
    assert store.get_max_offset_in_queue("TopicTest", 0) == 0


def test_disabled_index_writes_nothing(open_store: Opener, config: StoreConfig) -> None:
    store = open_store(dataclasses.replace(config, messageIndexEnable=False))
    store.put_message(keyed(keys="k"))
    assert bodies(store, "TopicTest", "k") == []
    assert not index_dir(config).exists()


def test_restart_reports_no_index_work_after_a_clean_stop(config: StoreConfig) -> None:
    store = DefaultMessageStore(config)
    store.start()
    for i in range(30):
        store.put_message(keyed(keys=f"k{i}") if i % 2 else make_msg(extra=None))
    store.put_message(make_msg(extra=None))  # the last message has no key: the index still knows it saw it
    store.shutdown()
    store = DefaultMessageStore(config)
    report = store.start()
    try:
        assert (report.index_records_rebuilt, report.index_entries_truncated) == (0, 0)
        assert bodies(store, "TopicTest", "k29") == [b"b"]
    finally:
        store.shutdown()


def test_lost_index_is_rebuilt_from_the_commitlog(config: StoreConfig) -> None:
    store = DefaultMessageStore(config)
    store.start()
    msgs = [keyed(keys=f"k{i % 4}", body=b"%d" % i) for i in range(70)]
    for m in msgs:
        store.put_message(m)
    store.shutdown()
    shutil.rmtree(index_dir(config))
    store = DefaultMessageStore(config)
    report = store.start()
    try:
        assert report.index_records_rebuilt == 70
        assert report.scan_from == 0  # the whole commitlog, though the consume queues needed nothing
        assert report.records_redispatched == 0
        assert bodies(store, "TopicTest", "k2") == [b"%d" % i for i in range(2, 70, 4)]
        assert bodies(store, "TopicTest", uniq(msgs[33])) == [b"33"]
    finally:
        store.shutdown()


def test_torn_tail_drops_its_index_entries(config: StoreConfig) -> None:
    store = DefaultMessageStore(config)
    store.start()
    kept = [keyed(keys="k", body=b"%d" % i) for i in range(10)]
    for m in kept:
        store.put_message(m)
    r = store.put_message(keyed(keys="k torn", body=b"torn"))
    assert r.append is not None
    crash(store)
    seg = Path(config.commit_log_path) / f"{r.append.wrote_offset - r.append.wrote_offset % 4096:020d}"
    with open(seg, "r+b") as f:
        f.seek(r.append.wrote_offset % 4096 + 4)
        f.write(b"\xff" * 4)  # a bad magic code
    store = DefaultMessageStore(config)
    report = store.start()
    try:
        assert report.index_entries_truncated == 3  # UNIQ_KEY, k, torn
        assert bodies(store, "TopicTest", "torn") == []
        assert bodies(store, "TopicTest", "k") == [b"%d" % i for i in range(10)]
        again = keyed(keys="torn", body=b"again")
        store.put_message(again)  # lands where the torn message was
        assert bodies(store, "TopicTest", "torn") == [b"again"]
        assert bodies(store, "TopicTest", uniq(again)) == [b"again"]
    finally:
        store.shutdown()


def test_cut_tail_across_index_files(config: StoreConfig) -> None:
    """Truncating past a whole index file deletes it and restores the previous file's slots."""
    store = DefaultMessageStore(config)
    store.start()
    for i in range(20):
        store.put_message(keyed(keys="k", body=b"%d" % i))  # 40 entries: one file
    cut = store.max_phy_offset
    for i in range(20, 45):
        store.put_message(keyed(keys="k", body=b"%d" % i))  # a second file
    assert len(list(index_dir(config).iterdir())) == 2
    crash(store)
    lose_commit_log_from(config, cut)
    store = DefaultMessageStore(config)
    report = store.start()
    try:
        assert report.max_phy_offset == cut
        assert report.index_entries_truncated >= 50
        assert len(list(index_dir(config).iterdir())) == 1
        assert bodies(store, "TopicTest", "k") == [b"%d" % i for i in range(20)]
    finally:
        store.shutdown()


@pytest.mark.parametrize("abnormal", [False, True])
def test_index_survives_restart(config: StoreConfig, abnormal: bool) -> None:
    store = DefaultMessageStore(config)
    store.start()
    msgs = [keyed(keys=f"k{i % 5}", body=b"%d" % i) for i in range(40)]
    for m in msgs:
        store.put_message(m)
    if abnormal:
        crash(store)
    else:
        store.shutdown()
    store = DefaultMessageStore(config)
    store.start()
    try:
        assert bodies(store, "TopicTest", "k3") == [b"%d" % i for i in range(3, 40, 5)]
        assert all(bodies(store, "TopicTest", uniq(m)) == [m.body] for m in msgs)
    finally:
        store.shutdown()
