"""DLedger's file store (``DLedgerMmapFileStore`` of dledger 0.3.1.2) on the project's segment files.

Layout under ``storeBaseDir/dledger-<selfId>``: ``data/`` holds the entries (segments of
``mappedFileSizeForEntryData`` bytes named by their first offset), ``index/`` one 32-byte record per entry at
``index * 32``, ``checkpoint`` the properties ``endIndex`` and ``committedIndex``.  An entry never spans two data
files: when the next one and 8 more bytes do not fit, the rest of the file gets a blank record (magic -1, the
length left) and the entry starts the next file, as ``MmapFileList.preAppend`` does.

No consensus here: the caller (the member state) checks roles, terms and leaders before it calls the store.
Single-threaded: the reactor appends, reads and truncates.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass

from gateway.config import format_properties, parse_properties
from gateway.dledger.codes import DLedgerError, DLedgerResponseCode
from gateway.dledger.entry import (
    BLANK_MAGIC_CODE,
    BODY_OFFSET,
    CURRENT_MAGIC,
    HEADER_SIZE,
    INDEX_UNIT_SIZE,
    MAGIC_1,
    DLedgerEntry,
    EntryError,
    IndexEntry,
)
from gateway.persist import StateFileError, load_with_backup, write_atomically
from gateway.store.mapped_file import MappedFile, MappedFileQueue, StoreLoadError, pwrite_all

log = logging.getLogger(__name__)

CHECK_POINT_FILE = "checkpoint"
END_INDEX_KEY = "endIndex"
COMMITTED_INDEX_KEY = "committedIndex"
# MmapFileList.MIN_BLANK_LEN: room kept at the end of a data file for the blank record's magic and length.
MIN_BLANK_LEN = 8
_BLANK = struct.Struct(">ii")
_HEAD = struct.Struct(">iiqqqiiii")

# ``hook(entry, body)``: may rewrite the body of an entry whose index, term and position are set, before it is
# written (``AppendHook``).
AppendHook = Callable[[DLedgerEntry, bytearray], None]


class DLedgerStoreError(DLedgerError):
    """An append, read or truncation the store refuses; ``code`` is what DLedger answers a peer."""


@dataclass(slots=True, kw_only=True)
class DLedgerStoreConfig:
    """The store's part of ``DLedgerConfig`` (names and defaults of dledger 0.3.1.2)."""

    store_base_dir: str
    self_id: str
    mapped_file_size_for_entry_data: int = 1024 * 1024 * 1024
    mapped_file_size_for_entry_index: int = INDEX_UNIT_SIZE * 5 * 1024 * 1024
    data_store_path: str | None = None

    @property
    def default_path(self) -> str:
        """``storeBaseDir/dledger-<selfId>``."""
        return os.path.join(self.store_base_dir, f"dledger-{self.self_id}")

    @property
    def data_path(self) -> str:
        """``getDataStorePath``: ``dataStorePath``, else ``data`` under the default path (the index and the
        checkpoint stay there)."""
        return self.data_store_path or os.path.join(self.default_path, "data")


class DLedgerFileStore:
    """The ledger: entries ``ledger_begin_index..ledger_end_index`` (-1 when empty), ``committed_index`` of them
    known replicated.  :meth:`open` loads and recovers the files."""

    def __init__(self, config: DLedgerStoreConfig) -> None:
        if config.mapped_file_size_for_entry_index % INDEX_UNIT_SIZE:
            raise StoreLoadError(
                f"mappedFileSizeForEntryIndex {config.mapped_file_size_for_entry_index} is not a multiple of "
                f"{INDEX_UNIT_SIZE}"
            )
        if config.mapped_file_size_for_entry_data <= BODY_OFFSET + MIN_BLANK_LEN:
            raise StoreLoadError(f"mappedFileSizeForEntryData {config.mapped_file_size_for_entry_data} is too small")
        self.config = config
        base = config.default_path
        self.data = MappedFileQueue(config.data_path, config.mapped_file_size_for_entry_data)
        self.index = MappedFileQueue(os.path.join(base, "index"), config.mapped_file_size_for_entry_index)
        self.checkpoint_path = os.path.join(base, CHECK_POINT_FILE)
        self.ledger_begin_index = -1
        self.ledger_end_index = -1
        self.ledger_end_term = 0
        self.committed_index = -1
        self.committed_pos = -1
        self.append_hook: AppendHook | None = None
        # Per queue, the file appends last went to and a descriptor kept open on it: ``MappedFile.write_at``
        # opens and closes one for every write, which cost more than the write itself.
        self._writers: dict[MappedFileQueue, tuple[MappedFile, int]] = {}

    # -- appends

    def append_as_leader(self, body: bytes, term: int, channel: int = 0) -> DLedgerEntry:
        """Append ``body`` as the next entry of ``term``; returns it with its index, term and position."""
        if term < self.ledger_end_term:
            raise DLedgerStoreError(
                DLedgerResponseCode.INCONSISTENT_TERM, f"term {term} < ledger end term {self.ledger_end_term}"
            )
        entry = DLedgerEntry(index=self.ledger_end_index + 1, term=term, body=body, channel=channel)
        entry.pos = self._pre_append(self.data, entry.size, blank=True)
        self._run_append_hook(entry)
        self._write(entry)
        return entry

    def append_as_follower(self, entry: DLedgerEntry) -> DLedgerEntry:
        """Append an entry the leader pushed: it must be the next index, at the position the leader gave it."""
        if entry.index != self.ledger_end_index + 1:
            raise DLedgerStoreError(
                DLedgerResponseCode.INCONSISTENT_INDEX, f"index {entry.index} != {self.ledger_end_index + 1}"
            )
        if entry.term < self.ledger_end_term:
            raise DLedgerStoreError(
                DLedgerResponseCode.INCONSISTENT_TERM, f"term {entry.term} < ledger end term {self.ledger_end_term}"
            )
        pos = self._pre_append(self.data, entry.size, blank=True)
        if pos != entry.pos:
            raise DLedgerStoreError(DLedgerResponseCode.DISK_ERROR, f"{pos} != {entry.pos}")
        self._run_append_hook(entry)
        self._write(entry)
        return entry

    def _run_append_hook(self, entry: DLedgerEntry) -> None:
        hook = self.append_hook
        if hook is not None:
            body = bytearray(entry.body)
            hook(entry, body)
            entry.body = bytes(body)

    def start_data_at(self, offset: int) -> None:
        """Make an empty ledger's first entry go at ``offset``, the end of the broker's commitlog converted to
        DLedger (``getLastMappedFile(dividedCommitlogOffset)``); its first data file is created there."""
        data = self.data
        if data.files or self.ledger_end_index != -1 or offset < 0 or offset % data.mapped_file_size:
            raise DLedgerStoreError(
                DLedgerResponseCode.DISK_ERROR,
                f"cannot start the data files at {offset}: not an empty ledger's file start",
            )
        data.create_file(offset)
        data.wrote_where = data.flushed_where = offset

    def _write(self, entry: DLedgerEntry) -> None:
        """Write ``entry`` at ``data.wrote_where`` (already ``entry.pos``) and its index record."""
        self._append(self.data, entry.encode())
        index_pos = self._pre_append(self.index, INDEX_UNIT_SIZE, blank=False)
        if index_pos != entry.index * INDEX_UNIT_SIZE:
            raise DLedgerStoreError(
                DLedgerResponseCode.DISK_ERROR, f"index record at {index_pos} != {entry.index * INDEX_UNIT_SIZE}"
            )
        self._append(self.index, entry.index_entry().encode())
        self.ledger_end_index = entry.index
        self.ledger_end_term = entry.term
        if self.ledger_begin_index == -1:
            self.ledger_begin_index = entry.index

    def _pre_append(self, queue: MappedFileQueue, length: int, blank: bool) -> int:
        """Where ``length`` bytes go next: the rest of a data file too short for them (and ``MIN_BLANK_LEN``)
        is closed by a blank record first."""
        size = queue.mapped_file_size
        room = MIN_BLANK_LEN if blank else 0
        if length + room > size:
            raise DLedgerStoreError(
                DLedgerResponseCode.DISK_ERROR, f"{length} bytes do not fit in a file of {size} bytes"
            )
        f = self._file_at(queue, queue.wrote_where)
        left = f.end_offset - queue.wrote_where
        if length + room > left:
            if not blank:
                raise DLedgerStoreError(DLedgerResponseCode.DISK_ERROR, f"{queue.store_path}: no room for {length}")
            # The bytes after it are zero already: tails are zeroed on truncation and recovery.
            self._write_at(queue, f, queue.wrote_where - f.file_from_offset, _BLANK.pack(BLANK_MAGIC_CODE, left))
            queue.wrote_where = f.end_offset
        return queue.wrote_where

    @staticmethod
    def _file_at(queue: MappedFileQueue, offset: int) -> MappedFile:
        f = queue.find_mapped_file_by_offset(offset)
        if f is None:
            f = queue.create_file(offset - offset % queue.mapped_file_size)
        return f

    def _append(self, queue: MappedFileQueue, data: bytes) -> None:
        f = self._file_at(queue, queue.wrote_where)
        self._write_at(queue, f, queue.wrote_where - f.file_from_offset, data)
        queue.wrote_where += len(data)

    def _write_at(self, queue: MappedFileQueue, f: MappedFile, pos: int, data: bytes) -> None:
        """pwrite, as ``MappedFile.write_at`` (not through the mapping: its page faults stall), through the
        descriptor kept on the queue's file last written."""
        writer = self._writers.get(queue)
        if writer is None or writer[0] is not f:
            self._close_writer(queue)
            writer = self._writers[queue] = (f, os.open(f.path, os.O_WRONLY))
        pwrite_all(writer[1], data, pos)

    def _close_writer(self, queue: MappedFileQueue) -> None:
        writer = self._writers.pop(queue, None)
        if writer is not None:
            os.close(writer[1])

    # -- reads

    def get(self, index: int) -> DLedgerEntry:
        """Entry ``index``; :class:`DLedgerStoreError` when out of range or the files disagree."""
        pos, size = self._pos_and_size(index)
        f = self.data.find_mapped_file_by_offset(pos)
        if f is None or pos - f.file_from_offset + size > f.file_size:
            raise DLedgerStoreError(DLedgerResponseCode.DISK_ERROR, f"Get null data for {index}")
        try:
            entry = DLedgerEntry.decode(f.view[: pos - f.file_from_offset + size], pos - f.file_from_offset)
        except EntryError as e:
            raise DLedgerStoreError(DLedgerResponseCode.DISK_ERROR, f"entry {index}: {e}") from None
        if entry.pos != pos or entry.index != index:
            raise DLedgerStoreError(DLedgerResponseCode.DISK_ERROR, f"entry {index} at {pos} says {entry.pos}")
        return entry

    def _pos_and_size(self, index: int) -> tuple[int, int]:
        if index < 0 or index > self.ledger_end_index:
            raise DLedgerStoreError(
                DLedgerResponseCode.INDEX_OUT_OF_RANGE,
                f"{index} should between {self.ledger_begin_index}-{self.ledger_end_index}",
            )
        if index < self.ledger_begin_index:
            raise DLedgerStoreError(
                DLedgerResponseCode.INDEX_LESS_THAN_LOCAL_BEGIN, f"{index} should be gt {self.ledger_begin_index}"
            )
        record = self._index_record(index)
        if record is None:
            raise DLedgerStoreError(DLedgerResponseCode.DISK_ERROR, f"Get null index for {index}")
        return record.pos, record.size

    def _index_record(self, index: int) -> IndexEntry | None:
        offset = index * INDEX_UNIT_SIZE
        f = self.index.find_mapped_file_by_offset(offset)
        if f is None:
            return None
        try:
            return IndexEntry.decode(f.view, offset - f.file_from_offset)
        except EntryError:
            return None

    # -- truncation

    def truncate(self, entry: DLedgerEntry) -> int:
        """Make ``entry`` (from the leader) the last entry: drop everything after it, and it too if ours differs,
        then write it; returns its index (``truncate(entry, leaderTerm, leaderId)``)."""
        try:
            existed = self.get(entry.index) == entry
        except DLedgerStoreError:
            existed = False
        cut = entry.pos + entry.size if existed else entry.pos
        if cut != self.data.wrote_where:
            log.warning(
                "[TRUNCATE] index=%d truncatePos=%d != maxPos=%d, usual on an old leader",
                entry.index,
                cut,
                self.data.wrote_where,
            )
        rebuilt = self._cut(self.data, cut)
        if not existed:
            self._append(self.data, entry.encode())
        self._cut(self.index, entry.index * INDEX_UNIT_SIZE)
        self._append(self.index, entry.index_entry().encode())
        self.ledger_end_index = entry.index
        self.ledger_end_term = entry.term
        if rebuilt or self.ledger_begin_index == -1:
            self.ledger_begin_index = entry.index
        if self.committed_index > entry.index:
            self.committed_index = -1  # Raft never truncates committed entries: forget a value that cannot hold
            self.committed_pos = -1
        return entry.index

    def _cut(self, queue: MappedFileQueue, offset: int) -> bool:
        """Cut ``queue`` at ``offset``; when no file holds it, drop every file and restart there
        (``rebuildWithPos``).  Returns whether it rebuilt."""
        end = queue.files[-1].end_offset if queue.files else 0
        self._close_writer(queue)  # its file may go
        rebuild = not queue.files or not queue.min_offset <= offset <= end
        queue.truncate_dirty_files(queue.min_offset if rebuild else offset)
        queue.wrote_where = offset
        queue.flushed_where = min(queue.flushed_where, offset)
        return rebuild

    # -- commit index and checkpoint

    def update_committed_index(self, new_committed_index: int) -> None:
        """Raise the committed index (clamped to the ledger end); lower values are ignored, as DLedger does."""
        if new_committed_index == -1 or self.ledger_end_index == -1 or new_committed_index == self.committed_index:
            return
        if new_committed_index < self.committed_index or new_committed_index < self.ledger_begin_index:
            log.warning(
                "[MONITOR]Skip update committed index for new=%d < old=%d or < beginIndex=%d",
                new_committed_index,
                self.committed_index,
                self.ledger_begin_index,
            )
            return
        new_committed_index = min(new_committed_index, self.ledger_end_index)
        pos, size = self._pos_and_size(new_committed_index)
        self.committed_index = new_committed_index
        self.committed_pos = pos + size

    def persist_checkpoint(self) -> None:
        """Write ``checkpoint`` (``endIndex``, ``committedIndex``) atomically, the previous one kept as ``.bak``."""
        # The order Java 9+ writes them in (DLedger iterates a Properties).
        props = {COMMITTED_INDEX_KEY: str(self.committed_index), END_INDEX_KEY: str(self.ledger_end_index)}
        write_atomically(self.checkpoint_path, format_properties(props).encode())

    def _load_checkpoint(self) -> dict[str, str] | None:
        try:
            return load_with_backup(self.checkpoint_path, lambda data: parse_properties(data.decode("latin-1")))
        except StateFileError as e:
            log.warning("Load checkpoint failed: %s", e)  # the commit index is relearned from the leader
            return None

    def flush(self) -> None:
        """Blocking: make the data and index files and the checkpoint durable."""
        self.data.flush()
        self.index.flush()
        self.persist_checkpoint()

    def close(self) -> None:
        """Flush and unmap everything."""
        self.flush()
        for queue in (self.data, self.index):
            self._close_writer(queue)
            queue.close()

    def destroy(self) -> None:
        """Delete the data and index files."""
        for queue in (self.data, self.index):
            self._close_writer(queue)
            queue.destroy()

    # -- load and recovery

    def open(self) -> None:
        """Load the files and recover: the ledger ends at the last whole entry that continues the log, the index
        file is made to agree with the data files, and anything after is cut."""
        for queue in (self.data, self.index):
            self._close_writer(queue)
            queue.load()
            self._check_order(queue)
        files = self.data.files
        if not files:
            self.index.truncate_dirty_files(0)
            return
        start = self._recovery_start(files)
        last_index, last_term, process_offset = self._scan(files, start)
        last_file = files[-1]
        if last_file.file_from_offset - process_offset > last_file.file_size:
            raise StoreLoadError(
                f"{self.data.store_path}: valid entries end at offset {process_offset}, more than a file before "
                f"{last_file.path}; check the files before the store cuts them"
            )
        cut, _ = self.data.truncate_dirty_files(process_offset)
        if cut:
            torn = self.data.find_mapped_file_by_offset(process_offset) or last_file
            log.warning(
                "DLedger recovery: cut %d bytes of torn tail in %s from offset %d", cut, torn.path, process_offset
            )
        self.index.truncate_dirty_files((last_index + 1) * INDEX_UNIT_SIZE)
        self.ledger_end_index, self.ledger_end_term = last_index, last_term
        if last_index != -1:
            self.ledger_begin_index = self._first_index()
            self.get(last_index)  # recheck through the index, as DLedger does
        props = self._load_checkpoint()
        committed = (props or {}).get(COMMITTED_INDEX_KEY, "").strip()
        if committed:
            try:
                self.update_committed_index(int(committed))
            except ValueError:
                log.warning("%s: committedIndex %r is not a number; ignored", self.checkpoint_path, committed)

    @staticmethod
    def _check_order(queue: MappedFileQueue) -> None:
        for prev, cur in zip(queue.files, queue.files[1:], strict=False):
            if cur.file_from_offset - prev.file_from_offset != queue.mapped_file_size:
                raise StoreLoadError(f"{cur.path}: does not follow {prev.path} (files missing in between)")

    def _head(self, f: MappedFile, rel: int) -> tuple[int, ...] | None:
        """The header at ``rel`` of ``f`` if it is whole and fits the file."""
        if rel + _HEAD.size > f.file_size:
            return None
        return _HEAD.unpack_from(f.view, rel)

    def _recovery_start(self, files: list[MappedFile]) -> int:
        """The data file to scan from: the third last, or an earlier one, whose first entry agrees with the index."""
        for i in range(max(len(files) - 3, 0), -1, -1):
            f = files[i]
            head = self._head(f, 0)
            if head is not None:
                magic, size, index, term, pos, _, _, _, body_size = head
                record = self._index_record(index)
                if (
                    MAGIC_1 <= magic <= CURRENT_MAGIC
                    and size > HEADER_SIZE
                    and pos == f.file_from_offset
                    and body_size + BODY_OFFSET == size
                    and record == IndexEntry(magic=magic, pos=pos, size=size, index=index, term=term)
                ):
                    return i
            log.warning("Pre check data and index failed %s", f.path)
        return 0

    def _scan(self, files: list[MappedFile], i: int) -> tuple[int, int, int]:
        """Read entries from file ``i`` on; returns the last entry's index and term and the offset after it,
        writing index records from the first one that disagrees with the data."""
        last_index = last_term = -1
        f = files[i]
        rel = 0
        rewrite = False
        while True:
            if rel + 4 <= f.file_size and struct.unpack_from(">i", f.view, rel)[0] == BLANK_MAGIC_CODE:
                i += 1
                if i >= len(files):
                    return last_index, last_term, f.end_offset
                f, rel = files[i], 0
                continue
            head = self._head(f, rel)
            if head is None:
                break
            magic, size, index, term, pos, _, _, _, body_size = head
            absolute = f.file_from_offset + rel
            if (
                size == 0
                or pos != absolute
                or body_size + BODY_OFFSET != size
                or not MAGIC_1 <= magic <= CURRENT_MAGIC
                or (last_index != -1 and index != last_index + 1)
                or term < last_term
                or size <= HEADER_SIZE
                or rel + size > f.file_size
            ):
                break
            record = IndexEntry(magic=magic, pos=pos, size=size, index=index, term=term)
            if not rewrite and self._index_record(index) != record:
                log.warning("DLedger recovery: index disagrees with %s at entry %d; rewriting it", f.path, index)
                self._cut(self.index, index * INDEX_UNIT_SIZE)
                rewrite = True
            if rewrite:
                self._append(self.index, record.encode())
            last_index, last_term = index, term
            rel += size
        return last_index, last_term, f.file_from_offset + rel

    def revise_ledger_begin_index(self) -> None:
        """After the oldest data files were deleted (expired): the ledger begins at the first one left's entry."""
        if self.data.files and self.ledger_end_index != -1:
            self.ledger_begin_index = self._first_index()

    def _first_index(self) -> int:
        head = self._head(self.data.files[0], 0)
        return -1 if head is None else head[2]
