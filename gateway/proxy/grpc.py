"""A gRPC server on the Twisted reactor: HTTP/2 from the sans-IO ``h2`` library plus gRPC's framing.

gRPC over HTTP/2 is small: a call is one stream; the request headers name the method in ``:path``; each
message travels as a 5-byte prefix (a compressed flag and a big-endian length) plus the serialised
message; the answer is headers, messages, then trailers carrying ``grpc-status`` and ``grpc-message``.
Every call runs on the reactor thread, so a handler calls the broker's services directly and a long
poll is a Deferred, not a thread. TLS (ALPN ``h2``) and plaintext (prior knowledge) share one port
through :class:`gateway.tls.server.TlsServer`, which hands a connection over after its first byte.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any
from urllib.parse import quote

from h2.config import H2Configuration
from h2.connection import ConnectionState, H2Connection
from h2.errors import ErrorCodes
from h2.events import (
    ConnectionTerminated,
    DataReceived,
    RemoteSettingsChanged,
    RequestReceived,
    StreamEnded,
    StreamReset,
    WindowUpdated,
)
from h2.exceptions import H2Error
from h2.settings import SettingCodes
from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from gateway.remoting.direct import set_no_delay

log = Logger()

PREFIX = struct.Struct(">BI")
# Apache's proxy (grpcMaxInboundMessageSize) takes messages up to 130 MiB.
MAX_INBOUND_MESSAGE_SIZE = 130 * 1024 * 1024
# Request bytes one connection may have buffered in unfinished messages (all its calls together).
MAX_BUFFERED_PER_CONNECTION = 2 * MAX_INBOUND_MESSAGE_SIZE
# Streams a client may open at once on one connection.
MAX_CONCURRENT_STREAMS = 1000
# HTTP/2's frame header (length, type, flags, stream) and the client's connection preface before the first frame.
FRAME_HEADER_SIZE = 9
PREFACE_SIZE = len(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
TIMEOUT_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}


class GrpcStatus(IntEnum):
    """gRPC's own status codes (the ``grpc-status`` trailer), not RocketMQ's ``Code``."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    RESOURCE_EXHAUSTED = 8
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    UNAUTHENTICATED = 16


class Kind(IntEnum):
    """How many messages each side of a method sends."""

    UNARY = 0
    SERVER_STREAM = 1
    BIDI_STREAM = 2


@dataclass(frozen=True, slots=True)
class Method:
    """A method of the service: ``handler(call, request)`` for unary and server streams, ``handler(call)`` for a
    bidirectional stream. A unary handler returns the response (or a Deferred of it); a streaming handler sends
    with ``call.send`` and ends with ``call.finish``."""

    kind: Kind
    request_type: Any
    handler: Callable[..., Any]


class GrpcCallError(Exception):
    """Ends a call with a gRPC status other than OK."""

    def __init__(self, status: GrpcStatus, message: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def parse_timeout(value: str | None) -> float | None:
    """The ``grpc-timeout`` header in seconds (e.g. ``"20S"``, ``"100m"``), None when absent or malformed."""
    if not value or len(value) > 9 or value[-1] not in TIMEOUT_UNITS or not value[:-1].isdigit():
        return None
    return int(value[:-1]) * TIMEOUT_UNITS[value[-1]]


class FrameLengthGuard:
    """Follows the frame headers in what a client sends, so that a frame longer than we allow is refused at its
    header: h2 checks the length only once the whole frame (up to 16 MiB) is buffered."""

    __slots__ = ("_header", "_skip")

    def __init__(self) -> None:
        self._skip = PREFACE_SIZE  # bytes still to pass over: the preface, then each frame's payload
        self._header = b""

    def overlong(self, data: bytes, limit: int) -> int | None:
        """The declared length of the first frame longer than ``limit`` whose header ``data`` completes."""
        pos, end = 0, len(data)
        while pos < end:
            if self._skip:
                step = min(self._skip, end - pos)
                pos += step
                self._skip -= step
                continue
            need = FRAME_HEADER_SIZE - len(self._header)
            self._header += data[pos : pos + need]
            pos += need
            if len(self._header) < FRAME_HEADER_SIZE:
                break
            length = int.from_bytes(self._header[:3], "big")
            self._header = b""
            if length > limit:
                return length
            self._skip = length
        return None


class ServerCall:
    """One call on one stream: its metadata, the messages it receives, and the way to answer."""

    def __init__(self, protocol: GrpcProtocol, stream_id: int, path: str, metadata: dict[str, str]) -> None:
        self.protocol = protocol
        self.stream_id = stream_id
        self.path = path
        self.metadata = metadata
        self.timeout = parse_timeout(metadata.get("grpc-timeout"))
        self.peer = protocol.peer
        self.finished = False
        self.cancelled = False
        # Set by a bidirectional handler: each request message, the end of the client's side.
        self.on_message: Callable[[Any], None] | None = None
        self.on_half_close: Callable[[], None] | None = None
        # Fired once when the call ends, whoever ends it (finish, client reset, connection lost).
        self.closed: Deferred[None] = Deferred()
        self._method: Method | None = None
        self._inbound = bytearray()
        self._requests: list[Any] = []
        self._outbound = bytearray()
        self._headers_sent = False
        self._trailers: list[tuple[str, str]] | None = None

    # -- answering

    def send(self, message: Any) -> None:
        """Queue one response message (flow control permitting, it leaves at once)."""
        if self.finished:
            return
        payload = message.SerializeToString()
        self._outbound += PREFIX.pack(0, len(payload))
        self._outbound += payload
        self.protocol.flush_stream(self)

    def finish(self, status: GrpcStatus = GrpcStatus.OK, message: str = "") -> None:
        """End the call with trailers once the queued messages are out."""
        if self.finished:
            return
        self.finished = True
        trailers = [("grpc-status", str(int(status)))]
        if message:
            trailers.append(("grpc-message", quote(message, safe=" !\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~")))
        self._trailers = trailers
        self.protocol.flush_stream(self)

    def response_headers(self) -> list[tuple[str, str]] | None:
        """The headers to send before the first message, once."""
        if self._headers_sent:
            return None
        self._headers_sent = True
        return [(":status", "200"), ("content-type", "application/grpc")]

    # -- receiving

    def feed(self, data: bytes) -> None:
        protocol = self.protocol
        if protocol.buffered + len(data) > MAX_BUFFERED_PER_CONNECTION:
            raise GrpcCallError(GrpcStatus.RESOURCE_EXHAUSTED, "too much unfinished request data on this connection")
        before = len(self._inbound)
        self._inbound += data
        try:
            self._parse()
        finally:
            protocol.buffered += len(self._inbound) - before

    def _parse(self) -> None:
        while len(self._inbound) >= PREFIX.size:
            compressed, length = PREFIX.unpack_from(self._inbound)
            if length > MAX_INBOUND_MESSAGE_SIZE:
                raise GrpcCallError(GrpcStatus.RESOURCE_EXHAUSTED, f"message of {length} bytes exceeds the limit")
            if compressed:
                raise GrpcCallError(GrpcStatus.UNIMPLEMENTED, "compressed messages are not accepted")
            if len(self._inbound) < PREFIX.size + length:
                return
            raw = bytes(self._inbound[PREFIX.size : PREFIX.size + length])
            del self._inbound[: PREFIX.size + length]
            assert self._method is not None
            request = self._method.request_type()
            try:
                request.ParseFromString(raw)
            except Exception as e:  # protobuf's DecodeError and friends
                raise GrpcCallError(GrpcStatus.INTERNAL, f"bad request message: {e}") from None
            self._received(request)

    def _received(self, request: Any) -> None:
        assert self._method is not None
        if self._method.kind is Kind.BIDI_STREAM:
            if self.on_message is not None:
                self.on_message(request)
            return
        if self._requests:
            raise GrpcCallError(GrpcStatus.INTERNAL, "more than one request message for a unary request")
        self._requests.append(request)

    def half_closed(self) -> None:
        """The client sent its last message."""
        assert self._method is not None
        if self._inbound:
            raise GrpcCallError(GrpcStatus.INTERNAL, "truncated request message")
        if self._method.kind is Kind.BIDI_STREAM:
            if self.on_half_close is not None:
                self.on_half_close()
            return
        if not self._requests:
            raise GrpcCallError(GrpcStatus.INTERNAL, "no request message")
        self.protocol.factory.run(self, self._method, self._requests.pop())

    def close(self) -> None:
        """The stream is gone (reset by the client or the connection lost): nothing more is sent."""
        self.protocol.buffered -= len(self._inbound)
        self._inbound.clear()
        if not self.finished:
            self.cancelled = True
        self.finished = True
        if not self.closed.called:
            self.closed.callback(None)


class GrpcProtocol(Protocol):
    """One HTTP/2 connection carrying gRPC calls."""

    def __init__(self, factory: GrpcServerFactory, addr: Any) -> None:
        self.factory = factory
        self.peer = f"{getattr(addr, 'host', '?')}:{getattr(addr, 'port', 0)}"
        self.conn = H2Connection(H2Configuration(client_side=False, header_encoding="utf-8"))
        self.calls: dict[int, ServerCall] = {}
        self.buffered = 0  # bytes of unfinished request messages, all calls together
        self.frames = FrameLengthGuard()

    def connectionMade(self) -> None:
        self.factory.connections.add(self)
        set_no_delay(self.transport)  # as gRPC servers do: a small response must not wait for the last one's ACK
        self.conn.initiate_connection()
        self.conn.update_settings({SettingCodes.MAX_CONCURRENT_STREAMS: MAX_CONCURRENT_STREAMS})
        self._write()

    def connectionLost(self, reason: Failure | None = None) -> None:
        self.factory.connections.discard(self)
        calls, self.calls = self.calls, {}
        for call in calls.values():
            call.close()

    def _write(self) -> None:
        data = self.conn.data_to_send()
        if data and self.transport is not None:
            self.transport.write(data)

    def dataReceived(self, data: bytes) -> None:
        if self.conn.state_machine.state is ConnectionState.CLOSED:
            return  # what arrives after we closed the connection
        length = self.frames.overlong(data, self.conn.max_inbound_frame_size)
        if length is not None:
            # RFC 9113 4.2: a frame over SETTINGS_MAX_FRAME_SIZE is a connection error of type FRAME_SIZE_ERROR.
            log.debug("HTTP/2 frame of {length} bytes from {peer}: too long", length=length, peer=self.peer)
            self.conn.close_connection(ErrorCodes.FRAME_SIZE_ERROR)
            self._write()
            self.transport.loseConnection()
            return
        try:
            events = self.conn.receive_data(data)
        except H2Error as e:
            log.debug("HTTP/2 error from {peer}: {error}", peer=self.peer, error=e)
            self._write()
            self.transport.loseConnection()
            return
        for event in events:
            if isinstance(event, RequestReceived):
                self._request(event.stream_id, event.headers)
            elif isinstance(event, DataReceived):
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                self._on_call(event.stream_id, ServerCall.feed, event.data)
            elif isinstance(event, StreamEnded):
                self._on_call(event.stream_id, ServerCall.half_closed)
            elif isinstance(event, StreamReset):
                call = self.calls.pop(event.stream_id, None)
                if call is not None:
                    call.close()
            elif isinstance(event, WindowUpdated | RemoteSettingsChanged):
                for call in list(self.calls.values()):
                    self.flush_stream(call)
            elif isinstance(event, ConnectionTerminated):
                self._write()
                self.transport.loseConnection()
                return
        self._write()

    def _request(self, stream_id: int, headers: list[tuple[str, str]]) -> None:
        metadata: dict[str, str] = {}
        for name, value in headers:
            metadata[name] = value
        path = metadata.get(":path", "")
        call = ServerCall(self, stream_id, path, metadata)
        self.calls[stream_id] = call
        if metadata.get(":method") != "POST" or not metadata.get("content-type", "").startswith("application/grpc"):
            call.finish(GrpcStatus.INTERNAL, "not a gRPC request")
            return
        method = self.factory.methods.get(path)
        if method is None:
            call.finish(GrpcStatus.UNIMPLEMENTED, f"Method not found: {path.lstrip('/')}")
            return
        call._method = method
        if method.kind is Kind.BIDI_STREAM:
            self.factory.run(call, method)

    def _on_call(self, stream_id: int, action: Callable[..., None], *args: Any) -> None:
        call = self.calls.get(stream_id)
        if call is None or call._method is None or call.finished:
            return  # what a client sends on a call already answered is dropped
        try:
            action(call, *args)
        except GrpcCallError as e:
            call.finish(e.status, e.message)

    def flush_stream(self, call: ServerCall) -> None:
        """Send what flow control lets through: headers, queued messages, then the trailers."""
        sid = call.stream_id
        if self.calls.get(sid) is not call:
            return
        if not call._outbound and call._trailers is None:
            return  # nothing to say yet: no headers either (a window update flushes every call)
        try:
            headers = call.response_headers()
            if headers is not None:
                if call._trailers is not None and not call._outbound:
                    # Trailers-Only: one HEADERS frame ends the call.
                    self.conn.send_headers(sid, headers + call._trailers, end_stream=True)
                    self._closed(call)
                    return
                self.conn.send_headers(sid, headers)
            while call._outbound:
                window = min(self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size)
                if window <= 0:
                    break
                chunk = bytes(call._outbound[:window])
                del call._outbound[:window]
                self.conn.send_data(sid, chunk)
            if call._trailers is not None and not call._outbound:
                self.conn.send_headers(sid, call._trailers, end_stream=True)
                self._closed(call)
        except H2Error as e:
            # The client reset or closed the stream in the batch being handled (h2 may already have forgotten it):
            # that call is over, the connection and its other calls are not.
            log.debug("stream {sid} from {peer} gone: {error}", sid=sid, peer=self.peer, error=e)
            self._closed(call)
        finally:
            self._write()

    def _closed(self, call: ServerCall) -> None:
        self.calls.pop(call.stream_id, None)
        call.close()

    def abort(self) -> None:
        """Close the connection, telling the client to go away."""
        self.conn.close_connection(ErrorCodes.NO_ERROR)
        self._write()
        self.transport.loseConnection()


class GrpcServerFactory(Factory):
    """Serves the methods of ``methods`` (``"/package.Service/Method"`` -> :class:`Method`).

    ``on_error(call, failure)`` turns a handler's failure into a response: by default gRPC status INTERNAL.
    """

    noisy = False

    def __init__(self, methods: dict[str, Method], on_error: Callable[[ServerCall, Failure], Any] | None = None):
        self.methods = methods
        self.on_error = on_error
        self.connections: set[GrpcProtocol] = set()

    def buildProtocol(self, addr: Any) -> GrpcProtocol:
        return GrpcProtocol(self, addr)

    def stopFactory(self) -> None:
        for proto in list(self.connections):
            proto.abort()

    def run(self, call: ServerCall, method: Method, request: Any = None) -> None:
        """Start a handler; a unary handler's result is sent and the call finished."""
        if method.kind is Kind.BIDI_STREAM:
            d = maybeDeferred(method.handler, call)
        else:
            d = maybeDeferred(method.handler, call, request)
        if method.kind is Kind.UNARY:
            d.addCallback(self._unary_done, call)
        d.addErrback(self._failed, call)

    @staticmethod
    def _unary_done(response: Any, call: ServerCall) -> None:
        call.send(response)
        call.finish()

    def _failed(self, failure: Failure, call: ServerCall) -> None:
        if failure.check(GrpcCallError):
            call.finish(failure.value.status, failure.value.message)
            return
        if self.on_error is not None and not call.finished:
            try:
                self.on_error(call, failure)
                return
            except Exception:
                failure = Failure()
        log.failure("gRPC handler of {path} failed", failure, path=call.path)
        call.finish(GrpcStatus.INTERNAL, failure.getErrorMessage())
