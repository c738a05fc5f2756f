"""A blocking remoting connection for code without a reactor (Spark workers, scripts): one socket,
requests answered in turn, over the same sans-IO codec as the Twisted protocol."""

from __future__ import annotations

import socket
import ssl
from collections import deque
from collections.abc import Callable

from .codec import FrameDecoder, encode
from .command import RemotingCommand

RequestSigner = Callable[[RemotingCommand], None]


class BlockingConnection:
    """A connection to ``addr`` (``host:port``), opened on first use and again after a failure.

    ``tls`` wraps it in TLS; ``sign`` is applied to every request (an ACL signer). Not thread-safe.
    """

    def __init__(
        self,
        addr: str,
        timeout: float = 10.0,
        tls: ssl.SSLContext | None = None,
        sign: RequestSigner | None = None,
    ) -> None:
        self.addr = addr
        self.timeout = timeout
        self.tls = tls
        self.sign = sign
        self._sock: socket.socket | None = None
        self._decoder = FrameDecoder()
        self._ready: deque[RemotingCommand] = deque()
        self._opaque = 0

    def _connect(self) -> socket.socket:
        host, _, port = self.addr.rpartition(":")
        sock = socket.create_connection((host, int(port)), timeout=self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.tls is not None:
            sock = self.tls.wrap_socket(sock, server_hostname=host)
        self._decoder = FrameDecoder()
        self._ready.clear()
        return sock

    def invoke(self, request: RemotingCommand, timeout: float | None = None) -> RemotingCommand:
        """Send ``request`` and return its response; OSError (the connection closed) on failure."""
        opaque = self.send(request)
        response = self.receive(timeout)
        if response.opaque != opaque:
            self.close()
            raise ConnectionError(f"{self.addr} answered request {response.opaque}, not {opaque}")
        return response

    def send(self, request: RemotingCommand) -> int:
        """Write ``request`` without waiting (pipelining); its opaque, which its response will carry."""
        if self._sock is None:
            self._sock = self._connect()
        self._opaque += 1
        request.opaque = self._opaque
        if self.sign is not None:
            self.sign(request)
        try:
            self._sock.sendall(encode(request))
        except BaseException:
            self.close()
            raise
        return request.opaque

    def receive(self, timeout: float | None = None) -> RemotingCommand:
        """The next response on the connection (a server answers one connection's requests in order)."""
        if self._sock is None:
            raise ConnectionError(f"no connection to {self.addr}")
        sock = self._sock
        sock.settimeout(self.timeout if timeout is None else timeout)
        try:
            while not self._ready:
                data = sock.recv(1 << 20)
                if not data:
                    raise ConnectionError(f"{self.addr} closed the connection")
                self._ready.extend(cmd for cmd in self._decoder.feed(data) if cmd.is_response)
        except BaseException:
            self.close()
            raise
        return self._ready.popleft()

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> BlockingConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
