"""Hostile input on the gRPC port of ``python -m gateway``: bytes that are not HTTP/2, malformed protobuf, a
message that claims to be huge, stalled streams and a flood of streams. Each costs its own connection or call at
most; the process's memory stays bounded and other clients are served throughout."""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import h2.config
import h2.connection
import h2.errors
import h2.events
import pytest

from compat_tests.servers import GatewayServers, free_port
from gateway.proxy.v2 import definition_pb2 as pb
from gateway.proxy.v2 import service_pb2 as spb

QUERY_ROUTE = "/apache.rocketmq.v2.MessagingService/QueryRoute"
TELEMETRY = "/apache.rocketmq.v2.MessagingService/Telemetry"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServers]:
    s = GatewayServers(tmp_path_factory.mktemp("grpc-hostile"), {"grpcServerPort": str(free_port())}).start()
    s.create_topic("HostileT", 2)
    yield s
    s.close()


def rss_kib(servers: GatewayServers) -> int:
    assert servers.proc is not None
    for line in Path(f"/proc/{servers.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def assert_served(servers: GatewayServers) -> None:
    """A well-behaved client gets its route."""
    with grpc.insecure_channel(servers.grpc_addr) as ch:
        call = ch.unary_unary(QUERY_ROUTE, spb.QueryRouteRequest.SerializeToString, spb.QueryRouteResponse.FromString)
        request = spb.QueryRouteRequest(topic=pb.Resource(name="HostileT"))
        request.endpoints.addresses.add(host="127.0.0.1", port=servers.grpc_port)
        response = call(request, timeout=10, metadata=(("x-mq-client-id", "hostile-test"),))
    assert response.status.code == pb.Code.OK and response.message_queues


class H2Client:
    """A raw HTTP/2 client that can say what grpcio never would."""

    def __init__(self, servers: GatewayServers) -> None:
        self.sock = socket.create_connection(("127.0.0.1", servers.grpc_port), timeout=10)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.conn.initiate_connection()
        self.flush()

    def flush(self) -> None:
        self.sock.sendall(self.conn.data_to_send())

    def start_call(self, path: str = QUERY_ROUTE, metadata: tuple[tuple[str, str], ...] = ()) -> int:
        sid = self.conn.get_next_available_stream_id()
        headers = [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "x"),
                   ("content-type", "application/grpc"), ("te", "trailers"), *metadata]  # fmt: skip
        self.conn.send_headers(sid, headers)
        self.flush()
        return sid

    def send(self, sid: int, data: bytes, end: bool) -> None:
        self.conn.send_data(sid, data, end_stream=end)
        self.flush()

    def grpc_status(self, sid: int, timeout: float = 10.0) -> tuple[str, str]:
        """The call's grpc-status and grpc-message (from trailers, or trailers-only headers)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            data = self.sock.recv(65536)
            if not data:
                raise AssertionError("connection closed before the call's status")
            for event in self.conn.receive_data(data):
                if isinstance(event, h2.events.DataReceived):
                    self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                headers = getattr(event, "headers", None)
                if getattr(event, "stream_id", None) == sid and headers:
                    found = {k.decode() if isinstance(k, bytes) else k: v for k, v in headers}
                    if "grpc-status" in found:
                        status, message = found["grpc-status"], found.get("grpc-message", "")
                        return (status.decode() if isinstance(status, bytes) else status,
                                message.decode() if isinstance(message, bytes) else message)  # fmt: skip
            self.flush()
        raise AssertionError("no status")

    def close(self) -> None:
        self.sock.close()


def frame(payload: bytes, length: int | None = None) -> bytes:
    return struct.pack(">BI", 0, len(payload) if length is None else length) + payload


def test_bytes_that_are_not_http2_close_that_connection_only(gateway: GatewayServers) -> None:
    with socket.create_connection(("127.0.0.1", gateway.grpc_port), timeout=10) as sock:
        # The preface, then a PING frame of 3 bytes (a PING carries 8).
        sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x03\x06\x00\x00\x00\x00\x00abc")
        deadline = time.monotonic() + 10
        closed = False
        while time.monotonic() < deadline:
            try:
                if sock.recv(65536) == b"":
                    closed = True
                    break
            except ConnectionResetError:
                closed = True
                break
        assert closed, "the server kept a connection that sent garbage"
    assert_served(gateway)


def test_malformed_protobuf_is_an_error_status(gateway: GatewayServers) -> None:
    client = H2Client(gateway)
    try:
        sid = client.start_call()
        client.send(sid, frame(b"\x0a\xff\xff\xff\xff\x0f garbage"), end=True)
        status, message = client.grpc_status(sid)
        assert status != "0" and "bad request message" in message
    finally:
        client.close()
    assert_served(gateway)


def test_a_huge_declared_message_is_refused_without_taking_the_memory(gateway: GatewayServers) -> None:
    before = rss_kib(gateway)
    client = H2Client(gateway)
    try:
        sid = client.start_call()
        client.send(sid, frame(b"x" * 100, length=0xFFFFFFFF), end=False)
        status, message = client.grpc_status(sid)
        assert status == str(grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]) and "exceeds the limit" in message
    finally:
        client.close()
    assert rss_kib(gateway) - before < 50 * 1024
    assert_served(gateway)


def test_stalled_streams_and_a_flood_of_them_leave_others_served(gateway: GatewayServers) -> None:
    before = rss_kib(gateway)
    clients = [H2Client(gateway) for _ in range(5)]
    try:
        for client in clients:
            for _ in range(100):  # headers and half a message, then nothing
                sid = client.start_call()
                client.send(sid, frame(b"", length=1000)[:5] + b"y" * 10, end=False)
        assert_served(gateway)
    finally:
        for client in clients:
            client.close()
    assert rss_kib(gateway) - before < 50 * 1024
    assert_served(gateway)


def test_a_flood_of_settings_on_one_telemetry_stream_ends_that_stream(gateway: GatewayServers) -> None:
    """Each consumer settings waits for its group's config from a broker: a client that sends settings faster than
    they can be answered has its stream ended, not an ever longer queue of answers."""
    client = H2Client(gateway)
    try:
        sid = client.start_call(TELEMETRY, (("x-mq-client-id", "settings-flood"),))
        commands = b""
        for i in range(64):  # each names a topic no name server knows: a lookup each
            settings = pb.Settings(
                client_type=pb.ClientType.PUSH_CONSUMER,
                subscription=pb.Subscription(
                    group=pb.Resource(name="FloodGroup"),
                    subscriptions=[pb.SubscriptionEntry(topic=pb.Resource(name=f"FloodTopic{i}"))],
                ),
            )
            commands += frame(spb.TelemetryCommand(settings=settings).SerializeToString())
        client.send(sid, commands, end=False)
        status, message = client.grpc_status(sid)
        assert status == str(grpc.StatusCode.RESOURCE_EXHAUSTED.value[0])
        assert message == "too many settings waiting for their answer"
    finally:
        client.close()
    assert_served(gateway)


def test_an_overlong_frame_is_refused_at_its_header(gateway: GatewayServers) -> None:
    """A frame over our SETTINGS_MAX_FRAME_SIZE (16 KiB) ends its connection with FRAME_SIZE_ERROR as soon as
    its 9-byte header is in, not once up to 16 MiB of it has been buffered."""
    client = H2Client(gateway)
    try:
        sid = client.start_call()
        # A DATA frame declaring 1 MiB, of which only 100 bytes come: the server must not wait for the rest.
        client.sock.sendall(struct.pack(">I", 1 << 20)[1:] + struct.pack(">BBI", 0, 0, sid) + b"z" * 100)
        error = None
        deadline = time.monotonic() + 10
        while error is None and time.monotonic() < deadline:
            data = client.sock.recv(65536)
            if not data:
                break
            for event in client.conn.receive_data(data):
                if isinstance(event, h2.events.ConnectionTerminated):
                    error = event.error_code
        assert error == h2.errors.ErrorCodes.FRAME_SIZE_ERROR
        assert client.sock.recv(65536) == b""  # and closed
    finally:
        client.close()
    assert_served(gateway)


def test_many_overlong_frames_do_not_take_the_memory(gateway: GatewayServers) -> None:
    before = rss_kib(gateway)
    socks = []
    try:
        for _ in range(40):
            sock = socket.create_connection(("127.0.0.1", gateway.grpc_port), timeout=10)
            socks.append(sock)
            sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
            # A DATA frame declaring almost 16 MiB, then 2 MiB of it (refused long before).
            sock.sendall(b"\xff\xff\xff\x00\x00\x00\x00\x00\x01")
            with contextlib.suppress(OSError):  # the server may have closed it already
                sock.sendall(b"w" * (2 << 20))
        assert_served(gateway)
    finally:
        for sock in socks:
            sock.close()
    # 40 x 2 MiB would have been buffered before.
    assert rss_kib(gateway) - before < 20 * 1024
    assert_served(gateway)


def test_connections_beyond_the_limit_are_closed_at_once(tmp_path: Path) -> None:
    servers = GatewayServers(tmp_path, {"grpcServerPort": str(free_port()), "grpcMaxConnections": "4"}).start()
    clients: list[H2Client] = []
    try:
        servers.create_topic("HostileT", 2)
        clients = [H2Client(servers) for _ in range(4)]
        for _ in range(3):  # a burst of three refused connections
            with (
                socket.create_connection(("127.0.0.1", servers.grpc_port), timeout=10) as extra,
                contextlib.suppress(ConnectionResetError),
            ):
                assert extra.recv(65536) == b"", "a connection beyond grpcMaxConnections was served"
        # The connections within the limit are still served.
        request = spb.QueryRouteRequest(topic=pb.Resource(name="HostileT"))
        request.endpoints.addresses.add(host="127.0.0.1", port=servers.grpc_port)
        sid = clients[0].start_call()
        clients[0].send(sid, frame(request.SerializeToString()), end=True)
        assert clients[0].grpc_status(sid)[0] == "0"
        # One goes away: a new client is served again.
        clients.pop().close()
        deadline = time.monotonic() + 10
        while True:
            try:
                assert_served(servers)
                break
            except grpc.RpcError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        warnings = [line for line in servers.output if "grpcMaxConnections=4" in line]
        assert len(warnings) == 1, warnings
    finally:
        for client in clients:
            client.close()
        servers.stop()


def test_a_stream_reset_beside_a_window_update_ends_that_call_only(gateway: GatewayServers) -> None:
    """One read holding a WINDOW_UPDATE, the reset of a waiting call and a new call: h2 has forgotten the reset
    stream (the new call made it count its open streams) when the window update makes the server flush its calls.
    That must end the reset call alone, not the connection (it did: TooManyStreamsError out of dataReceived)."""
    client = H2Client(gateway)
    try:
        waiting = client.start_call(TELEMETRY, (("x-mq-client-id", "hostile-reset"),))
        time.sleep(0.2)  # the server holds the call, waiting for its settings
        client.conn.increment_flow_control_window(65535)
        client.conn.reset_stream(waiting, h2.errors.ErrorCodes.CANCEL)
        sid = client.conn.get_next_available_stream_id()
        headers = [(":method", "POST"), (":scheme", "http"), (":path", QUERY_ROUTE), (":authority", "x"),
                   ("content-type", "application/grpc"), ("te", "trailers"),
                   ("x-mq-client-id", "hostile-reset")]  # fmt: skip
        request = spb.QueryRouteRequest(topic=pb.Resource(name="HostileT"))
        request.endpoints.addresses.add(host="127.0.0.1", port=gateway.grpc_port)
        client.conn.send_headers(sid, headers)
        client.conn.send_data(sid, frame(request.SerializeToString()), end_stream=True)
        client.flush()  # all in one write
        assert client.grpc_status(sid) == ("0", "")
    finally:
        client.close()
    assert_served(gateway)
