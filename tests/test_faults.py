"""The fault tools themselves: the proxy forwards, cuts, pauses, delays and heals; processes are waited on,
frozen, thawed, killed and always ended."""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults import FaultProxy, Faults, faults  # noqa: F401 - the fixture

TIMEOUT = 3


@pytest.fixture
def echo() -> Iterator[str]:
    """An echo server on loopback; its address."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=_echo, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    server.close()


def _echo(conn: socket.socket) -> None:
    with conn:
        try:
            while data := conn.recv(65536):
                conn.sendall(data)
        except OSError:
            return


def _connect(proxy: FaultProxy) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=TIMEOUT)


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _closed(sock: socket.socket) -> bool:
    """True once the proxy closed or reset the link."""
    try:
        return sock.recv(100) == b""
    except ConnectionResetError:
        return True


def _refused(proxy: FaultProxy) -> bool:
    """True if a new connection is closed or reset at once (the reset may even beat connect()'s return)."""
    try:
        sock = _connect(proxy)
    except ConnectionResetError:
        return True
    with sock:
        return _closed(sock)


def test_forwards_both_ways_in_order_a_large_stream(echo: str) -> None:
    payload = bytes(range(256)) * 8192  # 2 MiB: more than the proxy holds per direction
    with FaultProxy(echo, max_pending=64 * 1024) as proxy, _connect(proxy) as c:
        writer = threading.Thread(target=c.sendall, args=(payload,))
        writer.start()
        assert _recv_exactly(c, len(payload)) == payload
        writer.join()
        assert proxy.links_made == 1 and proxy.open_links == 1


def test_cut_resets_links_and_refuses_new_ones_until_healed(echo: str) -> None:
    with FaultProxy(echo) as proxy:
        with _connect(proxy) as c:
            c.sendall(b"hello")
            assert c.recv(100) == b"hello"
            proxy.cut()
            assert proxy.open_links == 0
            assert _closed(c)
        assert _refused(proxy)
        assert proxy.refused == 1
        proxy.heal()
        with _connect(proxy) as c:
            c.sendall(b"new link")
            assert c.recv(100) == b"new link"
        assert proxy.links_made == 2


def test_pause_holds_bytes_and_connections_until_resumed(echo: str) -> None:
    with FaultProxy(echo) as proxy, _connect(proxy) as c:
        c.sendall(b"before")
        assert c.recv(100) == b"before"
        proxy.pause()
        c.sendall(b"held")
        c.settimeout(0.5)
        with pytest.raises(TimeoutError):
            c.recv(100)
        assert proxy.open_links == 1
        proxy.resume()
        c.settimeout(TIMEOUT)
        assert _recv_exactly(c, 4) == b"held"  # not lost, only late


def test_an_end_closing_during_a_pause_closes_the_other(echo: str) -> None:
    with FaultProxy(echo) as proxy:
        c = _connect(proxy)
        c.sendall(b"x")
        assert c.recv(1) == b"x"
        proxy.pause()
        c.close()
        deadline = time.monotonic() + TIMEOUT
        while proxy.open_links and time.monotonic() < deadline:
            time.sleep(0.02)
        assert proxy.open_links == 0


def test_delay_holds_each_chunk(echo: str) -> None:
    with FaultProxy(echo, delay=0.2) as proxy, _connect(proxy) as c:
        start = time.monotonic()
        c.sendall(b"slow")
        assert _recv_exactly(c, 4) == b"slow"
        assert time.monotonic() - start >= 0.4  # there and back
        proxy.delay = 0.0
        start = time.monotonic()
        c.sendall(b"fast")
        assert _recv_exactly(c, 4) == b"fast"
        assert time.monotonic() - start < 0.2


def test_links_are_capped_and_a_refused_target_closes_the_client(echo: str) -> None:
    with FaultProxy(echo, max_links=1) as proxy, _connect(proxy) as first:
        first.sendall(b"1")
        assert first.recv(1) == b"1"
        assert _refused(proxy)
        assert proxy.refused == 1
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        nobody = f"127.0.0.1:{s.getsockname()[1]}"  # bound, not listening: connections are refused
        with FaultProxy(nobody) as proxy:
            assert _refused(proxy)


TICKER = "import time\nprint('ready', flush=True)\nwhile True:\n    print('tick', flush=True)\n    time.sleep(0.05)\n"


def test_processes_wait_freeze_thaw_kill_and_end(faults: Faults, tmp_path: Path) -> None:  # noqa: F811
    conf = tmp_path / "ticker.properties"
    conf.write_text("")
    ticker = faults.process("", conf, [sys.executable, "-u", "-c", TICKER])
    ticker.wait_for(r"ready")
    ticker.freeze()
    time.sleep(0.2)  # a tick under way when the signal came may still land
    frozen = ticker.output()
    time.sleep(0.3)
    assert ticker.output() == frozen and ticker.alive
    ticker.thaw()
    ticker.wait_for(rf"(tick\n){{{frozen.count('tick') + 2}}}")
    with pytest.raises(AssertionError, match=r"not in 0\.2 s"):
        ticker.wait_for("never", timeout=0.2)
    ticker.kill()
    assert ticker.proc.returncode == -9
    with pytest.raises(AssertionError, match="exited with -9"):
        ticker.wait_for("never")
    survivor = faults.process("", conf, [sys.executable, "-c", "import time; time.sleep(60)"])
    survivor.freeze()
    faults.close()  # ends a frozen one too
    assert survivor.proc.returncode is not None
