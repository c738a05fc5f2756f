"""The store against a list model through appends, reads, lookups, flushes, clean restarts, crashes (with and
without losing what was not flushed) and torn tails."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from gateway.remoting.message import MessageConst, decode_records, string_to_properties
from gateway.store import DefaultMessageStore, GetMessageStatus, MessageExtBrokerInner

from .conftest import CL_SIZE, crash, lose_commit_log_from, make_msg, small_config

S = GetMessageStatus
topics = st.sampled_from(["A", "B"])
queue_ids = st.integers(0, 1)
bodies = st.binary(max_size=600)
FOREVER = 1 << 62


@dataclass
class Stored:
    offset: int
    size: int
    queue: tuple[str, int]
    uniq_key: str
    body: bytes


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="store-sm-")
        self.config = small_config(self.dir)
        self.store = self._open()
        self.model: dict[tuple[str, int], list[bytes]] = {}
        self.records: list[Stored] = []  # in append order

    def _open(self) -> DefaultMessageStore:
        store = DefaultMessageStore(self.config)
        self.report = store.start()
        return store

    def teardown(self) -> None:
        self.store.shutdown()
        shutil.rmtree(self.dir)

    def _remember(self, msg: MessageExtBrokerInner, offset: int, size: int) -> None:
        key = (msg.topic, msg.queue_id)
        self.model.setdefault(key, []).append(msg.body)
        uniq = string_to_properties(msg.properties)[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX]
        self.records.append(Stored(offset, size, key, uniq, msg.body))

    def _forget_last(self) -> Stored:
        lost = self.records.pop()
        self.model[lost.queue].pop()
        return lost

    @rule(topic=topics, qid=queue_ids, body=bodies)
    def put(self, topic: str, qid: int, body: bytes) -> None:
        msg = make_msg(topic, qid, body=body)
        r = self.store.put_message(msg)
        assert r.append is not None
        assert r.append.logics_offset == len(self.model.get((topic, qid), []))
        self._remember(msg, r.append.wrote_offset, r.append.wrote_bytes)

    @rule(topic=topics, qid=queue_ids, batch=st.lists(st.binary(max_size=200), min_size=1, max_size=5))
    def put_batch(self, topic: str, qid: int, batch: list[bytes]) -> None:
        msgs = [make_msg(topic, qid, body=b) for b in batch]
        r = self.store.put_messages(msgs)
        assert r.append is not None
        pos = r.append.wrote_offset
        for msg in msgs:
            size = len(self.store.look_message_by_offset(pos) or b"")
            self._remember(msg, pos, size)
            pos += size
        assert pos == r.append.wrote_offset + r.append.wrote_bytes

    @rule(topic=topics, qid=queue_ids)
    def read_all(self, topic: str, qid: int) -> None:
        got: list[bytes] = []
        offset = 0
        while True:
            r = self.store.get_message("g", topic, qid, offset, 32)
            assert r is not None
            if r.status is not S.FOUND:
                break
            got += [m.body for m in decode_records(b"".join(r.buffers))]
            offset = r.next_begin_offset
        assert got == self.model.get((topic, qid), [])

    @rule(topic=topics, qid=queue_ids, offset=st.integers(0, 60), n=st.integers(1, 40))
    def read_from(self, topic: str, qid: int, offset: int, n: int) -> None:
        expected = self.model.get((topic, qid), [])
        r = self.store.get_message("g", topic, qid, offset, n)
        assert r is not None and r.max_offset == len(expected)
        if offset < len(expected):
            assert r.status is S.FOUND
            got = [m.body for m in decode_records(b"".join(r.buffers))]
            assert 1 <= len(got) <= n and got == expected[offset : offset + len(got)]
            assert r.next_begin_offset == offset + len(got)
        elif not expected:
            assert r.status is S.NO_MESSAGE_IN_QUEUE
        elif offset == len(expected):
            assert (r.status, r.next_begin_offset) == (S.OFFSET_OVERFLOW_ONE, offset)
        else:
            assert (r.status, r.next_begin_offset) == (S.OFFSET_OVERFLOW_BADLY, len(expected))

    @precondition(lambda self: self.records)
    @rule(data=st.data())
    def lookup_one(self, data: st.DataObject) -> None:
        self._check_lookup(data.draw(st.sampled_from(self.records)))

    def _check_lookup(self, stored: Stored) -> None:
        r = self.store.query_message(stored.queue[0], stored.uniq_key, 32, 0, FOREVER)
        found = decode_records(b"".join(r.buffers))
        assert [(m.commitlog_offset, m.body) for m in found] == [(stored.offset, stored.body)]

    def _check_after_recovery(self) -> None:
        for stored in self.records:
            self._check_lookup(stored)
        lost = self.store.query_message("A", "no-such-key", 32, 0, FOREVER)
        assert lost.buffers == []

    @rule()
    def flush(self) -> None:
        assert self.store.flush() == self.store.max_phy_offset
        self.store.flush_consume_queues(0)

    @rule()
    def clean_restart(self) -> None:
        self.store.shutdown()
        self.store = self._open()
        assert not self.report.abnormal
        assert (self.report.bytes_truncated, self.report.cq_units_truncated) == (0, 0)
        assert self.report.index_entries_truncated == 0
        self._check_after_recovery()

    @rule()
    def crash_restart(self) -> None:
        crash(self.store)
        self.store = self._open()
        assert self.report.abnormal and self.report.bytes_truncated == 0
        self._check_after_recovery()

    @rule()
    def power_loss_restart(self) -> None:
        """Crash and lose every commitlog byte that was not flushed; messages fully flushed must survive."""
        durable = self.store.flushed_where
        crash(self.store)
        lose_commit_log_from(self.config, durable)
        while self.records and self.records[-1].offset + self.records[-1].size > durable:
            self._forget_last()
        self.store = self._open()
        assert self.report.abnormal
        assert self.report.max_phy_offset == (self.records[-1].offset + self.records[-1].size if self.records else 0)
        self._check_after_recovery()

    @precondition(lambda self: self.records)
    @rule(keep=st.integers(0, 7))
    def torn_tail_restart(self, keep: int) -> None:
        """Crash with only ``keep`` bytes of the last record on disk."""
        last = self.records[-1]
        crash(self.store)
        path = f"{self.config.commit_log_path}/{last.offset - last.offset % CL_SIZE:020d}"
        with open(path, "r+b") as f:
            f.seek(last.offset % CL_SIZE + keep)
            f.write(b"\0" * (last.size - keep))
        self.store = self._open()
        self._forget_last()
        assert self.report.max_phy_offset == last.offset
        assert self.report.cq_units_truncated == 1
        assert self.report.index_entries_truncated == 1  # the torn message's UNIQ_KEY entry
        self._check_after_recovery()

    @invariant()
    def offsets_match_the_model(self) -> None:
        for (topic, qid), msgs in self.model.items():
            assert self.store.get_max_offset_in_queue(topic, qid) == len(msgs)


StoreMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
test_store_machine = StoreMachine.TestCase
