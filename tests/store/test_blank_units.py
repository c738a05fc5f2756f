"""Blank units in the middle of a consume queue (left where recovery skipped a damaged record): the readers
that walk units in commitlog order pass over them instead of reading them as commitlog offset 0."""

from __future__ import annotations

from pathlib import Path

from gateway.store.consume_queue import BLANK_UNIT_SIZE, ConsumeQueue

from .conftest import CQ_SIZE

UNITS_PER_FILE = CQ_SIZE // 20
SIZE = 100


def queue_of(root: Path, count: int, blank: range) -> ConsumeQueue:
    """A queue whose unit i points at commitlog 1000 + i*SIZE, the units in ``blank`` blanked as recovery does."""
    cq = ConsumeQueue("TopicTest", 0, str(root), CQ_SIZE)
    for i in range(count):
        assert cq.put_message_position_info(1000 + i * SIZE, SIZE, 0, i)
    if blank:
        assert cq.blank_units_in([(1000 + blank.start * SIZE, 1000 + blank.stop * SIZE)]) == len(blank)
    return cq


def test_a_blank_last_unit_does_not_expire_a_file_still_read(tmp_path: Path) -> None:
    last = UNITS_PER_FILE - 1
    cq = queue_of(tmp_path, UNITS_PER_FILE + 4, range(last, last + 1))
    try:
        # Records below unit 10 are gone; units 10..14 of the first file are still in the commitlog.
        assert cq.delete_expired_file(1000 + 10 * SIZE) == []
        assert len(cq.queue.files) == 2
        assert cq.min_offset_in_queue == 10
        assert cq.get_unit(14) == (1000 + 14 * SIZE, SIZE, 0)
        # Once the last real unit of the file is gone, the file goes.
        (gone,) = cq.delete_expired_file(1000 + last * SIZE)
        gone.destroy()
        assert cq.min_offset_in_queue == UNITS_PER_FILE
    finally:
        cq.close()


def test_a_file_of_blanks_only_expires_with_the_files_before_it(tmp_path: Path) -> None:
    cq = queue_of(tmp_path, 2 * UNITS_PER_FILE + 2, range(UNITS_PER_FILE, 2 * UNITS_PER_FILE))
    try:
        assert cq.delete_expired_file(1000) == []
        for f in cq.delete_expired_file(1000 + 2 * UNITS_PER_FILE * SIZE):
            f.destroy()
        assert len(cq.queue.files) == 1
        assert cq.min_offset_in_queue == 2 * UNITS_PER_FILE
    finally:
        cq.close()


def test_truncating_dirty_units_walks_past_a_blank(tmp_path: Path) -> None:
    cq = queue_of(tmp_path, 10, range(5, 6))
    try:
        # A slave following a new master cuts its commitlog at unit 4's record: units 4.. point at or past it.
        dropped, _ = cq.truncate_dirty_logic_files(1000 + 4 * SIZE)
        assert dropped == 6
        assert cq.max_offset_in_queue == 4
        assert cq.max_physic_offset == 1000 + 4 * SIZE
        assert cq.get_unit(3) == (1000 + 3 * SIZE, SIZE, 0)
        assert cq.get_unit(4) is None
    finally:
        cq.close()


def test_offset_by_time_probes_past_blanks(tmp_path: Path) -> None:
    cq = queue_of(tmp_path, 10, range(3, 7))
    # The store time of the record at commitlog offset o is o itself; a blank reads as the record at 0, gone.
    times = {1000 + i * SIZE: 1000 + i * SIZE for i in range(10)}

    def store_time(offset: int, size: int) -> int:
        assert size == SIZE or offset == 0
        return times.get(offset, -1)

    try:
        assert cq.get_unit(4) == (0, BLANK_UNIT_SIZE, 0)
        assert cq.get_offset_in_queue_by_time(1100, store_time) == 1
        assert cq.get_offset_in_queue_by_time(1240, store_time) == 2
        assert cq.get_offset_in_queue_by_time(1400, store_time) == 2  # nearer real neighbour of the blanks
        assert cq.get_offset_in_queue_by_time(1600, store_time) == 7
        assert cq.get_offset_in_queue_by_time(1690, store_time) == 7
        assert cq.get_offset_in_queue_by_time(1800, store_time) == 8
        assert cq.get_offset_in_queue_by_time(5000, store_time) == 9
    finally:
        cq.close()
