"""Disk flushing off the reactor thread (FlushRealTimeService, GroupCommitService, FlushConsumeQueueService).

Every fsync runs off the reactor, which only decides when: the commitlog's on the C store's fsync thread when
it is built (``CommitLogFsyncThread``), everything else in a small dedicated thread pool.  ``wait_for_flush``
is SYNC_FLUSH's group commit: all waiters share the next fsync, which starts at the end of the reactor turn
that asked for it (so it covers every send of that turn) or as soon as the previous one finishes while anyone
waits; a waiter not covered within ``syncFlushTimeout`` gets False.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Generator
from typing import Any

from twisted.internet import defer
from twisted.internet.interfaces import IReactorCore, IReactorFDSet
from twisted.internet.task import LoopingCall
from twisted.internet.threads import deferToThreadPool
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool

from gateway.native import ThreadPipe

from .config import StoreConfig
from .mapped_file import OS_PAGE_SIZE, FlushPlan
from .message_store import DefaultMessageStore
from .native import c_store
from .waiters import OffsetWaiters

log = logging.getLogger(__name__)


class CommitLogFsyncThread(ThreadPipe):
    """The commitlog's fsyncs on the C store's ``FsyncThread``, which never takes the GIL and reports each on a
    pipe the reactor watches.  A thread-pool worker takes the GIL back after every system call of a flush (open,
    fdatasync, close) and runs Python around them; with the reactor busy each hand-over costs two context
    switches, and SYNC_FLUSH's sends wait on them."""

    def __init__(self, reactor: Any, store: DefaultMessageStore) -> None:
        assert c_store is not None
        super().__init__(reactor, "commitlog-fsync")
        self._store = store
        self._thread = c_store.FsyncThread(self._write_fd)
        self._running: tuple[FlushPlan, int, defer.Deferred[int]] | None = None

    def flush(self) -> defer.Deferred[int]:
        """Sync what the commitlog has appended now; fires with the flushed offset, as ``store.flush`` returns."""
        plan, store_timestamp = self._store.plan_flush()
        if plan is None:
            return defer.succeed(self._store.flushed(None, store_timestamp))
        self._thread.request(tuple(map(os.fsencode, plan.targets)), plan.sync_dir)
        d: defer.Deferred[int] = defer.Deferred()
        self._running = (plan, store_timestamp, d)
        return d

    def on_news(self) -> None:
        outcome = self._thread.take()
        if outcome is None or self._running is None:
            return
        (plan, store_timestamp, d), self._running = self._running, None
        err, failed = outcome
        if err:
            self._store.flush_failed(plan)
            d.errback(OSError(err, os.strerror(err), plan.targets[failed]))
        else:
            d.callback(self._store.flushed(plan, store_timestamp))

    def close(self) -> None:
        """End the thread, after the fsync it is running if any, and stop watching its pipe."""
        self._thread.stop()
        self.close_pipe()


class FlushService:
    """Periodic commitlog and consume-queue flushes plus SYNC_FLUSH group commit for one store.

    ``config`` defaults to the store's; ``reactor`` to the global one; ``threadpool`` to a private
    two-thread pool (one commitlog and one consume-queue flush may run at once) started and stopped
    with the service.  With the private pool, a reactor that watches descriptors and the C store built, the
    commitlog's fsyncs run on its fsync thread instead.  ``stop_with_reactor`` stops the service when the reactor
    shuts down, a safety net for an owner that does not; an owner that stops it in its own shutdown (the broker,
    after closing its connections) says False, so the sends it still serves meanwhile keep their group commit.
    """

    def __init__(
        self,
        store: DefaultMessageStore,
        config: StoreConfig | None = None,
        reactor: Any = None,
        threadpool: ThreadPool | None = None,
        stop_with_reactor: bool = True,
    ) -> None:
        if reactor is None:
            from twisted.internet import reactor as global_reactor

            reactor = global_reactor
        self.store = store
        self.config = config or store.config
        self.reactor = reactor
        self._own_pool = threadpool is None
        self._stop_with_reactor = stop_with_reactor
        self.pool = threadpool or ThreadPool(minthreads=0, maxthreads=2, name="store-flush")
        self.running = False
        self._commit_loop = LoopingCall(self._flush_commit_log_tick)
        self._commit_loop.clock = reactor
        self._cq_loop = LoopingCall(self._flush_consume_queue_tick)
        self._cq_loop.clock = reactor
        self._commit_d: defer.Deferred[None] | None = None
        self._cq_d: defer.Deferred[None] | None = None
        self._last_commit_thorough = 0.0
        self._last_cq_thorough = 0.0
        self._waiters = OffsetWaiters(reactor)
        self._native = c_store is not None and self._own_pool and IReactorFDSet.providedBy(reactor)
        self._fsync_thread: CommitLogFsyncThread | None = None
        self._next_round: Any = None  # the DelayedCall of a group-commit round due at the end of this turn
        self._shutdown_trigger: Any = None
        self._stopping: defer.Deferred[None] | None = None

    def start(self) -> None:
        """Start the periodic flushes."""
        if self.running:
            return
        self.running = True
        self._stopping = None
        if self._own_pool:
            self.pool.start()
        if self._native:
            self._fsync_thread = CommitLogFsyncThread(self.reactor, self.store)
        now = self.reactor.seconds()
        self._last_commit_thorough = self._last_cq_thorough = now
        self._commit_loop.start(self.config.flushIntervalCommitLog / 1000, now=False)
        self._cq_loop.start(self.config.flushIntervalConsumeQueue / 1000, now=False)
        if self._stop_with_reactor and IReactorCore.providedBy(self.reactor):
            self._shutdown_trigger = self.reactor.addSystemEventTrigger("before", "shutdown", self._reactor_shutdown)

    def _reactor_shutdown(self) -> defer.Deferred[None]:
        self._shutdown_trigger = None  # firing now: removing it would warn
        return self.stop()

    def stop(self) -> defer.Deferred[None]:
        """Stop the timers, let running flushes finish, answer every waiter.

        The Deferred fires when all that is done; calling again while it runs waits for the same work.
        """
        if self._stopping is None:
            self._stopping = self._stop()
        done: defer.Deferred[None] = defer.Deferred()

        def relay(result: Any) -> Any:
            done.callback(None)
            return result

        self._stopping.addBoth(relay)
        return done

    @defer.inlineCallbacks
    def _stop(self) -> Generator[defer.Deferred[Any], Any, None]:
        if not self.running:
            return
        self.running = False
        for loop in (self._commit_loop, self._cq_loop):
            if loop.running:
                loop.stop()
        if self._next_round is not None:
            self._next_round.cancel()  # the last flush below answers its waiters
            self._next_round = None
        if self._shutdown_trigger is not None:
            self.reactor.removeSystemEventTrigger(self._shutdown_trigger)
            self._shutdown_trigger = None
        pending = [d for d in (self._commit_d, self._cq_d) if d is not None]
        if pending:
            yield defer.DeferredList(pending)
        if self._waiters:
            try:
                flushed = yield deferToThreadPool(self.reactor, self.pool, self.store.flush)
                self._waiters.release(flushed)
            except Exception:
                log.exception("final commitlog flush failed")
        self._waiters.expire(everything=True)
        if self._fsync_thread is not None:
            self._fsync_thread.close()
            self._fsync_thread = None
        if self._own_pool:
            self.pool.stop()

    # -- commitlog -----------------------------------------------------------------------------------------

    def _flush_commit_log_tick(self) -> None:
        store = self.store
        flushed = store.flushed_where
        wrote = store.max_phy_offset
        if wrote <= flushed or self._commit_d is not None:
            return
        now = self.reactor.seconds()
        if now - self._last_commit_thorough >= self.config.flushCommitLogThoroughInterval / 1000:
            self._last_commit_thorough = now  # every so often flush whatever is dirty
        elif wrote // OS_PAGE_SIZE - flushed // OS_PAGE_SIZE < self.config.flushCommitLogLeastPages:
            return
        self._flush_commit_log()

    def _flush_commit_log(self) -> None:
        if self._commit_d is not None:
            return  # the running flush will start the next round if anyone still waits
        if self._fsync_thread is not None:
            d = self._fsync_thread.flush()
        else:
            d = deferToThreadPool(self.reactor, self.pool, self.store.flush)
        self._commit_d = d
        d.addCallbacks(self._commit_log_flushed, self._commit_log_flush_failed)

    def _commit_log_flushed(self, flushed: int) -> None:
        self._commit_d = None
        self._waiters.release(flushed)
        # A waiter beyond what is written (the commitlog was cut) waits for the next put, not in a loop.
        if self._waiters and self.running and flushed < self.store.max_phy_offset:
            self._flush_commit_log()

    def _commit_log_flush_failed(self, failure: Failure) -> None:
        # Waiters stay until their timeout (FLUSH_DISK_TIMEOUT); the next tick retries.
        self._commit_d = None
        log.error("commitlog flush failed: %s", failure.getTraceback())

    def wait_for_flush(self, offset: int) -> defer.Deferred[bool]:
        """Fires True once commitlog data up to ``offset`` is durable, False after ``syncFlushTimeout``."""
        d: defer.Deferred[bool] = defer.Deferred()
        now = self.notify_flush(offset, d.callback, True, False)
        if now is not None:
            d.callback(now)
        return d

    def notify_flush(self, offset: int, callback: Callable[[Any], object], flushed: Any, timed_out: Any) -> Any:
        """``wait_for_flush`` without a Deferred, for a send's group commit: the answer now if there is one
        (``flushed`` or ``timed_out``), else None and ``callback`` gets it later. Neither value may be None."""
        if self.store.flushed_where >= offset:
            return flushed
        if not self.running:
            return timed_out
        self._waiters.add(offset, self.config.syncFlushTimeout / 1000, callback, flushed, timed_out)
        if self._commit_d is None and self._next_round is None:
            # The round starts at the end of this reactor turn: its fsync then covers every send the turn appends.
            self._next_round = self.reactor.callLater(0, self._start_round)
        return None

    def _start_round(self) -> None:
        self._next_round = None
        self._flush_commit_log()

    # -- consume queues ------------------------------------------------------------------------------------

    def _flush_consume_queue_tick(self) -> None:
        if self._cq_d is not None:
            return
        least_pages = self.config.flushConsumeQueueLeastPages
        now = self.reactor.seconds()
        if now - self._last_cq_thorough >= self.config.flushConsumeQueueThoroughInterval / 1000:
            self._last_cq_thorough = now
            least_pages = 0  # a thorough round also lets the checkpoint's consume-queue time advance
        d = deferToThreadPool(self.reactor, self.pool, self.store.flush_consume_queues, least_pages)
        self._cq_d = d
        d.addCallbacks(self._consume_queues_flushed, self._consume_queue_flush_failed)

    def _consume_queues_flushed(self, _: None) -> None:
        self._cq_d = None

    def _consume_queue_flush_failed(self, failure: Failure) -> None:
        self._cq_d = None
        log.error("consume queue flush failed: %s", failure.getTraceback())
