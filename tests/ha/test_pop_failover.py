"""POP across a controller-mode failover, in one process on loopback: pops and acks on the master, the slave
synced (the pop group's and the revive group's offsets and the timer's by slave sync, checkpoints and acks by
replication), the master stopped, the slave promoted. The new master's revive service starts from the synced
revive offsets and its timer from the synced timer offset: the unacked messages come back after their invisible
time, the acked ones and the ones the old master already revived do not, and the group's pop offset goes on."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import reactor

from compat_tests.servers import create_topic_request
from gateway.broker import slave_sync
from gateway.broker.controller import BrokerController
from gateway.broker.pop.records import REVIVE_GROUP
from gateway.broker.timer import TIMER_TOPIC
from gateway.client.api import MQClientAPI, PopResult
from gateway.remoting.client import RemotingClient
from gateway.remoting.codes import ResponseCode
from gateway.remoting.extra_info import PROPERTY_POP_CK
from tests.broker.conftest import sleep
from tests.broker.test_pop import pop_header
from tests.ha.test_controller_mode import GROUP, TOPIC, Cluster, until

POP_GROUP = "pop-failover"
FAST = {"reviveInterval": "200", "reviveMaxSlow": "1"}


@pytest_twisted.async_yield_fixture
async def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Cluster]:
    monkeypatch.setattr(slave_sync, "SYNC_FIRST_DELAY", 0.2)
    monkeypatch.setattr(slave_sync, "SYNC_INTERVAL", 0.5)
    client = RemotingClient(reactor)
    c = Cluster(tmp_path, client)
    c.start()
    try:
        yield c
    finally:
        await c.stop()
        await client.close()


async def pop(client: MQClientAPI, broker: BrokerController, invisible_ms: int) -> PopResult:
    header = pop_header(TOPIC, POP_GROUP, invisible_ms=invisible_ms)
    return await client.pop_message(broker.config.broker_addr, GROUP, header, 10)


async def pop_for(client: MQClientAPI, broker: BrokerController, seconds: float) -> list[bytes]:
    """Every body popped (never acked, invisible long) over ``seconds``."""
    bodies = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        result = await pop(client, broker, 60000)
        bodies += [m.body for m in result.messages]
        if not result.messages:
            await sleep(0.2)
    return bodies


async def ack(client: MQClientAPI, broker: BrokerController, result: PopResult, bodies: set[bytes]) -> None:
    for m in result.messages:
        if m.body in bodies:
            await client.ack_message(broker.config.broker_addr, POP_GROUP, TOPIC, m.properties[PROPERTY_POP_CK])


def offsets_synced(master: BrokerController, slave: BrokerController) -> bool:
    return all(
        slave.offsets.query_offset(group, topic, qid) == master.offsets.query_offset(group, topic, qid)
        for group, topic, qid in [(POP_GROUP, TOPIC, 0)]
        + [(REVIVE_GROUP, master.pop.revive_topic, q) for q in range(master.config.reviveQueueNum)]
    )


@pytest_twisted.ensureDeferred
async def test_unacked_pops_come_back_on_the_new_master_acked_and_revived_ones_do_not(cluster: Cluster) -> None:
    a = cluster.start_broker("a", **FAST)
    await until(lambda: a.replicas.role_known and not a.config.is_slave, what="first master")
    b = cluster.start_broker("b", **FAST)
    await until(lambda: a.replicas.sync_state_set == {1, 2}, what="slave in the SyncStateSet")
    resp = await cluster.client.invoke(a.config.broker_addr, create_topic_request(TOPIC, 1), 5)
    assert resp.code == ResponseCode.SUCCESS
    client = MQClientAPI(cluster.client, [cluster.namesrv_addr])

    # Round one, revived by the old master: popped, not acked, back from the retry topic and acked there.
    for body in (b"r0", b"r1"):
        assert (await cluster.send(a, body)).code == ResponseCode.SUCCESS
    # (Invisible long enough that the checkpoint waits in the timer topic: the new master must not deliver it again.)
    assert [m.body for m in (await pop(client, a, 2500)).messages] == [b"r0", b"r1"]
    deadline = time.monotonic() + 10
    revived: list[bytes] = []
    while len(revived) < 2:
        assert time.monotonic() < deadline, f"round one not revived on the old master: {revived}"
        result = await pop(client, a, 60000)
        await ack(client, a, result, {b"r0", b"r1"})
        revived += [m.body for m in result.messages]
        await sleep(0.2)
    assert sorted(revived) == [b"r0", b"r1"]

    # Round two: four popped, two acked, two left for their invisible time; the slave synced.
    for body in (b"m0", b"m1", b"m2", b"m3"):
        assert (await cluster.send(a, body)).code == ResponseCode.SUCCESS
    second = await pop(client, a, 4000)
    assert [m.body for m in second.messages] == [b"m0", b"m1", b"m2", b"m3"]
    await ack(client, a, second, {b"m0", b"m2"})
    popped_at = time.monotonic()
    await until(lambda: a.offsets.query_offset(POP_GROUP, TOPIC, 0) == 6, what="pop offset committed")
    await until(lambda: b.topics.select(TOPIC) is not None and offsets_synced(a, b), what="offsets synced")
    await until(lambda: b.store.commit_log.max_offset == a.store.commit_log.max_offset, what="slave caught up")
    await until(lambda: b.timer.commit_offset >= 1, what="timer checkpoint synced")
    # The slave's timer queue holds each unit's delivery time, as the master's does.
    units = [q.get_unit(i) for q in (x.store.consume_queue_table[(TIMER_TOPIC, 0)] for x in (a, b)) for i in range(5)]
    assert units[:5] == units[5:] and all(u[2] > 1_000_000_000_000 for u in units)
    assert b.offsets.query_offset(POP_GROUP, TOPIC, 0) == 6

    await cluster.stop_broker("a")
    await until(lambda: b.replicas.role_known and not b.config.is_slave, what="failover to b")
    assert (await cluster.send(b, b"after")).code in (ResponseCode.SUCCESS, ResponseCode.SLAVE_NOT_AVAILABLE)
    # The new message at once (the offset went on); m1 and m3 once their invisible time is over; nothing else.
    bodies = await pop_for(client, b, max(0.0, popped_at + 9 - time.monotonic()))
    assert bodies[0] == b"after" and sorted(bodies[1:]) == [b"m1", b"m3"], bodies
