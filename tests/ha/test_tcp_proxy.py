"""The fault-injecting proxy itself: forwards, cuts, black-holes and heals."""

from __future__ import annotations

import socket
import threading

import pytest

from tests.ha.tcp_proxy import TcpProxy


@pytest.fixture
def echo_port() -> int:
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=_echo, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


def _echo(conn: socket.socket) -> None:
    with conn:
        while data := conn.recv(65536):
            conn.sendall(data)


def test_forwards_cuts_black_holes_and_heals(echo_port: int) -> None:
    proxy = TcpProxy(echo_port).start()
    try:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=2) as c:
            c.sendall(b"hello")
            assert c.recv(100) == b"hello"
            proxy.black_hole()
            c.sendall(b"lost")
            c.settimeout(0.3)
            with pytest.raises(TimeoutError):
                c.recv(100)
            proxy.heal()
            c.settimeout(2)
            c.sendall(b"again")
            assert c.recv(100) == b"again"
            proxy.cut()
            assert c.recv(100) == b""  # closed by the proxy
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=2) as c:
            c.sendall(b"new link")
            assert c.recv(100) == b"new link"
        assert proxy.links_made == 2
    finally:
        proxy.close()
