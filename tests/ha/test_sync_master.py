"""SYNC_MASTER: a send is acknowledged once a slave holds it, with RocketMQ's statuses when it cannot be."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from types import SimpleNamespace
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import task
from twisted.internet.testing import MemoryReactorClock

from gateway.broker.config import load_broker_config
from gateway.config import ConfigError
from gateway.remoting.codes import ResponseCode
from gateway.remoting.message import decode_offset_message_id
from gateway.store.api import PutMessageStatus
from gateway.store.durability import put_waiter
from gateway.store.ha.service import HAConfig, HAService
from gateway.store.waiters import OffsetWaiters
from tests.broker.conftest import BrokerUnderTest, make_broker, remoting, sleep  # noqa: F401
from tests.broker.test_broker_server import send
from tests.ha.test_replication import TOPIC, caught_up, master_and_slave


@pytest_twisted.async_yield_fixture
async def sync_pair(make_broker) -> AsyncIterator[tuple[BrokerUnderTest, BrokerUnderTest]]:  # noqa: F811
    """A started SYNC_MASTER (slaveTimeout 600 ms) with topic HaTopic, and its slave, not started."""
    master = {"brokerRole": "SYNC_MASTER", "slaveTimeout": "600"}
    async with master_and_slave(make_broker, "broker-sync", master, {"haSendHeartbeatInterval": "200"}) as brokers:
        yield brokers


async def linked(master: BrokerUnderTest, timeout: float = 8.0) -> None:
    """Until the master has a slave that has reported."""
    ha = master.controller.ha_service
    deadline = time.monotonic() + timeout
    while not any(c.slave_ack_offset >= 0 for c in ha.connections):
        assert time.monotonic() < deadline, "slave never connected"
        await sleep(0.02)


@pytest_twisted.ensureDeferred
async def test_without_a_slave_the_send_is_stored_and_answered_slave_not_available(sync_pair) -> None:
    master, _ = sync_pair
    resp = await send(master, TOPIC, b"alone", {})
    assert resp.code == ResponseCode.SLAVE_NOT_AVAILABLE and resp.remark is None
    # Stored all the same: the client's SendResult carries the id and offset (sendOK in Apache).
    assert decode_offset_message_id(resp.ext_fields["msgId"])[1] == 0
    assert resp.ext_fields["queueOffset"] == "0"
    assert master.controller.store.get_max_offset_in_queue(TOPIC, 0) == 1
    # WAIT=false: nothing is waited for.
    resp = await send(master, TOPIC, b"no wait", {"WAIT": "false"})
    assert resp.code == ResponseCode.SUCCESS


@pytest_twisted.ensureDeferred
async def test_a_send_is_answered_once_the_slave_holds_it(sync_pair) -> None:
    master, slave = sync_pair
    s = slave.start()
    await linked(master)
    for i in range(30):
        resp = await send(master, TOPIC, b"m%d" % i * 50, {}, queue_id=i % 4)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        # Acknowledged means replicated: the slave's commitlog already reaches past this record.
        phy = decode_offset_message_id(resp.ext_fields["msgId"])[1]
        assert s.store.commit_log.max_offset > phy
    await caught_up(master.controller, s)


@pytest_twisted.ensureDeferred
async def test_a_stalled_slave_gives_flush_slave_timeout_without_blocking_others(sync_pair) -> None:
    master, slave = sync_pair
    s = slave.start()
    await linked(master)
    link = s.ha_client.link
    link.transport.pauseProducing()  # the slave reads (and so reports) nothing more
    try:
        started = time.monotonic()
        waiting = send(master, TOPIC, b"x" * 1000, {})
        # Meanwhile the reactor serves everyone else: a send that does not wait is answered at once.
        quick = await send(master, TOPIC, b"quick", {"WAIT": "false"})
        assert quick.code == ResponseCode.SUCCESS
        assert time.monotonic() - started < 0.5
        resp = await waiting
        assert resp.code == ResponseCode.FLUSH_SLAVE_TIMEOUT and resp.remark is None
        assert 0.5 <= time.monotonic() - started < 3
        assert "msgId" in resp.ext_fields
    finally:
        link.transport.resumeProducing()
    await caught_up(master.controller, s)  # the slave gets it all once it reads again
    resp = await send(master, TOPIC, b"after", {})
    assert resp.code == ResponseCode.SUCCESS


def test_offset_waiters_release_and_expire_in_order() -> None:
    clock = task.Clock()
    waiters = OffsetWaiters(clock)
    got: list[tuple[int, bool]] = []
    for offset in (10, 20, 30):
        waiters.add(offset, 1.0, lambda ok, o=offset: got.append((o, ok)))
        clock.advance(0.3)
    waiters.release(20)
    assert got == [(10, True), (20, True)]
    clock.advance(0.5)  # 30 was asked at 0.6, due at 1.6; now is 1.4
    assert len(got) == 2
    clock.advance(0.25)
    assert got[-1] == (30, False) and not waiters and not clock.getDelayedCalls()


def test_offset_waiters_answer_with_the_values_each_waiter_names() -> None:
    clock = task.Clock()
    waiters = OffsetWaiters(clock)
    got: list[str] = []
    waiters.add(10, 1.0, got.append, "stored", "late")
    waiters.add(20, 1.0, got.append, "stored", "late")
    waiters.release(15)
    clock.advance(1.0)
    assert got == ["stored", "late"]


class _Answers:
    """A fake flush or replica service: answers ``ok``'s value at once, or (``later``) when the test says."""

    def __init__(self, ok: bool, later: bool) -> None:
        self.ok, self.later = ok, later
        self.pending: list[Callable[[], object]] = []

    def answer(self, callback: Callable[[Any], object], good: Any, bad: Any) -> Any:
        value = good if self.ok else bad
        if not self.later:
            return value
        self.pending.append(lambda: callback(value))
        return None


class _Replica(_Answers):
    def __init__(self, slave_ok: bool, acked: bool, later: bool) -> None:
        super().__init__(acked, later)
        self.slave_ok = slave_ok

    def is_slave_ok(self, _end: int) -> bool:
        return self.slave_ok

    def notify_replica(self, _end: int, callback: Callable[[Any], object], replicated: Any, timed_out: Any) -> Any:
        return self.answer(callback, replicated, timed_out)


class _Flush(_Answers):
    def notify_flush(self, _end: int, callback: Callable[[Any], object], flushed: Any, timed_out: Any) -> Any:
        return self.answer(callback, flushed, timed_out)


@pytest.mark.parametrize("later", ["flush", "replica", "both", "replica first", None])
@pytest.mark.parametrize(
    ("flushed", "slave_ok", "acked", "status"),
    [
        (True, True, True, PutMessageStatus.PUT_OK),
        (False, True, True, PutMessageStatus.FLUSH_DISK_TIMEOUT),
        (True, True, False, PutMessageStatus.FLUSH_SLAVE_TIMEOUT),
        (False, True, False, PutMessageStatus.FLUSH_SLAVE_TIMEOUT),  # the replica's status wins, as in Apache
        (False, False, True, PutMessageStatus.SLAVE_NOT_AVAILABLE),
    ],
)
def test_flush_and_replica_statuses_combine_as_apache(
    flushed: bool, slave_ok: bool, acked: bool, status: PutMessageStatus, later: str | None
) -> None:
    """The final status comes at once when both answers are known, else through the callback exactly once, after
    the later of the two."""
    flush = _Flush(flushed, later in ("flush", "both", "replica first"))
    replica = _Replica(slave_ok, acked, later in ("replica", "both", "replica first"))
    wait = put_waiter(flush, replica)  # type: ignore[arg-type]
    assert wait is not None
    got: list[PutMessageStatus] = []
    now = wait(100, got.append)
    answers = flush.pending + replica.pending
    if later == "replica first":
        answers.reverse()
    if not answers:
        assert now is status and got == []
    else:
        assert now is None
        for answer in answers[:-1]:
            answer()
            assert got == []
        answers[-1]()
        assert got == [status]
    assert put_waiter(None, None) is None


def test_sync_flush_sends_wait_with_callbacks_not_deferreds() -> None:
    """A waiting send's status reaches its callback once the fsync covers it, and a callback that raises does not
    keep the others from theirs."""
    clock = task.Clock()
    waiters = OffsetWaiters(clock)
    got: list[tuple[int, str]] = []

    def broken(_: str) -> None:
        raise RuntimeError("a broken callback")

    waiters.add(10, 1.0, lambda v: got.append((10, v)), "stored", "late")
    waiters.add(15, 1.0, broken, "stored", "late")
    waiters.add(20, 1.0, lambda v: got.append((20, v)), "stored", "late")
    waiters.release(20)
    assert got == [(10, "stored"), (20, "stored")] and not waiters and not clock.getDelayedCalls()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"brokerRole": "SYNC_MASTR"}, "key brokerRole: 'SYNC_MASTR' is not one of"),
        ({"brokerRole": "SLAVE"}, "key brokerId: Slave's brokerId must be > 0"),
    ],
)
def test_role_settings_are_checked_as_broker_startup_does(overrides: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_broker_config(None, overrides)
    broker, store = load_broker_config(None, {"brokerRole": "SYNC_MASTER", "brokerId": "3"})
    assert (broker.brokerId, store.brokerRole) == (0, "SYNC_MASTER")  # a master is always 0


class _Slave:
    """An HA connection that counts the transfers it was asked for."""

    def __init__(self) -> None:
        self.transfers = 0
        self.transport = SimpleNamespace(abortConnection=lambda: None)

    def transfer(self) -> None:
        self.transfers += 1

    def tick(self, now: float) -> None:
        pass


def test_data_nobody_waits_for_is_pushed_in_batches_and_a_waiting_send_pushes_at_once() -> None:
    clock = MemoryReactorClock()
    commit_log = SimpleNamespace(max_offset=0)
    ha = HAService(SimpleNamespace(commit_log=commit_log), HAConfig(haTransferBatchSize=1000), clock)  # type: ignore[arg-type]
    ha.start(0, "127.0.0.1")
    slave = _Slave()
    ha.connections.add(slave)  # type: ignore[arg-type]
    commit_log.max_offset = 3999
    ha.wakeup()
    clock.advance(0)
    assert slave.transfers == 0  # under 4 batches unsent: left for the tick
    clock.advance(HAService.TICK)
    assert slave.transfers == 1
    commit_log.max_offset += 4000
    ha.wakeup()
    ha.wakeup()
    clock.advance(0)
    assert slave.transfers == 2  # 4 batches: at the end of this turn, once for all its appends
    commit_log.max_offset += 10
    ha.wakeup()
    clock.advance(0)
    assert slave.transfers == 2
    answers: list[str] = []
    assert ha.notify_replica(commit_log.max_offset, answers.append, "replicated", "timed out") is None
    clock.advance(0)
    assert slave.transfers == 3  # a SYNC_MASTER send does not wait for the tick
    ha.stop()
    assert answers == ["timed out"]
