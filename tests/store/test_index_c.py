"""The C index entries (``gateway/store/_index.c``) against the Python reference: the same bytes in the file and the
same header for any keys, and the same hash as Java's."""

from __future__ import annotations

import struct
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.store import index_file
from gateway.store.index_file import INDEX_HEADER_SIZE, IndexFile, index_key_hash
from gateway.store.mapped_file import MappedFilePool

C = index_file._c_index
needs_c = pytest.mark.skipif(C is None, reason="the C index was not built (no C compiler at install time)")
SLOTS, ENTRIES = 7, 40  # few slots: chains and collisions on every run
KEYS = st.text(max_size=12) | st.sampled_from(["", "TopicA#k", "é", "日本", "😀x", "a" * 40])


def _file(path: Path) -> IndexFile:
    return IndexFile.create(str(path), SLOTS, ENTRIES, 0, 0, MappedFilePool(), threading.Lock())


def _state(f: IndexFile) -> tuple[Any, ...]:
    header = (f.begin_timestamp, f.end_timestamp, f.begin_phy_offset, f.end_phy_offset, f.hash_slot_count)
    return header, f.index_count, bytes(f.mapped_file.mm)


@needs_c
@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.lists(KEYS, max_size=4), max_size=14),
    st.lists(st.integers(-2, ENTRIES + 2), min_size=SLOTS, max_size=SLOTS),
)
def test_put_keys_writes_what_python_writes(tmp_path: Path, messages: list[list[str]], slots: list[int]) -> None:
    with_c, with_python = _file(tmp_path / "c"), _file(tmp_path / "py")
    try:
        for f in (with_c, with_python):  # slots as a torn write may leave them: pointing anywhere
            struct.pack_into(f">{SLOTS}i", f.mapped_file.mm, INDEX_HEADER_SIZE, *slots)
        for i, keys in enumerate(messages):
            phy, stamp = 1000 + 100 * i, 1_700_000_000_000 + 1500 * i
            done_c = with_c.put_keys(list(keys), phy, stamp)
            index_file._c_index = None
            try:
                done_py = with_python.put_keys(list(keys), phy, stamp)
            finally:
                index_file._c_index = C
            assert done_c == done_py
            assert _state(with_c) == _state(with_python)
    finally:
        with_c.mapped_file.destroy()
        with_python.mapped_file.destroy()


@needs_c
@given(KEYS)
def test_key_hash_is_the_python_hash(key: str) -> None:
    assert C.key_hash(key) == index_key_hash(key)


@needs_c
def test_keys_python_cannot_hash_are_left_to_python(tmp_path: Path) -> None:
    f = _file(tmp_path / "c")
    try:
        before = _state(f)
        assert C.put_entries(f.mapped_file.mm, SLOTS, 1, ["ok", "lone \ud800"], 10, 0) is NotImplemented
        assert _state(f) == before  # nothing written
        with pytest.raises(UnicodeEncodeError):
            f.put_keys(["lone \ud800"], 10, 1)
    finally:
        f.mapped_file.destroy()


@needs_c
def test_entries_past_the_mapping_are_refused(tmp_path: Path) -> None:
    f = _file(tmp_path / "c")
    try:
        assert C.put_entries(f.mapped_file.mm, SLOTS, ENTRIES - 1, ["a"], 10, 0) == (ENTRIES, 1)
        with pytest.raises(ValueError):
            C.put_entries(f.mapped_file.mm, SLOTS, ENTRIES, ["a"], 10, 0)
        with pytest.raises(ValueError):
            C.put_entries(f.mapped_file.mm, 10**9, 1, ["a"], 10, 0)
    finally:
        f.mapped_file.destroy()
