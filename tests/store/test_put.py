"""Appending: record bytes, segment layout, queue offsets, batches, validation."""

from __future__ import annotations

import dataclasses
import os
import struct
from pathlib import Path

import pytest

from gateway.remoting.message import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
    MessageSysFlag,
    decode_offset_message_id,
    decode_record,
    encode_record,
    pack_host,
    tags_code,
)
from gateway.store import DefaultMessageStore, PutMessageStatus, StoreConfig
from gateway.store.config import SLAVE

from .conftest import CL_SIZE, CQ_SIZE, STORE_HOST, make_msg

_UNIT = struct.Struct(">qiq")
_II = struct.Struct(">ii")


def segment_records(path: Path) -> list[tuple[int, int]]:
    """(position, size) of each record in a segment file, checking that it ends with a proper blank."""
    data = path.read_bytes()
    assert len(data) == CL_SIZE
    out = []
    pos = 0
    while True:
        size, magic = _II.unpack_from(data, pos)
        if magic == BLANK_MAGIC_CODE:
            assert size == CL_SIZE - pos, "the blank covers the rest of the segment"
            return out
        assert magic == MESSAGE_MAGIC_CODE
        out.append((pos, size))
        pos += size


def test_record_is_encode_record_output(store: DefaultMessageStore) -> None:
    msg = make_msg(body=b"payload-1", extra={"KEYS": "k1 k2"})
    r = store.put_message(msg)
    assert r.status is PutMessageStatus.PUT_OK and r.ok
    a = r.append
    assert a is not None
    assert (a.wrote_offset, a.logics_offset, a.msg_num) == (0, 0, 1)
    expected = encode_record(
        topic=msg.topic.encode(),
        queue_id=0,
        flag=0,
        queue_offset=0,
        physical_offset=0,
        sys_flag=0,
        born_timestamp=msg.born_timestamp,
        born_host=msg.born_host,
        store_timestamp=a.store_timestamp,
        store_host=STORE_HOST,
        reconsume_times=0,
        prepared_transaction_offset=0,
        body=msg.body,
        properties=msg.properties.encode(),
    )
    assert store.look_message_by_offset(0) == expected
    assert a.wrote_bytes == len(expected)
    assert decode_offset_message_id(a.msg_id) == ("127.0.0.1:10911", 0)
    assert store.get_max_phy_offset() == store.max_phy_offset == len(expected)


def test_ipv6_hosts_set_the_flags(store: DefaultMessageStore) -> None:
    v6 = pack_host("::1", 10911)
    r = store.put_message(make_msg(born_host=pack_host("fe80::1", 4000), store_host=v6))
    assert r.append is not None
    m = decode_record(store.look_message_by_offset(0) or b"")
    flags = MessageSysFlag.BORNHOST_V6_FLAG | MessageSysFlag.STOREHOSTADDRESS_V6_FLAG
    assert m.sys_flag & flags == flags
    assert (m.born_host, m.store_host) == ("fe80::1:4000", "::1:10911")
    assert len(r.append.msg_id) == 56


def test_segments_are_padded_with_a_blank_and_records_never_span_files(
    store: DefaultMessageStore, config: StoreConfig
) -> None:
    results = [store.put_message(make_msg(body=os.urandom(300 + i))) for i in range(40)]
    names = sorted(os.listdir(config.commit_log_path))
    assert len(names) >= 3
    assert names == [f"{i * CL_SIZE:020d}" for i in range(len(names))]
    starts = []
    for name in names[:-1]:
        base = int(name)
        starts += [base + pos for pos, _ in segment_records(Path(config.commit_log_path) / name)]
    # The last segment has no blank yet: its records run up to max_phy_offset.
    for r in results:
        a = r.append
        assert a is not None
        assert a.wrote_offset // CL_SIZE == (a.wrote_offset + a.wrote_bytes - 1) // CL_SIZE
        assert decode_offset_message_id(a.msg_id)[1] == a.wrote_offset
        m = decode_record(store.look_message_by_offset(a.wrote_offset) or b"")
        assert (m.commitlog_offset, m.queue_offset) == (a.wrote_offset, a.logics_offset)
    assert starts == [r.append.wrote_offset for r in results[: len(starts)] if r.append]
    # The first record after a blank starts exactly at the next segment's name.
    first_in_second = next(r.append for r in results if r.append and r.append.wrote_offset >= CL_SIZE)
    assert first_in_second.wrote_offset == CL_SIZE


def test_queue_offsets_are_per_topic_and_queue(store: DefaultMessageStore, config: StoreConfig) -> None:
    seen: dict[tuple[str, int], list[int]] = {}
    for i in range(30):
        topic, qid = ("A", "B")[i % 2], i % 3
        r = store.put_message(make_msg(topic, qid, body=b"m%d" % i, tags=f"t{i % 4}"))
        assert r.append is not None
        seen.setdefault((topic, qid), []).append(r.append.logics_offset)
        cq_dir = Path(config.consume_queue_root) / topic / str(qid)
        n = r.append.logics_offset
        data = (cq_dir / f"{n * 20 - n * 20 % CQ_SIZE:020d}").read_bytes()
        assert _UNIT.unpack_from(data, n * 20 % CQ_SIZE) == (
            r.append.wrote_offset,
            r.append.wrote_bytes,
            tags_code(f"t{i % 4}"),
        )
    for offsets in seen.values():
        assert offsets == list(range(len(offsets)))
    assert store.get_max_offset_in_queue("A", 0) == len(seen[("A", 0)])
    assert all(len(os.path.basename(p)) == 20 for p in os.listdir(Path(config.consume_queue_root) / "A" / "0"))


def test_consume_queue_files_roll_at_their_size(store: DefaultMessageStore, config: StoreConfig) -> None:
    for _ in range(40):
        store.put_message(make_msg())
    names = sorted(os.listdir(Path(config.consume_queue_root) / "TopicTest" / "0"))
    assert names == ["00000000000000000000", "00000000000000000320", "00000000000000000640"]
    assert {os.path.getsize(Path(config.consume_queue_root) / "TopicTest" / "0" / n) for n in names} == {CQ_SIZE}


def test_batch_is_contiguous_in_one_segment(store: DefaultMessageStore) -> None:
    store.put_message(make_msg(body=b"x" * 3000))  # most of the first segment
    batch = [make_msg(body=b"b%d" % i * 50) for i in range(5)]
    r = store.put_messages(batch)
    assert r.status is PutMessageStatus.PUT_OK
    a = r.append
    assert a is not None
    assert (a.wrote_offset, a.logics_offset, a.msg_num) == (CL_SIZE, 1, 5)  # did not fit: all in the next segment
    ids = a.msg_id.split(",")
    assert len(ids) == 5
    pos = a.wrote_offset
    for i, msg_id in enumerate(ids):
        assert decode_offset_message_id(msg_id)[1] == pos
        m = decode_record(store.look_message_by_offset(pos) or b"")
        assert (m.queue_offset, m.body, m.store_timestamp) == (1 + i, batch[i].body, a.store_timestamp)
        pos += m.store_size
    assert pos == a.wrote_offset + a.wrote_bytes == store.max_phy_offset
    assert store.get_max_offset_in_queue("TopicTest", 0) == 6


@pytest.mark.parametrize(
    "msgs",
    [
        [],
        [make_msg("A"), make_msg("B")],
        [make_msg(queue_id=0), make_msg(queue_id=1)],
        [make_msg(sys_flag=MessageSysFlag.TRANSACTION_PREPARED_TYPE)],
        [make_msg(body=b"x" * 2500), make_msg(body=b"x" * 2500)],  # cannot fit in one 4 KiB segment
    ],
)
def test_bad_batches_are_illegal(store: DefaultMessageStore, msgs: list) -> None:
    assert store.put_messages(msgs).status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.max_phy_offset == 0


def test_size_limits(open_store, config: StoreConfig) -> None:
    config.maxMessageSize = 1000
    store = open_store(config)
    assert store.put_message(make_msg(body=b"x" * 1001)).status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.put_message(make_msg(body=b"x" * 1000)).status is PutMessageStatus.PUT_OK
    assert store.put_message(make_msg("T" * 128)).status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.put_message(make_msg("T" * 127)).status is PutMessageStatus.PUT_OK
    assert store.put_message(make_msg("é" * 64)).status is PutMessageStatus.MESSAGE_ILLEGAL  # 128 UTF-8 bytes
    big = make_msg()
    big.properties = "K\x01" + "v" * 32766
    assert store.put_message(big).status is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
    assert store.put_message(make_msg(born_host=b"\0" * 5)).status is PutMessageStatus.MESSAGE_ILLEGAL


def test_message_larger_than_a_segment_is_illegal(store: DefaultMessageStore) -> None:
    assert store.put_message(make_msg(body=b"x" * CL_SIZE)).status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.max_phy_offset == 0


def test_prepared_messages_get_no_queue_offset(store: DefaultMessageStore) -> None:
    store.put_message(make_msg())
    r = store.put_message(make_msg(sys_flag=MessageSysFlag.TRANSACTION_PREPARED_TYPE))
    assert r.append is not None and r.append.logics_offset == 0
    assert store.get_max_offset_in_queue("TopicTest", 0) == 1
    commit = store.put_message(make_msg(sys_flag=MessageSysFlag.TRANSACTION_COMMIT_TYPE))
    assert commit.append is not None and commit.append.logics_offset == 1
    assert store.get_max_offset_in_queue("TopicTest", 0) == 2


def test_arriving_listener(store: DefaultMessageStore) -> None:
    calls = []
    store.arriving_listener = lambda *args: calls.append(args)
    store.put_message(make_msg("T", 2, tags="x"))
    store.put_messages([make_msg("T", 2, tags="y"), make_msg("T", 2, tags=None)])
    assert calls == [("T", 2, 0, tags_code("x")), ("T", 2, 1, tags_code("y")), ("T", 2, 2, 0)]


def test_failing_listener_does_not_fail_the_put(store: DefaultMessageStore) -> None:
    def boom(*_: object) -> None:
        raise RuntimeError("listener bug")

    store.arriving_listener = boom
    assert store.put_message(make_msg()).status is PutMessageStatus.PUT_OK
    assert store.get_max_offset_in_queue("TopicTest", 0) == 1


def test_not_writable(open_store, config: StoreConfig) -> None:
    store = DefaultMessageStore(config)
    assert store.put_message(make_msg()).status is PutMessageStatus.SERVICE_NOT_AVAILABLE  # not started
    config.brokerRole = SLAVE
    slave = open_store(config)
    assert slave.put_message(make_msg()).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert slave.put_messages([make_msg()]).status is PutMessageStatus.SERVICE_NOT_AVAILABLE


def test_zeros_written_ahead_of_the_writer_never_reach_a_record(open_store, config: StoreConfig) -> None:
    """The writer keeps the next MiB of its segment written with zeros (pages faulted in before records reach
    them): every record still reads back whole, across three segments, and the zeros stay ahead of the writer
    and inside its segment."""
    segment = 3 << 20
    store = open_store(
        dataclasses.replace(config, mappedFileSizeCommitLog=segment, mappedFileSizeConsumeQueue=20 << 10)
    )
    cl = store.commit_log
    bodies = [os.urandom(1000 + i % 97) for i in range(7000)]
    offsets = []
    for i, body in enumerate(bodies):
        r = store.put_message(make_msg(queue_id=i % 4, body=body))
        assert r.append is not None
        offsets.append((r.append.wrote_offset, r.append.wrote_bytes))
        if i % 500 == 0:
            end, warm_to = cl.max_offset, cl._warm_to
            f = cl.queue.files[-1]
            assert end <= warm_to <= f.end_offset and warm_to - end <= 1 << 20
            pos = end - f.file_from_offset
            assert not any(f.view[pos : warm_to - f.file_from_offset])
    assert len(cl.queue.files) == 3
    for body, (offset, size) in zip(bodies, offsets, strict=True):
        view = cl.get_message(offset, size)
        assert view is not None and decode_record(view).body == body
