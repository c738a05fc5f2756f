"""4.x replication between our master and our slave: two in-process brokers on loopback, real files."""

from __future__ import annotations

import random
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import maybeDeferred
from twisted.internet.endpoints import TCP4ClientEndpoint
from twisted.internet.error import CannotListenError
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.testing import StringTransport

from gateway.broker.controller import BrokerController
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.message import decode_record
from gateway.store.ha.client import HAClientProtocol
from gateway.store.ha.codec import encode_transfer_header
from tests.broker.conftest import BrokerUnderTest, make_broker, remoting, sleep  # noqa: F401
from tests.broker.test_broker_server import create_topic, send, send_header
from tests.namesrv.conftest import namesrv, namesrv_config  # noqa: F401

TOPIC = "HaTopic"


@asynccontextmanager
async def master_and_slave(
    new_broker: Callable[..., BrokerUnderTest], name: str, master: dict[str, str], slave: dict[str, str]
) -> AsyncIterator[tuple[BrokerUnderTest, BrokerUnderTest]]:
    """A started master (``master`` settings) with topic HaTopic, and its slave (not started) following
    haMasterAddress; both stopped at the end."""
    m = new_broker(brokerName=name, **master)
    m.overrides["storePathRootDir"] = str(m.root / "master")
    controller = m.start()
    s = new_broker(
        storePathRootDir=str(m.root / "slave"),
        brokerName=name,
        brokerRole="SLAVE",
        brokerId="1",
        haMasterAddress=f"127.0.0.1:{controller.config.haListenPort}",
        **slave,
    )
    try:
        await create_topic(m, TOPIC)
        yield m, s
    finally:
        await s.stop()
        await m.stop()


@pytest_twisted.async_yield_fixture
async def pair(make_broker) -> AsyncIterator[tuple[BrokerUnderTest, BrokerUnderTest]]:  # noqa: F811
    """An ASYNC_MASTER and its slave (see :func:`master_and_slave`)."""
    async with master_and_slave(make_broker, "broker-ha", {}, {}) as brokers:
        yield brokers


async def fill(master: BrokerUnderTest, count: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    bodies = []
    for i in range(count):
        body = rng.randbytes(rng.choice((10, 300, 4000, 20000)))
        resp = await send(master, TOPIC, body, {"KEYS": f"k{seed}-{i}"}, queue_id=i % 4)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        bodies.append(body)
    return bodies


async def caught_up(master: BrokerController, slave: BrokerController, timeout: float = 8.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if slave.store.commit_log.max_offset == master.store.commit_log.max_offset:
            return
        await sleep(0.05)
    raise AssertionError(
        f"slave at {slave.store.commit_log.max_offset}, master at {master.store.commit_log.max_offset}"
    )


def assert_identical(master: BrokerController, slave: BrokerController, start: int = 0) -> None:
    m, s = master.store, slave.store
    end = m.commit_log.max_offset
    offset = start
    while offset < end:
        f = m.commit_log.queue.find_mapped_file_by_offset(offset)
        assert f is not None
        size = min(end, f.end_offset) - offset
        assert m.commit_log.get_message(offset, size) == s.commit_log.get_message(offset, size), offset
        offset += size
    for queue_id in range(4):
        assert s.get_max_offset_in_queue(TOPIC, queue_id) == m.get_max_offset_in_queue(TOPIC, queue_id) > 0
    assert s.commit_log.topic_queue_table == m.commit_log.topic_queue_table


@pytest_twisted.ensureDeferred
async def test_slave_replicates_byte_identical_and_catches_up_after_restart(pair) -> None:
    master, slave = pair
    m, s = master.controller, slave.start()
    assert m is not None
    bodies = await fill(master, 250, seed=1)
    await caught_up(m, s)
    assert len(m.store.commit_log.queue.files) >= 2  # crossed a 1 MiB segment, blank included
    assert_identical(m, s)
    # A message read from the slave's store equals the original.
    result = s.store.get_message("g", TOPIC, 1, 3, 1, None)
    (view,) = result.buffers
    assert decode_record(view).body == bodies[4 * 3 + 1]
    # A send to the slave is refused as Apache's store refuses it.
    resp = await slave.call(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, send_header(TOPIC, {}), b"x"))
    assert resp.code == ResponseCode.SERVICE_NOT_AVAILABLE
    await slave.stop()
    await fill(master, 250, seed=2)
    s = slave.start()
    await caught_up(m, s)
    assert_identical(m, s)


@pytest_twisted.ensureDeferred
async def test_both_ends_of_the_link_send_small_frames_at_once(pair) -> None:
    """TCP_NODELAY on the master's and the slave's HA sockets, as Apache's HAConnection and HAClient set it: a
    report or a small push must not wait for the peer's delayed ACK (Nagle) while a SYNC_MASTER send waits."""
    master, slave = pair
    m, s = master.controller, slave.start()
    assert m is not None and m.ha_service is not None and s.ha_client is not None
    await fill(master, 3, seed=3)
    await caught_up(m, s)
    [conn] = m.ha_service.connections
    link = s.ha_client.link
    assert link is not None
    for transport in (conn.transport, link.transport):
        assert transport.getHandle().getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)


@pytest_twisted.ensureDeferred
async def test_empty_slave_starts_after_master_has_data(pair) -> None:
    master, slave = pair
    bodies = await fill(master, 250, seed=3)
    m = master.controller
    assert m is not None and len(m.store.commit_log.queue.files) >= 2
    s = slave.start()
    await caught_up(m, s)
    # As Apache, an empty slave gets the master's last segment only.
    last_segment = m.store.commit_log.queue.files[-1].file_from_offset
    assert s.store.commit_log.min_offset == last_segment
    assert_identical(m, s, start=last_segment)
    offset = m.store.get_max_offset_in_queue(TOPIC, 2) - 1
    (view,) = s.store.get_message("g", TOPIC, 2, offset, 1, None).buffers
    assert decode_record(view).body == bodies[4 * offset + 2]


@pytest_twisted.ensureDeferred
async def test_transfer_at_wrong_offset_drops_link(pair) -> None:
    master, slave = pair
    await fill(master, 3, seed=4)
    assert master.controller is not None
    s = slave.start()
    await caught_up(master.controller, s)
    assert s.ha_client is not None
    proto = HAClientProtocol(s.ha_client)
    transport = StringTransport()
    proto.makeConnection(transport)
    end = s.store.commit_log.max_offset
    proto.dataReceived(encode_transfer_header(end + 1, 1) + b"x")
    assert transport.disconnecting and s.store.commit_log.max_offset == end


@pytest_twisted.ensureDeferred
async def test_slave_learns_master_ha_address_from_namesrv(tmp_path: Path, remoting, namesrv) -> None:  # noqa: F811
    common = {"namesrvAddr": f"127.0.0.1:{namesrv.port}", "brokerName": "broker-ha"}
    master = BrokerUnderTest(tmp_path / "master", remoting, **common)
    slave = BrokerUnderTest(tmp_path / "slave", remoting, brokerRole="SLAVE", brokerId="1", **common)
    try:
        m = master.start()
        await m.when_ready()
        await create_topic(master, TOPIC)
        await fill(master, 20, seed=5)
        s = slave.start()
        await s.when_ready()
        assert s.registration.ha_master_addr == f"127.0.0.1:{m.config.haListenPort}"
        await caught_up(m, s)
        assert_identical(m, s)
        # The slave's HA port listens too, as Apache's HAService does whatever the role.
        assert s.config.haListenPort not in (0, m.config.haListenPort)
        endpoint = TCP4ClientEndpoint(reactor, "127.0.0.1", s.config.haListenPort)
        peer = await endpoint.connect(Factory.forProtocol(Protocol))
        peer.transport.loseConnection()
    finally:
        await slave.stop()
        await master.stop()


@pytest_twisted.ensureDeferred
async def test_ha_port_is_listen_port_plus_one_or_ephemeral_when_taken(tmp_path: Path, remoting) -> None:  # noqa: F811
    for attempt in range(20):  # an ephemeral port whose neighbour below is free too
        blocker = reactor.listenTCP(0, Factory(), interface="127.0.0.1")
        taken = blocker.getHost().port
        broker = BrokerUnderTest(tmp_path / str(attempt), remoting, listenPort=str(taken - 1))
        try:
            c = broker.start()
            break
        except CannotListenError:
            await maybeDeferred(blocker.stopListening)
    else:
        pytest.fail("no free pair of neighbouring ports in 20 tries")
    try:
        assert c.config.haListenPort not in (taken, 0)
        await maybeDeferred(blocker.stopListening)
        await broker.stop()
        c = broker.start()  # listenPort + 1 is free now: Apache's HA port
        assert c.config.haListenPort == taken
    finally:
        await broker.stop()
