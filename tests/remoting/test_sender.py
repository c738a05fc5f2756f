"""The C send thread on its own, over real socket pairs: frames leave whole and in order, from the queue or from the
caller, a stalled channel gives back exactly what it did not send, and a full queue wakes the thread instead of
waiting for the end of the turn. ``queue`` is the C object: its ``send(channel, parts, now)`` queues unless ``now``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from twisted.internet import reactor

from gateway.remoting.sender import SendThread, _c_sender, start_send_thread

pytestmark = pytest.mark.skipif(_c_sender is None, reason="the C send thread is not built (or pure Python asked)")


class Connection:
    """What a protocol is to the thread: told when its channel stalled."""

    def __init__(self) -> None:
        self.stalls = 0

    def take_back(self) -> None:
        self.stalls += 1


@pytest.fixture
def thread() -> Iterator[SendThread]:
    t = start_send_thread(reactor)
    assert t is not None
    yield t
    t.stop()


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """Our end (given to the thread, which sends on a dup of it) and the peer's, non-blocking."""
    a, b = socket.socketpair()
    b.setblocking(False)
    with a, b:
        yield a, b


def _read_all(sock: socket.socket, size: int, timeout: float = 10.0) -> bytes:
    """``size`` bytes, or fewer if the peer closes first or the time is up."""
    data = bytearray()
    deadline = time.monotonic() + timeout
    while len(data) < size and time.monotonic() < deadline:
        try:
            chunk = sock.recv(1 << 20)
        except BlockingIOError:
            time.sleep(0.001)
            continue
        if not chunk:
            break
        data += chunk
    return bytes(data)


def _wait_stalled(t: SendThread, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        t.doRead()  # what the reactor does when the pipe is readable
        if t._channels and all(c.stalls for c in t._channels.values()):  # type: ignore[attr-defined]
            return
        time.sleep(0.005)
    raise AssertionError("no stall reported")


def test_frames_leave_whole_and_in_order(thread: SendThread, pair: tuple[socket.socket, socket.socket]) -> None:
    ours, peer = pair
    channel = thread.open(Connection(), ours.fileno())
    frames = [bytes([i % 251]) * (1 + i * 2) for i in range(300)]  # 90 KB: less than the socket takes
    queue = thread._thread  # type: ignore[attr-defined]
    for i in range(0, 300, 3):
        # Every fourth from the caller: after queued frames of the channel, it is queued too, keeping the order.
        assert queue.send(channel, frames[i : i + 3], i % 4 == 0) is None
    queue.kick()
    assert _read_all(peer, sum(map(len, frames))) == b"".join(frames)
    thread.close(channel)
    ours.close()
    assert _read_all(peer, 1, 2) == b""  # the dup is closed too: the peer sees the end


def test_a_stalled_channel_gives_back_exactly_what_it_did_not_send(
    thread: SendThread, pair: tuple[socket.socket, socket.socket]
) -> None:
    ours, peer = pair
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    connection = Connection()
    channel = thread.open(connection, ours.fileno())
    data = os.urandom(1 << 20)
    queue = thread._thread  # type: ignore[attr-defined]
    queue.send(channel, [memoryview(data)[: 1 << 19]], False)
    queue.send(channel, [memoryview(data)[1 << 19 :]], False)
    queue.kick()
    _wait_stalled(thread)
    assert connection.stalls == 1
    rest = thread.take(channel)
    assert rest is not None and 0 < len(rest) < len(data)
    sent = _read_all(peer, len(data) - len(rest))
    assert sent + rest == data
    assert thread.take(channel) is None  # nothing left; the channel sends again
    queue.send(channel, [b"after"], False)
    queue.kick()
    assert _read_all(peer, 5) == b"after"
    thread.close(channel)


def test_a_send_from_the_caller_returns_what_the_socket_did_not_take(
    thread: SendThread, pair: tuple[socket.socket, socket.socket]
) -> None:
    ours, peer = pair
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    channel = thread.open(Connection(), ours.fileno())
    data = os.urandom(1 << 20)
    parts = [data[i : i + 1000] for i in range(0, 64000, 1000)]  # sent in one sendmsg, as gathered parts
    parts.append(data[64000:])
    assert thread._thread.send(channel, parts[:3], True) is None  # type: ignore[attr-defined]  # small: all sent
    rest = thread._thread.send(channel, parts[3:], True)  # type: ignore[attr-defined]
    assert rest is not None and 0 < len(rest) < len(data) - 3000
    assert _read_all(peer, len(data) - len(rest)) + rest == data
    thread.close(channel)


def test_a_send_asked_for_now_that_must_queue_wakes_the_thread(
    thread: SendThread, pair: tuple[socket.socket, socket.socket]
) -> None:
    ours, peer = pair
    channel = thread.open(Connection(), ours.fileno())
    queue = thread._thread  # type: ignore[attr-defined]
    # More parts than one sendmsg takes (50 SYNC_FLUSH answers of one connection, released by one fsync): queued, and
    # no end-of-turn kick will come for it.
    parts = [bytes([i]) * 100 for i in range(100)]
    assert queue.send(channel, parts, True) is None
    assert _read_all(peer, 10_000, 5) == b"".join(parts)
    thread.close(channel)


def test_a_failed_channel_drops_its_frames(thread: SendThread, pair: tuple[socket.socket, socket.socket]) -> None:
    ours, peer = pair
    peer.close()
    channel = thread.open(Connection(), ours.fileno())
    queue = thread._thread  # type: ignore[attr-defined]
    queue.send(channel, [b"x" * 100_000], False)
    queue.kick()
    time.sleep(0.1)
    assert thread.take(channel) is None
    assert queue.send(channel, [b"y"], True) is None  # dropped too
    thread.close(channel)


def test_unknown_channels_and_a_stopped_thread(pair: tuple[socket.socket, socket.socket]) -> None:
    t = start_send_thread(reactor)
    assert t is not None
    with pytest.raises(KeyError):
        t.send(12345, [b"x"], True)
    assert t.take(12345) is None
    ours, _peer = pair
    channel = t.open(Connection(), ours.fileno())
    t.stop()
    with pytest.raises(RuntimeError):
        t._thread.send(channel, [b"x"], False)  # type: ignore[attr-defined]
    dup_link = f"/proc/self/fd/{channel}"
    assert os.path.exists(dup_link)
    t.close(channel)  # stopped: the dup is closed at once
    assert not os.path.exists(dup_link) or os.readlink(dup_link) != os.readlink(f"/proc/self/fd/{ours.fileno()}")


def test_a_full_queue_wakes_the_thread_instead_of_waiting_for_the_turn_to_end() -> None:
    # 80 MiB queued in one turn, past the 64 MiB cap, with nothing to kick the thread: send() must wake it rather
    # than wait for it forever (holding the GIL, so in a child process with a deadline).
    script = (
        "import socket\n"
        "from gateway.remoting import _sender\n"
        "import os\n"
        "r, w = os.pipe()\n"
        "t = _sender.SendThread(w)\n"
        "a, b = socket.socketpair()\n"
        "ch = t.open(a.fileno())\n"
        "part = b'x' * (1 << 20)\n"
        "for _ in range(80):\n"
        "    t.send(ch, [part], False)\n"
        "rest = t.take(ch)\n"
        "print(80 * len(part) - len(rest or b''))\n"
        "t.stop()\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert 0 < int(out.stdout) < 80 << 20  # the peer's buffer took some; the rest waited in the stash
