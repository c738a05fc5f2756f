"""A real server on 127.0.0.1: bad input closes only the offending connection; dispatch error paths.

Every wait is bounded (``within``), so a regression fails a test instead of hanging the suite.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer, error, protocol, reactor, task
from twisted.internet.defer import Deferred, DeferredQueue

from gateway.remoting.client import RemotingClient
from gateway.remoting.codec import FrameDecoder, encode
from gateway.remoting.codes import MAX_FRAME_LENGTH, RPC_TYPE_RESPONSE, ResponseCode, SerializeType
from gateway.remoting.command import RemotingCommand
from gateway.remoting.dispatch import RequestDispatcher
from gateway.remoting.headers import TopicRequestHeader
from gateway.remoting.protocol import RemotingProtocol, RemotingServerFactory, RemotingTimeoutError

TIMEOUT = 5.0

ECHO = 1001
RAISE = 1002
NEEDS_TOPIC = 1003
SILENT = 1004
DEFERRED_FAIL = 1005
DEFERRED_OK = 1006
CLOSE_LATER = 1007
UNKNOWN = 4242


def within(d: Deferred, timeout: float = TIMEOUT) -> Deferred:
    return d.addTimeout(timeout, reactor)


def sleep(seconds: float) -> Deferred:
    return task.deferLater(reactor, seconds, lambda: None)


async def eventually(predicate: Any, timeout: float = TIMEOUT) -> None:
    deadline = reactor.seconds() + timeout
    while not predicate():
        assert reactor.seconds() < deadline, "condition not reached in time"
        await sleep(0.01)


def echo(_channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
    return request.response(ext_fields=dict(request.ext_fields or {}), body=request.body)


def boom(_channel: RemotingProtocol, _request: RemotingCommand) -> RemotingCommand:
    raise ValueError("boom in processor")


def needs_topic(_channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
    header = TopicRequestHeader.decode(request.ext_fields)
    return request.response(ext_fields={"topic": header.topic})


def silent(_channel: RemotingProtocol, _request: RemotingCommand) -> None:
    return None


def deferred_fail(_channel: RemotingProtocol, _request: RemotingCommand) -> Deferred:
    return task.deferLater(reactor, 0.01, _raise, RuntimeError("failed later"))


def _raise(e: Exception) -> None:
    raise e


def deferred_ok(_channel: RemotingProtocol, request: RemotingCommand) -> Deferred:
    return task.deferLater(reactor, 0.01, lambda: request.response(remark="later"))


def close_later(channel: RemotingProtocol, _request: RemotingCommand) -> None:
    reactor.callLater(0.05, channel.transport.loseConnection)
    return None


class RawClient(protocol.Protocol):
    """A bare TCP peer: writes whatever bytes a test gives it, decodes what comes back."""

    def __init__(self) -> None:
        self.decoder = FrameDecoder()
        self.responses: DeferredQueue[RemotingCommand] = DeferredQueue()
        self.closed: Deferred[None] = Deferred()

    def dataReceived(self, data: bytes) -> None:
        for cmd in self.decoder.feed(data):
            self.responses.put(cmd)

    def connectionLost(self, reason: Any = None) -> None:
        self.closed.callback(None)

    def send(self, data: bytes) -> None:
        self.transport.write(data)

    def request(self, code: int, opaque: int, ext: dict[str, str] | None = None, **kw: Any) -> None:
        cmd = RemotingCommand.request(code, ext, **kw)
        cmd.opaque = opaque
        self.send(encode(cmd))

    async def response(self) -> RemotingCommand:
        return await within(self.responses.get())

    async def call(self, code: int, opaque: int, ext: dict[str, str] | None = None, **kw: Any) -> RemotingCommand:
        self.request(code, opaque, ext, **kw)
        resp = await self.response()
        assert resp.opaque == opaque
        assert resp.is_response
        return resp


class Server:
    def __init__(self) -> None:
        self.dispatcher = RequestDispatcher()
        self.dispatcher.register_all(
            {
                ECHO: echo,
                RAISE: boom,
                NEEDS_TOPIC: needs_topic,
                SILENT: silent,
                DEFERRED_FAIL: deferred_fail,
                DEFERRED_OK: deferred_ok,
                CLOSE_LATER: close_later,
            }
        )
        self.factory = RemotingServerFactory(self.dispatcher)
        self.port = reactor.listenTCP(0, self.factory, interface="127.0.0.1")
        self.addr = f"127.0.0.1:{self.port.getHost().port}"
        self.clients: list[RawClient] = []

    async def connect(self) -> RawClient:
        endpoint = protocol.ClientCreator(reactor, RawClient)
        client = await within(endpoint.connectTCP("127.0.0.1", self.port.getHost().port, timeout=TIMEOUT))
        self.clients.append(client)
        await eventually(lambda: len(self.factory.channels) >= sum(not c.closed.called for c in self.clients))
        return client

    async def stop(self) -> None:
        for c in self.clients:
            if not c.closed.called:
                c.transport.loseConnection()
        for c in self.clients:
            await within(c.closed)
        await eventually(lambda: not self.factory.channels)
        await within(defer.maybeDeferred(self.port.stopListening))


@pytest_twisted.async_yield_fixture
async def server():
    s = Server()
    yield s
    await s.stop()


def frame(header: bytes, body: bytes = b"", stype: int = 0) -> bytes:
    return struct.pack(">iI", 4 + len(header) + len(body), (stype << 24) | len(header)) + header + body


VALID = encode(RemotingCommand(code=ECHO, opaque=5, ext_fields={"k": "v"}, body=b"abc"))

BAD_INPUTS = {
    "http request": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    "tls client hello": bytes.fromhex("16030100a5010000a10303") + b"\x00" * 40,
    "tiny length": b"\x00\x00\x00\x02\xff\xff",
    "negative length": b"\xff\xff\xff\xff",
    "oversize length prefix only": struct.pack(">i", MAX_FRAME_LENGTH),
    "oversize length with some body": struct.pack(">i", MAX_FRAME_LENGTH + 100) + b"\x00" * 1000,
    "header length over frame length": struct.pack(">ii", 4 + 4, 100) + b"{}{}",
    "invalid JSON header": frame(b'{"code":1001,'),
    "JSON header not an object": frame(b"[1001]"),
    "bad UTF-8 in JSON header": frame(b'{"code":1001,"remark":"\xff"}'),
    "unknown serialize type": frame(b'{"code":1001}', stype=9),
    "truncated ROCKETMQ header": frame(b"\x03\xe9\x00", stype=1),
    "valid frame then garbage": VALID + b"\x00\x00\x00\x01x",
}


@pytest.mark.parametrize("bad", list(BAD_INPUTS.values()), ids=list(BAD_INPUTS))
@pytest_twisted.ensureDeferred
async def test_bad_input_closes_only_that_connection(server: Server, bad: bytes) -> None:
    good = await server.connect()
    offender = await server.connect()
    assert len(server.factory.channels) == 2
    assert (await good.call(ECHO, 1, {"n": "1"})).ext_fields == {"n": "1"}

    offender.send(bad)
    await within(offender.closed)  # the server closed it without waiting for more bytes
    await eventually(lambda: len(server.factory.channels) == 1)

    assert not good.closed.called
    resp = await good.call(ECHO, 2, {"n": "2"}, body=b"still here")
    assert resp.code == ResponseCode.SUCCESS
    assert resp.body == b"still here"
    # New connections are still accepted and served.
    late = await server.connect()
    assert (await late.call(ECHO, 3)).code == ResponseCode.SUCCESS


@pytest_twisted.ensureDeferred
async def test_oversize_prefix_is_refused_before_the_body(server: Server) -> None:
    client = await server.connect()
    client.send(struct.pack(">i", MAX_FRAME_LENGTH - 3))  # length + 4 is one byte over 16 MiB
    await within(client.closed, 2.0)


@pytest_twisted.ensureDeferred
async def test_largest_frame_prefix_is_not_refused(server: Server) -> None:
    client = await server.connect()
    client.send(struct.pack(">i", MAX_FRAME_LENGTH - 4))  # exactly the limit: the server waits for the body
    await sleep(0.1)
    assert not client.closed.called


@pytest_twisted.ensureDeferred
async def test_truncated_frame_then_close(server: Server) -> None:
    good = await server.connect()
    quitter = await server.connect()
    quitter.send(VALID[: len(VALID) // 2])
    await sleep(0.02)
    quitter.transport.loseConnection()
    await within(quitter.closed)
    await eventually(lambda: len(server.factory.channels) == 1)
    assert (await good.call(ECHO, 9)).code == ResponseCode.SUCCESS


@pytest_twisted.ensureDeferred
async def test_frames_split_and_pipelined(server: Server) -> None:
    client = await server.connect()
    frames = b"".join(
        encode(RemotingCommand(code=ECHO, opaque=i, ext_fields={"i": str(i)}, body=bytes([i]) * i)) for i in range(1, 6)
    )
    for i in range(0, len(frames), 7):
        client.send(frames[i : i + 7])
        await sleep(0)
    got = [await client.response() for _ in range(5)]
    assert [r.opaque for r in got] == [1, 2, 3, 4, 5]
    assert [r.body for r in got] == [bytes([i]) * i for i in range(1, 6)]
    assert all(r.flag & RPC_TYPE_RESPONSE for r in got)


@pytest_twisted.ensureDeferred
async def test_rocketmq_request_gets_rocketmq_response(server: Server) -> None:
    client = await server.connect()
    resp = await client.call(ECHO, 77, {"キー": "値\x01"}, serialize_type=SerializeType.ROCKETMQ)
    assert resp.serialize_type == SerializeType.ROCKETMQ
    assert resp.ext_fields == {"キー": "値\x01"}


@pytest_twisted.ensureDeferred
async def test_unknown_code_gets_request_code_not_supported(server: Server) -> None:
    client = await server.connect()
    resp = await client.call(UNKNOWN, 11)
    assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED == 3
    assert resp.remark == f" request type {UNKNOWN} not supported"


@pytest_twisted.ensureDeferred
async def test_oneway_requests_get_no_response(server: Server) -> None:
    client = await server.connect()
    for code in (ECHO, UNKNOWN, RAISE, NEEDS_TOPIC, DEFERRED_OK, DEFERRED_FAIL):
        client.request(code, 100 + code, oneway=True)
    await sleep(0.1)  # let the deferred processors finish too
    resp = await client.call(ECHO, 21)
    assert resp.opaque == 21  # the first and only response is to the two-way request
    await sleep(0.05)
    assert client.responses.pending == []


@pytest_twisted.ensureDeferred
async def test_processor_raising_gets_system_error(server: Server) -> None:
    client = await server.connect()
    resp = await client.call(RAISE, 31)
    assert resp.code == ResponseCode.SYSTEM_ERROR == 1
    assert resp.remark is not None
    assert "ValueError" in resp.remark
    assert "boom in processor" in resp.remark
    assert (await client.call(ECHO, 32)).code == ResponseCode.SUCCESS  # the connection survives


@pytest_twisted.ensureDeferred
async def test_deferred_processor_results(server: Server) -> None:
    client = await server.connect()
    failed = await client.call(DEFERRED_FAIL, 41)
    assert failed.code == ResponseCode.SYSTEM_ERROR
    assert failed.remark is not None
    assert "failed later" in failed.remark
    ok = await client.call(DEFERRED_OK, 42)
    assert ok.code == ResponseCode.SUCCESS
    assert ok.remark == "later"


@pytest_twisted.ensureDeferred
async def test_missing_required_header_field_gets_system_error(server: Server) -> None:
    client = await server.connect()
    resp = await client.call(NEEDS_TOPIC, 51, {"notTopic": "x"})
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert resp.remark is not None
    assert "topic" in resp.remark
    ok = await client.call(NEEDS_TOPIC, 52, {"topic": "TopicTest"})
    assert ok.code == ResponseCode.SUCCESS
    assert ok.ext_fields == {"topic": "TopicTest"}


@pytest_twisted.ensureDeferred
async def test_cpp_style_request_numbers_in_ext_fields(server: Server) -> None:
    client = await server.connect()
    client.send(frame(b'{"code":1001,"extFields":{"queueId":3,"ok":true},"flag":0,"language":"CPP","opaque":61}\n'))
    resp = await client.response()
    assert resp.opaque == 61
    assert resp.ext_fields == {"queueId": "3", "ok": "true"}


@pytest_twisted.ensureDeferred
async def test_stray_response_is_ignored(server: Server) -> None:
    client = await server.connect()
    client.send(encode(RemotingCommand(code=0, opaque=987654, flag=RPC_TYPE_RESPONSE)))
    assert (await client.call(ECHO, 71)).code == ResponseCode.SUCCESS
    assert not client.closed.called


# ---------------------------------------------------------------------------- RemotingClient


@pytest_twisted.ensureDeferred
async def test_client_invoke_round_trip_and_oneway(server: Server) -> None:
    client = RemotingClient(reactor)
    try:
        resp = await within(client.invoke(server.addr, RemotingCommand.request(ECHO, {"a": "1"}, b"xyz"), timeout=2))
        assert resp.code == ResponseCode.SUCCESS
        assert resp.body == b"xyz"
        await within(client.invoke_oneway(server.addr, RemotingCommand.request(ECHO)))
        again = await within(client.invoke(server.addr, RemotingCommand.request(ECHO, {"b": "2"}), timeout=2))
        assert again.ext_fields == {"b": "2"}
        assert len(server.factory.channels) == 1  # one cached connection
    finally:
        await within(client.close())


@pytest_twisted.ensureDeferred
async def test_client_invoke_timeout(server: Server) -> None:
    client = RemotingClient(reactor)
    try:
        channel = await within(client.get_channel(server.addr))
        started = reactor.seconds()
        with pytest.raises(RemotingTimeoutError):
            await within(client.invoke(server.addr, RemotingCommand.request(SILENT), timeout=0.2))
        assert 0.15 <= reactor.seconds() - started < 4.0
        assert channel.pending == {}
        # The connection is still usable after a timeout.
        resp = await within(client.invoke(server.addr, RemotingCommand.request(ECHO), timeout=2))
        assert resp.code == ResponseCode.SUCCESS
    finally:
        await within(client.close())


@pytest_twisted.ensureDeferred
async def test_pending_requests_fail_on_disconnect(server: Server) -> None:
    client = RemotingClient(reactor)
    try:
        channel = await within(client.get_channel(server.addr))
        pending = [client.invoke(server.addr, RemotingCommand.request(SILENT), timeout=10) for _ in range(3)]
        closer = client.invoke(server.addr, RemotingCommand.request(CLOSE_LATER), timeout=10)
        results = await within(defer.DeferredList([*pending, closer], consumeErrors=True), 3.0)
        assert all(not ok for ok, _ in results)
        for _, failure in results:
            assert failure.check(error.ConnectionLost, error.ConnectionDone)
        assert channel.pending == {}
        # The dead channel is forgotten; the next invoke reconnects.
        resp = await within(client.invoke(server.addr, RemotingCommand.request(ECHO), timeout=2))
        assert resp.code == ResponseCode.SUCCESS
        assert (await within(client.get_channel(server.addr))) is not channel
    finally:
        await within(client.close())


@pytest_twisted.ensureDeferred
async def test_invoke_on_closed_channel_fails_at_once(server: Server) -> None:
    client = RemotingClient(reactor)
    channel = await within(client.get_channel(server.addr))
    await within(client.close())
    assert not channel.connected_
    with pytest.raises(error.ConnectionLost):
        await within(channel.invoke(RemotingCommand.request(ECHO)), 1.0)


@pytest_twisted.ensureDeferred
async def test_client_connect_refused() -> None:
    port = reactor.listenTCP(0, protocol.Factory(), interface="127.0.0.1")
    addr = f"127.0.0.1:{port.getHost().port}"
    await port.stopListening()
    client = RemotingClient(reactor)
    with pytest.raises(error.ConnectError):
        await within(client.invoke(addr, RemotingCommand.request(ECHO), timeout=1))


@pytest_twisted.ensureDeferred
async def test_server_initiated_request_reaches_client_dispatcher(server: Server) -> None:
    """CHECK_TRANSACTION_STATE-style: the server invokes the client over the client's connection."""
    seen: list[RemotingCommand] = []

    def on_check(_channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        seen.append(request)
        return request.response(remark="checked")

    client = RemotingClient(reactor)
    client.dispatcher.register(39, on_check)
    try:
        await within(client.invoke(server.addr, RemotingCommand.request(ECHO), timeout=2))
        [server_side] = server.factory.channels
        resp = await within(server_side.invoke(RemotingCommand.request(39, {"msgId": "x"}), timeout=2))
        assert resp.remark == "checked"
        assert seen[0].ext_fields == {"msgId": "x"}
        assert not seen[0].is_response
        unknown = await within(server_side.invoke(RemotingCommand.request(UNKNOWN), timeout=2))
        assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    finally:
        await within(client.close())


@pytest_twisted.ensureDeferred
async def test_server_and_client_connections_set_tcp_nodelay(server: Server) -> None:
    # As Netty's: a small response must not wait for the ACK of the one before it (Nagle).
    client = RemotingClient(reactor)
    try:
        resp = await within(client.invoke(server.addr, RemotingCommand.request(ECHO, {"k": "v"})))
        assert resp.code == ResponseCode.SUCCESS
        [channel] = server.factory.channels
        for transport in (channel.transport, client._channels[server.addr].transport):
            assert transport.getHandle().getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    finally:
        await within(defer.maybeDeferred(client.close))
