"""maxOpenMappedFiles: however many queues are written, open descriptors stay bounded; files unmapped while idle
are mapped again on use, synced by the next flush, and survive restarts, crashes, retention and topic deletion.
A queue never written costs nothing."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway.store import DefaultMessageStore, GetMessageStatus, StoreConfig

from .conftest import crash, make_msg
from .test_clean import Disk, age, clean, segments
from .test_recovery import read_all

LIMIT = 16
QUEUES = 500
# Beside the mapped files a running store holds its lock file and its checkpoint.
STORE_FDS = 2

Opener = Callable[..., DefaultMessageStore]


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def bounded(config: StoreConfig) -> StoreConfig:
    config.maxOpenMappedFiles = LIMIT
    return config


def write_round_robin(store: DefaultMessageStore, rounds: range, queues: int = QUEUES, fd_ceiling: int = 0) -> None:
    """Round ``r`` puts body ``q-r`` into each queue ``q``; with ``fd_ceiling``, checks the descriptors after each."""
    for r in rounds:
        for q in range(queues):
            assert store.put_message(make_msg(queue_id=q, body=b"%d-%d" % (q, r))).ok
            if fd_ceiling:
                assert open_fds() <= fd_ceiling


def assert_all_readable(store: DefaultMessageStore, rounds: int) -> None:
    for q in range(QUEUES):
        assert read_all(store, "TopicTest", q) == [b"%d-%d" % (q, r) for r in range(rounds)]


def test_round_robin_over_many_queues_keeps_descriptors_bounded(open_store: Opener, bounded: StoreConfig) -> None:
    base = open_fds()
    ceiling = base + STORE_FDS + LIMIT
    store = open_store(bounded)
    write_round_robin(store, range(2), fd_ceiling=ceiling)
    assert store.mapped_file_pool.open_files <= LIMIT
    assert len(list(Path(bounded.consume_queue_root, "TopicTest").iterdir())) == QUEUES
    assert_all_readable(store, 2)
    assert open_fds() <= ceiling

    store.shutdown()
    store = open_store(bounded)
    assert open_fds() <= ceiling  # loading 500 queues maps only what recovery reads
    assert_all_readable(store, 2)
    write_round_robin(store, range(2, 3), fd_ceiling=ceiling)

    crash(store)
    assert open_fds() <= base
    store = open_store(bounded)
    assert open_fds() <= ceiling
    assert_all_readable(store, 3)


def test_unbounded_store_maps_every_file(open_store: Opener, config: StoreConfig) -> None:
    config.maxOpenMappedFiles = 0
    store = open_store(config)
    write_round_robin(store, range(1), queues=40)
    assert store.mapped_file_pool.open_files >= 40


def test_an_unmapped_queue_file_is_synced_by_the_next_flush(
    store: DefaultMessageStore, bounded: StoreConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.mapped_file_pool.limit = LIMIT
    write_round_robin(store, range(1), queues=100)
    files = [f for cq in store.consume_queue_table.values() for f in cq.queue.files]
    cq_files = {f.path for f in files}
    unmapped = [f for f in files if not f.is_mapped]
    assert len(cq_files) == 100 and len(unmapped) >= 100 - LIMIT

    synced: list[str] = []
    fdatasync = os.fdatasync

    def recording(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", recording)
    store.flush_consume_queues(0)
    assert cq_files <= set(synced)  # closing a file never skipped its sync
    assert not any(f.is_mapped for f in unmapped)  # synced through their paths, not mapped again
    synced.clear()
    store.flush_consume_queues(0)
    assert not cq_files & set(synced)  # and nothing is synced twice


def test_busy_and_active_files_stay_mapped(store: DefaultMessageStore) -> None:
    store.mapped_file_pool.limit = 2
    write_round_robin(store, range(1), queues=3)
    busy = store.consume_queue_table[("TopicTest", 0)].queue
    assert read_all(store, "TopicTest", 0) == [b"0-0"]  # maps it again
    with busy._lock:  # as while a worker syncs it
        assert busy.files[0].is_mapped
        write_round_robin(store, range(1, 2), queues=40)
        assert busy.files[0].is_mapped
    write_round_robin(store, range(1, 2), queues=40)
    assert not busy.files[0].is_mapped
    assert store.commit_log.queue.files[-1].is_mapped  # the active segment, always
    assert store.mapped_file_pool.open_files <= 2


def test_readers_keep_their_slices_when_a_file_is_unmapped(store: DefaultMessageStore) -> None:
    store.mapped_file_pool.limit = 1  # every other file used unmaps the last one
    for i in range(90):  # several commitlog segments and consume-queue files per queue
        assert store.put_message(make_msg(queue_id=i % 3, body=os.urandom(40) + b"%d" % i)).ok
    cq = store.consume_queue_table[("TopicTest", 1)]
    units = cq.get_index_buffer(0)
    assert units is not None
    held = bytes(units)
    for q in (0, 2):
        read_all(store, "TopicTest", q)
    assert not cq.queue.files[0].is_mapped and bytes(units) == held
    for q in range(3):
        assert [int(b[40:]) for b in read_all(store, "TopicTest", q)] == list(range(q, 90, 3))


def test_reads_of_unknown_queues_open_nothing_and_create_nothing(store: DefaultMessageStore, config: StoreConfig):
    assert store.put_message(make_msg()).ok
    root = Path(config.storePathRootDir)
    tree = sorted(root.rglob("*"))
    fds = open_fds()
    queues = set(store.consume_queue_table)
    for topic, qid in (("TopicTest", 7), ("Nobody", 0), ("../x", 0)):
        r = store.get_message("g", topic, qid, 0, 32)
        assert r is not None and r.status is GetMessageStatus.NO_MESSAGE_IN_QUEUE
        assert store.get_max_offset_in_queue(topic, qid) == store.get_min_offset_in_queue(topic, qid) == 0
        assert store.get_offset_in_queue_by_time(topic, qid, 1) == 0
        assert store.get_message_store_timestamp(topic, qid, 0) == store.get_earliest_message_time(topic, qid) == -1
        assert not store.check_in_disk_by_consume_offset(topic, qid, 0)
    assert (sorted(root.rglob("*")), open_fds(), set(store.consume_queue_table)) == (tree, fds, queues)


def test_retention_and_topic_deletion_work_on_unmapped_files(store: DefaultMessageStore, config: StoreConfig):
    store.mapped_file_pool.limit = 2
    i = 0
    while len(segments(config)) < 6:
        assert store.put_message(make_msg(queue_id=i % 2, body=os.urandom(150) + b"%d" % i)).ok
        i += 1
    names = segments(config)
    age(config, names[:3], 73)
    cq_dir = Path(config.consume_queue_root, "TopicTest")
    before = {q: sorted(os.listdir(cq_dir / str(q))) for q in range(2)}
    assert all(len(files) >= 2 for files in before.values())

    _, deleted = clean(store, Disk(0.5))
    assert segments(config) == names[3:]
    gone = [p for p in deleted if p.startswith(str(cq_dir))]
    assert gone and not any(os.path.exists(p) for p in deleted)
    for q in range(2):
        ids = [int(b[150:]) for b in read_all(store, "TopicTest", q)]
        assert ids and ids == list(range(ids[0], i, 2))  # what is left is whole, oldest going first
        assert store.get_min_offset_in_queue("TopicTest", q) > 0

    fds = open_fds()
    assert store.delete_topics({"TopicTest"}) == 2
    assert not cq_dir.exists()
    assert open_fds() <= fds and store.mapped_file_pool.open_files <= 2


def test_flush_running_on_a_worker_while_files_are_unmapped(store: DefaultMessageStore) -> None:
    store.mapped_file_pool.limit = 4
    stop = threading.Event()
    errors: list[BaseException] = []

    def flush_loop() -> None:
        try:
            while not stop.is_set():
                store.flush_consume_queues(0)
                store.flush()
        except BaseException as e:  # reported by the assertion below
            errors.append(e)

    worker = threading.Thread(target=flush_loop)
    worker.start()
    try:
        write_round_robin(store, range(2), queues=200)
    finally:
        stop.set()
        worker.join()
    assert not errors
    for q in range(200):
        assert read_all(store, "TopicTest", q) == [b"%d-0" % q, b"%d-1" % q]


_SHOW_LIMITS = """
import resource, sys, tempfile
from gateway.store import DefaultMessageStore, StoreConfig
store = DefaultMessageStore(StoreConfig(storePathRootDir=tempfile.mkdtemp()))
store.start()
print(resource.getrlimit(resource.RLIMIT_NOFILE)[0], store.mapped_file_pool.limit)
store.destroy()
"""


@pytest.mark.parametrize("lower_hard", [False, True])
def test_start_makes_room_for_the_mapped_files(lower_hard: bool) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    hard = 300 if lower_hard else hard

    def low_soft_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (300, hard))

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", _SHOW_LIMITS], cwd=root, preexec_fn=low_soft_limit, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    soft, limit = map(int, out.stdout.split())
    if lower_hard:  # no room to grow: fewer files stay mapped, leaving descriptors for everything else
        assert (soft, limit) == (300, 150)
    else:  # raised to the hard limit, as the JVM does
        assert soft == hard or hard == resource.RLIM_INFINITY
        assert limit == 1024 or soft < 1024 + 256
