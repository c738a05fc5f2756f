"""The Python client's delay levels, timer messages, send-back (with Java's fallback), dead letters and
transactional producer with check-back, against our broker (delay levels of 1 s, checks every 0.3 s)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest_twisted

from gateway.client import (
    ConsumeStatus,
    LocalTransactionState,
    Message,
    MessageExt,
    Producer,
    PullConsumer,
    TransactionProducer,
    build_message,
)
from gateway.client.instance import CLIENT_INNER_PRODUCER_GROUP
from gateway.remoting.bodies import MessageQueue
from gateway.remoting.codes import RequestCode, ResponseCode

from .conftest import Servers, group_name, wait_until
from .test_push_consumer import Recorder, push_consumer


@pytest_twisted.async_yield_fixture
async def producer(servers: Servers) -> AsyncIterator[Producer]:
    p = Producer(group_name("pg"), servers.namesrv_addr)
    await p.start()
    yield p
    await p.shutdown()


@pytest_twisted.ensureDeferred
async def test_delay_level_and_deliver_time(servers: Servers, producer: Producer) -> None:
    topic = await servers.topic(1)
    rec = Recorder()
    consumer = await push_consumer(servers, group_name("delayed"), topic, rec)
    try:
        sent_at = time.time() * 1000
        await producer.send(build_message(topic, b"level", delay_level=2))
        await producer.send(build_message(topic, b"timer", deliver_time_ms=int(sent_at) + 1500))
        await wait_until(lambda: len(rec.messages) == 2, what="delayed deliveries")
        by_body = {m.body: m for m in rec.messages}
        assert by_body[b"level"].store_timestamp - sent_at >= 1000 - 50
        assert by_body[b"timer"].store_timestamp >= sent_at + 1500
        assert all(m.topic == topic for m in rec.messages)
    finally:
        await consumer.shutdown()


@pytest_twisted.ensureDeferred
async def test_failed_messages_come_back_then_go_to_the_dead_letter_queue(servers: Servers, producer: Producer) -> None:
    topic = await servers.topic(1)
    attempts: Counter[bytes] = Counter()
    seen: list[MessageExt] = []

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        for m in msgs:
            attempts[m.body] += 1
            seen.append(m)
        if msgs[0].body == b"hopeless" or attempts[msgs[0].body] < 3:
            raise RuntimeError("not yet")
        return ConsumeStatus.CONSUME_SUCCESS

    group = group_name("retrying")
    consumer = await push_consumer(servers, group, topic, listener, max_reconsume_times=2)
    try:
        await producer.send(build_message(topic, b"flaky", keys="k1"))
        await producer.send(build_message(topic, b"hopeless"))
        # flaky: first delivery + 2 retries; hopeless: first delivery + 2 retries, then the DLQ.
        await wait_until(lambda: attempts == {b"flaky": 3, b"hopeless": 3}, timeout=20, what="three attempts each")
        retried = [m for m in seen if m.reconsume_times > 0]
        assert all(m.topic == topic and m.keys in ("k1", None) for m in retried)
        assert sorted(m.reconsume_times for m in retried if m.body == b"flaky") == [1, 2]
        reader = PullConsumer(group_name("dlq-reader"), servers.namesrv_addr)
        await reader.start()
        try:
            dlq = f"%DLQ%{group}"
            await wait_until(lambda: servers.broker.topics.select(dlq) is not None, what="DLQ topic")
            result = await reader.pull(MessageQueue(dlq, "broker-a", 0), "*", 0, 32)
            assert [m.body for m in result.messages] == [b"hopeless"]
            assert result.messages[0].properties["RETRY_TOPIC"] == topic
        finally:
            await reader.shutdown()
        assert attempts == {b"flaky": 3, b"hopeless": 3}, "delivered again after the dead letter"
    finally:
        await consumer.shutdown()


@pytest_twisted.ensureDeferred
async def test_refused_send_back_falls_back_to_a_retry_copy(servers: Servers, producer: Producer) -> None:
    topic = await servers.topic(1)
    refused: list[int] = []

    def refuse_send_back(channel: Any, request: Any) -> Any:
        if request.code == RequestCode.CONSUMER_SEND_MSG_BACK:
            refused.append(request.opaque)
            return request.response(ResponseCode.SYSTEM_ERROR, "not today")
        return None

    attempts: Counter[int] = Counter()

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        attempts[msgs[0].reconsume_times] += 1
        return ConsumeStatus.CONSUME_SUCCESS if msgs[0].reconsume_times else ConsumeStatus.RECONSUME_LATER

    servers.broker.dispatcher.hooks.append(refuse_send_back)
    consumer = await push_consumer(servers, group_name("fallback"), topic, listener)
    try:
        await producer.send(build_message(topic, b"x"))
        await wait_until(lambda: attempts[1] == 1, what="redelivery of the retry copy")
        assert refused and attempts == {0: 1, 1: 1}
        assert CLIENT_INNER_PRODUCER_GROUP in consumer.client.producers
    finally:
        servers.broker.dispatcher.hooks.remove(refuse_send_back)
        await consumer.shutdown()
    assert not consumer.client.started, "the inner producer kept the client instance alive"


class Listener:
    """Commits ``c*`` bodies, rolls back ``r*``, leaves ``u*`` unknown until the broker checks back."""

    def __init__(self) -> None:
        self.checked: Counter[bytes] = Counter()

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        return {
            b"c": LocalTransactionState.COMMIT_MESSAGE,
            b"r": LocalTransactionState.ROLLBACK_MESSAGE,
        }.get(msg.body[:1], LocalTransactionState.UNKNOW)

    async def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        self.checked[msg.body] += 1
        if msg.body == b"u-raise":
            raise RuntimeError("cannot tell")
        if self.checked[msg.body] < 2:
            return LocalTransactionState.UNKNOW
        return (
            LocalTransactionState.COMMIT_MESSAGE if msg.body == b"u-commit" else LocalTransactionState.ROLLBACK_MESSAGE
        )


@pytest_twisted.ensureDeferred
async def test_transactional_producer_with_check_back(servers: Servers) -> None:
    topic = await servers.topic(2)
    listener = Listener()
    tx = TransactionProducer(group_name("tpg"), servers.namesrv_addr, transaction_listener=listener)
    await tx.start()
    rec = Recorder()
    consumer = await push_consumer(servers, group_name("txc"), topic, rec)
    try:
        results = {}
        for body in (b"c1", b"c2", b"r1", b"u-commit", b"u-rollback", b"u-raise"):
            results[body] = await tx.send_message_in_transaction(build_message(topic, body), arg=None)
        assert results[b"c1"].local_transaction_state is LocalTransactionState.COMMIT_MESSAGE
        assert results[b"u-commit"].local_transaction_state is LocalTransactionState.UNKNOW
        await wait_until(lambda: len(rec.messages) == 2, what="committed at once")
        assert sorted(m.body for m in rec.messages) == [b"c1", b"c2"]
        await wait_until(lambda: len(rec.messages) == 3, timeout=15, what="committed at check-back")
        assert rec.messages[2].body == b"u-commit" and listener.checked[b"u-commit"] == 2
        assert rec.messages[2].uniq_key == results[b"u-commit"].send_result.msg_id
        await wait_until(lambda: listener.checked[b"u-rollback"] >= 2, timeout=15, what="rolled back")
        await wait_until(lambda: listener.checked[b"u-raise"] >= 2, timeout=15, what="checked again after an error")
        assert b"c1" not in listener.checked, "a committed message was checked back"
        assert sorted(m.body for m in rec.messages) == [b"c1", b"c2", b"u-commit"]
        assert max(rec.counts.values()) == 1
    finally:
        await consumer.shutdown()
        await tx.shutdown()
