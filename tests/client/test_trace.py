"""Message trace from the Python client, against our broker: what the Java client's golden traces show
(tests/trace/golden) written by a traced producer, transactional producer and push consumer, with times
that match what the test saw, found again by mqadmin's queryMsgTraceById lookup."""

from __future__ import annotations

import time
from typing import Any

import pytest_twisted

from gateway.client import (
    Admin,
    ConsumeStatus,
    LocalTransactionState,
    MessageExt,
    Producer,
    TransactionProducer,
    build_message,
)
from gateway.remoting.message import MessageConst, decode_records
from gateway.remoting.names import TRACE_TOPIC
from gateway.trace.codec import TraceFormatError, TraceRecord, decode_body
from gateway.trace.view import format_trace_views

from .conftest import Servers, group_name, wait_until
from .test_push_consumer import push_consumer


def now_ms() -> int:
    return int(time.time() * 1000)


def stored(servers: Servers, topic: str) -> list[MessageExt]:
    """The messages of every queue of ``topic``, read from the broker's store."""
    found = []
    for queue_id in range(8):
        result = servers.broker.store.get_message("trace-test", topic, queue_id, 0, 256)
        if result is not None and result.buffers:
            found.extend(decode_records(b"".join(result.buffers)))
    return found


def records(messages: list[MessageExt]) -> list[TraceRecord]:
    out = [r for m in messages for r in decode_body(m.body)]
    assert not [r for r in out if isinstance(r, TraceFormatError)]
    return out  # type: ignore[return-value]


class CommitAll:
    def execute_local_transaction(self, msg: Any, arg: Any) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE

    def check_local_transaction(self, msg: Any) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE


@pytest_twisted.ensureDeferred
async def test_traced_sends_transaction_and_consumes_as_the_java_client_writes_them(servers: Servers) -> None:
    topic = await servers.topic(2)
    before = len(stored(servers, TRACE_TOPIC))
    consumed_at: dict[tuple[str | None, int], int] = {}

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        m = msgs[0]
        consumed_at[(m.keys, m.reconsume_times)] = now_ms()
        if m.keys == "key-2" and m.reconsume_times == 0:
            return ConsumeStatus.RECONSUME_LATER  # consumed again, from the retry topic
        return ConsumeStatus.CONSUME_SUCCESS

    group = group_name("TraceCG")
    consumer = await push_consumer(servers, group, topic, listener, enable_msg_trace=True)
    producer = Producer(group_name("TracePG"), servers.namesrv_addr, enable_msg_trace=True)
    tx = TransactionProducer(
        group_name("TraceTxPG"), servers.namesrv_addr, transaction_listener=CommitAll(), enable_msg_trace=True
    )
    await producer.start()
    await tx.start()
    sends = {}
    try:
        for i in range(5):
            t0 = now_ms()
            result = await producer.send(build_message(topic, b"hello-trace-%d" % i, tags="TagA", keys=f"key-{i}"))
            sends[result.msg_id] = (t0, now_ms(), f"key-{i}")
        tx_result = await tx.send_message_in_transaction(
            build_message(topic, b"hello-tx-0", tags="TagTx", keys="tx-key-0")
        )
        tx_id = tx_result.send_result.msg_id
        await wait_until(lambda: len(consumed_at) == 7, timeout=20, what="6 consumes and 1 retry")
    finally:
        await consumer.shutdown()
        await producer.shutdown()
        await tx.shutdown()
    await wait_until(lambda: len(stored(servers, TRACE_TOPIC)) > before, what="trace messages stored")
    await wait_until(
        lambda: sum(r.trace_type == "SubAfter" for r in records(stored(servers, TRACE_TOPIC)[before:])) == 7,
        what="every trace record stored",
    )
    messages = stored(servers, TRACE_TOPIC)[before:]
    recs = records(messages)
    by_type: dict[str, list[TraceRecord]] = {}
    for r in recs:
        by_type.setdefault(r.trace_type, []).append(r)
    assert sorted(by_type) == ["EndTransaction", "Pub", "SubAfter", "SubBefore"]

    pubs = {r.msg_id: r for r in by_type["Pub"]}
    assert set(pubs) == {*sends, tx_id}
    for msg_id, (t0, t1, key) in sends.items():
        p = pubs[msg_id]
        assert (p.topic, p.tags, p.keys, p.region_id, p.success, p.msg_type) == (
            topic, "TagA", key, "DefaultRegion", True, 0,
        )  # fmt: skip
        assert p.store_host == servers.broker_addr and p.body_length == len(b"hello-trace-0")
        assert t0 <= p.timestamp <= t1 and 0 <= p.cost_time <= t1 - t0  # type: ignore[operator]
        assert p.offset_msg_id and p.offset_msg_id != msg_id
    assert pubs[tx_id].msg_type == 1 and pubs[tx_id].tags == "TagTx"
    (end,) = by_type["EndTransaction"]
    assert (end.msg_id, end.transaction_id, end.transaction_state, end.from_transaction_check, end.msg_type) == (
        tx_id, tx_id, "COMMIT_MESSAGE", False, 2,
    )  # fmt: skip

    befores = {r.request_id: r for r in by_type["SubBefore"]}
    afters = by_type["SubAfter"]
    assert len(befores) == len(afters) == 7 and {a.request_id for a in afters} == set(befores)
    for a in afters:
        b = befores[a.request_id]
        assert a.msg_id == b.msg_id and a.group == b.group == group and a.keys == b.keys
        # The listener ran between SubBefore and SubAfter.
        seen = consumed_at[(b.keys, b.retry_times)]  # type: ignore[index]
        assert b.timestamp <= seen <= a.timestamp  # type: ignore[operator]
        assert a.cost_time == a.timestamp - b.timestamp  # type: ignore[operator]
    key2 = next(m for m, s in sends.items() if s[2] == "key-2")
    tries = sorted((befores[a.request_id].retry_times, a.success, a.context_code) for a in afters if a.msg_id == key2)
    assert tries == [(0, False, 4), (1, True, 0)]  # FAILED, then SUCCESS on the retry

    # Every trace message is found by the msgIds and keys it carries.
    for m in messages:
        keys = set(m.properties[MessageConst.KEYS].split(" "))
        assert {r.msg_id for r in records([m])} <= keys
    admin = Admin(servers.namesrv_addr)
    try:
        views = await admin.query_msg_trace_by_id(key2)
    finally:
        await admin.shutdown()
    table = format_trace_views(views)
    assert [line.split()[0] for line in table.splitlines() if line and not line.startswith("#")] == [
        "Pub",
        "Sub",
        "Sub",
    ]
    assert [line.split()[-1] for line in table.splitlines() if line.startswith("Sub")] == ["failed", "success"]


@pytest_twisted.ensureDeferred
async def test_a_custom_trace_topic(servers: Servers) -> None:
    topic = await servers.topic(1)
    trace_topic = group_name("MyTraceTopic")
    producer = Producer(group_name("pg"), servers.namesrv_addr, enable_msg_trace=True, custom_trace_topic=trace_topic)
    await producer.start()
    try:
        result = await producer.send(build_message(topic, b"traced", keys="k"))
    finally:
        await producer.shutdown()
    await wait_until(lambda: bool(stored(servers, trace_topic)), what="the custom trace topic")
    (pub,) = records(stored(servers, trace_topic))
    assert (pub.trace_type, pub.msg_id, pub.topic) == ("Pub", result.msg_id, topic)


@pytest_twisted.ensureDeferred
async def test_a_trace_that_cannot_be_written_never_fails_the_traced_send(servers: Servers) -> None:
    """The trace topic is refused (an illegal name): the send and the shutdown still succeed."""
    topic = await servers.topic(1)
    producer = Producer(group_name("pg"), servers.namesrv_addr, enable_msg_trace=True, custom_trace_topic="no such!")
    await producer.start()
    try:
        result = await producer.send(build_message(topic, b"traced anyway"))
        assert result.status.name == "SEND_OK"
    finally:
        await producer.shutdown()
    assert producer.trace is not None and not producer.trace.dispatcher._sending
