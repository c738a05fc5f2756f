"""Flushing: store.flush from a worker thread, the periodic flush service, SYNC_FLUSH group commit."""

from __future__ import annotations

import dataclasses
import errno
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer
from twisted.internet.task import Clock, deferLater
from twisted.python.failure import Failure

from gateway.store import DefaultMessageStore
from gateway.store import flush as flush_module
from gateway.store.flush import FlushService
from gateway.store.mapped_file import FlushPlan

from .conftest import make_msg


class FakeReactor(Clock):
    """A Clock that deferToThreadPool can report back to."""

    def callFromThread(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        f(*args, **kwargs)


class ManualPool:
    """Thread-pool stand-in driven by the test: ``run`` does the queued work (a worker picks it up),
    ``release`` also delivers the results to the reactor."""

    def __init__(self) -> None:
        self.queued: list[tuple[Callable[[bool, Any], None], Callable[..., Any], tuple[Any, ...]]] = []
        self.done: list[tuple[Callable[[bool, Any], None], bool, Any]] = []

    def callInThreadWithCallback(self, on_result: Callable[[bool, Any], None], f: Callable[..., Any], *a: Any) -> None:
        self.queued.append((on_result, f, a))

    def run(self) -> None:
        queued, self.queued = self.queued, []
        for on_result, f, a in queued:
            try:
                self.done.append((on_result, True, f(*a)))
            except Exception:
                self.done.append((on_result, False, Failure()))

    def release(self) -> None:
        self.run()
        done, self.done = self.done, []
        for on_result, ok, result in done:
            on_result(ok, result)


def put(store: DefaultMessageStore, size: int = 100) -> int:
    r = store.put_message(make_msg(body=b"x" * size))
    assert r.append is not None
    return r.append.wrote_offset + r.append.wrote_bytes


def results(*ds: defer.Deferred[bool]) -> list[Any]:
    out: list[Any] = []
    for d in ds:
        d.addBoth(out.append)
    return out


@pytest.fixture
def counted(store: DefaultMessageStore) -> list[int]:
    """Counts fsyncs of the commitlog by wrapping ``store.flush``."""
    calls: list[int] = []
    real = store.flush

    def flush() -> int:
        calls.append(store.max_phy_offset)
        return real()

    store.flush = flush  # type: ignore[method-assign]
    return calls


@pytest.fixture
def clock() -> FakeReactor:
    return FakeReactor()


@pytest.fixture
def pool() -> ManualPool:
    return ManualPool()


@pytest.fixture
def svc(store: DefaultMessageStore, clock: FakeReactor, pool: ManualPool) -> FlushService:
    service = FlushService(store, reactor=clock, threadpool=pool)  # type: ignore[arg-type]
    service.start()
    return service


def test_flush_returns_the_durable_offset(store: DefaultMessageStore) -> None:
    end = put(store)
    assert store.flushed_where == 0
    assert store.flush() == end == store.flushed_where
    assert store.checkpoint is not None
    assert store.checkpoint.physic_msg_timestamp == store.get_message_store_timestamp("TopicTest", 0, 0)


def test_flush_from_a_worker_thread_while_appending(store: DefaultMessageStore) -> None:
    done = threading.Event()
    errors: list[BaseException] = []

    def flusher() -> None:
        try:
            while not done.is_set():
                store.flush()
                store.flush_consume_queues(0)
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=flusher)
    t.start()
    try:
        for _ in range(3000):
            put(store, 200)
    finally:
        done.set()
        t.join()
    assert not errors
    assert store.flush() == store.max_phy_offset


def test_async_flush_waits_for_enough_dirty_pages(
    store: DefaultMessageStore, svc: FlushService, clock: FakeReactor, pool: ManualPool, counted: list[int]
) -> None:
    put(store)
    clock.advance(0.5)
    assert counted == []  # under flushCommitLogLeastPages (4 pages)
    for _ in range(20):
        put(store, 1000)
    clock.advance(0.5)
    pool.release()
    assert counted == [store.max_phy_offset] and store.flushed_where == store.max_phy_offset
    put(store)
    clock.advance(0.5)
    assert len(counted) == 1
    clock.advance(10)  # flushCommitLogThoroughInterval: flush whatever is dirty
    pool.release()
    assert len(counted) == 2 and store.flushed_where == store.max_phy_offset


def test_waiters_share_one_fsync(
    store: DefaultMessageStore, svc: FlushService, clock: FakeReactor, pool: ManualPool, counted: list[int]
) -> None:
    ends = [put(store) for _ in range(5)]
    out = results(*[svc.wait_for_flush(e) for e in ends])
    assert pool.queued == []  # the round starts at the end of the reactor turn ...
    clock.advance(0)
    assert len(pool.queued) == 1 and out == []  # ... once for all of the turn's sends
    pool.release()
    assert out == [True] * 5 and len(counted) == 1


def test_group_commit_starts_the_next_fsync_at_once(
    store: DefaultMessageStore, svc: FlushService, clock: FakeReactor, pool: ManualPool, counted: list[int]
) -> None:
    first = results(svc.wait_for_flush(put(store)))
    clock.advance(0)
    pool.run()  # this fsync is now in flight
    later = results(*[svc.wait_for_flush(put(store)) for _ in range(3)])  # arrive during it
    clock.advance(0)
    assert len(counted) == 1 and pool.queued == []
    pool.release()
    assert first == [True] and later == []
    assert len(pool.queued) == 1  # the next round started as soon as the first finished
    pool.release()
    assert len(counted) == 2
    assert later == [True] * 3
    assert svc.wait_for_flush(store.max_phy_offset).result is True  # already durable


def test_wait_times_out(store: DefaultMessageStore, svc: FlushService, clock: FakeReactor, pool: ManualPool) -> None:
    store.config.syncFlushTimeout = 2000
    a = results(svc.wait_for_flush(put(store)))
    clock.advance(0)
    clock.advance(1)
    b = results(svc.wait_for_flush(put(store)))
    clock.advance(1)
    assert a == [False] and b == []  # the fsync hangs
    clock.advance(1)
    assert b == [False]
    pool.release()  # it finally completes: nobody is left to answer twice
    assert not svc._waiters


def test_failed_fsync_is_retried_by_the_next_tick(
    store: DefaultMessageStore, svc: FlushService, clock: FakeReactor, pool: ManualPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.config.flushCommitLogThoroughInterval = 1000
    real = store.flush
    monkeypatch.setattr(store, "flush", lambda: (_ for _ in ()).throw(OSError(5, "EIO")))
    out = results(svc.wait_for_flush(put(store)))
    clock.advance(0)
    pool.release()
    assert out == []
    monkeypatch.setattr(store, "flush", real)
    clock.advance(1)  # a thorough tick
    pool.release()
    assert out == [True]


def test_consume_queue_flush_and_checkpoint(
    store: DefaultMessageStore, svc: FlushService, clock: FakeReactor, pool: ManualPool
) -> None:
    put(store)
    cq = store.consume_queue_table[("TopicTest", 0)]
    clock.advance(1)
    pool.release()
    assert cq.queue.flushed_where == 0  # one unit is less than flushConsumeQueueLeastPages
    assert store.checkpoint is not None and store.checkpoint.logics_msg_timestamp == 0
    clock.advance(60)
    pool.release()
    assert cq.queue.flushed_where == 20
    assert store.checkpoint.logics_msg_timestamp == store.get_message_store_timestamp("TopicTest", 0, 0)


def test_stop_lets_the_running_fsync_finish_and_answers_everyone(
    store: DefaultMessageStore, svc: FlushService, clock: FakeReactor, pool: ManualPool
) -> None:
    first = results(svc.wait_for_flush(put(store)))
    clock.advance(0)
    pool.run()  # in flight, covering only the first message
    second = results(svc.wait_for_flush(put(store)))
    stopped = results(svc.stop(), svc.stop())
    assert stopped == []
    pool.release()  # the in-flight fsync completes ...
    assert first == [True] and second == [] and stopped == []
    pool.release()  # ... then stop runs a last one for the remaining waiter
    assert second == [True] and stopped == [None, None]
    assert results(svc.stop()) == [None]
    assert svc.wait_for_flush(store.max_phy_offset + 1).result is False  # stopped: nothing more will flush


@pytest.fixture(params=["fsync thread", "thread pool"])
def commit_log_sync(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways the commitlog is synced under a real reactor: the C store's fsync thread and the thread pool
    (what runs where the C store is not built)."""
    if request.param == "fsync thread" and flush_module.c_store is None:
        pytest.skip("the C store was not built")
    if request.param == "thread pool":
        monkeypatch.setattr(flush_module, "c_store", None)
    return str(request.param)


@pytest_twisted.ensureDeferred
async def test_group_commit_with_a_real_reactor(store: DefaultMessageStore, commit_log_sync: str) -> None:
    from twisted.internet import reactor

    store.config.flushDiskType = "SYNC_FLUSH"
    svc = FlushService(store, store.config, reactor)
    svc.start()
    try:
        assert (svc._fsync_thread is not None) == (commit_log_sync == "fsync thread")
        ends = [put(store) for _ in range(50)]  # over several segments: each is synced
        oks = await defer.gatherResults([svc.wait_for_flush(e) for e in ends])
        assert oks == [True] * 50
        assert store.flushed_where >= ends[-1]
        assert store.checkpoint is not None and store.checkpoint.physic_msg_timestamp == store.commit_log.tail[1]
    finally:
        await svc.stop()
    assert svc._fsync_thread is None


@pytest_twisted.ensureDeferred
async def test_the_reactor_shutdown_stops_the_service_unless_its_owner_does(store: DefaultMessageStore) -> None:
    from twisted.internet import reactor

    safety_net = FlushService(store, reactor=reactor)
    owned = FlushService(store, reactor=reactor, stop_with_reactor=False)
    safety_net.start()
    owned.start()
    try:
        assert safety_net._shutdown_trigger is not None and owned._shutdown_trigger is None
    finally:
        await safety_net.stop()
        await owned.stop()
    assert safety_net._shutdown_trigger is None  # removed again by stop


@pytest_twisted.ensureDeferred
async def test_one_fsync_covers_every_send_of_a_reactor_turn(store: DefaultMessageStore, commit_log_sync: str) -> None:
    from twisted.internet import reactor

    svc = FlushService(store, store.config, reactor)
    rounds: list[int] = []
    for name in ("plan_flush", "flush"):  # the fsync thread plans each round; a pool worker calls flush
        real = getattr(store, name)
        setattr(store, name, lambda real=real: (rounds.append(store.max_phy_offset), real())[1])
    svc.start()
    try:
        waiting = [svc.wait_for_flush(put(store)) for _ in range(5)]  # as a read's sends: put, wait, put...
        assert await defer.gatherResults(waiting) == [True] * 5
        assert rounds == [store.max_phy_offset]
    finally:
        await svc.stop()


@pytest_twisted.ensureDeferred
async def test_a_failed_fsync_keeps_its_waiters_until_a_tick_succeeds(
    store: DefaultMessageStore, commit_log_sync: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from twisted.internet import reactor

    store.config.flushCommitLogThoroughInterval = 0  # every tick syncs whatever is dirty
    store.config.flushIntervalCommitLog = 50
    svc = FlushService(store, store.config, reactor)
    real_plan = store.plan_flush
    real_flush = store.flush
    gone = str(tmp_path / "gone")

    def failing_plan() -> tuple[FlushPlan | None, int]:
        plan, ts = real_plan()
        assert plan is not None
        return dataclasses.replace(plan, paths=(*plan.paths, gone)), ts

    def failing_flush() -> int:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", gone)

    store.plan_flush = failing_plan  # type: ignore[method-assign]
    store.flush = failing_flush  # type: ignore[method-assign]
    svc.start()
    try:
        end = put(store)
        d = svc.wait_for_flush(end)
        await deferLater(reactor, 0.03, lambda: None)
        assert not d.called and store.flushed_where < end
        assert gone in caplog.text  # the failure names the file
        del store.plan_flush, store.flush
        assert await d.addTimeout(5, reactor) is True
        assert store.flushed_where >= end
    finally:
        store.plan_flush, store.flush = real_plan, real_flush  # type: ignore[method-assign]
        await svc.stop()


def test_a_flush_planned_before_a_truncation_is_not_recorded(store: DefaultMessageStore) -> None:
    queue = store.commit_log.queue
    put(store)
    cut_at = store.max_phy_offset
    put(store)
    plan, ts = store.plan_flush()
    assert plan is not None and plan.end == store.max_phy_offset
    queue.truncate_dirty_files(cut_at)
    store.commit_log.tail = (cut_at, ts)
    plan.sync()
    assert store.flushed(plan, ts) == 0  # what it synced was cut: nothing is known durable
    assert store.flush() == cut_at


def test_a_failed_flush_syncs_the_new_file_names_next_time(store: DefaultMessageStore) -> None:
    put(store)
    plan, _ = store.plan_flush()
    assert plan is not None and plan.sync_dir  # a segment was created
    again, _ = store.plan_flush()
    assert again is not None and not again.sync_dir
    store.flush_failed(plan)
    retry, _ = store.plan_flush()
    assert retry is not None and retry.sync_dir
