"""Per (topic, queueId) index into the commitlog: 20-byte units, logical offset n at byte n*20 (ConsumeQueue)."""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable

from .config import CQ_STORE_UNIT_SIZE
from .mapped_file import MappedFile, MappedFilePool, MappedFileQueue
from .paths import store_child

log = logging.getLogger(__name__)

# commitlog offset (int64), record size (int32), tagsCode (int64)
_UNIT = struct.Struct(">qiq")
# Java front-pads a queue whose first file starts late with these (offset 0, size Integer.MAX_VALUE, tag 0).
BLANK_UNIT_SIZE = 0x7FFFFFFF
_BLANK_UNIT = _UNIT.pack(0, BLANK_UNIT_SIZE, 0)


class ConsumeQueue:
    """One consume queue in ``<root>/<topic>/<queueId>``; ``max_physic_offset`` is the commitlog offset just past
    the last indexed record.

    Costs no file (and no descriptor) until its first unit is written.  StorePathError if ``topic`` is not a
    plain path component.
    """

    def __init__(
        self, topic: str, queue_id: int, root: str, mapped_file_size: int, pool: MappedFilePool | None = None
    ) -> None:
        self.topic = topic
        self.queue_id = queue_id
        path = os.path.join(store_child(root, topic), str(queue_id))
        self.queue = MappedFileQueue(path, mapped_file_size, pool=pool)
        self.max_physic_offset = -1
        self.min_logic_offset = 0  # bytes, like Java

    @property
    def max_offset_in_queue(self) -> int:
        """Number of units written: the next logical offset."""
        return self.queue.wrote_where // CQ_STORE_UNIT_SIZE

    @property
    def min_offset_in_queue(self) -> int:
        """First readable logical offset."""
        return self.min_logic_offset // CQ_STORE_UNIT_SIZE

    def load(self) -> list[str]:
        """List the files on disk; returns removed empty files."""
        dropped = self.queue.load()
        self.min_logic_offset = self.queue.min_offset
        return dropped

    def recover(self, abnormal: bool) -> tuple[int, list[str]]:
        """Find the written end (scanning from the third-last file, as Java) and cut what follows.

        Returns (non-zero bytes cut, deleted files).
        """
        files = self.queue.files
        if not files:
            return 0, []
        end = files[max(len(files) - 3, 0)].file_from_offset
        self.max_physic_offset = -1
        for f in files[max(len(files) - 3, 0) :]:
            if f.file_from_offset != end:
                break  # a missing file: everything after it is unusable
            for offset, size, _ in _UNIT.iter_unpack(f.view):
                if offset < 0 or size <= 0:
                    break
                end += CQ_STORE_UNIT_SIZE
                if size != BLANK_UNIT_SIZE:
                    self.max_physic_offset = offset + size
            if end < f.end_offset:
                break
        result = self.queue.truncate_dirty_files(end, always_zero=abnormal)
        if not self.queue.files:
            self.min_logic_offset = end  # nothing left: an empty queue whose min is its max
        return result

    def _unit_at(self, byte_offset: int) -> tuple[int, int, int] | None:
        f = self.queue.find_mapped_file_by_offset(byte_offset)
        if f is None or byte_offset >= self.queue.wrote_where:
            return None
        return _UNIT.unpack_from(f.mm, byte_offset - f.file_from_offset)

    def get_unit(self, index: int) -> tuple[int, int, int] | None:
        """(commitlog offset, size, tagsCode) at logical ``index``, or None."""
        byte_offset = index * CQ_STORE_UNIT_SIZE
        if byte_offset < self.min_logic_offset:
            return None
        return self._unit_at(byte_offset)

    def put_message_position_info(self, offset: int, size: int, tags_code: int, cq_offset: int) -> bool:
        """Write the unit for logical offset ``cq_offset``; False if the queue already indexes that record."""
        if offset + size <= self.max_physic_offset:
            return False
        q = self.queue
        expect = cq_offset * CQ_STORE_UNIT_SIZE
        files = q.files
        if not files:
            # First file of the queue: it starts at the file holding ``expect``, blank-padded up to it.
            start = expect - expect % q.mapped_file_size
            q.create_file(start)
            q.wrote_where = q.flushed_where = start
            self.min_logic_offset = expect
            self._fill_blank(start, expect)
        elif expect != q.wrote_where:
            if expect < q.wrote_where:
                log.warning("%s-%d: unit %d already written", self.topic, self.queue_id, cq_offset)
                return False
            log.warning("%s-%d: gap before unit %d, padding with blank units", self.topic, self.queue_id, cq_offset)
            self._fill_blank(q.wrote_where, expect)
        f = q.files[-1]
        if expect >= f.end_offset:
            f = q.create_file(f.end_offset)
        _UNIT.pack_into(f.mm, expect - f.file_from_offset, offset, size, tags_code)
        q.wrote_where = expect + CQ_STORE_UNIT_SIZE
        self.max_physic_offset = offset + size
        return True

    def _fill_blank(self, start: int, end: int) -> None:
        q = self.queue
        while start < end:
            f = q.files[-1]
            if start >= f.end_offset:
                f = q.create_file(f.end_offset)
            stop = min(end, f.end_offset)
            f.mm[start - f.file_from_offset : stop - f.file_from_offset] = _BLANK_UNIT * (
                (stop - start) // CQ_STORE_UNIT_SIZE
            )
            q.wrote_where = start = stop

    def get_index_buffer(self, start_index: int) -> memoryview | None:
        """Units from ``start_index`` to the end of what is written in that file (``getIndexBuffer``)."""
        byte_offset = start_index * CQ_STORE_UNIT_SIZE
        if byte_offset < self.min_logic_offset:
            return None
        f = self.queue.find_mapped_file_by_offset(byte_offset)
        if f is None:
            return None
        end = min(f.end_offset, self.queue.wrote_where)
        if byte_offset >= end:
            return None
        return f.view[byte_offset - f.file_from_offset : end - f.file_from_offset]

    def roll_next_file(self, index: int) -> int:
        """First logical offset of the file after the one holding ``index``."""
        units = self.queue.mapped_file_size // CQ_STORE_UNIT_SIZE
        return index + units - index % units

    def correct_min_offset(self, phy_min_offset: int) -> None:
        """Move the min offset to the first unit of the first file whose record is still in the commitlog.

        When the queue has a single file and none of its records is left, the queue is empty: min = max.
        """
        files = self.queue.files
        if not files:
            return
        f = files[0]
        written = min(f.end_offset, self.queue.wrote_where) - f.file_from_offset
        for i, (offset, size, _) in enumerate(_UNIT.iter_unpack(f.view[:written])):
            if size != BLANK_UNIT_SIZE and offset >= phy_min_offset:
                self.min_logic_offset = f.file_from_offset + i * CQ_STORE_UNIT_SIZE
                return
        if len(files) == 1:
            self.min_logic_offset = max(self.min_logic_offset, self.queue.wrote_where)

    def delete_expired_file(self, phy_min_offset: int) -> list[MappedFile]:
        """Detach the oldest files (never the newest) whose last non-blank unit points below commitlog
        ``phy_min_offset``, then correct the min offset (``deleteExpiredFile``).  The caller destroys the returned
        files.

        A file of blank units only holds nothing to read: it counts as pointing at 0, as Java reads a blank.
        """
        files = self.queue.files
        count = 0
        for f in files[:-1]:
            if _last_real_offset(f.view) >= phy_min_offset:
                break
            count += 1
        expired = self.queue.detach_first(count)
        self.correct_min_offset(phy_min_offset)
        return expired

    def get_offset_in_queue_by_time(self, timestamp: int, store_time: Callable[[int, int], int]) -> int:
        """Logical offset whose record's store time is ``timestamp``, else the nearer neighbour, else the edge.

        ``store_time(commitlog offset, size)`` reads a record's store time (-1 if gone).  Binary search over
        the whole queue; on equal times the first match wins.  0 for an empty queue.
        """
        low = self.min_offset_in_queue
        high = self.max_offset_in_queue - 1
        if high < low:
            return 0
        left = right = -1
        left_time = right_time = -1
        while low <= high:
            mid = (low + high) // 2
            probe = self._nearest_real_unit(mid, low, high)
            if probe is None:
                break  # only blanks left between low and high
            at, (offset, size, _) = probe
            mid_time = store_time(offset, size)
            # Whatever lies between mid and the probe is blank: step past both.
            if mid_time < 0:  # no longer in the commitlog: older than anything still there
                low = max(at, mid) + 1
            elif mid_time < timestamp:
                left, left_time = at, mid_time
                low = max(at, mid) + 1
            else:
                right, right_time = at, mid_time
                high = min(at, mid) - 1
        if right < 0:
            return max(left, 0)
        if left < 0 or right_time == timestamp:
            return right
        return right if timestamp - left_time > right_time - timestamp else left

    def _nearest_real_unit(self, index: int, low: int, high: int) -> tuple[int, tuple[int, int, int]] | None:
        """(logical offset, unit) of the first non-blank unit from ``index`` up to ``high``, else down to ``low``."""
        for at in (*range(index, high + 1), *range(index - 1, low - 1, -1)):
            unit = self.get_unit(at)
            if unit is not None and unit[1] != BLANK_UNIT_SIZE:
                return at, unit
        return None

    def truncate_dirty_logic_files(self, phy_offset: int) -> tuple[int, list[str]]:
        """Drop units pointing at or past commitlog ``phy_offset``; returns (units dropped, deleted files)."""
        q = self.queue
        end = q.wrote_where
        floor = q.min_offset
        while end > floor:
            unit = self._unit_at(end - CQ_STORE_UNIT_SIZE)
            # A blank points nowhere: it goes with the units after it until one below the cut is found.
            if unit is None or (unit[0] < phy_offset and unit[1] != BLANK_UNIT_SIZE):
                break
            end -= CQ_STORE_UNIT_SIZE
        dropped_units = (q.wrote_where - end) // CQ_STORE_UNIT_SIZE
        if not dropped_units:
            return 0, []
        _, dropped = q.truncate_dirty_files(end)
        self.max_physic_offset = -1
        unit = self._unit_at(end - CQ_STORE_UNIT_SIZE) if end > floor else None
        if unit is not None and unit[1] != BLANK_UNIT_SIZE:
            self.max_physic_offset = unit[0] + unit[1]
        if not q.files:
            self.min_logic_offset = end
        return dropped_units, dropped

    def blank_units_in(self, ranges: list[tuple[int, int]]) -> int:
        """Overwrite with blank units (which pulls pass over) the units pointing into any of the commitlog
        ``ranges`` ([start, end), in order), stretches recovery skipped as damaged; returns how many.  Walks back
        once from the newest unit to the first pointing below the first range."""
        q = self.queue
        blanked = 0
        first = ranges[0][0]
        at = q.wrote_where - CQ_STORE_UNIT_SIZE
        while at >= self.min_logic_offset:
            f = q.find_mapped_file_by_offset(at)
            if f is None:
                break
            offset, size, _ = _UNIT.unpack_from(f.mm, at - f.file_from_offset)
            if size != BLANK_UNIT_SIZE:
                if offset < first:
                    break
                if any(start <= offset < end for start, end in ranges):
                    pos = at - f.file_from_offset
                    f.mm[pos : pos + CQ_STORE_UNIT_SIZE] = _BLANK_UNIT
                    q.flushed_where = min(q.flushed_where, at)  # the next flush syncs the change
                    blanked += 1
            at -= CQ_STORE_UNIT_SIZE
        return blanked

    def flush(self, least_pages: int = 0) -> int:
        """fsync written units (see MappedFileQueue.flush); returns the flushed byte offset."""
        return self.queue.flush(None, least_pages)

    def close(self) -> None:
        """Unmap the files."""
        self.queue.close()

    def destroy(self) -> None:
        """Delete the files and the queue directory."""
        self.queue.destroy()
        self.max_physic_offset = -1
        self.min_logic_offset = 0


def _last_real_offset(units: memoryview) -> int:
    """Commitlog offset of the last non-blank unit in a full file of ``units``; 0 if all are blank."""
    for at in range(len(units) - CQ_STORE_UNIT_SIZE, -1, -CQ_STORE_UNIT_SIZE):
        offset, size, _ = _UNIT.unpack_from(units, at)
        if size != BLANK_UNIT_SIZE:
            return offset
    return 0
