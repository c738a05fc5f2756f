"""Fixed-size segment files named by their starting global offset, mapped whole on demand (MappedFile,
MappedFileQueue), and the store's bound on open mappings (MappedFilePool).

Threading: appends, reads, mapping and changes to the file list happen on one thread (the reactor); ``flush``
and ``destroy_files`` may run on worker threads.  A queue's lock is held while fsyncing and while unmapping or
deleting files, so a worker never syncs a file that is being closed, and the pool never unmaps a file a worker
is using.  The C store's fsync thread syncs a ``FlushPlan`` without the lock: it opens each file by its path, so
unmapping does not concern it, and a plan made before a truncation is not recorded.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import mmap
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

log = logging.getLogger(__name__)

OS_PAGE_SIZE = 4096
_NAME_DIGITS = 20
# Looking for a torn or garbage tail stops after this many zero bytes (holes count as zeros).
_ZERO_RUN = 1024 * 1024
_SCAN_CHUNK = 64 * 1024


class StoreLoadError(RuntimeError):
    """The store cannot start on its files: they do not match the configuration (Java refuses to start in that
    case), or the process may not use them. The entry points print it as one line (gateway.runner)."""


def offset2file_name(offset: int) -> str:
    """``UtilAll.offset2FileName``: 20-digit zero-padded offset."""
    return f"{offset:0{_NAME_DIGITS}d}"


@contextlib.contextmanager
def _descriptor(path: str, flags: int) -> Iterator[int]:
    fd = os.open(path, flags)
    try:
        yield fd
    finally:
        os.close(fd)


def _preallocate(fd: int, offset: int, length: int) -> None:
    try:
        os.posix_fallocate(fd, offset, length)
    except OSError as e:  # e.g. a filesystem without fallocate: stay sparse
        if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise


def _fsync_dir(path: str) -> None:
    with _descriptor(path, os.O_RDONLY) as fd:
        os.fsync(fd)


def sync_path(path: str) -> None:
    """fdatasync (it releases the GIL, mmap.flush does not) through a fresh descriptor: on Linux that writes back
    the file's pages dirtied through any mapping, also one already unmapped."""
    with _descriptor(path, os.O_RDONLY) as fd:
        os.fdatasync(fd)


def pwrite_all(fd: int, data: bytes | memoryview, pos: int) -> None:
    """Write all of ``data`` at ``pos`` of ``fd``."""
    view = memoryview(data)
    while view:  # pwrite to a regular file writes it all unless the disk is full (then it raises)
        written = os.pwrite(fd, view, pos)
        view = view[written:]
        pos += written


@dataclass(frozen=True, slots=True)
class FlushPlan:
    """One flush of a queue: sync ``paths`` (after the directory ``store_path`` when ``sync_dir``: new files'
    names) to make everything before ``end`` durable.  ``epoch`` is the queue's when planned."""

    end: int
    store_path: str
    sync_dir: bool
    paths: tuple[str, ...]
    epoch: int

    @property
    def targets(self) -> tuple[str, ...]:
        """Everything to sync, in order: the directory first when ``sync_dir``, then ``paths``."""
        return ((self.store_path,) if self.sync_dir else ()) + self.paths

    def sync(self) -> None:
        """Blocking: do it (the C store's fsync thread does the same without the GIL)."""
        for i, path in enumerate(self.targets):
            (_fsync_dir if i == 0 and self.sync_dir else sync_path)(path)


class MappedFilePool:
    """The open mappings of one store, least recently used first (``maxOpenMappedFiles``).

    Mapping a file beyond ``limit`` unmaps the least recently used idle ones: not pinned, and whose owner's
    lock is free (no flush or deletion is using them).  That loses nothing: pages written through a mapping
    stay in the page cache after it goes, and the owner's next flush syncs them through the file's path.
    The limit is soft: when every other file is busy, the pool stays over it until the next mapping.
    """

    def __init__(self, limit: int = 0) -> None:
        self.limit = limit  # 0: no bound
        self._lru: OrderedDict[MappedFile, None] = OrderedDict()
        # Workers deleting detached files discard them while the reactor maps others.  ``touch`` (every read
        # and write) goes without it: only the reactor touches, and only files of live queues, which no worker
        # discards; one OrderedDict operation is atomic under the GIL.
        self._lock = threading.Lock()
        self.ordering = False

    @property
    def open_files(self) -> int:
        """Files mapped now."""
        return len(self._lru)

    def touch(self, f: MappedFile) -> None:
        """``f`` was just used: it is the last to be unmapped. Files call it only while ``ordering`` (the pool
        over half full): below that nothing is unmapped soon, and every store read and write skips it."""
        self._lru.move_to_end(f)

    def _update_ordering(self) -> None:
        self.ordering = self.limit > 0 and len(self._lru) > self.limit // 2

    def add(self, f: MappedFile) -> None:
        """Count a newly mapped ``f``, unmapping idle files over the limit (never ``f`` itself)."""
        with self._lock:
            lru = self._lru
            lru[f] = None
            self._update_ordering()
            excess = len(lru) - self.limit
            if self.limit <= 0 or excess <= 0:
                return
            # Each older file comes to the front once: unmapped, or moved behind ``f`` if it is busy.
            for _ in range(len(lru) - 1):
                victim = next(iter(lru))
                if not victim.pinned and victim.lock.acquire(blocking=False):
                    try:
                        victim.unmap()
                    finally:
                        victim.lock.release()
                    del lru[victim]
                    self._update_ordering()
                    excess -= 1
                    if not excess:
                        return
                else:
                    lru.move_to_end(victim)

    def discard(self, f: MappedFile) -> None:
        """Stop counting ``f`` (it is being closed)."""
        with self._lock:
            self._lru.pop(f, None)
            self._update_ordering()


class MappedFile:
    """One segment: ``file_size`` bytes starting at global offset ``file_from_offset``.

    It is mapped read-write on first use of ``mm`` or ``view`` and counted in ``pool``, which may unmap it
    again while it is idle; the next use maps it again.  So never keep ``mm`` across a call that may map
    another file (slices of ``view`` stay valid: an unmapped file's mapping lives on while they exist).
    ``lock`` is the owner's lock; ``pinned`` (the commitlog's active segment) keeps it mapped.
    """

    __slots__ = ("_mm", "_view", "file_from_offset", "file_size", "lock", "path", "pinned", "pool")

    def __init__(
        self, path: str, file_from_offset: int, file_size: int, pool: MappedFilePool, lock: threading.Lock
    ) -> None:
        self.path = path
        self.file_from_offset = file_from_offset
        self.file_size = file_size
        self.pool = pool
        self.lock = lock
        self.pinned = False
        self._mm: mmap.mmap | None = None
        self._view: memoryview | None = None

    @classmethod
    def create(
        cls,
        path: str,
        file_from_offset: int,
        file_size: int,
        preallocate: bool,
        pool: MappedFilePool,
        lock: threading.Lock,
    ) -> MappedFile:
        """Create the file at full size and map it; ``preallocate`` reserves its blocks (writes to a sparse file
        fault slowly)."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        f = cls(path, file_from_offset, file_size, pool, lock)
        try:
            os.ftruncate(fd, file_size)
            if preallocate:
                _preallocate(fd, 0, file_size)
            f._map(fd)
        except BaseException:
            f.close()
            os.unlink(path)
            raise
        finally:
            os.close(fd)
        return f

    @property
    def mm(self) -> mmap.mmap:
        """The mapping (mapped now if it was not)."""
        mm = self._mm
        if mm is None:
            return self._open()[0]
        if self.pool.ordering:
            self.pool.touch(self)
        return mm

    @property
    def view(self) -> memoryview:
        """A memoryview of the whole mapping, for zero-copy slices."""
        view = self._view
        if view is None:
            return self._open()[1]
        if self.pool.ordering:
            self.pool.touch(self)
        return view

    @property
    def is_mapped(self) -> bool:
        """Whether the file is mapped now."""
        return self._mm is not None

    def _open(self) -> tuple[mmap.mmap, memoryview]:
        with _descriptor(self.path, os.O_RDWR) as fd:
            return self._map(fd)

    def _map(self, fd: int) -> tuple[mmap.mmap, memoryview]:
        # The mapping keeps its own duplicate of the descriptor: one descriptor per mapped file.
        mm = mmap.mmap(fd, self.file_size)
        view = memoryview(mm)
        self._mm, self._view = mm, view
        self.pool.add(self)
        return mm, view

    @property
    def end_offset(self) -> int:
        """Global offset just past this file."""
        return self.file_from_offset + self.file_size

    def sync(self) -> None:
        """Blocking: fdatasync the file through its path (``sync_path``)."""
        sync_path(self.path)

    def write_at(self, pos: int, data: bytes | memoryview) -> None:
        """Write ``data`` at ``pos`` with pwrite: what the mapping then reads, without its page faults. A store
        through the mapping into a page not yet in memory faults, and on ext4, while a flush writes the file back,
        such a fault waits up to 20-30 ms on this machine; pwrite of the same bytes never took 0.2 ms."""
        with _descriptor(self.path, os.O_WRONLY) as fd:
            pwrite_all(fd, data, pos)

    def zero_from(self, pos: int, preallocate: bool = False) -> None:
        """Make bytes ``pos..end`` zero by cutting the file and growing it back (cheap, even for a 1 GiB tail)."""
        with _descriptor(self.path, os.O_RDWR) as fd:
            os.ftruncate(fd, pos)
            os.ftruncate(fd, self.file_size)
            if preallocate:
                _preallocate(fd, pos, self.file_size - pos)

    def last_nonzero(self, start: int) -> int:
        """Position just past the last non-zero byte from ``start`` up to the first 1 MiB of zeros.

        Reads with pread (faulting in a mostly unwritten 1 GiB tail through the mapping is slow) and
        skips holes.
        """
        end = pos = start
        zeros = 0
        with _descriptor(self.path, os.O_RDONLY) as fd:
            while pos < self.file_size and zeros < _ZERO_RUN:
                try:
                    data = os.lseek(fd, pos, os.SEEK_DATA)
                except OSError as e:
                    if e.errno == errno.ENXIO:  # only a hole is left
                        break
                    data = pos  # no SEEK_DATA here: read everything
                if data > pos:
                    zeros += data - pos
                    pos = data
                    continue
                chunk = os.pread(fd, min(_SCAN_CHUNK, self.file_size - pos), pos)
                kept = len(chunk.rstrip(b"\0"))
                if kept:
                    end = pos + kept
                    zeros = len(chunk) - kept
                else:
                    zeros += len(chunk)
                pos += len(chunk)
        return end

    def unmap(self) -> None:
        """Release the mapping (the pool's bookkeeping is the caller's); if readers still hold slices it is left
        to the garbage collector."""
        mm, view = self._mm, self._view
        if mm is None or view is None:
            return
        self._mm = self._view = None
        view.release()
        try:
            mm.close()
        except BufferError:
            log.debug("%s still has readers; unmapping later", self.path)

    def close(self) -> None:
        """Unmap and stop counting the file in the pool."""
        self.pool.discard(self)
        self.unmap()

    def destroy(self) -> None:
        """Close and delete the file."""
        self.close()
        os.unlink(self.path)


class MappedFileQueue:
    """The ordered segments of one directory (the commitlog, or one consume queue).

    ``wrote_where`` is the global offset just past the written data; ``flushed_where`` the offset up to
    which data is known durable.  Files are mapped on use and counted in ``pool`` (a private, unbounded one by
    default); ``pin_last`` keeps the newest one (the commitlog's write target) mapped.
    """

    def __init__(
        self,
        store_path: str,
        mapped_file_size: int,
        preallocate: bool = False,
        pool: MappedFilePool | None = None,
        pin_last: bool = False,
    ) -> None:
        self.store_path = store_path
        self.mapped_file_size = mapped_file_size
        self.preallocate = preallocate
        self.pool = MappedFilePool() if pool is None else pool
        self.pin_last = pin_last
        self.files: list[MappedFile] = []
        self.wrote_where = 0
        self.flushed_where = 0
        self._lock = threading.Lock()
        self._dir_dirty = False
        self._epoch = 0  # counts truncations: a flush planned before one must not raise flushed_where

    def load(self) -> list[str]:
        """List the existing files (mapped when first used); returns the paths of zero-length files removed (a
        crash during creation).

        Raises StoreLoadError for a file whose size differs from the configured one.
        """
        dropped: list[str] = []
        self.files = []
        self.wrote_where = self.flushed_where = 0
        self._epoch += 1
        try:
            names = sorted(os.listdir(self.store_path))
        except FileNotFoundError:
            return dropped
        for name in names:
            path = os.path.join(self.store_path, name)
            if len(name) != _NAME_DIGITS or not name.isdigit():
                log.warning("ignoring %s: not a segment file name", path)
                continue
            size = os.path.getsize(path)
            if size == 0:
                log.warning("removing empty segment %s", path)
                os.unlink(path)
                dropped.append(path)
                continue
            if size != self.mapped_file_size:
                raise StoreLoadError(f"{path}: length {size} does not match the configured {self.mapped_file_size}")
            self.files.append(MappedFile(path, int(name), size, self.pool, self._lock))
        if self.files:
            self.files[-1].pinned = self.pin_last
            # Until recovery says otherwise, everything mapped counts as written (Java does the same).
            self.wrote_where = self.flushed_where = self.files[-1].end_offset
        return dropped

    def segment_paths(self) -> list[str]:
        """Every segment-named file of the directory, listed or not."""
        with contextlib.suppress(FileNotFoundError):
            names = sorted(os.listdir(self.store_path))
            return [os.path.join(self.store_path, n) for n in names if len(n) == _NAME_DIGITS and n.isdigit()]
        return []

    def remove_files(self) -> list[str]:
        """Delete every segment-named file of the directory, listed or not (a derived queue about to be rebuilt);
        returns their paths."""
        self.close()
        self.wrote_where = self.flushed_where = 0
        self._epoch += 1
        removed = self.segment_paths()
        for path in removed:
            os.unlink(path)
        return removed

    @property
    def min_offset(self) -> int:
        """Offset of the first byte still on disk (0 when empty)."""
        return self.files[0].file_from_offset if self.files else 0

    def create_file(self, file_from_offset: int) -> MappedFile:
        """Create and append the segment starting at ``file_from_offset``."""
        if not self.files:
            os.makedirs(self.store_path, exist_ok=True)
        path = os.path.join(self.store_path, offset2file_name(file_from_offset))
        f = MappedFile.create(path, file_from_offset, self.mapped_file_size, self.preallocate, self.pool, self._lock)
        if self.files:
            self.files[-1].pinned = False
        f.pinned = self.pin_last
        self.files.append(f)
        self._dir_dirty = True
        return f

    def find_mapped_file_by_offset(self, offset: int) -> MappedFile | None:
        """The segment holding global ``offset``, or None."""
        files = self.files
        if not files:
            return None
        first = files[0]
        index = (offset - first.file_from_offset) // self.mapped_file_size
        if 0 <= index < len(files):
            f = files[index]
            if f.file_from_offset <= offset < f.end_offset:
                return f
        for f in files:  # a gap in the file names: fall back to a scan, as Java does
            if f.file_from_offset <= offset < f.end_offset:
                return f
        return None

    def plan_flush(self, target: int | None = None, least_pages: int = 0) -> FlushPlan | None:
        """What a flush up to ``target`` (default: all written) must sync, or None when nothing is to be done.

        With ``least_pages`` > 0 nothing is planned unless that many pages are dirty or a segment filled up.
        """
        with self._lock:
            return self._plan_flush(target, least_pages)

    def _plan_flush(self, target: int | None, least_pages: int) -> FlushPlan | None:
        start = self.flushed_where
        end = self.wrote_where if target is None else target
        files = self.files[:]
        if end <= start or not files:
            return None
        first = files[0].file_from_offset
        size = self.mapped_file_size
        lo = max((start - first) // size, 0)
        hi = min((end - 1 - first) // size, len(files) - 1)
        if least_pages > 0 and lo == hi and end // OS_PAGE_SIZE - start // OS_PAGE_SIZE < least_pages:
            return None
        sync_dir = self._dir_dirty
        self._dir_dirty = False  # cleared now so that a file created while this plan runs is synced next time
        return FlushPlan(end, self.store_path, sync_dir, tuple(f.path for f in files[lo : hi + 1]), self._epoch)

    def flushed(self, plan: FlushPlan) -> int:
        """Record ``plan`` as synced; returns the new ``flushed_where``.  A plan made before a truncation counts
        for nothing: what it synced may have been cut since."""
        if plan.epoch == self._epoch:
            self.flushed_where = max(self.flushed_where, plan.end)
        return self.flushed_where

    def flush_failed(self, plan: FlushPlan) -> None:
        """``plan``'s syncs failed: whatever it would have synced is synced by the next flush."""
        if plan.sync_dir:
            self._dir_dirty = True

    def flush(self, target: int | None = None, least_pages: int = 0) -> int:
        """Blocking: make data up to ``target`` (default: all written) durable; returns the new ``flushed_where``.

        With ``least_pages`` > 0 nothing is done unless that many pages are dirty or a segment filled up.
        """
        with self._lock:
            plan = self._plan_flush(target, least_pages)
            if plan is None:
                return self.flushed_where
            try:
                plan.sync()
            except BaseException:
                self.flush_failed(plan)
                raise
            return self.flushed(plan)

    def truncate_dirty_files(self, offset: int, always_zero: bool = False) -> tuple[int, list[str]]:
        """Cut everything from ``offset`` on: zero the rest of its segment, delete later segments.

        The rest is zeroed if non-zero bytes are seen before 1 MiB of zeros, or always with ``always_zero``
        (after a crash, data may follow a lost stretch).  Returns the non-zero bytes cut and the deleted paths.
        """
        cut = 0
        dropped: list[str] = []
        with self._lock:
            keep: list[MappedFile] = []
            for f in self.files:
                if f.end_offset <= offset:
                    keep.append(f)
                    continue
                pos = max(offset - f.file_from_offset, 0)
                dirty = f.last_nonzero(pos) - pos
                cut += dirty
                if pos == 0:
                    f.destroy()
                    dropped.append(f.path)
                    continue
                if dirty or always_zero:
                    f.zero_from(pos, self.preallocate)
                keep.append(f)
            if keep:
                keep[-1].pinned = self.pin_last
            self.files = keep
        self.wrote_where = offset
        self.flushed_where = min(self.flushed_where, offset)
        self._epoch += 1
        return cut, dropped

    def detach_first(self, count: int) -> list[MappedFile]:
        """Remove the ``count`` oldest segments from the queue (never the newest) and return them.

        Does not wait for a running flush (rebinding the list is atomic); pass them to ``destroy_files``.
        """
        count = min(count, len(self.files) - 1)
        if count <= 0:
            return []
        expired, self.files = self.files[:count], self.files[count:]
        return expired

    def destroy_files(self, files: list[MappedFile]) -> None:
        """Blocking: delete detached segments, after any flush that may still be syncing them."""
        with self._lock:
            for f in files:
                f.destroy()

    def delete_expired_file_by_time(
        self, expired_ms: int, now_ms: int, clean_immediately: bool, batch_max: int = 10
    ) -> list[MappedFile]:
        """Detach up to ``batch_max`` of the oldest segments last modified ``expired_ms`` ago or earlier
        (all but the newest with ``clean_immediately``), stopping at the first younger one
        (``deleteExpiredFileByTime``)."""
        count = 0
        for f in self.files[: min(len(self.files) - 1, batch_max)]:
            if not clean_immediately and now_ms < os.stat(f.path).st_mtime_ns // 1_000_000 + expired_ms:
                break  # never delete from the middle
            count += 1
        return self.detach_first(count)

    def close(self) -> None:
        """Unmap every segment."""
        with self._lock:
            for f in self.files:
                f.close()
            self.files = []

    def destroy(self) -> None:
        """Delete every segment and the directory if it ends up empty."""
        with self._lock:
            for f in self.files:
                f.destroy()
            self.files = []
        self.wrote_where = self.flushed_where = 0
        self._epoch += 1
        with contextlib.suppress(OSError):  # not empty or already gone
            os.rmdir(self.store_path)
