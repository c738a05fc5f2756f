"""Message lookup by key: every stored message's ``topic#UNIQ_KEY`` and ``topic#KEY`` in index files (IndexService).

Files live in ``<storePathRootDir>/index``, named by their creation time (``yyyyMMddHHmmssSSS``, local time);
a new one starts when the last is full.  Appends, lookups and changes to the file list run on the store's
thread; ``flush`` and ``destroy_files`` may run on worker threads and share a lock, so a file is never
deleted while it is being synced.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field

from gateway.remoting.message import MessageConst, MessageSysFlag, property_value

from .config import StoreConfig
from .index_file import IndexFile, index_key_hash
from .mapped_file import MappedFilePool, StoreLoadError

log = logging.getLogger(__name__)

_UNIQ_KEY = MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX + "\x01"
_KEYS = MessageConst.KEYS + "\x01"
_NAME_DIGITS = 17


def time_millis_to_human_string(ms: int) -> str:
    """``UtilAll.timeMillisToHumanString``: ``yyyyMMddHHmmssSSS`` in local time."""
    return time.strftime("%Y%m%d%H%M%S", time.localtime(ms // 1000)) + f"{ms % 1000:03d}"


@dataclass(slots=True)
class QueryOffsetResult:
    """Commitlog offsets found for a key, plus where the index stood (``QueryOffsetResult``)."""

    phy_offsets: list[int] = field(default_factory=list)
    index_last_update_timestamp: int = 0
    index_last_update_phyoffset: int = 0


class IndexService:
    """Builds and searches the index files of one store; their mappings are counted in ``pool``."""

    def __init__(self, config: StoreConfig, pool: MappedFilePool | None = None) -> None:
        self.config = config
        self.pool = MappedFilePool() if pool is None else pool
        self.store_path = os.path.join(config.storePathRootDir, "index")
        self.hash_slot_num = config.maxHashSlotNum
        self.index_num = config.maxIndexNum
        self.files: list[IndexFile] = []
        # Commitlog offset of the newest message already dispatched here (-1: none); re-dispatch skips up to it.
        self.last_indexed_offset = -1
        self._lock = threading.Lock()

    def load(self) -> list[str]:
        """Open the files on disk; returns the paths of empty files removed (a crash during creation)."""
        dropped: list[str] = []
        self.files = []
        try:
            names = sorted(os.listdir(self.store_path))
        except FileNotFoundError:
            names = []
        damaged = False
        for name in names:
            path = os.path.join(self.store_path, name)
            if len(name) != _NAME_DIGITS or not name.isdigit():
                log.warning("ignoring %s: not an index file name", path)
                continue
            if damaged or os.path.getsize(path) == 0:
                # Entries continue from one file to the next: after a damaged file the later ones go too.
                log.warning("removing %s index file %s", "later" if damaged else "empty", path)
                os.unlink(path)
                dropped.append(path)
                continue
            try:
                self.files.append(IndexFile.open(path, self.hash_slot_num, self.index_num, self.pool, self._lock))
            except StoreLoadError as e:
                # Derived from the commitlog: recovery indexes again from where the kept files stop.
                log.warning("index file is damaged (%s): removing it and rebuilding from the commitlog", e)
                os.unlink(path)
                dropped.append(path)
                damaged = True
        self._update_last_indexed()
        return dropped

    def _update_last_indexed(self) -> None:
        self.last_indexed_offset = -1
        for f in reversed(self.files):
            if not f.is_empty or f.end_phy_offset > 0:
                self.last_indexed_offset = f.end_phy_offset
                return

    # -- build -------------------------------------------------------------------------------------------

    def _create_file(self) -> IndexFile:
        prev = self.files[-1] if self.files else None
        os.makedirs(self.store_path, exist_ok=True)
        name = int(time_millis_to_human_string(time.time_ns() // 1_000_000))
        if prev is not None:
            # Names must sort in creation order (loading sorts them), even within one millisecond or after the
            # clock stepped back.
            name = max(name, int(os.path.basename(prev.path)) + 1)
        path = os.path.join(self.store_path, str(name))
        f = IndexFile.create(
            path,
            self.hash_slot_num,
            self.index_num,
            prev.end_phy_offset if prev else 0,
            prev.end_timestamp if prev else 0,
            self.pool,
            self._lock,
        )
        self.files.append(f)  # atomic: a flush copies the list under the lock
        log.info("created index file %s", path)
        return f

    def build_index(self, topic: str, phy_offset: int, store_timestamp: int, sys_flag: int, properties: str) -> bool:
        """Index one stored message (``buildIndex``); False if skipped: at or below ``last_indexed_offset``
        (already indexed) or a rollback record."""
        if phy_offset <= self.last_indexed_offset or sys_flag & 0xC == MessageSysFlag.TRANSACTION_ROLLBACK_TYPE:
            return False
        files = self.files
        f = files[-1] if files else self._create_file()
        if not f.put_message(topic, properties, phy_offset, store_timestamp):
            index_keys = message_index_keys(topic, properties)
            done = f.put_keys(index_keys, phy_offset, store_timestamp)
            while done < len(index_keys):
                f = self._create_file()  # the full file is synced by the next flush
                done += f.put_keys(index_keys[done:], phy_offset, store_timestamp)
        self.last_indexed_offset = phy_offset
        return True

    # -- lookup ------------------------------------------------------------------------------------------

    def query_offset(self, topic: str, key: str, max_num: int, begin: int, end: int) -> QueryOffsetResult:
        """Offsets of messages indexed under ``topic#key`` stored within [begin, end], newest files first."""
        result = QueryOffsetResult()
        max_num = min(max_num, self.config.maxMsgsNumBatch)
        files = self.files
        if not files:
            return result
        last = files[-1]
        result.index_last_update_timestamp = last.end_timestamp
        result.index_last_update_phyoffset = last.end_phy_offset
        key_hash = index_key_hash(f"{topic}#{key}")
        for f in reversed(files):
            if f.is_time_matched(begin, end):
                f.select_phy_offsets(result.phy_offsets, key_hash, max_num, begin, end)
            if f.begin_timestamp < begin or len(result.phy_offsets) >= max_num:
                break
        return result

    # -- recovery and cleaning ---------------------------------------------------------------------------

    def truncate(self, phy_end: int) -> tuple[int, list[str]]:
        """Drop entries for messages at or past commitlog ``phy_end`` (a cut tail); returns (entries, files).

        A file left empty is deleted unless it is the only one.
        """
        entries = 0
        dropped: list[str] = []
        while self.files:
            f = self.files[-1]
            if f.end_phy_offset < phy_end:
                break
            entries += f.truncate(phy_end)
            if not f.is_empty or len(self.files) == 1:
                break
            self.files.pop()
            self.destroy_files([f])
            dropped.append(f.path)
        self._update_last_indexed()
        return entries, dropped

    def delete_expired_files(self, min_offset: int) -> list[IndexFile]:
        """Detach the oldest files whose messages all lie below commitlog ``min_offset`` (never the last file);
        pass them to ``destroy_files``."""
        files = self.files
        n = 0
        while n < len(files) - 1 and files[n].end_phy_offset < min_offset:
            n += 1
        expired, self.files = files[:n], files[n:]
        return expired

    def destroy_files(self, files: list[IndexFile]) -> None:
        """Blocking: delete detached files, after any flush that may still be syncing them."""
        with self._lock:
            for f in files:
                f.destroy()

    def flush(self) -> int:
        """Blocking: fsync files written since their last flush; returns the newest end timestamp covered."""
        with self._lock:
            files = self.files[:]
            end_timestamp = files[-1].end_timestamp if files else 0
            for f in files:
                if f.dirty:
                    f.flush()
        return end_timestamp

    def close(self) -> None:
        """Unmap every file."""
        with self._lock:
            for f in self.files:
                f.close()
            self.files = []

    def destroy(self) -> None:
        """Delete every file."""
        with self._lock:
            for f in self.files:
                f.destroy()
            self.files = []
        self.last_indexed_offset = -1


def message_index_keys(topic: str, properties: str) -> list[str]:
    """The keys a message is indexed under: ``topic#UNIQ_KEY``, then ``topic#k`` for each word of its KEYS."""
    uniq_key = property_value(properties, _UNIQ_KEY)
    keys = property_value(properties, _KEYS)
    index_keys = [f"{topic}#{uniq_key}"] if uniq_key is not None else []
    if keys is not None:
        index_keys += [f"{topic}#{key}" for key in keys.split(MessageConst.KEY_SEPARATOR) if key]
    return index_keys
