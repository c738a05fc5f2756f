"""get_message through the C unit loop (``_store.read_units``) against the Python reference (``_read_units_py``):
the same result to the byte (status, offsets, records, sizes, slave suggestion) and the same filter calls, over
real stores with rolled, removed and blanked segments, and over hostile consume-queue units."""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.remoting.message import tags_code
from gateway.store import DefaultMessageStore, StoreConfig, message_store
from gateway.store.api import GetMessageResult
from gateway.store.consume_queue import BLANK_UNIT_SIZE

from .conftest import CL_SIZE, make_msg, small_config

C = message_store.c_store
pytestmark = pytest.mark.skipif(C is None, reason="the C store was not built (no C compiler at install time)")
TOPIC = "TopicTest"
TAGS = ["TagA", "TagB", None]
_UNIT = struct.Struct(">qiq")


@contextlib.contextmanager
def python_path() -> Iterator[None]:
    message_store.c_store = None
    try:
        yield
    finally:
        message_store.c_store = C


def recording(keep: Callable[[int], bool] | None) -> tuple[Callable[[int], bool] | None, list[int]]:
    calls: list[int] = []
    if keep is None:
        return None, calls

    def message_filter(code: int) -> bool:
        calls.append(code)
        return keep(code)

    return message_filter, calls


FILTERS: list[Callable[[int], bool] | None] = [
    None,
    lambda code: code == tags_code("TagA"),
    lambda code: False,
    lambda code: code != tags_code("TagB"),
]


def same_both_ways(store: DefaultMessageStore, queue_id: int, offset: int, nums: int, index: int) -> GetMessageResult:
    c_filter, c_calls = recording(FILTERS[index])
    py_filter, py_calls = recording(FILTERS[index])
    c = store.get_message("g", TOPIC, queue_id, offset, nums, c_filter)
    with python_path():
        py = store.get_message("g", TOPIC, queue_id, offset, nums, py_filter)
    assert c == py, (queue_id, offset, nums, index)
    assert c_calls == py_calls
    return c


def fill(store: DefaultMessageStore, n: int) -> None:
    for i in range(n):
        msg = make_msg(TOPIC, i % 2, body=b"x" * (i * 37 % 300), tags=TAGS[i % 3])
        assert store.put_message(msg).ok


def sweep(store: DefaultMessageStore) -> set[str]:
    """Every queue offset (and a few outside), batch size and filter; returns the statuses seen."""
    seen = set()
    for queue_id in (0, 1, 5):
        top = store.get_max_offset_in_queue(TOPIC, queue_id)
        for offset in range(-1, top + 2):
            for nums in (1, 3, 32, 0, -1):
                for index in range(len(FILTERS)):
                    result = same_both_ways(store, queue_id, offset, nums, index)
                    seen.add(result.status.name)
    return seen


@pytest.mark.parametrize(
    "caps",
    [
        {},
        {"maxTransferCountOnMessageInMemory": 3},
        {"maxTransferBytesOnMessageInMemory": 500},
        {"accessMessageInMemoryMaxRatio": 0, "maxTransferCountOnMessageInDisk": 2},
        {"accessMessageInMemoryMaxRatio": 0, "maxTransferBytesOnMessageInDisk": 700},
    ],
)
def test_rolled_segments(open_store: Callable[..., DefaultMessageStore], config: StoreConfig, caps: dict) -> None:
    for name, value in caps.items():
        setattr(config, name, value)
    store = open_store(config)
    fill(store, 70)  # several commitlog segments of 4 KiB, several consume-queue files per queue
    assert len(store.commit_log.queue.files) > 3
    assert {"FOUND", "NO_MATCHED_MESSAGE", "OFFSET_OVERFLOW_ONE", "NO_MESSAGE_IN_QUEUE"} <= sweep(store)


def test_removed_segments_and_blank_units(open_store: Callable[..., DefaultMessageStore], config: StoreConfig) -> None:
    store = open_store(config)
    fill(store, 70)
    store.shutdown()
    segments = sorted(Path(config.commit_log_path).iterdir())
    os.unlink(segments[0])  # as if cleaned while the queues still point at it
    os.unlink(segments[2])  # and a hole further on
    store = open_store(config)
    cq = store.consume_queue_table[(TOPIC, 1)]
    start = int(segments[3].name)
    assert cq.blank_units_in([(start, start + CL_SIZE)]) > 0  # recovery's blanks over a skipped range
    assert {"MESSAGE_WAS_REMOVING", "FOUND"} <= sweep(store)


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DefaultMessageStore]:
    store = DefaultMessageStore(small_config(str(tmp_path_factory.mktemp("store"))))
    store.start()
    fill(store, 40)
    yield store
    store.shutdown()


def _units(store: DefaultMessageStore) -> list[tuple[int, int, int]]:
    units = []
    for queue_id in (0, 1):
        cq = store.consume_queue_table[(TOPIC, queue_id)]
        units += [cq.get_unit(i) for i in range(cq.max_offset_in_queue)]
    return units


OFFSETS = st.integers(-(2**63), 2**63 - 1) | st.integers(-5, 5 * CL_SIZE) | st.sampled_from([CL_SIZE - 1, -1, 0])
SIZES = st.integers(-(2**31), 2**31 - 1) | st.integers(-2, 400) | st.just(BLANK_UNIT_SIZE)
UNIT = st.tuples(OFFSETS, SIZES, st.integers(-(2**63), 2**63 - 1) | st.sampled_from([tags_code(t) for t in TAGS[:2]]))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.data(),
    nums=st.integers(-2, 40) | st.integers(-(2**31), 2**31 - 1),
    index=st.integers(0, len(FILTERS) - 1),
    memory=st.integers(0, 3 * CL_SIZE),
)
def test_hostile_units(filled: DefaultMessageStore, data: st.DataObject, nums: int, index: int, memory: int) -> None:
    real = _units(filled)
    chosen = data.draw(st.lists(st.sampled_from(real) | UNIT, max_size=60))
    units = memoryview(b"".join(_UNIT.pack(*u) for u in chosen))
    filled._memory_budget = lambda: memory  # type: ignore[method-assign]  # in disk or not, unit by unit
    c_filter, c_calls = recording(FILTERS[index])
    py_filter, py_calls = recording(FILTERS[index])
    try:
        c = filled._read_units(units, 7, 0, 100, nums, c_filter)
        py = filled._read_units_py(units, 7, 0, 100, nums, py_filter)
    finally:
        del filled._memory_budget
    assert c == py
    assert c_calls == py_calls


def test_a_missing_record_past_the_last_int64_segment(filled: DefaultMessageStore) -> None:
    # roll_next_file of an offset near 2**63 names a file past every int64 offset: every later unit is skipped.
    units = memoryview(_UNIT.pack(9_223_372_036_854_771_712, 10, 0) + _UNIT.pack(0, 2**31 - 1, 0) * 2)
    c = filled._read_units(units, 7, 0, 100, 32, None)
    assert c == filled._read_units_py(units, 7, 0, 100, 32, None)
    assert c.next_begin_offset == 10 and not c.buffers


def test_a_failing_filter_fails_the_same(filled: DefaultMessageStore) -> None:
    def broken(code: int) -> bool:
        raise ValueError("filter broke")

    units = filled.consume_queue_table[(TOPIC, 0)].get_index_buffer(0)
    assert units is not None
    with pytest.raises(ValueError, match="filter broke"):
        filled._read_units(units, 0, 0, 20, 32, broken)
    with pytest.raises(ValueError, match="filter broke"):
        filled._read_units_py(units, 0, 0, 20, 32, broken)
