"""The broker's commitlog on a DLedger ledger (``DLedgerCommitLog`` of Apache RocketMQ 4.9.8).

Each message record is the body of one ledger entry.  Its physical offset is the entry's position + 48 (the entry
header), written into the record by the ledger's append hook once the position is known, so consume queues, the
index and offset message ids point straight into the ledger's data files, as Apache's do.

Only committed entries are dispatched: ``max_offset`` is the ledger's committed position, where the store's reput
stops; the broker runs the reput on each commit (``DefaultMessageStore.dispatch_appended``).  A put answers once a
majority holds its entry, with Apache's statuses for DLedger's outcomes.

A store that holds a Master/Slave commitlog converts as 4.9.8 does: the old commitlog stays, read-only, as the
range below ``divided_commitlog_offset`` (its last file padded with a blank record), and the ledger's data files
begin there.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from twisted.internet import defer
from twisted.python.failure import Failure

from gateway.dledger.codes import DLedgerError, DLedgerResponseCode
from gateway.dledger.entry import BLANK_MAGIC_CODE as ENTRY_BLANK_MAGIC_CODE
from gateway.dledger.entry import BODY_OFFSET, CURRENT_MAGIC, MAGIC_1, DLedgerEntry
from gateway.dledger.store import DLedgerFileStore
from gateway.remoting.message import BLANK_MAGIC_CODE, create_offset_message_id
from gateway.store.api import AppendMessageResult, MessageExtBrokerInner, PutMessageResult, PutMessageStatus
from gateway.store.commit_log import (
    CommitLog,
    CorruptRecordError,
    Dispatcher,
    DispatchRequest,
    check_message_and_return_size,
    is_dispatched,
    now_ms,
    write_record,
)
from gateway.store.config import StoreConfig
from gateway.store.mapped_file import MappedFile, MappedFilePool, StoreLoadError

log = logging.getLogger(__name__)

# MessageDecoder.PHY_POS_POSITION: where a record holds its physical offset.
PHY_POS_POSITION = 4 + 4 + 4 + 4 + 4 + 8
_Q = struct.Struct(">q")
_II = struct.Struct(">ii")
_HOUR_MS = 3_600_000

# What a put answers for each DLedger code its entry failed with (asyncPutMessage); any other: UNKNOWN_ERROR.
# WAIT_QUORUM_ACK_TIMEOUT is not FLUSH_SLAVE_TIMEOUT on purpose: "the ons client will ignore it".
_COMMIT_FAILED_STATUS = {
    DLedgerResponseCode.INCONSISTENT_LEADER: PutMessageStatus.SERVICE_NOT_AVAILABLE,
    DLedgerResponseCode.NOT_LEADER: PutMessageStatus.SERVICE_NOT_AVAILABLE,
    DLedgerResponseCode.LEADER_NOT_READY: PutMessageStatus.SERVICE_NOT_AVAILABLE,
    DLedgerResponseCode.DISK_FULL: PutMessageStatus.SERVICE_NOT_AVAILABLE,
    DLedgerResponseCode.WAIT_QUORUM_ACK_TIMEOUT: PutMessageStatus.OS_PAGECACHE_BUSY,
    DLedgerResponseCode.LEADER_PENDING_FULL: PutMessageStatus.OS_PAGECACHE_BUSY,
}


class Appended(Protocol):
    """What an appender returns (``DLedgerServer.append``'s ``AppendResult``)."""

    entry: DLedgerEntry  # appended locally: index, term and position set
    committed: defer.Deferred[Any]  # fires once a majority holds it; errbacks DLedgerError otherwise


# ``appender(body)``: append as the leader, or raise DLedgerError at once (NOT_LEADER, LEADER_PENDING_FULL, ...).
Appender = Callable[[bytes], Appended]


def write_physical_offset(entry: DLedgerEntry, body: bytearray) -> None:
    """The ledger's append hook: a record's PHYSICALOFFSET is its entry's position + 48, known once appended."""
    _Q.pack_into(body, PHY_POS_POSITION, entry.pos + BODY_OFFSET)


class DLedgerCommitLog(CommitLog):
    """The commitlog of a DLedger broker: ``ledger`` holds the records, ``appender`` appends to it as the leader
    (``DLedgerServer.append``); ``queue`` is the commitlog of a converted Master/Slave store, if any.

    Made by ``DefaultMessageStore(config, functools.partial(DLedgerCommitLog, ledger=..., appender=...))``;
    ``load`` opens the ledger and ``close`` closes it.
    """

    def __init__(
        self,
        config: StoreConfig,
        dispatcher: Dispatcher,
        pool: MappedFilePool | None = None,
        *,
        ledger: DLedgerFileStore,
        appender: Appender,
    ) -> None:
        if ledger.config.mapped_file_size_for_entry_data != config.mappedFileSizeCommitLog:
            raise StoreLoadError(
                f"mappedFileSizeForEntryData {ledger.config.mapped_file_size_for_entry_data} != "
                f"mappedFileSizeCommitLog {config.mappedFileSizeCommitLog}: a DLedger broker's are one setting"
            )
        super().__init__(config, dispatcher, pool)
        self.ledger = ledger
        self.appender = appender
        # Below it: the converted commitlog (``dividedCommitlogOffset``); -1 when there was none.
        self.divided_commitlog_offset = -1
        self._entries = CommitLog(config, dispatcher, queue=ledger.data)  # reads the records in the data files
        self._stalled_at = -1  # an entry the reput cannot read, logged once
        self._old_end = 0  # where the old commitlog's records end, once recovered
        ledger.append_hook = write_physical_offset

    def load(self) -> list[str]:
        """List the old commitlog's segments and open (load and recover) the ledger."""
        dropped = super().load()
        self.ledger.open()
        if self.ledger.data.files:
            self.divided_commitlog_offset = self.ledger.data.min_offset
        return dropped

    # -- offsets -----------------------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        """The old commitlog's first offset while any of it is left, else the ledger's."""
        return self.queue.min_offset if self.queue.files else self.ledger.data.min_offset

    @property
    def max_offset(self) -> int:
        """The committed position (``getMaxOffset``): nothing past it is dispatched."""
        committed = self.ledger.committed_pos
        if committed > 0:
            return committed
        return self.ledger.data.min_offset if self.ledger.data.files else max(self.divided_commitlog_offset, 0)

    @property
    def confirm_offset(self) -> int:
        """``getConfirmOffset``: the committed position too."""
        return self.max_offset

    @property
    def max_wrote_offset(self) -> int:
        """The ledger's end, committed or not (``getMaxWrotePosition``); before its first entry, the end of the
        old commitlog's records (not of the blank that closes it)."""
        return self.ledger.data.wrote_where if self.ledger.ledger_end_index != -1 else self._old_end

    @property
    def flushed_where(self) -> int:
        """How far the ledger's data files are durable."""
        return self.ledger.data.flushed_where

    @property
    def empty(self) -> bool:
        """Neither an old commitlog nor ledger data on disk."""
        return not self.queue.files and not self.ledger.data.files

    # -- append ------------------------------------------------------------------------------------------

    def put_message(self, msg: MessageExtBrokerInner) -> defer.Deferred[PutMessageResult]:  # type: ignore[override]
        """Append ``msg`` as one entry; fires once a majority holds it, with DLedger's outcome mapped to a status
        as ``asyncPutMessage`` does (an append refused at once: OS_PAGECACHE_BUSY)."""
        status, topic, props, sys_flag, size = self._check(msg)
        if status is not PutMessageStatus.PUT_OK:  # a record that cannot be encoded, whatever the reason
            return defer.succeed(PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL))
        key = (msg.topic, msg.queue_id)
        dispatched = is_dispatched(sys_flag)
        queue_offset = self.topic_queue_table.get(key, 0) if dispatched else 0
        store_timestamp = now_ms()
        record = bytearray(size)
        write_record(record, 0, size, msg, topic, props, sys_flag, queue_offset, 0, store_timestamp)
        appended = self._append(record)
        if isinstance(appended, PutMessageResult):
            return defer.succeed(appended)
        wrote_offset = appended.entry.pos + BODY_OFFSET
        if dispatched:
            self.topic_queue_table[key] = queue_offset + 1
        append = AppendMessageResult(
            wrote_offset, size, create_offset_message_id(msg.store_host, wrote_offset), store_timestamp, queue_offset
        )
        return appended.committed.addCallbacks(_committed, _commit_failed, (append,), None, (append,))

    def put_messages(self, msgs: list[MessageExtBrokerInner]) -> defer.Deferred[PutMessageResult]:  # type: ignore[override]
        """Append a batch (one topic and queue, no transaction flags) as one entry per message; fires once a
        majority holds the last (``asyncPutMessages``)."""
        status, topic, checked, total = self._check_batch(msgs)
        if status is not PutMessageStatus.PUT_OK:
            return defer.succeed(PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL))
        first = msgs[0]
        key = (first.topic, first.queue_id)
        first_queue_offset = queue_offset = self.topic_queue_table.get(key, 0)
        store_timestamp = now_ms()  # one store time for the whole batch, as Java
        msg_ids = []
        appended: Appended | PutMessageResult | None = None
        wrote_offset = -1
        for msg, props, sys_flag, size in checked:
            record = bytearray(size)
            write_record(record, 0, size, msg, topic, props, sys_flag, queue_offset, 0, store_timestamp)
            if appended is not None:
                # Commits come in index order: the batch's last entry answers for the ones before it.
                appended.committed.addErrback(lambda _: None)
            appended = self._append(record)
            if isinstance(appended, PutMessageResult):
                break
            offset = appended.entry.pos + BODY_OFFSET
            if wrote_offset == -1:
                wrote_offset = offset
            msg_ids.append(create_offset_message_id(msg.store_host, offset))
            queue_offset += 1
        # Entries appended before a refusal keep their queue offsets (Apache's would be given again).
        self.topic_queue_table[key] = queue_offset
        if appended is None or isinstance(appended, PutMessageResult):
            return defer.succeed(appended or PutMessageResult(PutMessageStatus.UNKNOWN_ERROR))
        append = AppendMessageResult(
            wrote_offset, total, ",".join(msg_ids), store_timestamp, first_queue_offset, len(msgs)
        )
        return appended.committed.addCallbacks(_committed, _commit_failed, (append,), None, (append,))

    def _append(self, record: bytearray) -> Appended | PutMessageResult:
        """Hand a record to the appender; what a put answers when it is refused at once."""
        try:
            return self.appender(bytes(record))
        except DLedgerError as e:
            # handleAppend answered at once (pos -1): "HandleAppend return false due to error code".
            log.warning("DLedger refused the append: %s", e)
            return PutMessageResult(PutMessageStatus.OS_PAGECACHE_BUSY)
        except Exception:
            log.exception("Put message error")
            return PutMessageResult(PutMessageStatus.UNKNOWN_ERROR)

    def append_data(self, phy_offset: int, data: bytes | memoryview) -> bool:
        """Never: DLedger replicates the ledger, not Master/Slave's HA transfer (``appendData``)."""
        return False

    # -- read --------------------------------------------------------------------------------------------

    def get_message(self, offset: int, size: int) -> memoryview | None:
        """``size`` bytes at physical ``offset``: in the old commitlog below the divide, else in the ledger."""
        if offset < self.divided_commitlog_offset:
            return super().get_message(offset, size)
        return self._entries.get_message(offset, size)

    def readable_segment(self, offset: int) -> tuple[int, memoryview] | None:
        """The window holding physical ``offset``: the old commitlog's, ending at the divide, or the ledger's."""
        divided = self.divided_commitlog_offset
        if offset >= divided:
            return self._entries.readable_segment(offset)
        found = super().readable_segment(offset)
        if found is None:
            return None
        base, view = found
        return base, view[: divided - base]

    def get_record(self, offset: int) -> memoryview | None:
        """The whole, consistent record starting at physical ``offset``, or None."""
        if offset < self.divided_commitlog_offset:
            return super().get_record(offset)
        return self._entries.get_record(offset)

    def read_records(self, offset: int, end: int) -> Iterator[tuple[DispatchRequest | None, int]]:
        """The records from ``offset`` up to ``end``: the old commitlog's, then the entries'."""
        divided = self.divided_commitlog_offset
        if offset < divided:
            for item in super().read_records(offset, min(end, divided)):
                offset = item[1]
                yield item
            if offset < divided:
                return
        yield from self._read_entries(offset, end)

    def _read_entries(self, offset: int, end: int) -> Iterator[tuple[DispatchRequest | None, int]]:
        """The record in each entry from ``offset`` (an entry's position) up to ``end``, skipping the 48-byte
        entry headers (``checkMessageAndReturnSize``); stops at an entry that holds no valid record."""
        data = self.ledger.data
        while offset < end:
            f = data.find_mapped_file_by_offset(offset)
            if f is None:
                return
            base = f.file_from_offset
            view = f.view[: end - base]
            pos = offset - base
            try:
                found = self._entry_at(view, pos, base)
            except CorruptRecordError as e:
                if offset != self._stalled_at:
                    self._stalled_at = offset
                    log.error("DLedger commitlog: %s at %d; nothing after it is dispatched", e, offset)
                return
            if found is None:  # the rest of the file is a blank: the next entry opened the next file
                offset = f.end_offset
                yield None, offset
                continue
            req, size = found
            offset += size
            yield req, offset

    @staticmethod
    def _entry_at(view: memoryview, pos: int, base: int) -> tuple[DispatchRequest, int] | None:
        """The record in the entry at ``pos`` and the entry's size; None for a file's end blank."""
        if pos + 8 > len(view):
            raise CorruptRecordError("no whole entry")
        magic, size = _II.unpack_from(view, pos)
        if magic == ENTRY_BLANK_MAGIC_CODE:
            return None
        if not MAGIC_1 <= magic <= CURRENT_MAGIC:
            raise CorruptRecordError(f"bad entry magic {magic}")
        req = check_message_and_return_size(view, pos + BODY_OFFSET, base, False)
        if req is None or size != BODY_OFFSET + req.msg_size:
            raise CorruptRecordError(f"entry of {size} bytes does not hold one record")
        return req, size

    # -- recovery ----------------------------------------------------------------------------------------

    def normal_recover_start(self) -> int:
        """The third last data file of the ledger (of the old commitlog before it is converted)."""
        if self.ledger.data.files:
            return self._entries.normal_recover_start()
        return super().normal_recover_start()

    def abnormal_recover_start(self, min_timestamp: int) -> int:
        """As after a clean stop on a ledger (``recoverAbnormally`` is ``recover``): what the consume queues and
        the index lost is dispatched again from where they end; the old commitlog's choice before it converts."""
        if self.ledger.data.files:
            return self._entries.normal_recover_start()
        return super().abnormal_recover_start(min_timestamp)

    def segment_start(self, offset: int) -> int:
        """Start of the file holding ``offset``: the old commitlog's below the divide, else the ledger's."""
        if self.queue.files and (offset < self.divided_commitlog_offset or not self.ledger.data.files):
            return super().segment_start(offset)
        return self._entries.segment_start(offset)

    def recover(
        self, start: int, on_record: Callable[[DispatchRequest], None], abnormal: bool
    ) -> tuple[int, int, list[str], list[tuple[int, int]]]:
        """Recover the old commitlog if ``start`` is in it (and convert it on the first start on a ledger), then
        call ``on_record`` for each committed record from ``start`` on.  The ledger itself was recovered by
        ``load``: it cuts its own torn tail."""
        records, cut, dropped, skipped = 0, 0, [], []
        if self.queue.files and (start < self.divided_commitlog_offset or not self.ledger.data.files):
            records, cut, dropped, skipped = super().recover(start, on_record, abnormal)
            self._old_end = self.queue.wrote_where
            if not self.ledger.data.files and self.queue.files:  # recovery may have dropped empty files
                self._convert()
            start = self.divided_commitlog_offset
        for req, _ in self._read_entries(max(start, self.ledger.data.min_offset), self.max_offset):
            if req is not None:
                records += 1
                on_record(req)
        return records, cut, dropped, skipped

    def _convert(self) -> None:
        """Close the old commitlog with a blank record to its last file's end and begin the ledger there."""
        last = self.queue.files[-1]
        end = self.queue.wrote_where
        if end < last.end_offset:
            last.write_at(end - last.file_from_offset, _II.pack(last.end_offset - end, BLANK_MAGIC_CODE))
        log.info(
            "Recover old commitlog needWriteMagicCode=%s pos=%d file=%s dividedCommitlogOffset=%d",
            end < last.end_offset,
            end,
            last.path,
            last.end_offset,
        )
        self.queue.wrote_where = last.end_offset
        self.queue.flush()
        self.divided_commitlog_offset = last.end_offset
        self.ledger.start_data_at(last.end_offset)
        log.info("Will set the initial commitlog offset=%d for dledger", last.end_offset)

    # -- flush, expiry, close ----------------------------------------------------------------------------

    def flush(self) -> tuple[int, int]:
        """Blocking: fsync the ledger's index and data files; returns (flushed data offset, 0)."""
        self.ledger.index.flush()
        return self.ledger.data.flush(), 0

    def delete_expired_files(
        self, expired_ms: int, now_ms: int, clean_immediately: bool, batch_max: int
    ) -> tuple[list[MappedFile], Callable[[list[MappedFile]], None]]:
        """The old commitlog's files first, its last one too (``deleteExpiredFile``); once none is left, the
        ledger's data files kept ``fileReservedTime`` + 1 hours (DLedger's ``fileReservedHours``), never the
        newest, and the ledger then begins at the first entry left."""
        queue = self.queue
        if queue.files:
            files, destroy = super().delete_expired_files(expired_ms, now_ms, clean_immediately, batch_max)
            if files or len(queue.files) != 1:
                return files, destroy
            last = queue.files[0]
            log.info("Try to delete the last old commitlog file %s", last.path)
            if clean_immediately or now_ms >= os.stat(last.path).st_mtime_ns // 1_000_000 + expired_ms:
                queue.files = []
                return [last], destroy
            return [], destroy
        data = self.ledger.data
        files = data.delete_expired_file_by_time(expired_ms + _HOUR_MS, now_ms, clean_immediately, batch_max)
        if files:
            self.ledger.revise_ledger_begin_index()
        return files, data.destroy_files

    def close(self) -> None:
        """Unmap the old commitlog; flush and close the ledger."""
        super().close()
        self.ledger.close()

    def destroy(self) -> None:
        """Delete the old commitlog and the ledger's files."""
        super().destroy()
        self.ledger.destroy()


def _committed(_: object, append: AppendMessageResult) -> PutMessageResult:
    return PutMessageResult(PutMessageStatus.PUT_OK, append)


def _commit_failed(failure: Failure, append: AppendMessageResult) -> PutMessageResult:
    error = failure.value
    if isinstance(error, DLedgerError):
        status = _COMMIT_FAILED_STATUS.get(error.code, PutMessageStatus.UNKNOWN_ERROR)
        log.warning("DLedger entry of the record at %d not committed: %s", append.wrote_offset, error)
    else:
        status = PutMessageStatus.UNKNOWN_ERROR
        log.error("DLedger entry of the record at %d failed: %s", append.wrote_offset, failure.getTraceback())
    return PutMessageResult(status, append)
