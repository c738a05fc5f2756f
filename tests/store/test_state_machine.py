"""The store against a list model through appends, reads, flushes, clean restarts, crashes and torn tails."""

from __future__ import annotations

import shutil
import tempfile

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from gateway.remoting.message import decode_records
from gateway.store import DefaultMessageStore, GetMessageStatus, StoreConfig

from .conftest import CL_SIZE, CQ_SIZE, crash, make_msg

S = GetMessageStatus
topics = st.sampled_from(["A", "B"])
queue_ids = st.integers(0, 1)
bodies = st.binary(max_size=600)


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="store-sm-")
        self.config = StoreConfig(
            storePathRootDir=self.dir, mappedFileSizeCommitLog=CL_SIZE, mappedFileSizeConsumeQueue=CQ_SIZE
        )
        self.store = self._open()
        self.model: dict[tuple[str, int], list[bytes]] = {}
        self.records: list[tuple[int, int, tuple[str, int]]] = []  # (offset, size, queue) in append order

    def _open(self) -> DefaultMessageStore:
        store = DefaultMessageStore(self.config)
        self.report = store.start()
        return store

    def teardown(self) -> None:
        self.store.shutdown()
        shutil.rmtree(self.dir)

    @rule(topic=topics, qid=queue_ids, body=bodies)
    def put(self, topic: str, qid: int, body: bytes) -> None:
        r = self.store.put_message(make_msg(topic, qid, body=body))
        assert r.append is not None
        key = (topic, qid)
        assert r.append.logics_offset == len(self.model.get(key, []))
        self.model.setdefault(key, []).append(body)
        self.records.append((r.append.wrote_offset, r.append.wrote_bytes, key))

    @rule(topic=topics, qid=queue_ids, batch=st.lists(st.binary(max_size=200), min_size=1, max_size=5))
    def put_batch(self, topic: str, qid: int, batch: list[bytes]) -> None:
        r = self.store.put_messages([make_msg(topic, qid, body=b) for b in batch])
        assert r.append is not None
        key = (topic, qid)
        self.model.setdefault(key, []).extend(batch)
        pos = r.append.wrote_offset
        for _ in batch:
            size = len(self.store.look_message_by_offset(pos) or b"")
            self.records.append((pos, size, key))
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
            assert r.status in (S.NO_MATCHED_LOGIC_QUEUE, S.NO_MESSAGE_IN_QUEUE)
        elif offset == len(expected):
            assert (r.status, r.next_begin_offset) == (S.OFFSET_OVERFLOW_ONE, offset)
        else:
            assert (r.status, r.next_begin_offset) == (S.OFFSET_OVERFLOW_BADLY, len(expected))

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

    @rule()
    def crash_restart(self) -> None:
        crash(self.store)
        self.store = self._open()
        assert self.report.abnormal and self.report.bytes_truncated == 0

    @precondition(lambda self: self.records)
    @rule(keep=st.integers(0, 7))
    def torn_tail_restart(self, keep: int) -> None:
        """Crash with only ``keep`` bytes of the last record on disk."""
        offset, size, key = self.records.pop()
        crash(self.store)
        path = f"{self.config.commit_log_path}/{offset - offset % CL_SIZE:020d}"
        with open(path, "r+b") as f:
            f.seek(offset % CL_SIZE + keep)
            f.write(b"\0" * (size - keep))
        self.store = self._open()
        self.model[key].pop()
        assert self.report.max_phy_offset == offset
        assert self.report.cq_units_truncated == 1

    @invariant()
    def offsets_match_the_model(self) -> None:
        for (topic, qid), msgs in self.model.items():
            assert self.store.get_max_offset_in_queue(topic, qid) == len(msgs)


StoreMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
test_store_machine = StoreMachine.TestCase
