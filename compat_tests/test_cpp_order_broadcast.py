"""The Apache C++ client (PyPI ``rocketmq==0.4.4``): ordered sends (``send_orderly``) consumed by orderly push
consumers (``PushConsumer(orderly=True)``, which lock their queues with LOCK_BATCH_MQ), and BROADCASTING
consumers. SQL92 cannot be tried with this client: its ``subscribe`` has no expression type (tags only).
"""

from __future__ import annotations

import itertools
import time
from collections import defaultdict
from typing import Any

import pytest

from .test_cpp_client import Background, _unique, check_messages, produce

pytestmark = pytest.mark.compat

ORDER_KEYS = 8


def _wait_for(members: list[Background], total: int, timeout: float = 90) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msgs = [e for m in members for e in m.events() if e.get("event") == "msg"]
        if len(msgs) >= total:
            time.sleep(2)  # a duplicate would arrive now
            return [e for m in members for e in m.events() if e.get("event") == "msg"]
        time.sleep(0.2)
    runs = [m.finish() for m in members]
    pytest.fail(f"{len(msgs)} of {total} messages in {timeout}s\n" + "\n".join(r.describe() for r in runs))


def test_orderly_members_keep_each_key_in_order(servers, tmp_path):
    """Ordered sends by key; two orderly members (the second joins halfway): every message once, each key in
    send order, and no queue in two members' callbacks at the same time."""
    topic = _unique("CppOrder")
    servers.create_topic(topic, queues=4, order=True)
    group = _unique("cpp_order")
    run_id = _unique("order")
    members = [Background(tmp_path / "home-a", servers, topic, group, "--orderly", "--hold-ms", 2, timeout=120)]
    try:
        members[0].wait_started()
        produce(tmp_path, servers, topic, run_id, 120, mode="orderly")
        members.append(Background(tmp_path / "home-b", servers, topic, group, "--orderly", "--hold-ms", 2, timeout=120))
        members[1].wait_started()
        produce(tmp_path, servers, topic, run_id, 120, mode="orderly", start=120)
        msgs = _wait_for(members, 240)
    finally:
        runs = [m.finish() for m in members]
    # Every message arrived. This client persists a queue's offset lazily when it gives the queue up, so
    # (as against Apache) the new owner may get the old owner's last messages again: nothing else repeats.
    assert {int(m["props"]["idx"]) for m in msgs} == set(range(240))
    assert all(m["props"]["run"] == run_id for m in msgs)
    first = {int(m["props"]["idx"]): m for m in runs[0].messages}
    again = [m for m in runs[1].messages if int(m["props"]["idx"]) in first]
    assert all(first[int(m["props"]["idx"])]["t0"] < m["t0"] for m in again), "a repeat that is not a handover"
    assert len(msgs) == 240 + len(again)
    # How many repeat depends on timing (the old owner's last persist); which ones does not: on each queue
    # handed over, the last messages the old owner consumed before it let the queue go.
    consumed_by_a: dict[int, list[int]] = defaultdict(list)
    for m in runs[0].messages:
        consumed_by_a[m["queue_id"]].append(m["queue_offset"])
    repeated: dict[int, list[int]] = defaultdict(list)
    for m in again:
        repeated[m["queue_id"]].append(m["queue_offset"])
    for queue, offsets in repeated.items():
        tail = sorted(consumed_by_a[queue])[-len(offsets) :]
        assert sorted(offsets) == tail, f"queue {queue}: repeats {sorted(offsets)} are not its handover tail {tail}"
    # Each key in send order: in each member's deliveries, and in the first delivery of every message (a
    # handover repeat goes back to the tail the old owner had not committed, then on in order).
    for member, run in enumerate(runs):
        by_key: dict[int, list[int]] = defaultdict(list)
        for m in sorted(run.messages, key=lambda e: e["t0"]):
            by_key[int(m["props"]["idx"]) % ORDER_KEYS].append(int(m["props"]["idx"]))
        for key, idxs in by_key.items():
            assert idxs == sorted(idxs), f"member {member}: key {key} consumed out of order: {idxs}"
    firsts: dict[int, list[int]] = defaultdict(list)
    seen: set[int] = set()
    for m in sorted(msgs, key=lambda e: e["t0"]):
        idx = int(m["props"]["idx"])
        if idx not in seen:
            seen.add(idx)
            firsts[idx % ORDER_KEYS].append(idx)
    for key, idxs in firsts.items():
        assert idxs == sorted(idxs), f"key {key} first consumed out of order: {idxs}"
    # Per queue, the callbacks of the two members never overlap in time.
    spans: dict[int, list[tuple[float, float, int]]] = defaultdict(list)
    for member, run in enumerate(runs):
        for m in run.messages:
            spans[m["queue_id"]].append((m["t0"], m["t1"], member))
    for queue, queue_spans in spans.items():
        queue_spans.sort()
        for (_, end, a), (start, _, b) in itertools.pairwise(queue_spans):
            assert a == b or start >= end, f"queue {queue} consumed by both members at once"


def test_broadcasting_members_each_get_everything(servers, tmp_path):
    """Two BROADCASTING members of one group (offsets kept by each client) both receive every message."""
    topic = _unique("CppBroadcast")
    servers.create_topic(topic, queues=4)
    group = _unique("cpp_bc")
    run_id = _unique("bc")
    members = [Background(tmp_path / f"home-{name}", servers, topic, group, "--broadcast", timeout=90) for name in "ab"]
    try:
        for m in members:
            m.wait_started()
        produce(tmp_path, servers, topic, run_id, 100)
        _wait_for(members, 200)
    finally:
        runs = [m.finish() for m in members]
    for name, run in zip("ab", runs, strict=True):
        check_messages(run.messages, run_id, range(100), topic, f"broadcasting member {name}")
