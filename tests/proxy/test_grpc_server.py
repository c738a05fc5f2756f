"""gateway.proxy.grpc: gRPC over h2 on the reactor, driven by grpcio's own client (in a thread)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater
from twisted.internet.threads import deferToThread

from gateway.proxy import grpc as grpc_server
from gateway.proxy.grpc import GrpcCallError, GrpcServerFactory, GrpcStatus, Kind, Method, ServerCall, parse_timeout
from gateway.proxy.v2 import definition_pb2 as pb

CALLS: list[ServerCall] = []


def stream(call: ServerCall, request: pb.Status) -> None:
    CALLS.append(call)
    for i in range(request.code):
        call.send(pb.Status(code=i, message=request.message))
    if request.message != "hold":
        call.finish()


def fail(call: ServerCall, request: pb.Status) -> Any:
    if request.code == 1:
        raise GrpcCallError(GrpcStatus.INVALID_ARGUMENT, "bad thing asked")
    raise ValueError("a bug")


def chat(call: ServerCall) -> None:
    call.on_message = lambda request: call.send(pb.Status(code=request.code + 1))
    call.on_half_close = lambda: call.finish(GrpcStatus.OK)


METHODS = {
    "/t.T/Echo": Method(Kind.UNARY, pb.Status, lambda call, request: request),
    "/t.T/Later": Method(Kind.UNARY, pb.Status, lambda call, request: deferLater(reactor, 0.05, lambda: request)),
    "/t.T/Stream": Method(Kind.SERVER_STREAM, pb.Status, stream),
    "/t.T/Fail": Method(Kind.UNARY, pb.Status, fail),
    "/t.T/Chat": Method(Kind.BIDI_STREAM, pb.Status, chat),
}


@pytest.fixture
def channel() -> Iterator[grpc.Channel]:
    port = reactor.listenTCP(0, GrpcServerFactory(METHODS), interface="127.0.0.1")
    ch = grpc.insecure_channel(f"127.0.0.1:{port.getHost().port}")
    yield ch
    ch.close()
    port.stopListening()


def unary(ch: grpc.Channel, name: str, request: pb.Status, **kwargs: Any) -> Deferred[Any]:
    fn = ch.unary_unary(f"/t.T/{name}", pb.Status.SerializeToString, pb.Status.FromString)
    return deferToThread(fn, request, timeout=5, **kwargs)


@pytest_twisted.ensureDeferred
async def test_connections_send_small_frames_at_once() -> None:
    """TCP_NODELAY, as gRPC servers set it: without it a response waits for the peer's delayed ACK of the one
    before (40 ms on Linux), which held a 5.x SDK's sync sends and acks to ~25 a second."""
    factory = GrpcServerFactory(METHODS)
    port = reactor.listenTCP(0, factory, interface="127.0.0.1")
    ch = grpc.insecure_channel(f"127.0.0.1:{port.getHost().port}")
    try:
        assert (await unary(ch, "Echo", pb.Status(code=1))).code == 1
        (conn,) = factory.connections
        assert conn.transport.getHandle().getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    finally:
        ch.close()
        await port.stopListening()


async def rpc_error(d: Deferred[Any]) -> grpc.RpcError:
    try:
        await d
    except grpc.RpcError as e:
        return e
    raise AssertionError("the call succeeded")


@pytest_twisted.ensureDeferred
async def test_unary_small_large_and_deferred(channel: grpc.Channel) -> None:
    assert (await unary(channel, "Echo", pb.Status(code=20000, message="x" * 1000))).message == "x" * 1000
    # Far beyond the 64 KiB flow-control window, both ways.
    big = "y" * (3 * 1024 * 1024)
    assert (await unary(channel, "Echo", pb.Status(message=big))).message == big
    assert (await unary(channel, "Later", pb.Status(code=7))).code == 7


@pytest_twisted.ensureDeferred
async def test_server_stream(channel: grpc.Channel) -> None:
    fn = channel.unary_stream("/t.T/Stream", pb.Status.SerializeToString, pb.Status.FromString)
    got = await deferToThread(lambda: [r.code for r in fn(pb.Status(code=5, message="m"), timeout=5)])
    assert got == [0, 1, 2, 3, 4]


@pytest_twisted.ensureDeferred
async def test_client_cancel_closes_the_call(channel: grpc.Channel) -> None:
    fn = channel.unary_stream("/t.T/Stream", pb.Status.SerializeToString, pb.Status.FromString)
    CALLS.clear()

    def first_then_cancel() -> int:
        responses = fn(pb.Status(code=1, message="hold"), timeout=5)
        code = next(responses).code
        responses.cancel()
        return code

    assert await deferToThread(first_then_cancel) == 0
    await CALLS[0].closed
    assert CALLS[0].cancelled and CALLS[0].finished


@pytest_twisted.ensureDeferred
async def test_errors_become_statuses(channel: grpc.Channel) -> None:
    e = await rpc_error(unary(channel, "Nope", pb.Status()))
    assert e.code() == grpc.StatusCode.UNIMPLEMENTED and e.details() == "Method not found: t.T/Nope"
    e = await rpc_error(unary(channel, "Fail", pb.Status(code=1)))
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and e.details() == "bad thing asked"
    e = await rpc_error(unary(channel, "Fail", pb.Status(code=2)))
    assert e.code() == grpc.StatusCode.INTERNAL and "a bug" in e.details()
    e = await rpc_error(unary(channel, "Echo", pb.Status(message="z" * 10000), compression=grpc.Compression.Gzip))
    assert e.code() == grpc.StatusCode.UNIMPLEMENTED
    # The connection survives all of that.
    assert (await unary(channel, "Echo", pb.Status(code=3))).code == 3


@pytest_twisted.ensureDeferred
async def test_oversized_messages_refused(channel: grpc.Channel, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(grpc_server, "MAX_INBOUND_MESSAGE_SIZE", 1024 * 1024)
    e = await rpc_error(unary(channel, "Echo", pb.Status(message="z" * (2 * 1024 * 1024))))
    assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    # Unfinished messages of all calls together are bounded too.
    monkeypatch.setattr(grpc_server, "MAX_BUFFERED_PER_CONNECTION", 512 * 1024)
    e = await rpc_error(unary(channel, "Echo", pb.Status(message="z" * (800 * 1024))))
    assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    monkeypatch.undo()
    assert (await unary(channel, "Echo", pb.Status(message="z" * (800 * 1024)))).message == "z" * (800 * 1024)


@pytest_twisted.ensureDeferred
async def test_bidirectional_stream(channel: grpc.Channel) -> None:
    fn = channel.stream_stream("/t.T/Chat", pb.Status.SerializeToString, pb.Status.FromString)
    got = await deferToThread(lambda: [r.code for r in fn(iter([pb.Status(code=i) for i in range(4)]), timeout=5)])
    assert got == [1, 2, 3, 4]


def test_grpc_timeout_header() -> None:
    assert parse_timeout("20S") == 20.0
    assert parse_timeout("100m") == pytest.approx(0.1)
    assert parse_timeout("1H") == 3600.0
    for bad in (None, "", "S", "10", "1x", "1234567890S"):
        assert parse_timeout(bad) is None
