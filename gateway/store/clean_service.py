"""Retention and the disk guard (CleanCommitLogService, CleanConsumeQueueService), run periodically on Twisted.

Each round, on the reactor: probe the disk, mark the store full or not (a full store refuses writes with
SERVICE_NOT_AVAILABLE), pick the commitlog segments to delete (older than ``fileReservedTime`` hours, at
``deleteWhen`` or when the disk is above ``diskMaxUsedSpaceRatio``; any age above
``diskSpaceCleanForciblyRatio``), then the consume-queue and index files that only reach below the
commitlog's new start.  Picked files leave the store's tables at once; unmapping and unlinking them (slow
for big files, and it waits for a flush still syncing them) runs in a thread pool.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any

from twisted.internet import defer
from twisted.internet.task import LoopingCall
from twisted.internet.threads import deferToThreadPool
from twisted.python.threadpool import ThreadPool

from .index_file import IndexFile
from .mapped_file import MappedFile
from .message_store import DefaultMessageStore

log = logging.getLogger(__name__)

_HOUR_MS = 3_600_000
_DELETE_FILES_BATCH_MAX = 10


@dataclass
class Deletion:
    """Files already detached from the store, and their owner's blocking ``destroy_files``."""

    files: Sequence[MappedFile | IndexFile]
    destroy: Callable[[Any], None]

    @property
    def paths(self) -> list[str]:
        """The files' paths (for logs and tests)."""
        return [f.path for f in self.files]


def disk_partition_used_ratio(path: str) -> float:
    """``UtilAll.getDiskPartitionSpaceUsedPercent`` as a ratio (0.0-1.0); -1 if the path cannot be probed."""
    try:
        os.makedirs(path, exist_ok=True)
        usage = shutil.disk_usage(path)
    except OSError as e:
        log.error("cannot probe disk usage of %s: %s", path, e)
        return -1.0
    return usage.used / usage.total if usage.total else -1.0  # Java: (total - File.getFreeSpace()) / total


def is_it_time_to_do(when: str, hour: int) -> bool:
    """``UtilAll.isItTimeToDo``: whether ``hour`` is one of the ``;``-separated hours in ``when``."""
    for item in when.split(";"):
        try:
            if int(item) == hour:
                return True
        except ValueError:
            log.warning("deleteWhen: %r is not an hour", item)
    return False


# Java's MAX_MANUAL_DELETE_FILE_TIMES.
_MANUAL_DELETE_ROUNDS = 20


class CleanCommitLogService:
    """Decides which commitlog segments go, and whether the store may still write.

    ``disk_used_ratio(path)`` probes a partition (injectable: tests simulate a full disk); ``clock`` gives
    seconds since the epoch.
    """

    def __init__(
        self,
        store: DefaultMessageStore,
        disk_used_ratio: Callable[[str], float] = disk_partition_used_ratio,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.disk_used_ratio = disk_used_ratio
        self.clock = clock
        self.clean_immediately = False
        # Rounds left that delete expired files whatever the hour (executeDeleteFilesManually).
        self.manual_delete_rounds = 0

    def is_space_to_delete(self) -> bool:
        """Probe the commitlog's and the consume queues' partitions; update the store's disk-full flag and
        ``clean_immediately``; True if either partition is above ``diskMaxUsedSpaceRatio``."""
        config = self.store.config
        ratio = max(self.disk_used_ratio(config.commit_log_path), self.disk_used_ratio(config.consume_queue_root))
        full = ratio > config.diskSpaceWarningLevelRatio
        if full != self.store.disk_full:
            if full:
                log.error("disk maybe full soon (%.2f used): the store refuses writes", ratio)
            else:
                log.info("disk space OK again (%.2f used): the store accepts writes", ratio)
            self.store.disk_full = full
        self.clean_immediately = ratio > config.diskSpaceCleanForciblyRatio
        return ratio < 0 or ratio > config.diskMaxUsedSpaceRatio / 100

    def is_time_to_delete(self) -> bool:
        """Whether the local hour is one of ``deleteWhen``."""
        return is_it_time_to_do(self.store.config.deleteWhen, time.localtime(self.clock()).tm_hour)

    def delete_expired_files(self) -> list[Deletion]:
        """Detach the segments this round deletes (``deleteExpiredFiles``)."""
        config = self.store.config
        space_full = self.is_space_to_delete()
        manual = self.manual_delete_rounds > 0
        if not (self.is_time_to_delete() or space_full or manual):
            return []
        if manual:
            self.manual_delete_rounds -= 1
        clean_at_once = config.cleanFileForciblyEnable and self.clean_immediately
        files, destroy = self.store.commit_log.delete_expired_files(
            config.fileReservedTime * _HOUR_MS, int(self.clock() * 1000), clean_at_once, _DELETE_FILES_BATCH_MAX
        )
        if files:
            log.info("deleting %d commitlog file(s) up to %s", len(files), files[-1].path)
            return [Deletion(files, destroy)]
        if space_full:
            log.warning("disk space will be full soon, but no commitlog file could be deleted")
        return []


class CleanConsumeQueueService:
    """Drops consume-queue and index files that only reach below the commitlog's start."""

    def __init__(self, store: DefaultMessageStore) -> None:
        self.store = store
        self.last_physical_min_offset = 0

    def delete_expired_files(self) -> list[Deletion]:
        """Detach what the commitlog's new min offset made useless; nothing if it has not moved."""
        store = self.store
        min_offset = store.get_min_phy_offset()
        if min_offset <= self.last_physical_min_offset:
            return []
        self.last_physical_min_offset = min_offset
        deletions = []
        for cq in list(store.consume_queue_table.values()):
            files = cq.delete_expired_file(min_offset)
            if files:
                deletions.append(Deletion(files, cq.queue.destroy_files))
        index = store.index_service
        files = index.delete_expired_files(min_offset)
        if files:
            deletions.append(Deletion(files, index.destroy_files))
        return deletions


def destroy_files(deletions: Sequence[Deletion]) -> None:
    """Blocking: unmap and delete detached files."""
    for deletion in deletions:
        try:
            deletion.destroy(deletion.files)
        except OSError as e:
            log.error("cannot delete %s: %s", deletion.paths, e)


class CleanService:
    """Runs both cleaners every ``cleanResourceInterval`` ms; deletions happen in ``threadpool``.

    ``threadpool`` defaults to a private one-thread pool started and stopped with the service.
    """

    def __init__(
        self,
        store: DefaultMessageStore,
        reactor: Any = None,
        threadpool: ThreadPool | None = None,
        disk_used_ratio: Callable[[str], float] = disk_partition_used_ratio,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if reactor is None:
            from twisted.internet import reactor as global_reactor

            reactor = global_reactor
        self.store = store
        self.reactor = reactor
        self.commit_log = CleanCommitLogService(store, disk_used_ratio, clock)
        self.consume_queue = CleanConsumeQueueService(store)
        self._own_pool = threadpool is None
        self.pool = threadpool or ThreadPool(minthreads=0, maxthreads=1, name="store-clean")
        self._loop = LoopingCall(self.run)
        self._loop.clock = reactor
        self._round: defer.Deferred[None] | None = None

    def start(self) -> None:
        """Start the periodic rounds (the first one after one interval)."""
        if self._own_pool:
            self.pool.start()
        self._loop.start(self.store.config.cleanResourceInterval / 1000, now=False)

    @defer.inlineCallbacks
    def stop(self) -> Generator[defer.Deferred[Any], Any, None]:
        """Stop the rounds and wait for a running one to finish."""
        if self._loop.running:
            self._loop.stop()
        if self._round is not None:
            yield self._round
        if self._own_pool:
            self.pool.stop()

    def execute_delete_files_manually(self) -> defer.Deferred[None]:
        """Make the next rounds delete expired commitlog files at any hour (mqadmin deleteExpiredCommitLog);
        one round starts now."""
        self.commit_log.manual_delete_rounds = _MANUAL_DELETE_ROUNDS
        return self.run()

    def run(self) -> defer.Deferred[None]:
        """One round; fires when its files are deleted.  A round still deleting makes this one a no-op."""
        if self._round is not None:
            return defer.succeed(None)
        if not self.store.running:
            return defer.succeed(None)
        deletions = self.commit_log.delete_expired_files()
        deletions += self.consume_queue.delete_expired_files()
        if not deletions:
            return defer.succeed(None)
        d = deferToThreadPool(self.reactor, self.pool, destroy_files, deletions)
        self._round = d

        def done(result: Any) -> Any:
            self._round = None
            return result

        d.addBoth(done)
        d.addErrback(lambda f: log.error("cleaning failed: %s", f.getTraceback()))
        return d
