"""The store the broker talks to: commitlog + consume queues + index + checkpoint, with recovery (DefaultMessageStore).

Everything runs on the caller's thread (the reactor) except ``flush`` and ``flush_consume_queues``, which a
worker thread may run while appends continue.  A message is dispatched to its consume queue and the index
before ``put_message`` returns, so it is pullable and can be looked up at once; on a DLedger ledger
(``gateway.dledger.commitlog``) once its entry is committed, by the reput.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import resource
import shutil
import struct
from collections.abc import Callable, Iterable

from twisted.internet import defer

from gateway.remoting.message import (
    NAME_VALUE_SEPARATOR,
    MessageConst,
    property_value,
    tags_code,
)

from .api import (
    ArrivingListener,
    GetMessageResult,
    GetMessageStatus,
    MessageExtBrokerInner,
    MessageFilter,
    PutMessageResult,
    PutMessageStatus,
    QueryMessageResult,
    RecoveryReport,
)
from .checkpoint import StoreCheckpoint
from .commit_log import (
    MIN_RECORD_SIZE,
    CommitLog,
    Dispatcher,
    DispatchRequest,
    is_dispatched,
)
from .config import CQ_STORE_UNIT_SIZE, SLAVE, StoreConfig
from .consume_queue import BLANK_UNIT_SIZE, ConsumeQueue
from .index_service import IndexService
from .mapped_file import FlushPlan, MappedFilePool, StoreLoadError
from .native import c_store
from .paths import StorePathError, store_child

log = logging.getLogger(__name__)

TOTAL_PHYSICAL_MEMORY_SIZE = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
RMQ_SYS_SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
# 5.x timer messages wait here; a unit's tagsCode is its delivery time (TIMER_OUT_MS), as the broker puts it.
TIMER_TOPIC = "rmq_sys_wheel_timer"
_TAGS_SEP = MessageConst.TAGS + NAME_VALUE_SEPARATOR
_DELAY_SEP = MessageConst.DELAY_TIME_LEVEL + NAME_VALUE_SEPARATOR
_TIMER_OUT_SEP = MessageConst.TIMER_OUT_MS + NAME_VALUE_SEPARATOR

_UNIT = struct.Struct(">qiq")
# Descriptors wanted beside the mapped files (connections, config files).
_SPARE_DESCRIPTORS = 256


class DefaultMessageStore:
    """A RocketMQ-compatible message store on local files.

    ``arriving_listener(topic, queue_id, logic_offset, tags_code)``, if set, is called after each new message
    is indexed, with the message's queue offset (the queue's max offset is one more).
    """

    def __init__(
        self,
        config: StoreConfig,
        commit_log: Callable[[StoreConfig, Dispatcher, MappedFilePool], CommitLog] = CommitLog,
    ) -> None:
        """``commit_log(config, dispatcher, pool)`` makes the commitlog (a ``DLedgerCommitLog`` on a ledger)."""
        self.config = config
        self.arriving_listener: ArrivingListener | None = None
        # Every file's mapping is counted here, so open descriptors stay bounded however many queues exist.
        self.mapped_file_pool = MappedFilePool(config.maxOpenMappedFiles)
        # The C store's dispatcher does what _dispatch does, falling back to it (and the methods it calls) for
        # anything uncommon.
        self._dispatcher: Dispatcher = (
            self._dispatch if c_store is None else c_store.Dispatcher(self, _arriving_listener_failed)
        )
        self.commit_log = commit_log(config, self._dispatcher, self.mapped_file_pool)
        self.consume_queue_table: dict[tuple[str, int], ConsumeQueue] = {}
        self.index_service = IndexService(config, self.mapped_file_pool)
        self.checkpoint: StoreCheckpoint | None = None
        self.running = False
        # RunningFlags' disk-full bit: set by the clean service above diskSpaceWarningLevelRatio, refuses writes.
        self.disk_full = False
        self._lock_fd: int | None = None
        self._refused_topics: set[str] = set()  # logged once each
        self._logics_timestamp = 0  # store time of the last record indexed in a consume queue
        self._reput_from = 0  # slave: commitlog offset up to which replicated records are dispatched

    # -- paths -------------------------------------------------------------------------------------------

    def _path(self, name: str) -> str:
        return os.path.join(self.config.storePathRootDir, name)

    # -- lifecycle ---------------------------------------------------------------------------------------

    def start(self) -> RecoveryReport:
        """Lock the directory, load and recover the files, then mark the store running (``abort`` file)."""
        if self.running:
            raise RuntimeError("store already started")
        root = self.config.storePathRootDir
        try:
            os.makedirs(root, exist_ok=True)
            fd = os.open(self._path("lock"), os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise _access_error(e) from None
        self._fit_open_files_limit()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreLoadError(f"{root} is locked: another store is running on it") from None
        self._lock_fd = fd
        try:
            report = self._load_and_recover(os.path.exists(self._path("abort")))
            abort = os.open(self._path("abort"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(abort, str(os.getpid()).encode())
                os.fsync(abort)
            finally:
                os.close(abort)
            dir_fd = os.open(root, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except BaseException as e:
            self._close_files()
            if isinstance(e, OSError):
                raise _access_error(e) from None
            raise
        # What the consume queues reach counts too: on a ledger whose checkpoint's commit index is behind them.
        reach = max((cq.max_physic_offset for cq in self.consume_queue_table.values()), default=0)
        self._reput_from = max(self.commit_log.max_offset, reach)
        self.running = True
        log.info("store %s started: %s", root, report)
        return report

    def _fit_open_files_limit(self) -> None:
        """Make room for ``maxOpenMappedFiles`` descriptors and spare ones: raise the soft RLIMIT_NOFILE to the hard
        one when short, as the JVM does (MaxFDLimit); if still short, map fewer files."""
        limit = self.config.maxOpenMappedFiles
        wanted = limit + _SPARE_DESCRIPTORS
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if limit <= 0 or soft == resource.RLIM_INFINITY or soft >= wanted:
            return
        target = wanted if hard == resource.RLIM_INFINITY else hard
        if target > soft:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
                log.info("open files limit raised from %d to %d", soft, target)
                soft = target
            except (OSError, ValueError) as e:
                log.warning("cannot raise the open files limit from %d: %s", soft, e)
        if soft < wanted:
            self.mapped_file_pool.limit = max(soft - _SPARE_DESCRIPTORS, soft // 2)
            log.warning(
                "open files limit %d: at most %d files stay mapped (maxOpenMappedFiles=%d); raise ulimit -n",
                soft,
                self.mapped_file_pool.limit,
                limit,
            )

    def _load_and_recover(self, abnormal: bool) -> RecoveryReport:
        report = RecoveryReport(abnormal=abnormal)
        self.consume_queue_table.clear()
        report.files_dropped += self.commit_log.load()
        dropped, rebuilt = self._load_consume_queues()
        report.files_dropped += dropped
        report.queues_rebuilt = [f"{topic}-{queue_id}" for topic, queue_id in sorted(rebuilt)]
        report.files_dropped += self.index_service.load()
        self.checkpoint = StoreCheckpoint(self._path("checkpoint"))
        # Consume queues first: their written end and the commitlog offset they reach.
        for cq in self.consume_queue_table.values():
            _, dropped = cq.recover(abnormal)
            report.files_dropped += dropped
        if self.commit_log.empty:
            for cq in list(self.consume_queue_table.values()):
                if cq.queue.files:
                    log.warning("no commitlog files: dropping consume queue %s-%d", cq.topic, cq.queue_id)
                report.files_dropped += [f.path for f in cq.queue.files]
                cq.destroy()
            self.consume_queue_table.clear()
            report.files_dropped += [f.path for f in self.index_service.files]
            self.index_service.destroy()
            self.recover_topic_queue_table()
            return report

        cl = self.commit_log
        start = cl.abnormal_recover_start(self.checkpoint.min_timestamp) if abnormal else cl.normal_recover_start()
        # As Java: after a clean shutdown only records past the highest offset any consume queue reaches
        # (the reput start; the commitlog's beginning if none reaches anything) are dispatched again, so a
        # deleted topic is not brought back; after a crash every record scanned is (queues skip what they have).
        reach = max((cq.max_physic_offset for cq in self.consume_queue_table.values()), default=-1)
        reput_from = max(reach, cl.min_offset)
        # The index is rebuilt from wherever it stops (the commitlog's start when it has no files at all).
        index = self.index_service
        index_enabled = self.config.messageIndexEnable
        index_from = max(index.last_indexed_offset + 1, cl.min_offset) if index_enabled else reput_from
        # A rebuilt queue takes every record of its own still in the commitlog.
        rebuilt_from = cl.min_offset if rebuilt else reput_from
        start = min(start, cl.segment_start(reput_from), cl.segment_start(index_from), cl.segment_start(rebuilt_from))
        report.scan_from = start
        redispatch_from = start if abnormal else reput_from

        def on_record(req: DispatchRequest) -> None:
            offset = req.commit_log_offset
            if (
                (offset >= redispatch_from or (rebuilt and (req.topic, req.queue_id) in rebuilt))
                and is_dispatched(req.sys_flag)
                and self._redispatch(req)
            ):
                report.records_redispatched += 1
            if (
                index_enabled
                and offset >= index_from
                and index.build_index(req.topic, offset, req.store_timestamp, req.sys_flag, req.properties)
            ):
                report.index_records_rebuilt += 1

        report.records_kept, report.bytes_truncated, dropped, report.skipped = cl.recover(start, on_record, abnormal)
        report.files_dropped += dropped
        report.max_phy_offset = end = cl.max_wrote_offset
        if report.skipped:
            for cq in self.consume_queue_table.values():
                report.cq_units_blanked += cq.blank_units_in(report.skipped)
        for cq in self.consume_queue_table.values():
            if cq.max_physic_offset > end:
                units, dropped = cq.truncate_dirty_logic_files(end)
                report.cq_units_truncated += units
                report.files_dropped += dropped
        report.index_entries_truncated, dropped = index.truncate(end)
        report.files_dropped += dropped
        if abnormal:
            # What was scanned may not have reached the disk before the crash: sync it on the first flush.
            cl.queue.flushed_where = min(cl.queue.flushed_where, start)
        self.recover_topic_queue_table()
        return report

    def _load_consume_queues(self) -> tuple[list[str], set[tuple[str, int]]]:
        """Open the consume queues on disk; returns (files removed, queues emptied to be rebuilt as damaged)."""
        dropped: list[str] = []
        rebuilt: set[tuple[str, int]] = set()
        damaged: dict[tuple[str, int], tuple[ConsumeQueue, StoreLoadError]] = {}
        root = self.config.consume_queue_root
        try:
            topics = sorted(os.listdir(root))
        except FileNotFoundError:
            return dropped, rebuilt
        for topic in topics:
            try:
                topic_dir = store_child(root, topic)
            except StorePathError as e:
                log.warning("consume queues of %r not loaded: %s", topic, e)
                continue
            if not os.path.isdir(topic_dir):
                continue
            for name in sorted(os.listdir(topic_dir)):
                try:
                    queue_id = int(name)
                except ValueError:
                    continue
                cq = ConsumeQueue(topic, queue_id, root, self.config.consume_queue_file_size, self.mapped_file_pool)
                try:
                    dropped += cq.load()
                except StoreLoadError as e:
                    damaged[(topic, queue_id)] = (cq, e)
                self.consume_queue_table[(topic, queue_id)] = cq
        self._check_consume_queue_file_size(damaged)
        for (topic, queue_id), (cq, e) in damaged.items():
            # Derived from the commitlog: rebuilt from it by recovery rather than refusing to start.
            log.warning("consume queue %s-%d is damaged (%s): rebuilding it from the commitlog", topic, queue_id, e)
            dropped += cq.queue.remove_files()
            rebuilt.add((topic, queue_id))
        return dropped, rebuilt

    def _check_consume_queue_file_size(
        self, damaged: dict[tuple[str, int], tuple[ConsumeQueue, StoreLoadError]]
    ) -> None:
        """StoreLoadError naming ``mappedFileSizeConsumeQueue`` when every consume-queue file on disk, two or more,
        has the same other length: the setting changed (Java refuses then too); damage is rebuilt, a setting is not.
        """
        if len(damaged) != len(self.consume_queue_table):
            return
        sizes = [os.path.getsize(f) for cq, _ in damaged.values() for f in cq.queue.segment_paths()]
        if len(sizes) >= 2 and len(set(sizes)) == 1:
            raise StoreLoadError(
                f"{self.config.consume_queue_root}: every consume-queue file is {sizes[0]} bytes long, but "
                f"mappedFileSizeConsumeQueue makes them {self.config.consume_queue_file_size}: set it as the store "
                "was written"
            )

    def recover_topic_queue_table(self) -> None:
        """Take each queue's next offset from its consume queue (``recoverTopicQueueTable``): after recovery, and
        on a DLedger follower that becomes the leader once it has dispatched everything committed."""
        min_phy = self.commit_log.min_offset
        table = {}
        for key, cq in self.consume_queue_table.items():
            table[key] = cq.max_offset_in_queue
            cq.correct_min_offset(min_phy)
        self.commit_log.topic_queue_table = table

    def shutdown(self) -> None:
        """Flush everything, write a clean checkpoint, close the files and remove ``abort``.

        The caller must have stopped any flush service first.
        """
        if not self.running:
            return
        self.running = False
        self.flush()
        self.flush_consume_queues(0)
        self._close_files()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path("abort"))

    def _close_files(self) -> None:
        """Release everything without cleaning up; after a crash the files look exactly like this."""
        self.commit_log.close()
        for cq in self.consume_queue_table.values():
            cq.close()
        self.index_service.close()
        if self.checkpoint is not None:
            self.checkpoint.close()
            self.checkpoint = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # also releases the flock
            self._lock_fd = None

    def destroy(self) -> None:
        """Delete every file of the store (tests); shuts it down first if it is running."""
        self.shutdown()
        self.commit_log.destroy()
        shutil.rmtree(self.config.commit_log_path, ignore_errors=True)
        shutil.rmtree(self.config.consume_queue_root, ignore_errors=True)
        shutil.rmtree(self.index_service.store_path, ignore_errors=True)
        for name in ("checkpoint", "abort", "lock"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path(name))
        self.consume_queue_table.clear()

    # -- write -------------------------------------------------------------------------------------------

    def _writable(self) -> bool:
        return self.running and not self.disk_full and self.config.brokerRole != SLAVE

    def put_message(self, msg: MessageExtBrokerInner) -> PutMessageResult:
        """Store one message; it is in its consume queue (and pullable) when this returns.  On a DLedger ledger
        the commitlog answers with a Deferred instead: use :meth:`async_put_message`."""
        if not self._writable():
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE)
        return self.commit_log.put_message(msg)

    def put_messages(self, msgs: list[MessageExtBrokerInner]) -> PutMessageResult:
        """Store a batch for one topic and queue: contiguous records, consecutive queue offsets."""
        if not self._writable():
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE)
        return self.commit_log.put_messages(msgs)

    def async_put_message(self, msg: MessageExtBrokerInner) -> defer.Deferred[PutMessageResult]:
        """``put_message`` as a Deferred (``asyncPutMessage``): on a DLedger ledger the commitlog answers once a
        majority holds the entry, and ``put_message`` itself returns that Deferred."""
        return _deferred(self.put_message(msg))

    def async_put_messages(self, msgs: list[MessageExtBrokerInner]) -> defer.Deferred[PutMessageResult]:
        """``put_messages`` as a Deferred (``asyncPutMessages``)."""
        return _deferred(self.put_messages(msgs))

    def append_to_commit_log(self, phy_offset: int, data: bytes | memoryview) -> bool:
        """Slave: append bytes replicated from the master at ``phy_offset`` (DefaultMessageStore.appendToCommitLog);
        :meth:`dispatch_appended` then dispatches what they complete.  False if the offset does not continue the
        commitlog."""
        return self.running and self.commit_log.append_data(phy_offset, data)

    def dispatch_appended(self) -> None:
        """Slave: dispatch the whole records appended so far to consume queues and the index (what Apache's
        ReputMessageService does behind the append); on a DLedger ledger, the entries committed so far (run it on
        each commit)."""
        self._reput()

    @property
    def replicated_whole_records_end(self) -> int:
        """Slave: where the last whole record replicated (and dispatched) ends; a partial one may follow."""
        return self._reput_from

    def truncate_files(self, offset: int) -> int:
        """Cut the commitlog at ``offset`` (a record boundary) and whatever was dispatched from beyond it
        (consume queues, index, the topic queue table); replicated bytes are then appended from there.
        Apache 5's truncateFiles, for a broker that follows a new master. Returns the bytes cut."""
        cl = self.commit_log
        offset = max(offset, cl.min_offset)
        cut = 0
        if offset < cl.max_offset:
            cut, _ = cl.queue.truncate_dirty_files(offset, always_zero=True)
            cl.tail = (offset, cl.tail[1])
            for cq in self.consume_queue_table.values():
                if cq.max_physic_offset > offset:
                    cq.truncate_dirty_logic_files(offset)
            self.index_service.truncate(offset)
            self.recover_topic_queue_table()
        self._reput_from = offset
        return cut

    def _reput(self) -> None:
        """Dispatch the whole records between the last dispatched offset and the commitlog's end (its committed
        end on a DLedger ledger)."""
        cl = self.commit_log
        self._reput_from = max(self._reput_from, cl.min_offset)
        dispatch, tags_code_of, queue_table = self._dispatcher, self._tags_code_of, cl.topic_queue_table
        for req, next_offset in cl.read_records(self._reput_from, cl.max_offset):
            self._reput_from = next_offset
            if req is None:
                continue
            dispatch(
                req.topic,
                req.queue_id,
                req.commit_log_offset,
                req.msg_size,
                tags_code_of(req.topic, req.properties, req.store_timestamp),
                req.consume_queue_offset,
                req.store_timestamp,
                req.sys_flag,
                req.properties,
            )
            if is_dispatched(req.sys_flag):
                key = (req.topic, req.queue_id)
                # Never lower: a DLedger leader has given offsets to entries appended after the committed ones.
                if queue_table.get(key, 0) <= req.consume_queue_offset:
                    queue_table[key] = req.consume_queue_offset + 1
            cl.tail = (next_offset, req.store_timestamp)

    def _find_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """The queue, made on first use; None for a topic that cannot name a directory of the store (a record
        written before topics were checked, or a symbolic link planted in the store)."""
        cq = self.consume_queue_table.get((topic, queue_id))
        if cq is None:
            if topic in self._refused_topics:
                return None
            config = self.config
            try:
                cq = ConsumeQueue(
                    topic, queue_id, config.consume_queue_root, config.consume_queue_file_size, self.mapped_file_pool
                )
            except StorePathError as e:
                log.error("messages of this topic stay out of consume queues: %s", e)
                self._refused_topics.add(topic)
                return None
            self.consume_queue_table[(topic, queue_id)] = cq
        return cq

    def _dispatch(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        size: int,
        tags: int,
        cq_offset: int,
        store_timestamp: int,
        sys_flag: int,
        properties: str,
    ) -> None:
        if self.config.messageIndexEnable:
            self.index_service.build_index(topic, offset, store_timestamp, sys_flag, properties)
        if not is_dispatched(sys_flag):
            return
        cq = self.consume_queue_table.get((topic, queue_id)) or self._find_consume_queue(topic, queue_id)
        if cq is None:
            return
        cq.put_message_position_info(offset, size, tags, cq_offset)
        self._logics_timestamp = store_timestamp
        listener = self.arriving_listener
        if listener is not None:
            try:
                listener(topic, queue_id, cq_offset, tags)
            except Exception as e:
                _arriving_listener_failed(e)

    def _redispatch(self, req: DispatchRequest) -> bool:
        cq = self._find_consume_queue(req.topic, req.queue_id)
        if cq is None or req.commit_log_offset + req.msg_size <= cq.max_physic_offset:
            return False  # refused topic, or already indexed: skip parsing its properties
        written = cq.put_message_position_info(
            req.commit_log_offset,
            req.msg_size,
            self._tags_code_of(req.topic, req.properties, req.store_timestamp),
            req.consume_queue_offset,
        )
        if written:
            self._logics_timestamp = req.store_timestamp
        return written

    def _tags_code_of(self, topic: str, properties: str, store_timestamp: int) -> int:
        """A record's tagsCode as Java derives it: the tag hash, or the delivery time of a delay message (and
        of a timer message, so that a slave's or a rebuilt consume queue holds what the master put). Its
        properties are searched as the send path searches them (the first TAGS), not decoded."""
        if topic == TIMER_TOPIC:
            deliver_ms = property_value(properties, _TIMER_OUT_SEP)
            if deliver_ms is not None and deliver_ms.isdigit():
                return int(deliver_ms)
        elif topic == RMQ_SYS_SCHEDULE_TOPIC:
            level_text = property_value(properties, _DELAY_SEP)
            if level_text is not None:
                levels = self.config.delay_level_table()
                level = min(int(level_text), len(levels))
                if level > 0:
                    return store_timestamp + levels[level - 1]
        return tags_code(property_value(properties, _TAGS_SEP))

    # -- read --------------------------------------------------------------------------------------------

    def _next_offset_correction(self, old: int, new: int) -> int:
        # A slave keeps the client's offset unless told to check it.
        if self.config.brokerRole != SLAVE or self.config.offsetCheckInSlave:
            return new
        return old

    def _is_the_batch_full(self, size: int, max_msg_nums: int, total: int, count: int, in_disk: bool) -> bool:
        if total == 0 or count == 0:
            return False
        if count >= max_msg_nums:
            return True
        c = self.config
        if in_disk:
            return total + size > c.maxTransferBytesOnMessageInDisk or count >= c.maxTransferCountOnMessageInDisk
        return total + size > c.maxTransferBytesOnMessageInMemory or count >= c.maxTransferCountOnMessageInMemory

    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int,
        message_filter: MessageFilter | None = None,
    ) -> GetMessageResult | None:
        """Up to ``max_msg_nums`` records from logical ``offset`` (``DefaultMessageStore.getMessage``).

        ``message_filter(tags_code)`` drops units before their record is read; dropped units still advance
        ``next_begin_offset``.  None when the store is not running (Java returns null).
        """
        if not self.running:
            return None
        cq = self.consume_queue_table.get((topic, queue_id))
        if cq is None:  # Java's findConsumeQueue makes an empty one here; we answer as if, creating no file
            return GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, self._next_offset_correction(offset, 0), 0, 0)
        min_offset = cq.min_offset_in_queue
        max_offset = cq.max_offset_in_queue
        if max_offset == 0:
            status, next_offset = GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0
        elif offset < min_offset:
            status, next_offset = GetMessageStatus.OFFSET_TOO_SMALL, min_offset
        elif offset == max_offset:
            status, next_offset = GetMessageStatus.OFFSET_OVERFLOW_ONE, offset
        elif offset > max_offset:
            status, next_offset = GetMessageStatus.OFFSET_OVERFLOW_BADLY, max_offset
        else:
            units = cq.get_index_buffer(offset)
            if units is None:
                status, next_offset = GetMessageStatus.OFFSET_FOUND_NULL, cq.roll_next_file(offset)
            else:
                return self._read_units(units, offset, min_offset, max_offset, max_msg_nums, message_filter)
        return GetMessageResult(status, self._next_offset_correction(offset, next_offset), min_offset, max_offset)

    def _read_units(
        self,
        units: memoryview,
        offset: int,
        min_offset: int,
        max_offset: int,
        max_msg_nums: int,
        message_filter: MessageFilter | None,
    ) -> GetMessageResult:
        if c_store is None:
            return self._read_units_py(units, offset, min_offset, max_offset, max_msg_nums, message_filter)
        cl = self.commit_log
        c = self.config
        max_offset_py = cl.max_offset
        memory = self._memory_budget()
        buffers, total, scanned, max_phy_offset_pulling, removing = c_store.read_units(
            units,
            max_msg_nums,
            max_offset_py,
            memory,
            c.maxTransferBytesOnMessageInMemory,
            c.maxTransferCountOnMessageInMemory,
            c.maxTransferBytesOnMessageInDisk,
            c.maxTransferCountOnMessageInDisk,
            message_filter,
            cl.readable_segment,
            cl.roll_next_file,
        )
        if buffers:
            status = GetMessageStatus.FOUND
        else:
            status = GetMessageStatus.MESSAGE_WAS_REMOVING if removing else GetMessageStatus.NO_MATCHED_MESSAGE
        return GetMessageResult(
            status,
            offset + scanned,
            min_offset,
            max_offset,
            buffers,
            total,
            max_offset_py - max_phy_offset_pulling > memory,
        )

    def _read_units_py(
        self,
        units: memoryview,
        offset: int,
        min_offset: int,
        max_offset: int,
        max_msg_nums: int,
        message_filter: MessageFilter | None,
    ) -> GetMessageResult:
        """The reference for ``_store.read_units`` (and the path without it)."""
        result = GetMessageResult(GetMessageStatus.NO_MATCHED_MESSAGE, offset, min_offset, max_offset)
        buffers = result.buffers
        total = 0
        cl = self.commit_log
        max_offset_py = cl.max_offset
        memory = self._memory_budget()
        next_phy_file_start = -1
        max_phy_offset_pulling = 0
        # Java scans at most max(16000, maxMsgNums * 20) bytes of consume queue.
        limit = min(len(units), max(16000, max_msg_nums * CQ_STORE_UNIT_SIZE))
        scanned = 0
        for offset_py, size_py, tags in _UNIT.iter_unpack(units[:limit]):
            max_phy_offset_pulling = offset_py
            if offset_py < next_phy_file_start or size_py == BLANK_UNIT_SIZE:
                scanned += 1
                continue
            in_disk = max_offset_py - offset_py > memory
            if self._is_the_batch_full(size_py, max_msg_nums, total, len(buffers), in_disk):
                break
            scanned += 1
            if message_filter is not None and not message_filter(tags):
                continue
            record = cl.get_message(offset_py, size_py)
            if record is None:
                if not total:
                    result.status = GetMessageStatus.MESSAGE_WAS_REMOVING
                next_phy_file_start = cl.roll_next_file(offset_py)
                continue
            buffers.append(bytes(record))  # Twisted transports take bytes only; one copy out of the mapping
            total += size_py
            result.status = GetMessageStatus.FOUND
            next_phy_file_start = -1
        result.buffer_total_size = total
        result.next_begin_offset = offset + scanned
        result.suggest_pull_from_slave = max_offset_py - max_phy_offset_pulling > memory
        return result

    def _memory_budget(self) -> int:
        """Bytes behind the commitlog's end still read from memory: accessMessageInMemoryMaxRatio of RAM, read
        at each call as Java does, so an updateBrokerConfig takes effect at the next pull."""
        return int(TOTAL_PHYSICAL_MEMORY_SIZE * self.config.accessMessageInMemoryMaxRatio / 100)

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """Next logical offset of the queue (0 if it does not exist)."""
        cq = self.consume_queue_table.get((topic, queue_id))
        return cq.max_offset_in_queue if cq else 0

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """First readable logical offset (0 if the queue does not exist)."""
        cq = self.consume_queue_table.get((topic, queue_id))
        return cq.min_offset_in_queue if cq else 0

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        """SEARCH_OFFSET_BY_TIMESTAMP: see ConsumeQueue.get_offset_in_queue_by_time (0 if no queue)."""
        cq = self.consume_queue_table.get((topic, queue_id))
        if cq is None:
            return 0
        return cq.get_offset_in_queue_by_time(timestamp, self.commit_log.pickup_store_timestamp)

    def get_message_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        """Store time of the message at logical ``offset``, or -1."""
        cq = self.consume_queue_table.get((topic, queue_id))
        unit = cq.get_unit(offset) if cq else None
        if unit is None or unit[1] == BLANK_UNIT_SIZE:
            return -1
        return self.commit_log.pickup_store_timestamp(unit[0], unit[1])

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        """Store time of the message at the queue's min offset, or -1."""
        return self.get_message_store_timestamp(topic, queue_id, self.get_min_offset_in_queue(topic, queue_id))

    def check_in_disk_by_consume_offset(self, topic: str, queue_id: int, offset: int) -> bool:
        """Whether the message at ``offset`` is further behind the commitlog's end than the in-memory ratio."""
        cq = self.consume_queue_table.get((topic, queue_id))
        unit = cq.get_unit(offset) if cq else None
        if unit is None or unit[1] == BLANK_UNIT_SIZE:
            return False
        return self.commit_log.max_offset - unit[0] > self._memory_budget()

    def look_message_by_offset(self, phy_offset: int) -> bytes | None:
        """The whole record starting at commitlog ``phy_offset`` (a copy), or None if no valid record starts there
        (``CommitLog.get_record``: never a damaged one an index entry still points at)."""
        record = self.commit_log.get_record(phy_offset)
        return None if record is None else bytes(record)

    def query_message(self, topic: str, key: str, max_num: int, begin: int, end: int) -> QueryMessageResult:
        """Records indexed under ``topic#key`` stored within [begin, end] (``queryMessage``), oldest first.

        As Java, when every offset found points at a deleted record the lookup is retried (up to three times)
        with the time range ending at the oldest of them.
        """
        result = QueryMessageResult()
        last_query_time = end
        for _ in range(3):
            found = self.index_service.query_offset(topic, key, max_num, begin, last_query_time)
            if not found.phy_offsets:
                break
            found.phy_offsets.sort()
            result.index_last_update_timestamp = found.index_last_update_timestamp
            result.index_last_update_phyoffset = found.index_last_update_phyoffset
            for i, offset in enumerate(found.phy_offsets):
                if i == 0:
                    last_query_time = self.commit_log.pickup_store_timestamp(offset, MIN_RECORD_SIZE)
                record = self.look_message_by_offset(offset)
                if record is not None:
                    result.buffers.append(record)
            if result.buffers or last_query_time < begin:
                break
        return result

    def select_one_message_by_offset(self, phy_offset: int, size: int) -> memoryview | None:
        """``size`` bytes of commitlog at ``phy_offset`` without copying, or None."""
        return self.commit_log.get_message(phy_offset, size)

    def get_max_phy_offset(self) -> int:
        """Offset just past the last record."""
        return self.commit_log.max_offset

    def get_min_phy_offset(self) -> int:
        """First commitlog offset still on disk."""
        return self.commit_log.min_offset

    @property
    def max_phy_offset(self) -> int:
        """Offset just past the last record."""
        return self.commit_log.max_offset

    @property
    def flushed_where(self) -> int:
        """Commitlog offset up to which data is durable."""
        return self.commit_log.flushed_where

    # -- admin -------------------------------------------------------------------------------------------

    def destroy_consume_queue(self, topic: str) -> int:
        """Delete every consume queue of ``topic`` (files included); returns how many.

        StorePathError, before anything is touched, if ``topic`` is not a plain path component.
        """
        topic_dir = store_child(self.config.consume_queue_root, topic)
        keys = [key for key in self.consume_queue_table if key[0] == topic]
        for key in keys:
            self._drop_consume_queue(key)
        with contextlib.suppress(OSError):  # not empty: something else lives there
            os.rmdir(topic_dir)
        return len(keys)

    def clean_expired_consume_queues(self) -> int:
        """Delete the consume queues whose every unit points below the commitlog's start
        (cleanExpiredConsumerQueue); returns how many went."""
        min_offset = self.get_min_phy_offset()
        expired = [key for key, cq in self.consume_queue_table.items() if 0 <= cq.max_physic_offset < min_offset]
        for key in expired:
            self._drop_consume_queue(key)
        return len(expired)

    def _drop_consume_queue(self, key: tuple[str, int]) -> None:
        """Delete one consume queue (its files too) and forget its next offset."""
        self.consume_queue_table.pop(key).destroy()
        self.commit_log.topic_queue_table.pop(key, None)

    def delete_topics(self, topics: Iterable[str]) -> int:
        """Delete the consume queues of ``topics``; returns how many queues went.  Their records stay in the
        commitlog until it is cleaned.  StorePathError, before anything is deleted, if a topic is not a plain
        path component."""
        topics = list(topics)
        for topic in topics:
            store_child(self.config.consume_queue_root, topic)
        return sum(self.destroy_consume_queue(topic) for topic in topics)

    # -- durability --------------------------------------------------------------------------------------

    def flush(self) -> int:
        """Blocking: fsync the commitlog up to what is appended now; returns the flushed offset.

        Safe to call from a worker thread while the reactor appends.
        """
        flushed, store_timestamp = self.commit_log.flush()
        self._commit_log_durable_to(store_timestamp)
        return flushed

    def plan_flush(self) -> tuple[FlushPlan | None, int]:
        """What ``flush`` would sync now (None: nothing), and the store time of the last record it covers; for a
        flush done elsewhere (the C store's fsync thread), then recorded with ``flushed`` or ``flush_failed``."""
        end, store_timestamp = self.commit_log.tail
        return self.commit_log.queue.plan_flush(end), store_timestamp

    def flushed(self, plan: FlushPlan | None, store_timestamp: int) -> int:
        """Record a planned flush as done; returns the flushed offset."""
        queue = self.commit_log.queue
        if plan is None or queue.flushed(plan) >= plan.end:
            self._commit_log_durable_to(store_timestamp)
        return queue.flushed_where

    def flush_failed(self, plan: FlushPlan) -> None:
        """A planned flush failed: the next one syncs what it would have."""
        self.commit_log.queue.flush_failed(plan)

    def _commit_log_durable_to(self, store_timestamp: int) -> None:
        if store_timestamp and self.checkpoint is not None:
            self.checkpoint.physic_msg_timestamp = store_timestamp

    def flush_consume_queues(self, least_pages: int = 0) -> None:
        """Blocking: fsync consume queues with at least ``least_pages`` dirty pages, then the checkpoint.

        Only a thorough flush (``least_pages`` 0) also syncs the index files and advances the checkpoint's
        consume-queue and index times, since only then is everything before them durable.  Safe to call from
        a worker thread.
        """
        logics_timestamp = self._logics_timestamp
        for cq in list(self.consume_queue_table.values()):
            cq.flush(least_pages)
        index_timestamp = self.index_service.flush() if least_pages == 0 else 0
        checkpoint = self.checkpoint
        if checkpoint is None:
            return
        if least_pages == 0 and logics_timestamp:
            checkpoint.logics_msg_timestamp = logics_timestamp
        if index_timestamp:
            checkpoint.index_msg_timestamp = index_timestamp
        checkpoint.flush()


def _deferred(result: PutMessageResult | defer.Deferred[PutMessageResult]) -> defer.Deferred[PutMessageResult]:
    return result if isinstance(result, defer.Deferred) else defer.succeed(result)


def _arriving_listener_failed(e: Exception) -> None:
    log.error("message arriving listener failed", exc_info=e)


def _access_error(e: OSError) -> StoreLoadError:
    """One line for a store path the process cannot use: which path, and what the store needs of it."""
    path = e.filename
    if path is None:
        return StoreLoadError(f"store: {e.strerror or e}")
    if e.errno in (errno.EEXIST, errno.ENOTDIR):
        return StoreLoadError(f"{path}: a file is in the way: the store needs a directory there")
    if e.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
        return StoreLoadError(f"{path}: {e.strerror}: the store cannot use this path")
    if not os.path.lexists(path):  # it could not be created: its directory is what refuses
        path = os.path.dirname(path) or "."
    need = "read, write and create files in this directory" if os.path.isdir(path) else "read and write this file"
    hint = " (immutable? see lsattr)" if e.errno == errno.EPERM else ""  # what refuses root
    return StoreLoadError(f"{path}: {e.strerror}{hint}: the store needs to {need}")
