"""The C dispatcher (``c_store.Dispatcher``) against the Python reference (``DefaultMessageStore._dispatch``): the
same consume queue and index files, the same Python-visible state and the same arrivals for any run of dispatches,
rolling files, gaps, repeats, transactions, refused topics and arguments it must leave to Python included; and its
``dispatch_run`` (a batch's records in one call) against the reference called for each record."""

from __future__ import annotations

import dataclasses
import logging
import os
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.remoting.message import MessageSysFlag
from gateway.store import DefaultMessageStore, StoreConfig, index_file
from gateway.store.native import c_store

from .conftest import small_config

needs_c = pytest.mark.skipif(c_store is None, reason="the C store was not built (no C compiler at install time)")

TOPICS = ["TopicA", "TopicB", "é主题", ".."]  # ".." names no directory: the store refuses its queues
SYS_FLAGS = [
    0,
    MessageSysFlag.TRANSACTION_PREPARED_TYPE,
    MessageSysFlag.TRANSACTION_COMMIT_TYPE,
    MessageSysFlag.TRANSACTION_ROLLBACK_TYPE,
]
KEY_WORDS = st.sampled_from(["k1", "k2", "订单", "a b", "", "😀"])


@st.composite
def dispatch_ops(draw: st.DrawFn) -> dict[str, Any]:
    """One dispatch as the commitlog (or a test poking at the edges) makes it."""
    return {
        "topic": draw(st.sampled_from(TOPICS)),
        "queue_id": draw(st.integers(0, 2)),
        "unit": draw(st.sampled_from(["next"] * 8 + ["gap", "again", "old record"])),
        "size": draw(st.integers(60, 300)),
        "tags": draw(st.integers(-(2**63), 2**63 - 1) | st.just(2**63)),  # 2**63: no unit can hold it
        "sys_flag": draw(st.sampled_from(SYS_FLAGS * 3 + [MessageSysFlag.COMPRESSED_FLAG])),
        "uniq": draw(st.booleans()),
        "keys": draw(st.lists(KEY_WORDS, max_size=5)),
        "index_enabled": draw(st.sampled_from([True] * 6 + [False])),
        "queue_id_as_bool": draw(st.sampled_from([False] * 10 + [True])),  # not what the commitlog passes
        "flush_index": draw(st.sampled_from([False] * 5 + [True])),  # files clean again: dispatch marks them
    }


class Run:
    """Dispatches into one store, recording what its arriving listener hears and what each call raised."""

    def __init__(self, root: Path, dispatch: str) -> None:
        config = dataclasses.replace(small_config(str(root)), maxHashSlotNum=7, maxIndexNum=12)
        self.store = DefaultMessageStore(config)
        self.store.start()
        self.arrivals: list[tuple[Any, ...]] = []
        self.raised: list[str | None] = []
        self.store.arriving_listener = lambda *args: self.arrivals.append(args)
        self.dispatch = dispatch

    def __call__(self, args: tuple[Any, ...], index_enabled: bool, flush_index: bool = False) -> None:
        self.store.config.messageIndexEnable = index_enabled
        if flush_index:
            self.store.index_service.flush()
        try:
            if self.dispatch == "c":
                self.store.commit_log.dispatcher(*args)
            else:  # the reference: Python throughout, index entries included
                index_file._c_store = None
                try:
                    self.store._dispatch(*args)
                finally:
                    index_file._c_store = c_store
        except Exception as e:
            self.raised.append(type(e).__name__)
        else:
            self.raised.append(None)

    def run(self, calls: list[tuple[Any, ...]], index_enabled: bool) -> None:
        """A batch's records (one queue, consecutive queue offsets, one store time and sys flag): by dispatch_run in
        C, by the reference one record at a time in Python."""
        if self.dispatch == "python":
            for args in calls:
                self(args, index_enabled)
            return
        self.store.config.messageIndexEnable = index_enabled
        topic, queue_id, _, _, _, first, stamp, sys_flag, _ = calls[0]
        units = b"".join(struct.pack("=qqq", phy, size, tags) for _, _, phy, size, tags, *_ in calls)
        try:
            self.store.commit_log.dispatcher.dispatch_run(
                topic, queue_id, first, stamp, sys_flag, units, [args[8] for args in calls]
            )
        except Exception as e:
            self.raised.extend([type(e).__name__] * len(calls))
        else:
            self.raised.extend([None] * len(calls))

    def files(self) -> tuple[dict[str, bytes], list[bytes]]:
        """The consume queue files by path, the index files' bytes in order (their names are creation times)."""
        config = self.store.config
        root = Path(config.consume_queue_root)
        queues = {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
        index = Path(config.storePathRootDir) / "index"
        return queues, [p.read_bytes() for p in sorted(index.iterdir())] if index.is_dir() else []

    def state(self) -> dict[str, Any]:
        """Every attribute the dispatch updates, as Python sees it."""
        store = self.store
        service = store.index_service
        return {
            "queues": {
                key: (
                    cq.max_physic_offset,
                    cq.min_logic_offset,
                    cq.queue.wrote_where,
                    cq.queue.flushed_where,
                    [(f.file_from_offset, os.path.basename(f.path)) for f in cq.queue.files],
                )
                for key, cq in store.consume_queue_table.items()
            },
            "refused": store._refused_topics,
            "logics_timestamp": store._logics_timestamp,
            "last_indexed": service.last_indexed_offset,
            "index_files": [(f.header, f.dirty) for f in service.files],
            "arrivals": self.arrivals,
            "raised": self.raised,
        }

    def close(self) -> None:
        self.store.shutdown()


@pytest.fixture
def runs(tmp_path: Path) -> Iterator[tuple[Run, Run]]:
    made: list[Run] = []

    def run(name: str, dispatch: str) -> Run:
        made.append(Run(tmp_path / name, dispatch))
        return made[-1]

    yield run  # type: ignore[misc]
    for r in made:
        r.close()


def _calls(ops: list[dict[str, Any]]) -> Iterator[tuple[tuple[Any, ...], bool, bool]]:
    """The dispatcher's nine arguments for each op: commitlog offsets growing, queue offsets per queue."""
    phy, stamp = 0, 1_700_000_000_000
    next_unit: dict[tuple[str, int], int] = {}
    earlier: list[tuple[Any, ...]] = []
    for i, op in enumerate(ops):
        key = (op["topic"], op["queue_id"])
        unit = next_unit.get(key, 0)
        if op["unit"] == "old record" and earlier:
            yield earlier[i % len(earlier)], op["index_enabled"], op["flush_index"]
            continue
        if op["unit"] == "gap":
            unit += 3
        elif op["unit"] == "again" and unit > 0:
            unit -= 1
        next_unit[key] = max(next_unit.get(key, 0), unit + 1)
        props = [f"UNIQ_KEY\x01{i:032X}"] if op["uniq"] else []
        props += ["TAGS\x01t"] + ([f"KEYS\x01{' '.join(op['keys'])}"] if op["keys"] else [])
        queue_id: Any = bool(op["queue_id"]) if op["queue_id_as_bool"] else op["queue_id"]
        args = (op["topic"], queue_id, phy, op["size"], op["tags"], unit, stamp, op["sys_flag"], "\x02".join(props))
        earlier.append(args)
        yield args, op["index_enabled"], op["flush_index"]
        phy += op["size"]
        stamp += 700


def _run_both(runs: Any, ops: list[dict[str, Any]], name: str) -> tuple[Run, Run]:
    with_c, with_python = runs(f"c{name}", "c"), runs(f"py{name}", "python")
    for args, index_enabled, flush_index in _calls(ops):
        with_c(args, index_enabled, flush_index)
        with_python(args, index_enabled, flush_index)
    return with_c, with_python


_examples = iter(range(10**9))


@needs_c
@settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(dispatch_ops(), min_size=1, max_size=80))
def test_the_c_dispatcher_writes_and_updates_what_python_does(runs: Any, ops: list[dict[str, Any]]) -> None:
    with_c, with_python = _run_both(runs, ops, str(next(_examples)))
    assert with_c.files() == with_python.files()
    assert with_c.state() == with_python.state()


@needs_c
def test_a_long_run_rolls_queue_and_index_files_alike(runs: Any) -> None:
    ops = [
        {
            "topic": TOPICS[i % 2],
            "queue_id": i % 3,
            "unit": "gap" if i % 97 == 0 else "next",
            "size": 100 + i % 50,
            "tags": i * 7919,
            "sys_flag": MessageSysFlag.TRANSACTION_ROLLBACK_TYPE if i % 13 == 0 else 0,
            "uniq": i % 5 != 0,
            "keys": ["k1", "订单"][: i % 3],
            "index_enabled": True,
            "queue_id_as_bool": False,
            "flush_index": i % 50 == 0,
        }
        for i in range(600)
    ]
    with_c, with_python = _run_both(runs, ops, "long")
    queues, index = with_c.files()
    assert len(queues) > 6 * 3 and len(index) > 10  # many files rolled, in every queue and in the index
    assert (queues, index) == with_python.files()
    assert with_c.state() == with_python.state()
    assert with_c.store.commit_log.dispatcher is not with_c.store._dispatch


@st.composite
def batch_runs(draw: st.DrawFn) -> dict[str, Any]:
    """A batch as the send lane stores it: records of one queue from where the queue is (or past it, or again)."""
    return {
        "topic": draw(st.sampled_from(TOPICS)),
        "queue_id": draw(st.integers(0, 2)),
        "start": draw(st.sampled_from(["next"] * 6 + ["gap", "again"])),
        "sys_flag": draw(st.sampled_from(SYS_FLAGS * 3)),
        "index_enabled": draw(st.sampled_from([True] * 6 + [False])),
        "records": draw(
            st.lists(
                st.tuples(
                    st.integers(60, 300),
                    st.integers(-(2**31), 2**31 - 1),
                    st.booleans(),
                    st.lists(KEY_WORDS, max_size=4),
                ),
                min_size=1,
                max_size=20,
            )
        ),
    }


@needs_c
@settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(batch_runs(), min_size=1, max_size=25))
def test_dispatch_run_writes_and_updates_what_a_call_a_record_does(runs: Any, batches: list[dict[str, Any]]) -> None:
    with_c, with_python = runs(f"crun{next(_examples)}", "c"), runs(f"pyrun{next(_examples)}", "python")
    phy, stamp, n = 0, 1_700_000_000_000, 0
    next_unit: dict[tuple[str, int], int] = {}
    for b in batches:
        key = (b["topic"], b["queue_id"])
        unit = next_unit.get(key, 0) + {"next": 0, "gap": 2}.get(b["start"], -1)
        unit = max(unit, 0)
        calls = []
        for size, tags, uniq, keys in b["records"]:
            props = ([f"UNIQ_KEY\x01{n:032X}"] if uniq else []) + ([f"KEYS\x01{' '.join(keys)}"] if keys else [])
            calls.append((b["topic"], b["queue_id"], phy, size, tags, unit, stamp, b["sys_flag"], "\x02".join(props)))
            phy, unit, n = phy + size, unit + 1, n + 1
        next_unit[key] = max(next_unit.get(key, 0), unit)
        stamp += 900
        for r in (with_c, with_python):
            r.run(calls, b["index_enabled"])
    assert with_c.files() == with_python.files()
    assert with_c.state() == with_python.state()


@needs_c
def test_dispatch_run_rolls_queue_and_index_files_mid_batch(runs: Any) -> None:
    with_c, with_python = runs("crun-long", "c"), runs("pyrun-long", "python")
    phy, stamp = 0, 1_700_000_000_000
    for b in range(60):
        calls = [
            (
                "TopicA",
                1,
                phy + i * 100,
                100,
                i,
                b * 16 + i,
                stamp + b,
                0,
                f"UNIQ_KEY\x01{b:016X}{i:016X}\x02KEYS\x01k{i} x",
            )
            for i in range(16)
        ]
        phy += 1600
        for r in (with_c, with_python):
            r.run(calls, True)
    queues, index = with_c.files()
    assert len(queues) > 10 and len(index) > 50  # files rolled inside batches
    assert (queues, index) == with_python.files()
    assert with_c.state() == with_python.state()
    assert len(with_c.arrivals) == 960 and with_c.raised == [None] * 960


@needs_c
def test_a_failing_listener_is_logged_and_the_next_message_still_arrives(
    runs: Any, caplog: pytest.LogCaptureFixture
) -> None:
    run = runs("listener", "c")
    heard: list[int] = []

    def listener(topic: str, queue_id: int, offset: int, tags: int) -> None:
        heard.append(offset)
        if offset == 0:
            raise RuntimeError("listener broke")

    run.store.arriving_listener = listener
    with caplog.at_level(logging.ERROR, logger="gateway.store.message_store"):
        for unit in range(2):
            run(("TopicA", 0, unit * 100, 100, 0, unit, 1_700_000_000_000, 0, ""), True)
    assert heard == [0, 1]
    assert run.raised == [None, None]
    assert [r.exc_info[1].args for r in caplog.records if r.exc_info] == [("listener broke",)]
    assert run.store.get_max_offset_in_queue("TopicA", 0) == 2


def test_the_python_dispatch_is_chosen_without_the_c_store(tmp_path: Path) -> None:
    code = (
        "import sys; from gateway.store import DefaultMessageStore, StoreConfig;"
        "s = DefaultMessageStore(StoreConfig(storePathRootDir=sys.argv[1]));"
        "print(s.commit_log.dispatcher == s._dispatch)"
    )
    env = {**os.environ, "ROCKETMQ_GATEWAY_PURE_PYTHON": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "True"
    store = DefaultMessageStore(StoreConfig(storePathRootDir=str(tmp_path)))
    assert (store.commit_log.dispatcher == store._dispatch) == (c_store is None)
