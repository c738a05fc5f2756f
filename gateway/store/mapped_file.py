"""Fixed-size segment files named by their starting global offset, mapped whole (MappedFile, MappedFileQueue).

Threading: appends, reads and changes to the file list happen on one thread (the reactor); ``flush`` and
``destroy_files`` may run on worker threads.  A queue's lock is held while fsyncing and while closing or
deleting files, so a worker never syncs a file descriptor that is being closed.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import mmap
import os
import threading

log = logging.getLogger(__name__)

OS_PAGE_SIZE = 4096
_NAME_DIGITS = 20
# Looking for a torn or garbage tail stops after this many zero bytes (holes count as zeros).
_ZERO_RUN = 1024 * 1024
_SCAN_CHUNK = 64 * 1024


class StoreLoadError(RuntimeError):
    """The files on disk do not match the configuration (Java refuses to start in that case)."""


def offset2file_name(offset: int) -> str:
    """``UtilAll.offset2FileName``: 20-digit zero-padded offset."""
    return f"{offset:0{_NAME_DIGITS}d}"


def _preallocate(fd: int, offset: int, length: int) -> None:
    try:
        os.posix_fallocate(fd, offset, length)
    except OSError as e:  # e.g. a filesystem without fallocate: stay sparse
        if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class MappedFile:
    """One segment: ``file_size`` bytes starting at global offset ``file_from_offset``, mapped read-write."""

    __slots__ = ("fd", "file_from_offset", "file_size", "mm", "path", "view")

    def __init__(self, path: str, file_from_offset: int, file_size: int, fd: int) -> None:
        self.path = path
        self.file_from_offset = file_from_offset
        self.file_size = file_size
        self.fd = fd  # kept for fdatasync, which releases the GIL (mmap.flush does not)
        self.mm = mmap.mmap(fd, file_size)
        self.view = memoryview(self.mm)

    @classmethod
    def create(cls, path: str, file_from_offset: int, file_size: int, preallocate: bool) -> MappedFile:
        """Create the file at full size; ``preallocate`` reserves its blocks (writes to a sparse file fault slowly)."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.ftruncate(fd, file_size)
            if preallocate:
                _preallocate(fd, 0, file_size)
            return cls(path, file_from_offset, file_size, fd)
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise

    @classmethod
    def open(cls, path: str, file_from_offset: int, file_size: int) -> MappedFile:
        """Map an existing file."""
        fd = os.open(path, os.O_RDWR)
        try:
            return cls(path, file_from_offset, file_size, fd)
        except BaseException:
            os.close(fd)
            raise

    @property
    def end_offset(self) -> int:
        """Global offset just past this file."""
        return self.file_from_offset + self.file_size

    def sync(self) -> None:
        """fdatasync: on Linux it also writes back pages dirtied through the mapping."""
        os.fdatasync(self.fd)

    def zero_from(self, pos: int) -> None:
        """Make bytes ``pos..end`` zero by cutting the file and growing it back (cheap, even for a 1 GiB tail)."""
        os.ftruncate(self.fd, pos)
        os.ftruncate(self.fd, self.file_size)

    def last_nonzero(self, start: int) -> int:
        """Position just past the last non-zero byte from ``start`` up to the first 1 MiB of zeros.

        Reads with pread (faulting in a mostly unwritten 1 GiB tail through the mapping is slow) and
        skips holes.
        """
        end = pos = start
        zeros = 0
        while pos < self.file_size and zeros < _ZERO_RUN:
            try:
                data = os.lseek(self.fd, pos, os.SEEK_DATA)
            except OSError as e:
                if e.errno == errno.ENXIO:  # only a hole is left
                    break
                data = pos  # no SEEK_DATA here: read everything
            if data > pos:
                zeros += data - pos
                pos = data
                continue
            chunk = os.pread(self.fd, min(_SCAN_CHUNK, self.file_size - pos), pos)
            kept = len(chunk.rstrip(b"\0"))
            if kept:
                end = pos + kept
                zeros = len(chunk) - kept
            else:
                zeros += len(chunk)
            pos += len(chunk)
        return end

    def close(self) -> None:
        """Unmap and close; if readers still hold slices the mapping is left to the garbage collector."""
        self.view.release()
        try:
            self.mm.close()
        except BufferError:
            log.debug("%s still has readers; unmapping later", self.path)
        os.close(self.fd)

    def destroy(self) -> None:
        """Close and delete the file."""
        self.close()
        os.unlink(self.path)


class MappedFileQueue:
    """The ordered segments of one directory (the commitlog, or one consume queue).

    ``wrote_where`` is the global offset just past the written data; ``flushed_where`` the offset up to
    which data is known durable.
    """

    def __init__(self, store_path: str, mapped_file_size: int, preallocate: bool = False) -> None:
        self.store_path = store_path
        self.mapped_file_size = mapped_file_size
        self.preallocate = preallocate
        self.files: list[MappedFile] = []
        self.wrote_where = 0
        self.flushed_where = 0
        self._lock = threading.Lock()
        self._dir_dirty = False

    def load(self) -> list[str]:
        """Map the existing files; returns the paths of zero-length files removed (a crash during creation).

        Raises StoreLoadError for a file whose size differs from the configured one.
        """
        dropped: list[str] = []
        self.files = []
        self.wrote_where = self.flushed_where = 0
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
            self.files.append(MappedFile.open(path, int(name), size))
        if self.files:
            # Until recovery says otherwise, everything mapped counts as written (Java does the same).
            self.wrote_where = self.flushed_where = self.files[-1].end_offset
        return dropped

    @property
    def min_offset(self) -> int:
        """Offset of the first byte still on disk (0 when empty)."""
        return self.files[0].file_from_offset if self.files else 0

    def create_file(self, file_from_offset: int) -> MappedFile:
        """Create and append the segment starting at ``file_from_offset``."""
        if not self.files:
            os.makedirs(self.store_path, exist_ok=True)
        path = os.path.join(self.store_path, offset2file_name(file_from_offset))
        f = MappedFile.create(path, file_from_offset, self.mapped_file_size, self.preallocate)
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

    def flush(self, target: int | None = None, least_pages: int = 0) -> int:
        """Make data up to ``target`` (default: all written) durable; returns the new ``flushed_where``.

        With ``least_pages`` > 0 nothing is done unless that many pages are dirty or a segment filled up.
        """
        with self._lock:
            start = self.flushed_where
            end = self.wrote_where if target is None else target
            if end <= start:
                return start
            files = self.files[:]
            if not files:
                return start
            first = files[0].file_from_offset
            size = self.mapped_file_size
            lo = max((start - first) // size, 0)
            hi = min((end - 1 - first) // size, len(files) - 1)
            if least_pages > 0 and lo == hi and end // OS_PAGE_SIZE - start // OS_PAGE_SIZE < least_pages:
                return start
            if self._dir_dirty:
                self._dir_dirty = False  # cleared before the sync so a file created meanwhile is synced next time
                _fsync_dir(self.store_path)
            for f in files[lo : hi + 1]:
                f.sync()
            self.flushed_where = end
            return end

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
                    f.zero_from(pos)
                    if self.preallocate:
                        _preallocate(f.fd, pos, f.file_size - pos)
                keep.append(f)
            self.files = keep
        self.wrote_where = offset
        self.flushed_where = min(self.flushed_where, offset)
        return cut, dropped

    def detach_first(self, count: int) -> list[MappedFile]:
        """Remove the ``count`` oldest segments from the queue (never the newest) and return them, still mapped.

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
        """Unmap and close every segment."""
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
        with contextlib.suppress(OSError):  # not empty or already gone
            os.rmdir(self.store_path)
