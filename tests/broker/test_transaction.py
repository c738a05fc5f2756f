"""Transactional messages on the broker: half queue, END_TRANSACTION, op queue, check-back, restarts."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
import pytest_twisted
from twisted.internet import reactor

from gateway.remoting import fastjson
from gateway.remoting.bodies import HeartbeatData, ProducerData
from gateway.remoting.client import RemotingClient
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.dispatch import RequestDispatcher
from gateway.remoting.headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader
from gateway.remoting.message import MessageExt, MessageSysFlag, decode_offset_message_id, decode_record
from gateway.remoting.names import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC

from .conftest import BrokerUnderTest, sleep
from .test_broker_server import create_topic, send
from .test_schedule import pull_all, wait_for

COMMIT, ROLLBACK, UNKNOWN = 8, 12, 0


class TransactionalProducer:
    """A producer connection that remembers the broker's CHECK_TRANSACTION_STATE requests."""

    def __init__(self) -> None:
        dispatcher = RequestDispatcher()
        dispatcher.register(RequestCode.CHECK_TRANSACTION_STATE, self._check)
        self.client = RemotingClient(reactor, dispatcher)
        self.checks: list[tuple[CheckTransactionStateRequestHeader, MessageExt]] = []

    def _check(self, channel: object, request: RemotingCommand) -> None:
        assert request.is_oneway
        self.checks.append((CheckTransactionStateRequestHeader.decode(request.ext_fields), decode_record(request.body)))

    async def register(self, broker: BrokerUnderTest, group: str = "tpg") -> None:
        body = fastjson.dumps(HeartbeatData(client_id="127.0.0.1@tx", producer_data_set=[ProducerData(group)]))
        resp = await self.client.invoke(broker.addr, RemotingCommand.request(RequestCode.HEART_BEAT, body=body))
        assert resp.code == ResponseCode.SUCCESS

    async def send_half(self, broker: BrokerUnderTest, topic: str, body: bytes, uniq: str, **extra: str) -> dict:
        props = {"TRAN_MSG": "true", "PGROUP": "tpg", "UNIQ_KEY": uniq, **extra}
        resp = await send(broker, topic, body, props, queue_id=1)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        return resp.ext_fields

    async def end(
        self, broker: BrokerUnderTest, half: dict, kind: int, *, group: str = "tpg", check: bool = False, **over: int
    ) -> RemotingCommand:
        """END_TRANSACTION as a two-way request, so the test sees what the broker made of it."""
        header = EndTransactionRequestHeader(
            producer_group=group,
            tran_state_table_offset=over.get("queue_offset", int(half["queueOffset"])),
            commit_log_offset=over.get("phy", decode_offset_message_id(half["msgId"])[1]),
            commit_or_rollback=kind,
            from_transaction_check=check,
            msg_id="ignored",
        )
        return await self.client.invoke(
            broker.addr, RemotingCommand.request(RequestCode.END_TRANSACTION, header.encode())
        )


@pytest_twisted.async_yield_fixture
async def producer() -> AsyncIterator[TransactionalProducer]:
    p = TransactionalProducer()
    yield p
    await p.client.close()


@pytest_twisted.ensureDeferred
async def test_commit_and_rollback(broker: BrokerUnderTest, producer: TransactionalProducer) -> None:
    await create_topic(broker, "Tx", 2)
    one = await producer.send_half(broker, "Tx", b"one", "U1", TAGS="a")
    two = await producer.send_half(broker, "Tx", b"two", "U2")
    # The answer names the real queue; the offset is the half queue's.
    assert (one["queueId"], one["queueOffset"], two["queueOffset"]) == ("1", "0", "1")
    assert await pull_all(broker, "Tx", 1) == []
    halves = await pull_all(broker, TRANS_HALF_TOPIC)
    assert [h.properties["REAL_TOPIC"] for h in halves] == ["Tx", "Tx"]
    assert all(MessageSysFlag.transaction_value(h.sys_flag) == 0 for h in halves)

    resp = await producer.end(broker, one, COMMIT, group="other")
    assert resp.code == ResponseCode.SYSTEM_ERROR and resp.remark == "The producer group wrong"
    resp = await producer.end(broker, one, COMMIT, queue_offset=1)
    assert resp.remark == "The transaction state table offset wrong"
    resp = await producer.end(broker, one, COMMIT, phy=1)
    assert resp.remark == "Find prepared transaction message failed"
    assert await pull_all(broker, "Tx", 1) == []

    assert (await producer.end(broker, one, COMMIT)).code == ResponseCode.SUCCESS
    assert (await producer.end(broker, two, ROLLBACK)).code == ResponseCode.SUCCESS
    (msg,) = await pull_all(broker, "Tx", 1)
    assert msg.body == b"one" and msg.tags == "a" and msg.properties["UNIQ_KEY"] == "U1"
    assert MessageSysFlag.transaction_value(msg.sys_flag) == MessageSysFlag.TRANSACTION_COMMIT_TYPE
    assert msg.prepared_transaction_offset == decode_offset_message_id(one["msgId"])[1]
    assert not {"TRAN_MSG", "REAL_TOPIC", "REAL_QID"} & msg.properties.keys()
    ops = await pull_all(broker, TRANS_OP_HALF_TOPIC)
    assert [(op.tags, op.body) for op in ops] == [("d", b"0"), ("d", b"1")]


@pytest_twisted.ensureDeferred
async def test_transaction_messages_can_be_refused(make_broker) -> None:
    broker = make_broker(rejectTransactionMessage="true")
    broker.start()
    try:
        await create_topic(broker, "TxOff", 1)
        resp = await send(broker, "TxOff", b"x", {"TRAN_MSG": "true", "PGROUP": "g"})
        assert resp.code == ResponseCode.NO_PERMISSION and "transaction message is forbidden" in resp.remark
    finally:
        await broker.stop()


@pytest.fixture
def checking_broker(make_broker):
    return make_broker(transactionCheckInterval="200", transactionTimeOut="600", transactionCheckMax="3")


@pytest_twisted.ensureDeferred
async def test_unknown_outcome_is_checked_back_and_committed_once(
    checking_broker: BrokerUnderTest, producer: TransactionalProducer
) -> None:
    broker = checking_broker
    broker.start()
    try:
        await create_topic(broker, "TxCheck", 2)
        await producer.register(broker)
        decided = await producer.send_half(broker, "TxCheck", b"decided", "D1")
        pending = await producer.send_half(broker, "TxCheck", b"pending", "P1")
        assert (await producer.end(broker, decided, ROLLBACK)).code == ResponseCode.SUCCESS
        sent_at = time.monotonic()
        while not producer.checks:
            assert time.monotonic() - sent_at < 10, "no check-back"
            await sleep(0.05)
        assert time.monotonic() - sent_at >= 0.5, "checked before transactionTimeOut"
        header, msg = producer.checks[0]
        assert {m.body for _, m in producer.checks} == {b"pending"}, "a resolved half was checked"
        assert msg.topic == "TxCheck" and msg.queue_id == 1 and msg.properties["UNIQ_KEY"] == "P1"
        assert header.msg_id == header.transaction_id == "P1"
        assert msg.properties["TRANSACTION_CHECK_TIMES"] == "1"
        # The check names a new copy of the half message.
        assert header.tran_state_table_offset > int(pending["queueOffset"])
        assert header.offset_msg_id == msg.msg_id and decode_offset_message_id(header.offset_msg_id)[1] == (
            header.commit_log_offset
        )
        answer = {"msgId": header.offset_msg_id, "queueOffset": str(header.tran_state_table_offset)}
        assert (await producer.end(broker, answer, COMMIT, check=True)).code == ResponseCode.SUCCESS
        (committed,) = await wait_for(broker, "TxCheck", 1, queue_id=1)
        assert committed.body == b"pending"
        checks = len(producer.checks)
        await sleep(1.0)
        assert len(producer.checks) == checks, "checked again after the commit"
        assert len(await pull_all(broker, "TxCheck", 1)) == 1
    finally:
        await broker.stop()


@pytest_twisted.ensureDeferred
async def test_half_messages_survive_a_restart_and_unanswered_ones_go_to_check_max_topic(
    checking_broker: BrokerUnderTest, producer: TransactionalProducer
) -> None:
    broker = checking_broker
    broker.start()
    await create_topic(broker, "TxRestart", 2)
    half = await producer.send_half(broker, "TxRestart", b"survivor", "S1")
    await broker.stop()
    broker.start()
    try:
        # After the restart the producer's original END_TRANSACTION still commits it, exactly once.
        assert (await producer.end(broker, half, COMMIT)).code == ResponseCode.SUCCESS
        await producer.register(broker)
        await producer.send_half(broker, "TxRestart", b"orphan", "O1")  # nobody will ever answer
        dead = await wait_for(broker, TRANS_CHECK_MAX_TIME_TOPIC, 1, timeout=15)
        assert [m.body for m in dead] == [b"orphan"]
        assert len(producer.checks) == 3  # transactionCheckMax
        assert [m.body for m in await pull_all(broker, "TxRestart", 1)] == [b"survivor"]
    finally:
        await broker.stop()
    broker.start()
    try:
        await sleep(1.0)
        assert len(await pull_all(broker, TRANS_CHECK_MAX_TIME_TOPIC)) == 1
        assert len(await pull_all(broker, "TxRestart", 1)) == 1
    finally:
        await broker.stop()
