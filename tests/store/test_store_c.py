"""The C store (``gateway/store/_store.c``) against the Python reference: the same commitlog record bytes for any
message, the same index file bytes and header for any keys; and its fsync thread."""

from __future__ import annotations

import errno
import os
import struct
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.remoting.message import encode_record, record_size
from gateway.store import commit_log, index_file
from gateway.store.api import MessageExtBrokerInner
from gateway.store.index_file import INDEX_HEADER_SIZE, IndexFile
from gateway.store.index_service import message_index_keys
from gateway.store.mapped_file import MappedFilePool

C = index_file._c_store
needs_c = pytest.mark.skipif(C is None, reason="the C store was not built (no C compiler at install time)")
SLOTS, ENTRIES = 7, 40  # few slots: chains and collisions on every run
KEYS = st.text(max_size=12) | st.sampled_from(["", "TopicA#k", "é", "日本", "😀x", "a" * 40])


def _file(path: Path) -> IndexFile:
    return IndexFile.create(str(path), SLOTS, ENTRIES, 0, 0, MappedFilePool(), threading.Lock())


def _state(f: IndexFile) -> tuple[Any, ...]:
    header = (f.begin_timestamp, f.end_timestamp, f.begin_phy_offset, f.end_phy_offset, f.hash_slot_count)
    return header, f.index_count, bytes(f.mapped_file.mm)


# Properties as a message carries them: UNIQ_KEY and KEYS among others, and look-alikes the C parser must skip.
PROPERTY = st.tuples(
    st.sampled_from(["UNIQ_KEY", "KEYS", "TAGS", "XKEYS", "KEYSX", "UNIQ_KEYS", ""]),
    st.lists(KEYS.filter(lambda k: "\x01" not in k and "\x02" not in k), max_size=3).map(" ".join)
    | st.sampled_from(["", " ", "a  b ", "KEYS\x01x"]),
)
TOPICS = st.sampled_from(["TopicA", "t", "é", "😀"])


def _properties(props: list[tuple[str, str]]) -> str:
    return "\x02".join(f"{name}\x01{value}" for name, value in props)


def _index_in_python(f: IndexFile, topic: str, properties: str, phy: int, stamp: int) -> int:
    """What build_index does without the C store, for one file with room (or the keys that fit)."""
    index_file._c_store = None
    try:
        return f.put_keys(message_index_keys(topic, properties), phy, stamp)
    finally:
        index_file._c_store = C


@needs_c
@settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.tuples(TOPICS, st.lists(PROPERTY, max_size=4)), max_size=14),
    st.lists(st.integers(-2, ENTRIES + 2), min_size=SLOTS, max_size=SLOTS),
)
def test_index_message_writes_what_python_writes(
    tmp_path: Path, messages: list[tuple[str, list[tuple[str, str]]]], slots: list[int]
) -> None:
    with_c, with_python = _file(tmp_path / "c"), _file(tmp_path / "py")
    try:
        for f in (with_c, with_python):  # slots as a torn write may leave them: pointing anywhere
            struct.pack_into(f">{SLOTS}i", f.mapped_file.mm, INDEX_HEADER_SIZE, *slots)
        for i, (topic, props) in enumerate(messages):
            properties = _properties(props)
            phy, stamp = 1000 + 100 * i, 1_700_000_000_000 + 1500 * i
            expected = _index_in_python(with_python, topic, properties, phy, stamp)
            keys = len(message_index_keys(topic, properties))
            if with_c.put_message(topic, properties, phy, stamp):
                assert expected == keys
            else:  # more keys than room: only the ones that fit, as Python writes them
                assert expected < keys
                assert _index_in_python(with_c, topic, properties, phy, stamp) == expected
            assert _state(with_c) == _state(with_python)
    finally:
        with_c.mapped_file.destroy()
        with_python.mapped_file.destroy()


@needs_c
@pytest.mark.parametrize(("topic", "properties"), [("t", "KEYS\x01ok lone\ud800"), ("lone\udc00", "UNIQ_KEY\x01a")])
def test_keys_c_cannot_hash_are_left_to_python(tmp_path: Path, topic: str, properties: str) -> None:
    """A lone surrogate (the send path refuses such properties before the index sees them)."""
    f = _file(tmp_path / "c")
    try:
        before = _state(f)
        assert not f.put_message(topic, properties, 10, 1)
        assert _state(f) == before  # nothing written
        with pytest.raises(UnicodeEncodeError):
            _index_in_python(f, topic, properties, 10, 1)
    finally:
        f.mapped_file.destroy()


@needs_c
def test_index_entries_past_the_mapping_are_refused(tmp_path: Path) -> None:
    f = _file(tmp_path / "c")
    try:
        mm = f.mapped_file.mm
        header = (0, 0, 0, 0, 0, ENTRIES - 1)
        props = "UNIQ_KEY\x01a"
        assert C.index_message(mm, SLOTS, ENTRIES, header, "t", props, 10, 1)[-1] == ENTRIES
        assert C.index_message(mm, SLOTS, ENTRIES, (0, 0, 0, 0, 0, ENTRIES), "t", props, 10, 1) is NotImplemented
        with pytest.raises(ValueError):  # capacity larger than the mapping
            C.index_message(mm, SLOTS, 10**6, (0, 0, 0, 0, 0, ENTRIES), "t", props, 10, 1)
        with pytest.raises(ValueError):
            C.index_message(mm, 10**9, ENTRIES, header, "t", props, 10, 1)
    finally:
        f.mapped_file.destroy()


HOSTS = st.sampled_from([bytes(range(8)), bytes(range(20)), bytes(12)]) | st.binary(min_size=8, max_size=8)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)


@st.composite
def records(draw: st.DrawFn) -> tuple[Any, ...]:
    msg = MessageExtBrokerInner(
        topic="t",
        queue_id=draw(INT32 | st.sampled_from([2**31, -(2**31) - 1])),
        flag=draw(INT32),
        body=draw(st.binary(max_size=64)),
        properties="",
        tags_code=0,
        sys_flag=0,
        born_timestamp=draw(INT64),
        born_host=draw(HOSTS),
        store_host=draw(HOSTS),
        reconsume_times=draw(INT32),
        prepared_transaction_offset=draw(INT64),
    )
    topic = draw(st.binary(min_size=1, max_size=127) | st.sampled_from([b"t" * 127, b"t" * 128]))
    props = draw(st.binary(max_size=80) | st.sampled_from([b"p" * 32767, b"p" * 32768]))
    size = record_size(len(msg.body), len(topic), len(props), len(msg.born_host), len(msg.store_host))
    size += draw(st.sampled_from([0, 0, 0, -1, 1]))  # now and then a size that is not the record's
    pos = draw(st.integers(0, 48))
    return msg, topic, props, size, pos, draw(INT32), draw(INT64), draw(INT64), draw(INT64)


def _written(record: tuple[Any, ...], c: Any) -> tuple[str, Any]:
    msg, topic, props, size, pos, sys_flag, queue_offset, phy, stamp = record
    mm = bytearray(b"\xee" * 33500)
    commit_log._c_store = c
    try:
        commit_log.write_record(mm, pos, size, msg, topic, props, sys_flag, queue_offset, phy, stamp)
    except Exception as e:
        return "raised", type(e)
    finally:
        commit_log._c_store = C
    return "ok", bytes(mm)


@needs_c
@settings(max_examples=300, deadline=None, database=None)
@given(records())
def test_write_record_writes_the_python_record(record: tuple[Any, ...]) -> None:
    msg, topic, props, size, *_ = record
    with_c, with_python = _written(record, C), _written(record, None)
    if size == record_size(len(msg.body), len(topic), len(props), len(msg.born_host), len(msg.store_host)):
        assert with_c == with_python
    else:  # Python writes a record of another length into the slice (resizing it); C refuses
        assert with_c in {("raised", ValueError), ("raised", struct.error)}


@needs_c
def test_a_record_past_the_mapping_is_refused() -> None:
    msg = MessageExtBrokerInner("t", 0, 0, b"body", "", 0, 0, 0, bytes(8), bytes(8))
    size = record_size(4, 1, 0)
    mm = bytearray(size)
    commit_log.write_record(mm, 0, size, msg, b"t", b"", 0, 0, 0, 0)
    for pos in (1, size, 10**12):
        with pytest.raises(ValueError):
            commit_log.write_record(mm, pos, size, msg, b"t", b"", 0, 0, 0, 0)
    with pytest.raises(struct.error):  # as struct.pack refuses the topic's length byte
        commit_log.write_record(mm, 0, size + 128, msg, b"t" * 129, b"", 0, 0, 0, 0)


@needs_c
def test_a_field_out_of_range_is_named() -> None:
    msg = MessageExtBrokerInner("t", 2**31, 0, b"body", "", 0, 0, 0, bytes(8), bytes(8))
    size = record_size(4, 1, 0)
    with pytest.raises(struct.error, match="queue_id out of range"):
        commit_log.write_record(bytearray(size), 0, size, msg, b"t", b"", 0, 0, 0, 0)


def _wait_for(read_fd: int, thread: Any) -> Any:
    os.read(read_fd, 1)  # the thread writes one byte a request
    return thread.take()


@needs_c
def test_the_fsync_thread_syncs_what_it_is_asked_and_reports_each_request(tmp_path: Path) -> None:
    read_fd, write_fd = os.pipe()
    segment = tmp_path / "00000000000000000000"
    segment.write_bytes(b"x" * 100)
    thread = C.FsyncThread(write_fd)
    try:
        assert thread.take() is None  # nothing asked yet
        thread.request((os.fsencode(tmp_path), os.fsencode(segment)), True)
        with pytest.raises(RuntimeError, match="not taken"):
            thread.request((os.fsencode(segment),), False)  # one request at a time
        assert _wait_for(read_fd, thread) == (0, -1)
        assert thread.take() is None  # reported once
        # The errno and which path failed: the ones after it are not tried.
        thread.request((os.fsencode(segment), os.fsencode(tmp_path / "gone"), os.fsencode(segment)), False)
        assert _wait_for(read_fd, thread) == (errno.ENOENT, 1)
        with pytest.raises(ValueError):
            thread.request((b"a\0b",), False)  # a path with a NUL never reaches open()
        thread.stop()
        thread.stop()
        with pytest.raises(RuntimeError, match="not running"):
            thread.request((os.fsencode(segment),), False)
    finally:
        thread.stop()
        os.close(read_fd)
        os.close(write_fd)


@st.composite
def segments(draw: st.DrawFn) -> tuple[bytes, int, int]:
    """A record (hosts IPv4 or IPv6, as its sys flag says or not), perhaps damaged or cut, at a position of a
    segment, with bytes around it; and the segment's first offset."""
    pos = draw(st.integers(0, 40))
    base = draw(st.sampled_from([0, 1 << 30, 2**62]))
    born, store = draw(st.sampled_from([8, 20])), draw(st.sampled_from([8, 20]))
    sys_flag = draw(st.sampled_from([0x10 * (born == 20) | 0x20 * (store == 20)] * 4 + [0]) | INT32)
    record = encode_record(
        topic=draw(st.binary(max_size=130) | st.sampled_from([b"TopicA", "é".encode()])),
        queue_id=draw(INT32),
        flag=draw(INT32),
        queue_offset=draw(INT64),
        physical_offset=draw(st.sampled_from([base + pos] * 4 + [base + pos + 1]) | INT64),
        sys_flag=sys_flag,
        born_timestamp=draw(INT64),
        born_host=bytes(born),
        store_timestamp=draw(INT64),
        store_host=bytes(store),
        reconsume_times=draw(INT32),
        prepared_transaction_offset=draw(INT64),
        body=draw(st.binary(max_size=40)),
        properties=draw(st.binary(max_size=40) | st.just(b"TAGS\x01a\x02KEYS\x01k")),
    )
    data = bytearray(draw(st.binary(max_size=40)).ljust(pos, b"\0")[:pos] + record + draw(st.binary(max_size=20)))
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 2]))):  # damage: a byte changed anywhere
        at = draw(st.integers(0, len(data) - 1))
        data[at] = draw(st.integers(0, 255))
    if draw(st.sampled_from([False, False, True])):
        data = data[: draw(st.integers(0, len(data)))]
    if draw(st.sampled_from([False] * 9 + [True])):  # the blank that pads a segment's end
        data[pos : pos + 8] = struct.pack(">ii", 8, -875286124)
    return bytes(data), pos, base


@needs_c
@settings(max_examples=500, deadline=None, database=None)
@given(segments())
def test_parse_record_reads_what_python_reads(segment: tuple[bytes, int, int]) -> None:
    data, pos, base = segment
    view = memoryview(data)
    assert C.parse_record(view, pos, base) == commit_log.parse_record(view, pos, base)


def test_a_record_is_checked_before_its_fields_are_read() -> None:
    """IPv6 hosts claimed by the sys flag of a record too short for them: a clear error, not a read past it."""
    record = encode_record(
        topic=b"", queue_id=0, flag=0, queue_offset=0, physical_offset=0, sys_flag=0x30, born_timestamp=0,
        born_host=bytes(8), store_timestamp=0, store_host=bytes(8), reconsume_times=0, prepared_transaction_offset=0,
        body=b"", properties=b"",
    )  # fmt: skip
    for parse in {commit_log.parse_record, commit_log._parse_record}:
        assert parse(memoryview(record), 0, 0) == f"bad record size {len(record)} at 0"
    with pytest.raises(commit_log.CorruptRecordError, match="bad record size"):
        commit_log.check_message_and_return_size(memoryview(record), 0, 0, True)
