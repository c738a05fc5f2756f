"""The server-wide memory budget: partial frames and unsent replies over the cap close the newest connections.

Real servers on 127.0.0.1 (a bare one with an echo handler, a broker, a NameServer) and one unit test of
the unsent-reply accounting over a StringTransport.
"""

from __future__ import annotations

import socket
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer, protocol, reactor, task
from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport

from gateway.broker.config import BrokerConfig
from gateway.config import ConfigError
from gateway.namesrv.config import NamesrvConfig
from gateway.namesrv.service import NamesrvController
from gateway.remoting.budget import MemoryBudget, MiB
from gateway.remoting.client import RemotingClient
from gateway.remoting.codec import FrameDecoder, encode
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.dispatch import RequestDispatcher
from gateway.remoting.protocol import RemotingProtocol, RemotingServerFactory
from tests.broker.conftest import BrokerUnderTest, make_broker, remoting  # noqa: F401
from tests.broker.test_broker_server import send_header
from tests.remoting.test_server_bad_input import ECHO, RawClient, echo, eventually, within

KiB = 1024
BIG = 1005  # answers with ``size`` bytes after ``delayMs``


def big(_channel: RemotingProtocol, request: RemotingCommand) -> defer.Deferred[RemotingCommand]:
    ext = request.ext_fields or {}
    body = b"r" * int(ext["size"])
    return task.deferLater(reactor, int(ext.get("delayMs", "0")) / 1000, lambda: request.response(body=body))


class Server:
    """A remoting server with a budget of ``limit`` bytes, and raw peers connected to it in order."""

    def __init__(self, limit: int) -> None:
        dispatcher = RequestDispatcher()
        dispatcher.register_all({ECHO: echo, BIG: big})
        self.budget = MemoryBudget(limit)
        self.factory = RemotingServerFactory(dispatcher, budget=self.budget)
        self.port = reactor.listenTCP(0, self.factory, interface="127.0.0.1")
        self.addr = f"127.0.0.1:{self.port.getHost().port}"
        self.peers: list[RawClient] = []

    async def connect(self) -> RawClient:
        """A new peer, once the server has it (so the server sees peers in the order they were made)."""
        creator = protocol.ClientCreator(reactor, RawClient)
        peer = await within(creator.connectTCP("127.0.0.1", self.port.getHost().port))
        self.peers.append(peer)
        await eventually(lambda: channel_of(self.factory, peer) is not None)
        return peer

    async def stop(self) -> None:
        for peer in self.peers:
            if not peer.closed.called:
                peer.transport.abortConnection()
        await within(defer.DeferredList([p.closed for p in self.peers]))
        await eventually(lambda: not self.factory.channels)
        await within(defer.maybeDeferred(self.port.stopListening))


@pytest.fixture
def peak(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The highest ``used`` any budget reached once a charge had returned (i.e. after shedding)."""
    seen = [0]
    charge = MemoryBudget.charge

    def watched(self: MemoryBudget, delta: int) -> None:
        charge(self, delta)
        seen[0] = max(seen[0], self.used)

    monkeypatch.setattr(MemoryBudget, "charge", watched)
    yield seen


def echo_frame(opaque: int, body_size: int) -> bytes:
    cmd = RemotingCommand.request(ECHO, {"n": str(opaque)}, b"b" * body_size)
    cmd.opaque = opaque
    return encode(cmd)


def channel_of(factory: RemotingServerFactory, peer: RawClient) -> RemotingProtocol | None:
    """The server side of ``peer``'s connection."""
    port = peer.transport.getHost().port
    return next((ch for ch in factory.channels if ch.peer_port == port), None)


async def arrived(factory: RemotingServerFactory, peer: RawClient, held: int) -> None:
    """Until the server holds ``held`` bytes for ``peer`` or has closed it."""
    await eventually(lambda: peer.closed.called or getattr(channel_of(factory, peer), "held", None) == held)


@pytest_twisted.ensureDeferred
async def test_trickled_frames_close_the_newest_connections_and_never_pass_the_cap(peak: list[int]) -> None:
    server = Server(4 * MiB)
    client = RemotingClient(reactor)
    try:
        peers = [await server.connect() for _ in range(20)]
        frames = [echo_frame(i, 1 * MiB) for i in range(20)]
        half = 512 * KiB
        for i, (peer, frame) in enumerate(zip(peers, frames, strict=True)):
            peer.send(frame[:half])  # declares a 1 MiB frame, sends half of it
            await arrived(server.factory, peer, half)
            # A client with small requests is never held against the budget, and is served throughout.
            resp = await within(client.invoke(server.addr, RemotingCommand.request(ECHO, {"i": str(i)}), 2))
            assert resp.ext_fields == {"i": str(i)}
        await eventually(lambda: sum(p.closed.called for p in peers) == 12)

        assert peak[0] <= server.budget.limit
        # 8 halves are exactly the cap: the 8 oldest stay, every newer one was closed as it passed it.
        assert [p.closed.called for p in peers] == [False] * 8 + [True] * 12
        assert server.budget.used == 8 * half == sum(ch.held for ch in server.factory.channels)
        # The oldest finish their frames; the room they need (and their 1 MiB replies) comes from the newest.
        answered = []
        for i, (peer, frame) in enumerate(zip(peers[:8], frames[:8], strict=True)):
            if not peer.closed.called:
                peer.send(frame[half:])
                resp = await peer.response()
                assert (resp.opaque, resp.body) == (i, b"b" * MiB)
                answered.append(i)
        assert answered == list(range(len(answered)))
        assert len(answered) >= 4
        assert [p.closed.called for p in peers] == [False] * len(answered) + [True] * (20 - len(answered))
        await eventually(lambda: server.budget.used == 0)
        # With room again, a large request passes too.
        resp = await within(client.invoke(server.addr, RemotingCommand.request(ECHO, body=b"x" * 3 * MiB), 5))
        assert len(resp.body) == 3 * MiB
        assert peak[0] <= server.budget.limit
    finally:
        await within(client.close())
        await server.stop()
    assert server.budget.used == 0


@pytest_twisted.ensureDeferred
async def test_an_old_connection_growing_closes_a_newer_one(peak: list[int]) -> None:
    server = Server(4 * MiB)
    try:
        old, new = await server.connect(), await server.connect()
        old_frame, new_frame = echo_frame(1, 3 * MiB), echo_frame(2, 3 * MiB)
        old.send(old_frame[: 2 * MiB])
        await arrived(server.factory, old, 2 * MiB)
        new.send(new_frame[: 3 * MiB // 2])
        await arrived(server.factory, new, 3 * MiB // 2)
        old.send(old_frame[2 * MiB :])  # the old one passes the cap: the newer one goes
        resp = await old.response()
        assert (resp.opaque, len(resp.body)) == (1, 3 * MiB)
        await within(new.closed)
        assert peak[0] <= server.budget.limit
        assert server.budget.used == 0
    finally:
        await server.stop()


@pytest_twisted.ensureDeferred
async def test_a_peer_that_does_not_read_its_replies_is_closed_a_reader_is_not(peak: list[int]) -> None:
    server = Server(4 * MiB)
    try:
        reader, deaf = await server.connect(), await server.connect()
        deaf.transport.getHandle().setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * KiB)
        deaf.transport.pauseProducing()  # reads nothing more
        replies = 60
        # 60 replies of 256 KiB to the deaf peer, one every 5 ms: 15 MiB, far more than the kernel's buffers.
        for i in range(replies):
            deaf.request(BIG, i, {"size": str(256 * KiB), "delayMs": str(5 * i)})
        deaf_side = channel_of(server.factory, deaf)
        # Meanwhile the reader asks for as much, one reply at a time: it never holds more than one, however
        # late a loaded machine runs the timers (all 60 at once would be over the cap on their own).
        got = [await reader.call(BIG, i, {"size": str(256 * KiB)}) for i in range(replies)]
        assert [len(r.body) for r in got] == [256 * KiB] * replies
        await eventually(lambda: deaf_side not in server.factory.channels)
        deaf.transport.resumeProducing()  # it reads what got through, then finds the connection closed
        await within(deaf.closed)
        assert not reader.closed.called
        assert peak[0] <= server.budget.limit
        await eventually(lambda: server.budget.used == 0)
    finally:
        await server.stop()


def test_unsent_replies_are_counted_while_the_transport_is_full() -> None:
    budget = MemoryBudget(1 * MiB)
    factory = RemotingServerFactory(RequestDispatcher(), idle_timeout=None, budget=budget)
    older, newer = (factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", p)) for p in (1, 2))
    for channel in (older, newer):
        channel.makeConnection(StringTransport())
    reply = RemotingCommand.request(ECHO, body=b"r" * 300 * KiB)
    frame_size = len(encode(reply))

    older.send_command(reply)  # the transport takes it: nothing held
    assert budget.used == 0
    older.pauseProducing()  # as Twisted does past its bufferSize
    newer.pauseProducing()
    older.send_command(reply)
    newer.send_command(reply)
    assert (older.held, newer.held, budget.used) == (frame_size, frame_size, 2 * frame_size)
    older.resumeProducing()  # drained
    assert (older.held, budget.used) == (0, frame_size)

    older.pauseProducing()
    older.send_command(reply)
    older.send_command(reply)
    assert budget.used == 3 * frame_size <= budget.limit
    older.send_command(reply)  # past the cap: the newest connection holding bytes is closed, not this one
    assert newer.transport.disconnected and not newer.connected_ and newer.held == 0
    assert not older.transport.disconnected and older.held == budget.used == 3 * frame_size
    newer.send_command(reply)  # an evicted connection writes (and holds) nothing more
    assert budget.used == 3 * frame_size

    older.pauseProducing()
    older.send_command(reply)  # alone over the cap: it goes too
    assert older.transport.disconnected and budget.used == 0


def test_decoder_bytes_are_charged_and_given_back() -> None:
    budget = MemoryBudget(1 * MiB)
    factory = RemotingServerFactory(RequestDispatcher(), idle_timeout=None, budget=budget)
    channel = factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 1))
    channel.makeConnection(StringTransport())
    frame = echo_frame(1, 100 * KiB)
    channel.dataReceived(frame[:70000])
    assert budget.used == channel.held == 70000
    channel.dataReceived(frame[70000:] + frame[:10])  # one frame done, the next one begun
    assert budget.used == channel.held == 10
    channel.connectionLost(None)
    assert budget.used == 0


@pytest.mark.parametrize("piece", [1, 100, 10_000, 65_536])
def test_a_large_partial_frame_costs_what_was_received(piece: int) -> None:
    """However a peer splits a large frame, the decoder holds the bytes received (what it charges), plus at most
    the 1/8 a growing bytearray keeps spare."""
    frame = echo_frame(7, 2 * MiB)
    decoder = FrameDecoder()
    fed = 1 * MiB if piece > 1 else 200 * KiB  # 1-byte pieces: fewer, or the test gets slow
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(0, fed, piece):
            assert decoder.feed(frame[i : min(i + piece, fed)]) == []
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert decoder.buffered == fed
    assert fed <= held <= fed * 1.125 + 4 * KiB
    [cmd] = decoder.feed(frame[fed:] + frame[:3])  # the rest, and the start of the next frame
    assert (cmd.opaque, cmd.body) == (7, b"b" * 2 * MiB)
    assert decoder.buffered == 3
    decoder.clear()
    assert decoder.buffered == 0


def test_the_cap_is_always_on() -> None:
    for bad in (0, -1):
        with pytest.raises(ConfigError, match="remotingMaxBufferedBytes"):
            MemoryBudget(bad)
    assert BrokerConfig().remotingMaxBufferedBytes == 512 * MiB
    assert NamesrvConfig().remotingMaxBufferedBytes == 64 * MiB


def test_namesrv_uses_its_setting(tmp_path: Path) -> None:
    config = NamesrvConfig(kvConfigPath=str(tmp_path / "kv.json"), remotingMaxBufferedBytes=3 * MiB)
    assert NamesrvController(config, reactor).factory.budget.limit == 3 * MiB


@pytest_twisted.ensureDeferred
async def test_broker_sheds_trickling_connections_and_still_takes_sends(
    make_broker: Any,  # noqa: F811
) -> None:
    broker: BrokerUnderTest = make_broker(remotingMaxBufferedBytes=str(2 * MiB))
    controller = broker.start()
    try:
        budget = controller.factory.budget
        assert budget.limit == 2 * MiB
        assert controller.vip_factory is not None and controller.vip_factory.budget is budget  # one server, one cap
        port = controller.config.listenPort
        creator = protocol.ClientCreator(reactor, RawClient)
        frame = echo_frame(0, 8 * MiB)
        attackers = []
        for _ in range(6):
            attacker = await within(creator.connectTCP("127.0.0.1", port))
            attackers.append(attacker)
            await eventually(lambda: channel_of(controller.factory, attacker) is not None)  # noqa: B023
        for attacker in attackers:
            attacker.send(frame[: 512 * KiB])
            await arrived(controller.factory, attacker, 512 * KiB)
        await eventually(lambda: sum(a.closed.called for a in attackers) == 2)
        assert [a.closed.called for a in attackers] == [False] * 4 + [True] * 2
        assert budget.used == 2 * MiB
        # A producer still gets its (small) sends through while the budget is full.
        resp = await broker.call(
            RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, send_header("BudgetTopic", {}), body=b"m" * 1000)
        )
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        for attacker in attackers:
            attacker.transport.abortConnection()
        await eventually(lambda: budget.used == 0)
        # ... and ones that take several reads (so are charged while partial) once the attackers are gone.
        resp = await broker.call(
            RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, send_header("BudgetTopic", {}), body=b"m" * 100 * KiB)
        )
        assert resp.code == ResponseCode.SUCCESS, resp.remark
    finally:
        await broker.stop()
