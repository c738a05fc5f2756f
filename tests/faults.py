"""Fault injection for tests of replicated servers: a TCP proxy that cuts, pauses or delays the links between
peers, and child processes that can be waited on, frozen and killed, all cleaned up by the ``faults`` fixture.

The proxy runs in a thread of its own, not on the reactor: the servers under test are child processes and
the tests drive them with blocking clients (``call``, the Java and C++ clients), which would stall a proxy
sharing their thread. One thread serves every link of a proxy (``poll``), so a proxy costs one thread
however many links it carries; links are capped (``max_links``) and so are the bytes held per direction
(``max_pending``: past it the proxy stops reading and TCP pushes back on the sender).
"""

from __future__ import annotations

import contextlib
import errno
import re
import select
import signal
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.ha.procs import Proc, until, write_properties

_POLLRDHUP = getattr(select, "POLLRDHUP", 0x2000)
_CLOSED = select.POLLHUP | select.POLLERR | select.POLLNVAL
# SO_LINGER with a zero timeout: close() sends RST, so both ends see the link drop at once.
_RESET = struct.pack("ii", 1, 0)


def _reset(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
    sock.close()


class _Side:
    """One socket of a link and the bytes waiting to be written to it, each with the time it is due."""

    __slots__ = ("eof", "out", "pending", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.out: deque[tuple[float, bytes]] = deque()
        self.pending = 0
        self.eof = False  # its peer end sent FIN: nothing more to read from it


class _Link:
    __slots__ = ("client", "connecting", "upstream")

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client, self.upstream = _Side(client), _Side(upstream)
        self.connecting = True


class FaultProxy:
    """Forwards connections to ``127.0.0.1:<port>`` on to ``target`` (``host:port``) and injects faults.

    ``cut()`` resets every link and refuses new ones until ``heal()``; ``pause()`` stops forwarding bytes both
    ways but keeps the connections (a frozen network) until ``resume()``; ``delay`` (seconds) holds each chunk
    that long before passing it on. A link whose end closes is closed on the other side too.
    """

    def __init__(self, target: str, *, delay: float = 0.0, max_links: int = 64, max_pending: int = 1 << 20) -> None:
        host, _, port = target.rpartition(":")
        self.target = (host or "127.0.0.1", int(port))
        self.delay = delay
        self.max_links = max_links
        self.max_pending = max_pending
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.setblocking(False)
        self.port: int = self._listener.getsockname()[1]
        self._links: list[_Link] = []
        self._cut = False
        self._paused = False
        self._closed = False
        self._commands: deque[tuple[Callable[[], None], threading.Event]] = deque()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._thread = threading.Thread(target=self._loop, name=f"proxy-{self.port}", daemon=True)
        self.links_made = 0
        self.refused = 0
        self.forwarded = 0

    @property
    def address(self) -> str:
        """Where to connect instead of the target."""
        return f"127.0.0.1:{self.port}"

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def open_links(self) -> int:
        return len(self._links)

    def cut(self) -> None:
        """Reset every link and refuse (reset) new connections until :meth:`heal`."""
        self._call(self._cut_now)

    def heal(self) -> None:
        """Accept and forward new connections again (after :meth:`cut`)."""
        self._call(lambda: setattr(self, "_cut", False))

    def pause(self) -> None:
        """Forward nothing either way from now on, close nothing: bytes wait in the proxy and the sockets'
        buffers. A link one end gives up on meanwhile is closed at the other end too."""
        self._call(lambda: setattr(self, "_paused", True))

    def resume(self) -> None:
        """Forward again, what waited first."""
        self._call(lambda: setattr(self, "_paused", False))

    def close(self) -> None:
        """Reset every link and stop listening."""
        if self._thread.is_alive():
            self._call(self._cut_now)
            self._closed = True
            self._wake()
            self._thread.join(5)
        else:
            self._cut_now()
        self._listener.close()
        self._wake_r.close()
        self._wake_w.close()

    # Everything below runs on the proxy's thread (or before it starts / after it ends).

    def _call(self, command: Callable[[], None]) -> None:
        """Run ``command`` on the proxy's thread and wait for it, so the fault is in place on return."""
        if not self._thread.is_alive():
            command()
            return
        done = threading.Event()
        self._commands.append((command, done))
        self._wake()
        if not done.wait(5):
            raise TimeoutError("the proxy's thread did not answer")

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def _cut_now(self) -> None:
        self._cut = True
        for link in self._links:
            _reset(link.client.sock)
            _reset(link.upstream.sock)
        self._links.clear()

    def _loop(self) -> None:
        while not self._closed:
            now = time.monotonic()
            poller = select.poll()
            poller.register(self._listener, select.POLLIN)
            poller.register(self._wake_r, select.POLLIN)
            owners: dict[int, tuple[_Link, _Side, _Side]] = {}
            wait = 1.0
            for link in self._links:
                for side, other in ((link.client, link.upstream), (link.upstream, link.client)):
                    mask = self._mask(link, side, other, now)
                    if side.out and not self._paused and not link.connecting and side.out[0][0] > now:
                        wait = min(wait, side.out[0][0] - now)  # a delayed chunk falls due (due ones: POLLOUT)
                    if mask:
                        poller.register(side.sock, mask)
                        owners[side.sock.fileno()] = (link, side, other)
            events = poller.poll(wait * 1000)
            for fd, event in events:
                if fd == self._wake_r.fileno():
                    with contextlib.suppress(OSError):
                        self._wake_r.recv(4096)
                elif fd == self._listener.fileno():
                    self._accept()
                elif fd in owners:
                    link, side, other = owners[fd]
                    if link in self._links:
                        self._serve(link, side, other, event)
            self._flush_due()
            while self._commands:
                command, done = self._commands.popleft()
                command()
                done.set()
        self._cut_now()

    def _mask(self, link: _Link, side: _Side, other: _Side, now: float) -> int:
        if link.connecting:
            return select.POLLOUT if side is link.upstream else _POLLRDHUP
        if self._paused:
            return 0 if side.eof else _POLLRDHUP  # only to notice an end giving up
        mask = 0
        if not side.eof and other.pending < self.max_pending:
            mask |= select.POLLIN
        if side.out and side.out[0][0] <= now:
            mask |= select.POLLOUT
        return mask

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except OSError:
            return
        if self._cut or len(self._links) >= self.max_links:
            self.refused += 1
            _reset(client)
            return
        client.setblocking(False)
        upstream = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        upstream.setblocking(False)
        for sock in (client, upstream):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if upstream.connect_ex(self.target) not in (0, errno.EINPROGRESS):
            _reset(client)
            upstream.close()
            return
        self._links.append(_Link(client, upstream))
        self.links_made += 1

    def _serve(self, link: _Link, side: _Side, other: _Side, event: int) -> None:
        if link.connecting:
            if side is link.upstream and event & select.POLLOUT:
                if side.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                    self._drop(link)  # the target refused: the client sees its link close
                else:
                    link.connecting = False
            elif event & (_POLLRDHUP | _CLOSED):
                self._drop(link)
            return
        if event & select.POLLIN:
            try:
                data = side.sock.recv(65536)
            except BlockingIOError:
                data = None
            except OSError:
                self._drop(link)
                return
            if data:
                other.out.append((time.monotonic() + self.delay, data))
                other.pending += len(data)
            elif data is not None:
                side.eof = True
        elif event & (_POLLRDHUP | _CLOSED):
            self._drop(link)  # during a pause: an end gave up
            return
        if event & select.POLLOUT:
            self._write(link, side)
        if link in self._links and side.eof and not other.out:
            self._drop(link)

    def _flush_due(self) -> None:
        if self._paused:
            return
        for link in list(self._links):
            if not link.connecting:
                for side, other in ((link.client, link.upstream), (link.upstream, link.client)):
                    if link in self._links and side.out:
                        self._write(link, side)
                    if link in self._links and other.eof and not side.out:
                        self._drop(link)

    def _write(self, link: _Link, side: _Side) -> None:
        now = time.monotonic()
        while side.out and side.out[0][0] <= now:
            due, data = side.out[0]
            try:
                sent = side.sock.send(data)
            except BlockingIOError:
                return
            except OSError:
                self._drop(link)
                return
            side.pending -= sent
            self.forwarded += sent
            if sent < len(data):
                side.out[0] = (due, data[sent:])
                return
            side.out.popleft()

    def _drop(self, link: _Link) -> None:
        if link in self._links:
            self._links.remove(link)
        for side in (link.client, link.upstream):
            with contextlib.suppress(OSError):
                side.sock.shutdown(socket.SHUT_RDWR)
            side.sock.close()


class Process(Proc):
    """A child process (``python -m <module> -c <conf>`` or ``argv``) whose output goes to ``<root>/<conf
    stem>.log``; it can be waited on for a line, frozen, thawed and killed."""

    def __init__(self, module: str, conf: Path, root: Path, argv: list[str] | None = None) -> None:
        super().__init__(module, conf, root, argv)
        self.log_path = Path(self.log.name)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, pattern: str, timeout: float = 30.0) -> re.Match[str]:
        """The first match of the regular expression ``pattern`` in the output, waiting up to ``timeout``
        seconds; AssertionError (with the output's tail) if it does not come or the process ends first."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            found = regex.search(self.output())
            if found:
                return found
            if not self.alive or time.monotonic() > deadline:
                why = f"exited with {self.proc.returncode}" if not self.alive else f"not in {timeout} s"
                raise AssertionError(f"{pattern!r} {why}; output ends:\n{self.output()[-3000:]}")
            time.sleep(0.05)

    def freeze(self) -> None:
        """SIGSTOP: the process keeps its sockets but answers nothing."""
        self.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT."""
        self.proc.send_signal(signal.SIGCONT)


class Faults:
    """What a test starts to break things: proxies and processes, all ended by :meth:`close`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._proxies: list[FaultProxy] = []
        self._processes: list[Process] = []

    def proxy(self, target: str, **options: float) -> FaultProxy:
        """A started :class:`FaultProxy` in front of ``target``."""
        proxy = FaultProxy(target, **options).start()  # type: ignore[arg-type]
        self._proxies.append(proxy)
        return proxy

    def process(self, module: str, conf: Path, argv: list[str] | None = None) -> Process:
        """A started :class:`Process` logging under ``root``."""
        process = Process(module, conf, self.root, argv)
        self._processes.append(process)
        return process

    def python(self, module: str, name: str, config: dict[str, str]) -> Process:
        """``python -m module -c <root>/<name>.properties`` written from ``config``."""
        return self.process(module, write_properties(self.root / f"{name}.properties", config))

    def close(self) -> None:
        """Stop every process (SIGCONT first, then SIGTERM, SIGKILL after 15 s) and close every proxy."""
        for process in self._processes:
            process.stop()
        for proxy in self._proxies:
            proxy.close()
        self._processes.clear()
        self._proxies.clear()


@pytest.fixture
def faults(tmp_path: Path) -> Iterator[Faults]:
    """A :class:`Faults` under the test's ``tmp_path``, everything in it ended after the test."""
    f = Faults(tmp_path)
    try:
        yield f
    finally:
        f.close()


__all__ = ["FaultProxy", "Faults", "Process", "faults", "until", "write_properties"]
