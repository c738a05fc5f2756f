"""A fault-injecting TCP proxy for tests: forwards 127.0.0.1:<port> to a target, and on demand cuts every link,
or black-holes them (keeps the sockets open and silently drops what either side sends), then heals.

Threads, not the reactor: the tests that use it drive servers running in child processes.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading


class TcpProxy:
    """``TcpProxy(target_port).start()``; ``port`` is where to connect instead of the target."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._links: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self._black_hole = threading.Event()
        self._closed = threading.Event()
        self.links_made = 0

    def start(self) -> TcpProxy:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=3)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._links.append((client, upstream))
                self.links_made += 1
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        peers = {a: b, b: a}
        try:
            while not self._closed.is_set():
                readable, _, _ = select.select([a, b], [], [], 0.1)
                for sock in readable:
                    data = sock.recv(65536)
                    if not data:
                        return
                    if not self._black_hole.is_set():
                        peers[sock].sendall(data)
        except (OSError, ValueError):  # ValueError: select() on a socket cut() closed meanwhile
            return
        finally:
            self._drop(a, b)

    def _drop(self, a: socket.socket, b: socket.socket) -> None:
        with self._lock:
            if (a, b) in self._links:
                self._links.remove((a, b))
        for sock in (a, b):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    @property
    def open_links(self) -> int:
        with self._lock:
            return len(self._links)

    def cut(self) -> None:
        """Close every current link (both sides see the connection drop); new ones are still accepted."""
        with self._lock:
            links = list(self._links)
        for a, b in links:
            self._drop(a, b)

    def black_hole(self) -> None:
        """From now on forward nothing, and close nothing."""
        self._black_hole.set()

    def heal(self) -> None:
        """Forward again."""
        self._black_hole.clear()

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        self.cut()
