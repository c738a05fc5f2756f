"""The store's C CRC-32 (gateway/store/crc32.h: carry-less folding where the CPU has it, tables for the rest) against
zlib's, which the Python store and Apache's UtilAll.crc32 compute."""

from __future__ import annotations

import os
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.store.native import c_store

pytestmark = pytest.mark.skipif(c_store is None, reason="the C store is not built")

DATA = os.urandom(70_000)


@pytest.mark.parametrize("offset", [0, 1, 3, 8, 13])
def test_every_length_up_to_a_few_folds_and_each_alignment(offset: int) -> None:
    # Below 64 bytes the tables only; from 64 the folds, then a tail of 0-15 bytes through the tables.
    for n in [*range(300), 1024, 4096, 65_536, 69_987]:
        data = DATA[offset : offset + n]
        assert c_store.crc32(data) == zlib.crc32(data), n
        assert c_store.crc32(memoryview(data)) == zlib.crc32(data), n


@given(st.binary(max_size=5000), st.integers(min_value=0, max_value=2**32 - 1))
def test_any_bytes_continuing_from_any_value(data: bytes, value: int) -> None:
    assert c_store.crc32(data, value) == zlib.crc32(data, value)


def test_a_crc_of_parts_is_the_crc_of_the_whole() -> None:
    whole = DATA[:10_000]
    assert c_store.crc32(whole[7_777:], c_store.crc32(whole[:7_777])) == zlib.crc32(whole)


def test_what_is_not_bytes_is_refused() -> None:
    with pytest.raises(TypeError):
        c_store.crc32("text")
    with pytest.raises(TypeError):
        c_store.crc32()
