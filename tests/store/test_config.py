"""StoreConfig: RocketMQ's keys and the values derived from them."""

from __future__ import annotations

from gateway.config import apply_properties
from gateway.store import StoreConfig


def test_defaults_are_rocketmqs() -> None:
    c = StoreConfig()
    assert (c.mappedFileSizeCommitLog, c.consume_queue_file_size) == (1 << 30, 6_000_000)
    assert (c.flushDiskType, c.flushIntervalCommitLog, c.syncFlushTimeout) == ("ASYNC_FLUSH", 500, 5000)
    assert c.commit_log_path.endswith("store/commitlog")


def test_derived_values_follow_later_changes() -> None:
    c = StoreConfig()
    apply_properties([c], {"storePathRootDir": "/data/rmq", "mappedFileSizeConsumeQueue": "1001"}, "broker.conf")
    assert (c.commit_log_path, c.consume_queue_root) == ("/data/rmq/commitlog", "/data/rmq/consumequeue")
    assert c.consume_queue_file_size == 1020  # rounded up to whole 20-byte units, as Java's getter
    c.storePathCommitLog = "/fast/commitlog"
    assert c.commit_log_path == "/fast/commitlog"


def test_delay_levels() -> None:
    table = StoreConfig().delay_level_table()
    assert (len(table), table[0], table[4], table[-1]) == (18, 1000, 60_000, 7_200_000)
