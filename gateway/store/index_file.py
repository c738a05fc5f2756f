"""One index file: RocketMQ's 40-byte header, a hash-slot table and chained 20-byte entries (IndexFile).

Layout (shared/rocketmq-wire.md §6.5): header at 0, ``hash_slot_num`` int32 slots at 40, entries after
them.  A slot holds the number of the newest entry whose key hashes to it; each entry holds the number
of the previous one in its slot, so a lookup walks newest to oldest.  Entry 0 is never used.

The header is written into the mapping after every message (Java writes it only on flush), so a process
killed with -9 leaves a file that agrees with its entries.
"""

from __future__ import annotations

import operator
import os
import struct
import threading

from gateway.remoting.message import java_string_hash

from .mapped_file import MappedFile, MappedFilePool, StoreLoadError
from .native import c_store as _c_store

INDEX_HEADER_SIZE = 40
HASH_SLOT_SIZE = 4
INDEX_SIZE = 20
INVALID_INDEX = 0

# beginTimestamp, endTimestamp, beginPhyOffset, endPhyOffset, hashSlotCount, indexCount
_HEADER = struct.Struct(">qqqqii")
# keyHash, phyOffset, timeDiff (s), prevIndex
_ENTRY = struct.Struct(">iqii")
_SLOT = struct.Struct(">i")
_unpack_slot = _SLOT.unpack_from
_pack_slot = _SLOT.pack_into
_pack_entry = _ENTRY.pack_into
_header_fields = operator.attrgetter(
    "begin_timestamp", "end_timestamp", "begin_phy_offset", "end_phy_offset", "hash_slot_count", "index_count"
)
_INT_MAX = 0x7FFFFFFF
_MASK = 0xFFFFFFFF

# Java's String.hashCode is sum(c[i] * 31**(n-1-i)) mod 2**32: a base-31 number whose "digits" c[i] may exceed
# 30.  Writing each ASCII code as 31*q + r splits it into two strings of real base-31 digits, which int() parses
# in C: hash = int(r-digits, 31) + 31 * int(q-digits, 31).  Several times faster than a Python loop.
_DIGITS = b"0123456789abcdefghijklmnopqrstu"
_LOW_DIGITS = bytes(_DIGITS[c % 31] for c in range(128)) + bytes(128)
_HIGH_DIGITS = bytes(_DIGITS[c // 31] for c in range(128)) + bytes(128)


def index_key_hash(key: str) -> int:
    """``indexKeyHashMethod``: ``abs(key.hashCode())``, Integer.MIN_VALUE mapped to 0."""
    if key.isascii() and key:
        data = key.encode("ascii")
        h = (int(data.translate(_LOW_DIGITS), 31) + 31 * int(data.translate(_HIGH_DIGITS), 31)) & _MASK
        # abs() of the signed value; Integer.MIN_VALUE stays negative in Java and becomes 0.
        return 0 if h == 0x80000000 else (1 << 32) - h if h & 0x80000000 else h
    h = java_string_hash(key)
    return 0 if h == -(1 << 31) else abs(h)


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    """Bytes of an index file with these capacities (420000040 for Java's defaults)."""
    return INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE + index_num * INDEX_SIZE


class IndexFile:
    """An index file (its ``mapped_file``, mapped on use); header fields are kept as attributes and mirrored into
    the mapping."""

    __slots__ = (
        "_entries_at",
        "begin_phy_offset",
        "begin_timestamp",
        "dirty",
        "end_phy_offset",
        "end_timestamp",
        "hash_slot_count",
        "hash_slot_num",
        "index_count",
        "index_num",
        "mapped_file",
    )

    def __init__(self, mapped_file: MappedFile, hash_slot_num: int, index_num: int) -> None:
        self.mapped_file = mapped_file
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self._entries_at = INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE
        self.header = _HEADER.unpack_from(mapped_file.mm, 0)
        # A fresh file has 0 (entry 0 is reserved); a damaged one must not send lookups past the mapping.
        self.index_count = min(max(self.index_count, 1), index_num)
        self.dirty = False

    @classmethod
    def create(
        cls,
        path: str,
        hash_slot_num: int,
        index_num: int,
        end_phy_offset: int,
        end_timestamp: int,
        pool: MappedFilePool,
        lock: threading.Lock,
    ) -> IndexFile:
        """A new sparse file continuing from the previous file's end (both 0 for the first file); ``pool`` counts
        its mapping, ``lock`` is its owner's."""
        size = index_file_size(hash_slot_num, index_num)
        mapped_file = MappedFile.create(path, 0, size, False, pool, lock)
        try:
            f = cls(mapped_file, hash_slot_num, index_num)
        except BaseException:
            mapped_file.destroy()
            raise
        if end_phy_offset > 0:
            f.begin_phy_offset = f.end_phy_offset = end_phy_offset
        if end_timestamp > 0:
            f.begin_timestamp = f.end_timestamp = end_timestamp
        f.write_header()
        return f

    @classmethod
    def open(
        cls, path: str, hash_slot_num: int, index_num: int, pool: MappedFilePool, lock: threading.Lock
    ) -> IndexFile:
        """An existing file (its header read now); StoreLoadError if its size does not match the capacities."""
        size = os.path.getsize(path)
        if size != index_file_size(hash_slot_num, index_num):
            raise StoreLoadError(f"{path}: length {size} does not match maxHashSlotNum/maxIndexNum")
        return cls(MappedFile(path, 0, size, pool, lock), hash_slot_num, index_num)

    @property
    def path(self) -> str:
        """The file's path."""
        return self.mapped_file.path

    @property
    def header(self) -> tuple[int, int, int, int, int, int]:
        """The header's fields: (beginTimestamp, endTimestamp, beginPhyOffset, endPhyOffset, hashSlotCount,
        indexCount)."""
        return _header_fields(self)

    @header.setter
    def header(self, fields: tuple[int, ...]) -> None:
        (
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        ) = fields

    @property
    def is_empty(self) -> bool:
        """No entry yet."""
        return self.index_count <= 1

    def write_header(self) -> None:
        """Mirror the header attributes into the mapping."""
        _HEADER.pack_into(self.mapped_file.mm, 0, *self.header)
        self.dirty = True

    def put_message(self, topic: str, properties: str, phy_offset: int, store_timestamp: int) -> bool:
        """Index the message at ``phy_offset`` under its UNIQ_KEY and KEYS in one call to the C store, header
        included; False, with nothing written, where :meth:`put_keys` must (no C store, a key C cannot hash, more
        keys than the file has room for)."""
        c = _c_store
        if c is None:
            return False
        header = c.index_message(
            self.mapped_file.mm,
            self.hash_slot_num,
            self.index_num,
            self.header,
            topic,
            properties,
            phy_offset,
            store_timestamp,
        )
        if header is NotImplemented:
            return False
        self.header = header
        self.dirty = True
        return True

    def put_keys(self, keys: list[str], phy_offset: int, store_timestamp: int) -> int:
        """Add an entry for each key of the message at ``phy_offset``; returns how many fit (all unless the
        file filled up).  The header, written afterwards, records the message as the last one indexed even
        when it has no key."""
        first = count = self.index_count
        room = self.index_num - count
        if len(keys) > room:
            keys = keys[: max(room, 0)]
        if keys:
            if count <= 1:
                # The first entry starts the file's span (Java sets it after computing this entry's time
                # against the previous file's end, which can date the entry seconds late).
                self.begin_phy_offset = phy_offset
                self.begin_timestamp = store_timestamp
            begin = self.begin_timestamp
            time_diff = (store_timestamp - begin) // 1000 if begin > 0 else 0
            time_diff = 0 if time_diff < 0 else _INT_MAX if time_diff > _INT_MAX else time_diff
            count = self._put_entries(keys, count, phy_offset, time_diff)
            self.index_count = count
            self.end_timestamp = store_timestamp
        self.end_phy_offset = phy_offset
        self.write_header()
        return count - first

    def _put_entries(self, keys: list[str], count: int, phy_offset: int, time_diff: int) -> int:
        """Entries ``count``.. for ``keys``, each chained to its slot's previous entry; returns the next count."""
        mm = self.mapped_file.mm
        slots = self.hash_slot_num
        entry_pos = self._entries_at + count * INDEX_SIZE
        for key in keys:
            key_hash = index_key_hash(key)
            slot_pos = INDEX_HEADER_SIZE + key_hash % slots * HASH_SLOT_SIZE
            (prev,) = _unpack_slot(mm, slot_pos)
            if prev <= INVALID_INDEX or prev > count:
                prev = INVALID_INDEX
                self.hash_slot_count += 1
            _pack_entry(mm, entry_pos, key_hash, phy_offset, time_diff, prev)
            _pack_slot(mm, slot_pos, count)
            count += 1
            entry_pos += INDEX_SIZE
        return count

    def is_time_matched(self, begin: int, end: int) -> bool:
        """Whether [begin, end] overlaps the file's time span (``isTimeMatched``)."""
        b, e = self.begin_timestamp, self.end_timestamp
        return (begin < b and end > e) or b <= begin <= e or b <= end <= e

    def select_phy_offsets(self, out: list[int], key_hash: int, max_num: int, begin: int, end: int) -> None:
        """Append to ``out`` the commitlog offsets of entries for ``key_hash`` stored within [begin, end].

        Walks the slot's chain newest first and stops at ``max_num`` results or an entry older than ``begin``.
        """
        count = self.index_count
        if count <= 1:
            return
        mm = self.mapped_file.mm
        (index,) = _SLOT.unpack_from(mm, INDEX_HEADER_SIZE + key_hash % self.hash_slot_num * HASH_SLOT_SIZE)
        if index <= INVALID_INDEX or index > count:
            return
        base = self.begin_timestamp
        while len(out) < max_num:
            hash_read, phy, time_diff, prev = _ENTRY.unpack_from(mm, self._entries_at + index * INDEX_SIZE)
            if time_diff < 0:
                break
            time_read = base + time_diff * 1000
            if hash_read == key_hash and begin <= time_read <= end:
                out.append(phy)
            # Chains only point backwards; anything else is damage and ends the walk.
            if prev <= INVALID_INDEX or prev >= index or time_read < begin:
                break
            index = prev

    def truncate(self, phy_end: int) -> int:
        """Drop the newest entries pointing at or past commitlog ``phy_end``; returns how many.

        Each dropped entry's slot is pointed back at the entry's predecessor, newest first, which restores the
        slots exactly as they were before those entries were added.  ``end_*`` then describe the last entry
        left (its time to the second, as stored); a file left empty gets a zero header.
        """
        mm = self.mapped_file.mm
        count = self.index_count
        dropped = 0
        while count > 1:
            pos = self._entries_at + (count - 1) * INDEX_SIZE
            key_hash, phy, time_diff, prev = _ENTRY.unpack_from(mm, pos)
            if phy < phy_end:
                self.end_phy_offset = phy
                self.end_timestamp = self.begin_timestamp + time_diff * 1000
                break
            slot_pos = INDEX_HEADER_SIZE + key_hash % self.hash_slot_num * HASH_SLOT_SIZE
            if _SLOT.unpack_from(mm, slot_pos)[0] == count - 1:
                _SLOT.pack_into(mm, slot_pos, prev)
                if prev == INVALID_INDEX:
                    self.hash_slot_count -= 1
            mm[pos : pos + INDEX_SIZE] = bytes(INDEX_SIZE)
            count -= 1
            dropped += 1
        self.index_count = count
        if count <= 1:
            self.begin_timestamp = self.end_timestamp = self.begin_phy_offset = self.end_phy_offset = 0
        self.write_header()
        return dropped

    def flush(self) -> None:
        """fdatasync the file (also writes back pages dirtied through the mapping)."""
        self.dirty = False  # cleared first: a write during the sync marks the file again
        self.mapped_file.sync()

    def close(self) -> None:
        """Unmap."""
        self.mapped_file.close()

    def destroy(self) -> None:
        """Close and delete the file."""
        self.mapped_file.destroy()
