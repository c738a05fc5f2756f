"""Retention and the disk guard: expired segments, deleteWhen, disk ratios, consume queues and index files going
with their commitlog, min offsets moving, writes refused on a full disk and resumed."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest_twisted
from twisted.internet import reactor

from gateway.store import DefaultMessageStore, GetMessageStatus, PutMessageStatus, StoreConfig
from gateway.store.clean_service import CleanCommitLogService, CleanConsumeQueueService, CleanService, destroy_files

from .conftest import CL_SIZE, make_msg

HOUR = 3600.0
NOW = time.mktime((2024, 5, 6, 4, 30, 0, 0, 0, -1))  # 04:30 local time: within the default deleteWhen "04"
FOREVER = 1 << 62


class Disk:
    """A disk whose used ratio the test sets."""

    def __init__(self, ratio: float = 0.5) -> None:
        self.ratio = ratio
        self.probed: list[str] = []

    def __call__(self, path: str) -> float:
        self.probed.append(path)
        return self.ratio


def segments(config: StoreConfig) -> list[str]:
    path = config.commit_log_path
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


def fill_segments(store: DefaultMessageStore, config: StoreConfig, count: int) -> list[str]:
    """Messages with keys until ``count`` segments exist; returns their uniq keys in order."""
    keys = []
    i = 0
    while len(segments(config)) < count or store.max_phy_offset % CL_SIZE < CL_SIZE // 2:
        msg = make_msg(body=os.urandom(150), extra={"KEYS": f"k{i}"})
        assert store.put_message(msg).ok
        keys.append(f"k{i}")
        i += 1
    return keys


def age(config: StoreConfig, names: list[str], hours: float) -> None:
    for name in names:
        t = NOW - hours * HOUR
        os.utime(Path(config.commit_log_path) / name, (t, t))


def clean(store: DefaultMessageStore, disk: Disk) -> tuple[CleanCommitLogService, list[str]]:
    """One cleaning round, deleting synchronously; returns the service and the deleted paths."""
    commit_log = CleanCommitLogService(store, disk, clock=lambda: NOW)
    deletions = commit_log.delete_expired_files()
    deletions += CleanConsumeQueueService(store).delete_expired_files()
    destroy_files(deletions)
    return commit_log, [path for d in deletions for path in d.paths]


def test_expired_segments_go_at_delete_when_with_their_queues_and_index(
    store: DefaultMessageStore, config: StoreConfig
) -> None:
    keys = fill_segments(store, config, 6)
    names = segments(config)
    age(config, names[:3], 73)
    age(config, names[3:], 71)
    cq_files = sorted(os.listdir(Path(config.consume_queue_root) / "TopicTest" / "0"))
    index_files = sorted(os.listdir(Path(config.storePathRootDir) / "index"))
    assert len(index_files) >= 3

    _, deleted = clean(store, Disk(0.5))

    assert segments(config) == names[3:]
    min_phy = int(names[3])
    assert store.get_min_phy_offset() == min_phy
    left_cq = sorted(os.listdir(Path(config.consume_queue_root) / "TopicTest" / "0"))
    assert left_cq and left_cq == cq_files[len(cq_files) - len(left_cq) :] and len(left_cq) < len(cq_files)
    left_index = sorted(os.listdir(Path(config.storePathRootDir) / "index"))
    assert left_index == index_files[len(index_files) - len(left_index) :] and len(left_index) < len(index_files)
    assert all(not os.path.exists(p) for p in deleted)
    # The queue's min offset is the first message still in the commitlog; pulls below it are told so.
    min_offset = store.get_min_offset_in_queue("TopicTest", 0)
    r = store.get_message("g", "TopicTest", 0, min_offset - 1, 32)
    assert r is not None and (r.status, r.next_begin_offset) == (GetMessageStatus.OFFSET_TOO_SMALL, min_offset)
    first = store.get_message("g", "TopicTest", 0, min_offset, 1)
    assert first is not None and first.status is GetMessageStatus.FOUND
    assert int.from_bytes(first.buffers[0][28:36], "big") >= min_phy
    assert int.from_bytes(first.buffers[0][28:36], "big") - min_phy < 400  # no message before it is left
    # Lookups no longer find deleted messages, still find the others.
    assert store.query_message("TopicTest", keys[0], 32, 0, FOREVER).buffers == []
    assert len(store.query_message("TopicTest", keys[-1], 32, 0, FOREVER).buffers) == 1


def test_nothing_goes_outside_delete_when_on_a_roomy_disk(store: DefaultMessageStore, config: StoreConfig) -> None:
    fill_segments(store, config, 4)
    age(config, segments(config), 100)
    config.deleteWhen = "05;06"
    _, deleted = clean(store, Disk(0.74))
    assert deleted == [] and len(segments(config)) == 4


def test_a_disk_above_max_used_ratio_deletes_expired_files_at_any_hour(
    store: DefaultMessageStore, config: StoreConfig
) -> None:
    fill_segments(store, config, 5)
    names = segments(config)
    age(config, names[:2], 100)
    age(config, names[2:], 1)
    config.deleteWhen = "05"
    _, deleted = clean(store, Disk(0.80))
    assert segments(config) == names[2:]
    assert {os.path.basename(p) for p in deleted} >= set(names[:2])


def test_a_disk_above_the_forcible_ratio_deletes_young_files_but_never_the_last(
    store: DefaultMessageStore, config: StoreConfig
) -> None:
    fill_segments(store, config, 13)
    names = segments(config)
    age(config, names, 0)
    config.cleanFileForciblyEnable = False
    clean(store, Disk(0.86))
    assert segments(config) == names
    config.cleanFileForciblyEnable = True
    clean(store, Disk(0.86))
    assert segments(config) == names[10:]  # at most 10 a round
    clean(store, Disk(0.86))
    assert segments(config) == names[-1:]
    assert store.put_message(make_msg()).ok


def test_full_disk_refuses_writes_until_space_returns(store: DefaultMessageStore, config: StoreConfig) -> None:
    disk = Disk(0.95)
    service = CleanCommitLogService(store, disk, clock=lambda: NOW)
    service.delete_expired_files()
    assert store.disk_full
    assert {config.commit_log_path, config.consume_queue_root} <= set(disk.probed)
    assert store.put_message(make_msg()).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert store.put_messages([make_msg()]).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    disk.ratio = 0.89
    service.delete_expired_files()
    assert not store.disk_full
    assert store.put_message(make_msg()).ok


@pytest_twisted.inlineCallbacks
def test_clean_service_deletes_off_the_reactor(open_store: Callable[..., DefaultMessageStore], config: StoreConfig):
    store = open_store()
    fill_segments(store, config, 4)
    names = segments(config)
    age(config, names[:2], 100)
    service = CleanService(store, reactor, disk_used_ratio=Disk(0.5), clock=lambda: NOW)
    service.start()
    try:
        yield service.run()
        assert segments(config) == names[2:]
        assert store.get_min_phy_offset() == int(names[2])
    finally:
        yield service.stop()
