"""The epoch history of a commitlog (Apache 5's EpochFileCache) in ``epochFileCheckpoint``.

Each entry says from which commitlog offset on the master of that epoch wrote; the next entry's start ends
it, and the commitlog's max offset ends the last one. Two brokers agree up to the end of the newest epoch
they both have with the same start offset: a former master truncates its commitlog there before it follows
the new master (its tail beyond it was never acknowledged by the group).

The file is Apache's CheckpointFile: the entry count, the CRC32 of the entry lines, then ``epoch-startOffset``
lines; it is replaced atomically.
"""

from __future__ import annotations

import zlib
from pathlib import Path

from twisted.logger import Logger

from gateway.persist import write_atomically
from gateway.remoting.controller_protocol import EpochEntry

log = Logger()

FILE_NAME = "epochFileCheckpoint"


def _crc32(text: str) -> int:
    # UtilAll.crc32: the CRC masked to a non-negative int.
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


class EpochFileCache:
    """Epoch → start offset, ascending in both, persisted on every change."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._entries: list[EpochEntry] = []

    def load(self) -> None:
        """Read the file; a missing one is an empty history, a corrupt one is reported and ignored."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return
        lines = text.splitlines()
        try:
            count, crc = int(lines[0]), int(lines[1])
            body = lines[2 : 2 + count]
            if len(body) != count or _crc32("".join(line + "\n" for line in body)) != crc:
                raise ValueError("checksum or entry count does not match")
            entries = []
            for line in body:
                epoch, _, start = line.partition("-")
                entries.append(EpochEntry(int(epoch), int(start)))
        except (ValueError, IndexError) as e:
            log.error("{path} is corrupt ({error}); starting with no epoch history", path=self.path, error=e)
            return
        self._entries = sorted(entries, key=lambda e: e.epoch)

    def _persist(self) -> None:
        body = "".join(f"{e.epoch}-{e.start_offset}\n" for e in self._entries)
        write_atomically(self.path, f"{len(self._entries)}\n{_crc32(body)}\n{body}".encode())

    @property
    def last_epoch(self) -> int:
        """The newest epoch, -1 without any."""
        return self._entries[-1].epoch if self._entries else -1

    @property
    def last_start_offset(self) -> int:
        """Where the newest epoch began, 0 without any."""
        return self._entries[-1].start_offset if self._entries else 0

    def entries(self, max_offset: int) -> list[EpochEntry]:
        """The history with end offsets, as far as a commitlog ending at ``max_offset`` holds it."""
        held = [e for e in self._entries if e.start_offset <= max_offset]
        if not held:
            return []
        ends = [e.start_offset for e in held[1:]] + [max_offset]
        return [EpochEntry(e.epoch, e.start_offset, end) for e, end in zip(held, ends, strict=True)]

    def append(self, epoch: int, start_offset: int) -> None:
        """A new master's epoch starts at ``start_offset`` (ignored if not newer than the last one)."""
        if self._entries and (epoch <= self._entries[-1].epoch or start_offset < self._entries[-1].start_offset):
            return
        self._entries.append(EpochEntry(epoch, start_offset))
        self._persist()

    def replace(self, entries: list[EpochEntry]) -> None:
        """Take over a master's history (a slave's bytes are the master's, so are their epochs)."""
        self._entries = [EpochEntry(e.epoch, e.start_offset) for e in sorted(entries, key=lambda e: e.epoch)]
        self._persist()


def find_consistent_point(local: list[EpochEntry], remote: list[EpochEntry]) -> int:
    """The offset up to which two histories (with end offsets) agree; -1 when they share no epoch."""
    theirs = {e.epoch: e for e in remote}
    for mine in reversed(local):
        other = theirs.get(mine.epoch)
        if other is not None and other.start_offset == mine.start_offset:
            return min(mine.end_offset, other.end_offset)
    return -1
