"""Replies to one read, and frames written outside a read in one reactor turn, leave in one send, straight to the
socket when nothing is buffered before them, and stay in order when the socket is full (Twisted buffers the
rest). With a send thread (the broker's), the same sends leave from that thread, and the same orders hold."""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.task import deferLater

from gateway.remoting.client import RemotingClient
from gateway.remoting.codec import FrameDecoder, encode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.dispatch import RequestDispatcher
from gateway.remoting.protocol import RemotingProtocol, RemotingServerFactory
from gateway.remoting.sender import SendThread, start_send_thread

BIG = 256 * 1024


def _send_thread() -> SendThread:
    thread = start_send_thread(reactor)
    if thread is None:
        pytest.skip("the C send thread is not built (or ROCKETMQ_GATEWAY_PURE_PYTHON=1)")
    return thread


def _server(sender: SendThread | None = None) -> tuple[RemotingServerFactory, Any, str]:
    dispatcher = RequestDispatcher()
    dispatcher.register(1, lambda ch, req: req.response(ext_fields={"i": req.ext("i") or ""}))
    dispatcher.register(2, lambda ch, req: req.response(ext_fields={"i": req.ext("i") or ""}, body=b"b" * BIG))
    factory = RemotingServerFactory(dispatcher)
    factory.sender = sender
    port = reactor.listenTCP(0, factory, interface="127.0.0.1")
    return factory, port, f"127.0.0.1:{port.getHost().port}"


def _spy(channel: RemotingProtocol) -> dict[str, int]:
    """Counts of the server connection's reads, direct sends and buffered writes."""
    counts = {"reads": 0, "sends": 0, "buffered": 0}
    t = channel.transport
    read, send, buffered = channel.dataReceived, t.writeSomeData, t.writeSequence

    def counted(key: str, fn: Any) -> Any:
        def call(*args: Any) -> Any:
            counts[key] += 1
            return fn(*args)

        return call

    channel.dataReceived = counted("reads", read)  # type: ignore[method-assign]
    t.writeSomeData = counted("sends", send)
    t.writeSequence = counted("buffered", buffered)
    return counts


async def _sleep(seconds: float) -> None:
    await deferLater(reactor, seconds, lambda: None)


@pytest_twisted.ensureDeferred
async def test_the_replies_to_one_read_leave_in_one_send_without_a_reactor_turn() -> None:
    factory, port, addr = _server()
    client = RemotingClient(reactor)
    try:
        channel = await client.get_channel(addr)
        await _sleep(0.05)
        (server_side,) = factory.channels
        counts = _spy(server_side)
        # Written in one turn by the client: one read on the server, almost always.
        answers = [channel.invoke(RemotingCommand.request(1, {"i": str(i)}), 5) for i in range(8)]
        replies = [await d for d in answers]
        assert [r.ext("i") for r in replies] == [str(i) for i in range(8)]
        # At most one send a read (a read holding only part of a frame sends nothing), none through Twisted's buffer.
        assert 1 <= counts["sends"] <= counts["reads"]
        assert counts["buffered"] == 0
        t = server_side.transport
        assert t.dataBuffer == b"" and not t._tempDataBuffer
    finally:
        await client.close()
        await factory.close_all()
        await port.stopListening()


@contextlib.asynccontextmanager
async def _raw_connection(sender: SendThread | None = None) -> AsyncIterator[tuple[socket.socket, RemotingProtocol]]:
    """A server, a non-blocking socket to it (read only when the test says) and the server's side of it."""
    factory, port, addr = _server(sender)
    host, port_number = addr.split(":")
    sock = socket.create_connection((host, int(port_number)))
    sock.setblocking(False)
    try:
        await _sleep(0.05)
        (server_side,) = factory.channels
        yield sock, server_side
    finally:
        sock.close()
        await factory.close_all()
        await port.stopListening()
        if sender is not None:
            sender.stop()


async def _read(sock: socket.socket, count: int, timeout: float) -> list[RemotingCommand]:
    """Up to ``count`` frames from ``sock`` within ``timeout`` seconds, letting the reactor run between reads."""
    decoder, got = FrameDecoder(), []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        try:
            data = sock.recv(1 << 20)
        except BlockingIOError:
            await _sleep(0)  # let the server's reactor write more
            continue
        assert data, "connection closed"
        got += decoder.feed(data)
    return got


def _command(code: int, i: int) -> RemotingCommand:
    cmd = RemotingCommand.request(code, {"i": str(i)})
    cmd.opaque = i
    return cmd


def _frame(code: int, i: int) -> bytes:
    return encode(_command(code, i))


@pytest_twisted.ensureDeferred
async def test_replies_stay_in_order_when_the_socket_is_full() -> None:
    async with _raw_connection() as (sock, server_side):
        counts = _spy(server_side)
        # The peer reads nothing for now: with a small send buffer, the socket is soon full.
        server_side.transport.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        # Big replies first (they fill the socket and Twisted's buffer), then small ones in later reads: those must
        # not overtake what waits in the buffer.
        sock.sendall(b"".join(_frame(2, i) for i in range(8)))
        await _sleep(0.1)
        for i in range(8, 16):
            sock.sendall(_frame(1, i))
            await _sleep(0.02)
        assert counts["buffered"] > 0
        got = await _read(sock, 16, 20)
        assert [r.opaque for r in got] == list(range(16))
        assert [len(r.body) for r in got] == [BIG] * 8 + [0] * 8


@pytest_twisted.ensureDeferred
async def test_frames_written_outside_a_read_in_one_turn_leave_in_one_send() -> None:
    async with _raw_connection() as (sock, server_side):
        counts = _spy(server_side)
        # As a SYNC_FLUSH fsync releases several waiting sends of one connection at once.
        for i in range(5):
            server_side.send_command(_command(1, i))
        assert counts["sends"] == 0  # not yet: the turn may write more
        got = await _read(sock, 5, 10)
        assert [c.opaque for c in got] == list(range(5))
        assert counts == {"reads": 0, "sends": 1, "buffered": 0}


@pytest_twisted.ensureDeferred
async def test_a_reply_does_not_overtake_a_frame_written_before_it() -> None:
    async with _raw_connection() as (sock, server_side):
        # A command written outside a read waits for the end of the reactor turn; a read handled before then
        # queues its reply behind it.
        server_side.send_command(_command(1, 100))
        server_side.dataReceived(_frame(1, 101))
        got = await _read(sock, 2, 10)
        assert [c.opaque for c in got] == [100, 101]


# -- with a send thread (the broker's)


def _recv_now(sock: socket.socket, wait: float = 0.05) -> list[RemotingCommand]:
    """The frames that arrive within ``wait`` seconds without letting the reactor run."""
    time.sleep(wait)
    data = b""
    with contextlib.suppress(BlockingIOError):
        while chunk := sock.recv(1 << 20):
            data += chunk
    return FrameDecoder().feed(data)


@pytest_twisted.ensureDeferred
async def test_the_first_reply_of_a_turn_leaves_at_once_the_next_ones_from_the_thread() -> None:
    async with _raw_connection(_send_thread()) as (sock, server_side):
        counts = _spy(server_side)
        # Two reads in one reactor turn (this test runs in it): the first one's reply is sent by the reactor at
        # once; the second one's is queued for the thread, which is woken only at the end of the turn.
        server_side.dataReceived(_frame(1, 0))
        server_side.dataReceived(_frame(1, 1))
        assert [c.opaque for c in _recv_now(sock)] == [0]
        got = await _read(sock, 1, 10)  # the turn ends: the thread sends the rest
        assert [c.opaque for c in got] == [1]
        assert counts["sends"] == counts["buffered"] == 0  # neither went through Twisted


@pytest_twisted.ensureDeferred
async def test_with_a_send_thread_replies_stay_in_order_when_the_socket_is_full() -> None:
    async with _raw_connection(_send_thread()) as (sock, server_side):
        counts = _spy(server_side)
        taken: list[int] = []
        take_back = server_side.take_back

        def spied_take_back() -> None:
            taken.append(len(server_side.transport.dataBuffer) + server_side.transport._tempDataLen)
            take_back()

        server_side.take_back = spied_take_back  # type: ignore[method-assign]
        server_side.transport.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        # The turn's first reply leaves at once; the big ones after it go to the thread, which fills the socket and
        # stalls; the connection takes the rest back into Twisted's buffer, and the small replies of later reads
        # queue behind it there.
        server_side.dataReceived(_frame(1, 0))
        server_side.dataReceived(b"".join(_frame(2, i) for i in range(1, 9)))
        await _sleep(0.1)
        for i in range(9, 17):
            sock.sendall(_frame(1, i))
            await _sleep(0.02)
        assert taken and taken[0] == 0  # taken back while Twisted held nothing
        t = server_side.transport
        assert t.dataBuffer or t._tempDataLen  # Twisted holds the rest now
        got = await _read(sock, 17, 20)
        assert [r.opaque for r in got] == list(range(17))
        assert [len(r.body) for r in got] == [0] + [BIG] * 8 + [0] * 8
        # Drained: replies go out without Twisted again.
        sends = counts["sends"]
        sock.sendall(_frame(1, 17))
        assert [r.opaque for r in await _read(sock, 1, 10)] == [17]
        assert counts["sends"] == sends


@pytest_twisted.ensureDeferred
async def test_a_connection_the_server_closes_sends_what_its_thread_holds_first() -> None:
    async with _raw_connection(_send_thread()) as (sock, server_side):
        server_side.dataReceived(_frame(1, 0))  # sent at once
        server_side.dataReceived(b"".join(_frame(1, i) for i in (1, 2)))  # queued, the thread not woken yet
        server_side.close()
        got = await _read(sock, 3, 10)
        assert [c.opaque for c in got] == [0, 1, 2]
        assert await _recv_until_closed(sock, 10) == b""


@pytest_twisted.ensureDeferred
async def test_a_channel_closes_its_socket_with_its_connection() -> None:
    thread = _send_thread()
    async with _raw_connection(thread) as (sock, server_side):
        dup = server_side._channel
        assert server_side._sender is thread and dup != server_side.transport.fileno()
        link = os.readlink(f"/proc/self/fd/{dup}")
        assert link == os.readlink(f"/proc/self/fd/{server_side.transport.fileno()}")  # the same socket
        # An abort (an idle or evicted connection) reaches the peer at once: the dup does not keep the socket open.
        server_side.transport.abortConnection()
        assert await _recv_until_closed(sock, 10) == b""
        await _sleep(0.1)
        with contextlib.suppress(FileNotFoundError):
            assert os.readlink(f"/proc/self/fd/{dup}") != link


@pytest_twisted.ensureDeferred
async def test_frames_written_outside_a_read_leave_from_the_reactor_in_one_piece() -> None:
    thread = _send_thread()
    async with _raw_connection(thread) as (sock, server_side):
        calls: list[bool] = []
        send = thread.send

        def spied_send(channel: int, parts: list[bytes], now: bool = False) -> bytes | None:
            calls.append(now)
            return send(channel, parts, now)

        thread.send = spied_send  # type: ignore[method-assign]
        # As an fsync or a slave's ack releases several waiting sends of one connection at once: their senders wait.
        for i in range(5):
            server_side.send_command(_command(1, i))
        got = await _read(sock, 5, 10)
        assert [c.opaque for c in got] == list(range(5))
        assert calls == [True]


async def _recv_until_closed(sock: socket.socket, timeout: float) -> bytes:
    """What arrives on ``sock`` until the peer closes it (a reset counts as a close)."""
    data = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(1 << 16)
        except BlockingIOError:
            await _sleep(0.01)
            continue
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk
    raise AssertionError("still open")
